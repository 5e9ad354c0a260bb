//! Rows as a model sees them: `tributary_row_text(record, ...)` and `tributary_embed(record, ...)`
//! (the text itself: src/service/rows.rs).

use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;

use crate::engine::rowtext::TEMPLATE_VERSION;
use crate::pg::error::{OrRaise, Result, TributaryError};
use crate::pg::vector::Vector;
use crate::service::rows::{record_embedding, record_text, RowOptions};

/// The SQL functions' arguments as [`RowOptions`]. NULL `include`, `exclude`, `time_columns`,
/// `as_of`, `max_tokens` mean "not given"; NULL `parents`, `children`, `keys`, `template`, or a
/// NULL element of an array, is 22004.
#[allow(clippy::too_many_arguments)]
fn options(
    include: Option<Vec<Option<String>>>,
    exclude: Option<Vec<Option<String>>>,
    parents: Option<i32>,
    children: Option<i32>,
    time_columns: Option<Vec<Option<String>>>,
    as_of: Option<TimestampWithTimeZone>,
    keys: Option<bool>,
    max_tokens: Option<i32>,
    template: Option<i32>,
) -> Result<RowOptions> {
    fn names(a: Option<Vec<Option<String>>>, what: &'static str) -> Result<Option<Vec<String>>> {
        a.map(|v| {
            v.into_iter()
                .collect::<Option<Vec<_>>>()
                .ok_or(TributaryError::NullArgument(what))
        })
        .transpose()
    }
    // `table.*` / `schema.table.*` entries name context tables to read whoever owns them; the
    // others are columns of the row itself (none: all columns, unless include is empty).
    let (include, tables) = match names(include, "an element of include")? {
        None => (None, Vec::new()),
        Some(all) => {
            let (tables, columns): (Vec<String>, Vec<String>) =
                all.into_iter().partition(|e| e.ends_with(".*"));
            let tables: Vec<String> = tables
                .into_iter()
                .map(|t| t.trim_end_matches(".*").to_owned())
                .collect();
            let columns = (!columns.is_empty() || tables.is_empty()).then_some(columns);
            (columns, tables)
        }
    };
    Ok(RowOptions {
        include,
        tables,
        exclude: names(exclude, "an element of exclude")?.unwrap_or_default(),
        parents: parents.ok_or(TributaryError::NullArgument("parents"))?,
        children: children.ok_or(TributaryError::NullArgument("children"))?,
        time_columns: names(time_columns, "an element of time_columns")?.unwrap_or_default(),
        as_of,
        keys: keys.ok_or(TributaryError::NullArgument("keys"))?,
        max_tokens,
        template: template.ok_or(TributaryError::NullArgument("template"))?,
    })
}

