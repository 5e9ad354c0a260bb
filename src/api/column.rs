//! `tributary_embed_column`: fill a vector column of a whole table, in batches, in this backend.

use pgrx::prelude::*;

use crate::engine::rowtext::{self, TEMPLATE_VERSIONS};
use crate::pg::error::{raise, OrRaise, Result, TributaryError};
use crate::pg::name::Name;
use crate::pg::regclass::RegClass;
use crate::service::column::embed_column;
use crate::service::rows::RowOptions;

/// `tributary_embed_column(tbl regclass, columns text[], target name [, model, batch_size])
/// → bigint`: embeds every row of `tbl` whose `target` column is NULL and returns the number of
/// rows written.
///
/// The text of a row is its `columns` cast to text and joined with newlines (NULL columns
/// skipped); rows whose `columns` are all NULL stay NULL and are not counted. Rows are read
/// through one cursor, `batch_size` at a time, embedded (length-sorted, cut by
/// `tributary.max_batch_tokens`) and written back with one UPDATE per batch, by (tableoid, ctid):
/// partitioned tables and inheritance parents (children included) work, ctids repeating across
/// partitions and children. Rows the caller may read but not UPDATE (row-level security) are
/// left alone and not counted. Progress is
/// a NOTICE every `tributary.progress_interval` ms. A cancel or statement_timeout stops it
/// between two ONNX Runtime runs; since it all runs in the caller's transaction, a stopped call
/// leaves the table unchanged.
///
/// With `columns => '{*}'` the text of a row is the whole row as `tributary_row_text` writes it
/// under row template version `template` (default 2; 1: the text of tributary 0.5 and before):
/// `exclude`, `parents`, `children`, `time_columns`, `as_of` and `template` work as there (the
/// target and other vector columns are never part of it), and every row whose target is NULL is
/// embedded. These options other than `template` are an error (22023) with a column list, and
/// `template` is not used there.
///
/// `prompt` names the model's prompt to embed with (`passage`, ...; NULL: its default prompt).
/// The model and prompt are recorded for the column (`tributary.column_models`, when the caller
/// may UPDATE it): a later call or job with another model or prompt is an error (22023), and
/// `tributary_embed_for(tbl, target, query)` embeds queries with that model. Texts longer than
/// the window are truncated and counted: one WARNING with the count (`tributary.truncation =
/// warning`, the default), none (`truncate`), or 22001 at the first (`error`).
///
/// Errors, all before any work: 22004 NULL `tbl`, `columns`, `target`, `batch_size`, `parents`,
/// `children` or `template`, or a NULL element of `columns`, `exclude` or `time_columns`; 42P01 no
/// relation has `tbl`'s OID (a dropped table); 42501 the caller may read no column of `tbl`;
/// 42704 unknown prompt; 22023 column filled by another model;
/// 22023 unknown row template version (whole rows);
/// 42809 not an ordinary or partitioned table (a view, materialized
/// view or foreign table); 22023 bad batch_size or empty columns; 42703 unknown column;
/// 42804 target not vector/halfvec; 22000 target dimension differs from the model's; 42704
/// unknown model. Privileges are the caller's (SELECT on the columns, UPDATE on the target).
#[allow(clippy::too_many_arguments)]
#[pg_extern(name = "tributary_embed_column", volatile, parallel_unsafe)]
pub(crate) fn tributary_embed_column_0_6(
    tbl: Option<RegClass>,
    columns: Option<Vec<Option<String>>>,
    target: Option<Name>,
    model: default!(Option<&str>, "NULL"),
    batch_size: default!(Option<i32>, 1024),
    exclude: default!(Option<Vec<Option<String>>>, "NULL"),
    parents: default!(Option<i32>, 0),
    children: default!(Option<i32>, 0),
    time_columns: default!(Option<Vec<Option<String>>>, "NULL"),
    as_of: default!(Option<pgrx::datum::TimestampWithTimeZone>, "NULL"),
    prompt: default!(Option<&str>, "NULL"),
    template: default!(Option<i32>, 2),
) -> i64 {
    let (Some(tbl), Some(columns), Some(target)) = (tbl, columns, target) else {
        raise(TributaryError::NullArgument("tbl, columns and target"));
    };
    let columns = no_nulls(columns, "an element of columns").or_raise();
    let exclude = exclude
        .map(|e| no_nulls(e, "an element of exclude"))
        .transpose()
        .or_raise();
    let time_columns = time_columns
        .map(|t| no_nulls(t, "an element of time_columns"))
        .transpose()
        .or_raise();
    let (Some(batch_size), Some(parents), Some(children), Some(template)) =
        (batch_size, parents, children, template)
    else {
        raise(TributaryError::NullArgument(
            "batch_size, parents, children and template",
        ));
    };
    if parents < 0 || children < 0 {
        raise(TributaryError::InvalidArgument {
            message: format!(
                "parents and children must be 0 or more, not {parents} and {children}"
            ),
            hint: None,
        });
    }
    let row_options = RowOptions {
        exclude: exclude.unwrap_or_default(),
        parents,
        children,
        time_columns: time_columns.unwrap_or_default(),
        as_of,
        template,
        ..Default::default()
    };
    let whole_row = columns.len() == 1 && columns[0] == "*";
    if !whole_row
        && (!row_options.exclude.is_empty()
            || parents != 0
            || children != 0
            || !row_options.time_columns.is_empty()
            || as_of.is_some())
    {
        raise(TributaryError::InvalidArgument {
            message: "exclude, parents, children, time_columns and as_of apply to whole rows only"
                .into(),
            hint: Some("Pass columns => '{*}' to embed whole rows.".into()),
        });
    }
    if whole_row && !TEMPLATE_VERSIONS.contains(&template) {
        raise(TributaryError::InvalidArgument {
            message: format!("row template version {template} does not exist"),
            hint: Some(format!(
                "Versions {} exist (see the README, \"Rows as text\").",
                rowtext::version_list()
            )),
        });
    }
    if !(1..=MAX_BATCH_SIZE).contains(&batch_size) {
        raise(TributaryError::InvalidArgument {
            message: format!("batch_size must be between 1 and {MAX_BATCH_SIZE}, not {batch_size}"),
            hint: Some("batch_size is rows per UPDATE; batches are also cut to tributary.max_texts_per_call.".into()),
        });
    }
    if columns.is_empty() {
        raise(TributaryError::InvalidArgument {
            message: "columns must name at least one column".into(),
            hint: Some(
                "For example: tributary_embed_column('docs', ARRAY['title', 'body'], 'embedding')"
                    .into(),
            ),
        });
    }
    embed_column(
        tbl.lock().or_raise(),
        &columns,
        &target.0,
        model,
        prompt,
        batch_size,
        whole_row.then_some(row_options),
    )
    .or_raise()
}

/// The names of a `text[]` argument, or 22004 when one is NULL (`what` names the argument).
pub(crate) fn no_nulls(names: Vec<Option<String>>, what: &'static str) -> Result<Vec<String>> {
    names
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or(TributaryError::NullArgument(what))
}

/// Most rows per batch (as for jobs' batch_size).
const MAX_BATCH_SIZE: i32 = 100_000;