/// `tributary_row_text(row record [, include text[], exclude text[], parents int, children int,
/// time_columns text[], as_of timestamptz, keys bool, max_tokens int, model text, template int])
/// → text`: the text `tributary_embed(record)` embeds for `row`, under row template version
/// `template` (default 2; 1 and 2 exist, and 1 gives exactly the text it always gave).
///
/// Template version 1:
/// `table: <name>`, then `column: value` lines in column order (NULL and empty values skipped,
/// key columns skipped unless `keys`, vector/halfvec/sparsevec/bytea/tsvector columns never, also
/// through domains and arrays), then parents' columns prefixed by their path
/// (`album.artist.name: ...`, `parents` levels deep; the row itself and rows already shown are
/// not repeated, so foreign-key cycles end), then one line per child table (`invoice (3 of 7):
/// ...`, at most `children` rows each, most recent first by the first of `time_columns` the table
/// has; never the row itself). No context row after `as_of` (by that time column) is used.
/// Values are cut to a fair share of `max_tokens` tokens (default: the model's max length, 256
/// for all-MiniLM-L6-v2); json values nested deeper than 128 levels are kept, compact. A value
/// over 1 kB per token of `max_tokens` (256 kB for 256 tokens) is read only as far as its first
/// 64 bytes per token, as text, so a huge value costs bounded memory and time. Context is read
/// as the current role: row-level security and column privileges apply.
///
/// Template version 2 (crates/engine/src/rowtext.rs) is version 1 with two changes. Columns of
/// types that carry no language (int2/4/8, float4/8, numeric, money, date, time, timestamp,
/// timestamptz, interval, boolean, uuid, also through domains and arrays; for an anonymous record,
/// JSON numbers and booleans) are left out at every level, unless named in `include`: under mean
/// pooling they dilute the words that say what the row is. And with `children`, a child table
/// that references one other table besides this row's (a link table, as
/// `film_person(film_id, person_id, role)`) shows the rows it links to: `person (2 of 3): name:
/// Ann Lee, role: director; ...`, labelled with the far table's name (`person (via film_person)`
/// when two lines would share it), the far row's columns then the link row's own, at most
/// `children` rows and the count of all, read in one query as the current role (a far row it
/// cannot see is neither shown nor counted; a far table whose key it cannot read gives no line),
/// ordered and cut by the link table's time column and `as_of` (the far table's time column is
/// also compared with `as_of`), never the row itself.
///
/// Child and link tables (and a link table's far table) are read only when owned by the row
/// table's owner or by a role the current role is a member of, or named in `include` as
/// `table.*` or `schema.table.*` (such entries do not limit the row's own columns); others are
/// left out silently: reading a table runs its owner's row-level security policies as the reader.
///
/// NULL `row` gives NULL (whatever the options); NULL `include`, `exclude`, `time_columns`, `as_of`, `max_tokens` are
/// "not given", NULL `model` the default model (`tributary.model`).
///
/// Errors: 22004 NULL `parents`, `children`, `keys` or `template`, or a NULL element in
/// `include`, `exclude` or `time_columns`; 22023 bad options (negative `parents`/`children`,
/// `max_tokens` < 1) or unknown template version (not 1 or 2); 42703 `include`/`exclude` names a column the
/// table does not have; 42704 unknown model.
#[allow(clippy::too_many_arguments)]
#[pg_extern(stable, parallel_unsafe)]
fn tributary_row_text(
    row: Option<pgrx::composite_type!("record")>,
    include: default!(Option<Vec<Option<String>>>, "NULL"),
    exclude: default!(Option<Vec<Option<String>>>, "NULL"),
    parents: default!(Option<i32>, 0),
    children: default!(Option<i32>, 0),
    time_columns: default!(Option<Vec<Option<String>>>, "NULL"),
    as_of: default!(Option<TimestampWithTimeZone>, "NULL"),
    keys: default!(Option<bool>, false),
    max_tokens: default!(Option<i32>, "NULL"),
    model: default!(Option<&str>, "NULL"),
    template: default!(Option<i32>, 2),
) -> Option<String> {
    let row = row?;
    let opts = options(
        include,
        exclude,
        parents,
        children,
        time_columns,
        as_of,
        keys,
        max_tokens,
        template,
    )
    .or_raise();
    Some(record_text(row, &opts, model).or_raise())
}

/// `tributary_embed(row record [, model text, include text[], exclude text[], parents int,
/// children int, time_columns text[], as_of timestamptz, keys bool, template int]) → vector`: the
/// embedding (`[dim]` f32, unit L2 norm; dim 384 for all-MiniLM-L6-v2) of
/// `tributary_row_text(row, ...)` with the same options (`template` default 2). NULL row gives
/// NULL; NULL options as in `tributary_row_text`.
///
/// Errors: as `tributary_row_text` (22004, 22023, 42703, 42704) and `tributary_embed(text)`.
#[allow(clippy::too_many_arguments)]
#[pg_extern(name = "tributary_embed", stable, parallel_unsafe)]
fn tributary_embed_row(
    row: Option<pgrx::composite_type!("record")>,
    model: default!(Option<&str>, "NULL"),
    include: default!(Option<Vec<Option<String>>>, "NULL"),
    exclude: default!(Option<Vec<Option<String>>>, "NULL"),
    parents: default!(Option<i32>, 0),
    children: default!(Option<i32>, 0),
    time_columns: default!(Option<Vec<Option<String>>>, "NULL"),
    as_of: default!(Option<TimestampWithTimeZone>, "NULL"),
    keys: default!(Option<bool>, false),
    template: default!(Option<i32>, 2),
) -> Option<Vector> {
    let row = row?;
    let opts = options(
        include,
        exclude,
        parents,
        children,
        time_columns,
        as_of,
        keys,
        None,
        template,
    )
    .or_raise();
    Some(record_embedding(row, &opts, model).or_raise())
}

/// `tributary_row_template_version() → integer`: the row template version `tributary_row_text`,
/// `tributary_embed(record)`, `tributary_embed_column(..., '{*}')` and new whole-row jobs use
/// by default (2).
#[pg_extern(immutable, parallel_safe)]
fn tributary_row_template_version() -> i32 {
    TEMPLATE_VERSION
}
