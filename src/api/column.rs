//! `tributary_embed_column`: fill a vector column of a whole table, in batches, in this backend.

use std::time::{Duration, Instant};

use pgrx::prelude::*;
use pgrx::spi::quote_identifier;
use pgrx::PgRelation;

use crate::api::rows::RowOptions;
use crate::pg::catalog::{self, ModelRow};
use crate::pg::error::{spi_error, OrRaise, Result, TributaryError};
use crate::pg::gucs;
use crate::pg::name::Name;
use crate::pg::vector::{HalfVec, Vector};

/// `tributary_embed_column(tbl regclass, columns text[], target name [, model, batch_size])
/// → bigint`: embeds every row of `tbl` whose `target` column is NULL and returns the number of
/// rows embedded.
///
/// The text of a row is its `columns` cast to text and joined with newlines (NULL columns
/// skipped); rows whose `columns` are all NULL stay NULL and are not counted. Rows are read
/// through one cursor, `batch_size` at a time, embedded (length-sorted, cut by
/// `tributary.max_batch_tokens`) and written back with one UPDATE per batch, by ctid. Progress is
/// a NOTICE every `tributary.progress_interval` ms. A cancel or statement_timeout stops it
/// between two ONNX Runtime runs; since it all runs in the caller's transaction, a stopped call
/// leaves the table unchanged.
///
/// With `columns => '{*}'` the text of a row is the whole row as `tributary_row_text` writes it
/// (template version 1): `exclude`, `parents`, `children`, `time_columns` and `as_of` work as
/// there (the target and other vector columns are never part of it), and every row whose target
/// is NULL is embedded. These options are an error (22023) with a column list.
///
/// Errors, all before any work: 22023 bad batch_size or empty columns; 42703 unknown column;
/// 42804 target not vector/halfvec; 22000 target dimension differs from the model's; 42704
/// unknown model. Privileges are the caller's (SELECT on the columns, UPDATE on the target).
#[pg_extern(volatile, parallel_unsafe)]
fn tributary_embed_column(
    tbl: Option<PgRelation>,
    columns: Option<Vec<String>>,
    target: Option<Name>,
    model: default!(Option<&str>, "NULL"),
    batch_size: default!(Option<i32>, 1024),
    exclude: default!(Option<Vec<String>>, "NULL"),
    parents: default!(Option<i32>, 0),
    children: default!(Option<i32>, 0),
    time_columns: default!(Option<Vec<String>>, "NULL"),
    as_of: default!(Option<pgrx::datum::TimestampWithTimeZone>, "NULL"),
) -> i64 {
    let (Some(tbl), Some(columns), Some(target)) = (tbl, columns, target) else {
        crate::pg::error::raise(TributaryError::NullArgument("tbl, columns and target"));
    };
    let (Some(batch_size), Some(parents), Some(children)) = (batch_size, parents, children) else {
        crate::pg::error::raise(TributaryError::NullArgument("batch_size, parents and children"));
    };
    if parents < 0 || children < 0 {
        crate::pg::error::raise(TributaryError::InvalidArgument {
            message: format!("parents and children must be 0 or more, not {parents} and {children}"),
            hint: None,
        });
    }
    let row_options = RowOptions {
        exclude: exclude.unwrap_or_default(),
        parents,
        children,
        time_columns: time_columns.unwrap_or_default(),
        as_of,
        template: crate::engine::rowtext::TEMPLATE_VERSION,
        ..Default::default()
    };
    let whole_row = columns.len() == 1 && columns[0] == "*";
    if !whole_row && (!row_options.exclude.is_empty() || parents != 0 || children != 0 || !row_options.time_columns.is_empty() || as_of.is_some()) {
        crate::pg::error::raise(TributaryError::InvalidArgument {
            message: "exclude, parents, children, time_columns and as_of apply to whole rows only".into(),
            hint: Some("Pass columns => '{*}' to embed whole rows.".into()),
        });
    }
    embed_column(tbl.oid(), &columns, &target.0, model, batch_size, whole_row.then_some(row_options)).or_raise()
}

/// Most rows per batch (as for jobs' batch_size).
const MAX_BATCH_SIZE: i32 = 100_000;

fn embed_column(
    tbl: pg_sys::Oid,
    columns: &[String],
    target: &str,
    model: Option<&str>,
    batch_size: i32,
    row_options: Option<RowOptions>,
) -> Result<i64> {
    if !(1..=MAX_BATCH_SIZE).contains(&batch_size) {
        return Err(TributaryError::InvalidArgument {
            message: format!("batch_size must be between 1 and {MAX_BATCH_SIZE}, not {batch_size}"),
            hint: Some("batch_size is rows per UPDATE; batches are also cut to tributary.max_texts_per_call.".into()),
        });
    }
    if columns.is_empty() {
        return Err(TributaryError::InvalidArgument {
            message: "columns must name at least one column".into(),
            hint: Some("For example: tributary_embed_column('docs', ARRAY['title', 'body'], 'embedding')".into()),
        });
    }
    let model = catalog::model(model)?;
    let plan = Plan::new(tbl, columns, target, &model, row_options.is_some())?;
    let row_options = row_options.map(|mut o| {
        o.exclude.push(target.to_owned());
        o
    });
    let total: i64 = Spi::get_one(&plan.count_sql).ok().flatten().unwrap_or(0);
    let interval = gucs::progress_interval_ms();
    let started = Instant::now();
    let mut last_report = Instant::now();
    let mut done: i64 = 0;

    // The cursor outlives the per-batch SPI connections below, so that each batch's tuples,
    // texts and vector datums are freed when its connection finishes: memory stays flat
    // whatever the table's size.
    let cursor_name = Spi::connect(|c| c.open_cursor(plan.select_sql.as_str(), &[]).detach_into_name());
    loop {
        pgrx::check_for_interrupts!();
        let n = Spi::connect_mut(|client| -> Result<i64> {
            let mut cursor = client.find_cursor(&cursor_name).map_err(spi_error)?;
            // At most tributary.max_texts_per_call rows a batch, whatever batch_size says.
            let rows = cursor.fetch((batch_size as i64).min(gucs::max_texts_per_call() as i64)).map_err(spi_error)?;
            let mut tids = Vec::with_capacity(rows.len());
            let mut rels = Vec::with_capacity(rows.len());
            let mut texts = Vec::with_capacity(rows.len());
            for row in rows {
                tids.push(row.get::<pg_sys::ItemPointerData>(1).map_err(spi_error)?.expect("ctid is never NULL"));
                rels.push(row.get::<pg_sys::Oid>(3).map_err(spi_error)?.expect("tableoid is never NULL"));
                let text = row.get::<String>(2).map_err(spi_error)?.unwrap_or_default();
                texts.push(match &row_options {
                    None => text,
                    Some(opts) => {
                        let values = crate::api::rows::row_values(&text)?;
                        crate::api::rows::row_text(Some(tbl), &values, opts, &model)?
                    }
                });
            }
            if tids.is_empty() {
                // Dropping the found cursor closes it.
                return Ok(0);
            }
            std::mem::forget(cursor);
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let emb = crate::api::embed::embed(&refs, Some(&model.name))?;
            let n = tids.len() as i64;
            // Datums of the target's own type: an fp16 graph's output goes into a halfvec bit
            // for bit, with no round trip through f32 (and no cast in the UPDATE).
            let vectors: pgrx::datum::DatumWithOid = if plan.halfvec {
                (0..emb.rows()).map(|i| HalfVec(emb.row_f16(i).into_owned())).collect::<Vec<_>>().into()
            } else {
                (0..emb.rows()).map(|i| Vector(emb.row_f32(i).into_owned())).collect::<Vec<_>>().into()
            };
            client.update(plan.update_sql.as_str(), None, &[rels.into(), tids.into(), vectors]).map_err(spi_error)?;
            Ok(n)
        })?;
        if n == 0 {
            break;
        }
        done += n;
        if interval > 0 && last_report.elapsed() >= Duration::from_millis(interval) {
            last_report = Instant::now();
            let secs = started.elapsed().as_secs_f64();
            pgrx::notice!(
                "tributary_embed_column: {done} of {total} rows embedded ({:.0} rows/s)",
                done as f64 / secs.max(1e-9)
            );
        }
    }
    crate::api::embed::release_memory(done as usize);
    Ok(done)
}

/// The three statements of one call, with identifiers quoted.
struct Plan {
    /// The target column is halfvec (else vector).
    halfvec: bool,
    count_sql: String,
    select_sql: String,
    update_sql: String,
}

impl Plan {
    /// `whole_row`: the text is the row's JSON (`row_to_json`), not its `columns`.
    fn new(tbl: pg_sys::Oid, columns: &[String], target: &str, model: &ModelRow, whole_row: bool) -> Result<Self> {
        let relname: String = Spi::get_one_with_args("SELECT $1::regclass::text", &[tbl.into()])
            .ok()
            .flatten()
            .ok_or_else(|| TributaryError::InvalidArgument { message: format!("relation with OID {} does not exist", tbl.to_u32()), hint: None })?;
        // Rows are written back by (tableoid, ctid): ordinary and partitioned tables (with
        // their partitions and inheritance children) only.
        let relkind: Option<i8> = Spi::get_one_with_args("SELECT relkind FROM pg_catalog.pg_class WHERE oid = $1", &[tbl.into()]).ok().flatten();
        if !matches!(relkind.map(|k| k as u8), Some(b'r') | Some(b'p')) {
            return Err(TributaryError::NotATable(relname));
        }
        for c in columns.iter().filter(|_| !whole_row) {
            attribute(tbl, &relname, c)?;
        }
        let (typname, typmod) = attribute(tbl, &relname, target)?;
        if typname != "vector" && typname != "halfvec" {
            return Err(TributaryError::WrongColumnType { column: target.into(), actual: typname });
        }
        if typmod > 0 && typmod as usize != model.dimension {
            return Err(TributaryError::Dimension {
                expected: typmod as usize,
                actual: model.dimension,
                detail: format!(
                    "column \"{target}\" is {typname}({typmod}) but model \"{}\" produces {} dimensions",
                    model.name, model.dimension
                ),
            });
        }
        let cols: Vec<String> = columns.iter().map(quote_identifier).collect();
        let text_expr = if cols.len() == 1 {
            format!("{}::text", cols[0])
        } else {
            format!("concat_ws(E'\\n', {})", cols.iter().map(|c| format!("{c}::text")).collect::<Vec<_>>().join(", "))
        };
        let target = quote_identifier(target);
        let (text_expr, filter) = if whole_row {
            // t.*: the row, even when the table has a column named t.
            ("row_to_json(t.*)::text".to_owned(), format!("{target} IS NULL"))
        } else {
            (text_expr, format!("{target} IS NULL AND num_nonnulls({}) > 0", cols.join(", ")))
        };
        Ok(Plan {
            halfvec: typname == "halfvec",
            count_sql: format!("SELECT count(*) FROM {relname} WHERE {filter}"),
            // A ctid is unique within one table only: rows of partitions and inheritance
            // children are told apart by tableoid.
            select_sql: format!("SELECT ctid, {text_expr}, tableoid FROM {relname} AS t WHERE {filter}"),
            update_sql: format!(
                "UPDATE {relname} AS t SET {target} = u.e FROM unnest($1::oid[], $2::tid[], $3) AS u(rel, id, e) \
                 WHERE t.tableoid = u.rel AND t.ctid = u.id"
            ),
        })
    }
}

/// `(type name, typmod)` of column `column` of `tbl`; 42703 if there is no such column.
fn attribute(tbl: pg_sys::Oid, relname: &str, column: &str) -> Result<(String, i32)> {
    let row = Spi::get_two_with_args::<String, i32>(
        "SELECT t.typname::text, a.atttypmod FROM pg_catalog.pg_attribute a \
         JOIN pg_catalog.pg_type t ON t.oid = a.atttypid \
         WHERE a.attrelid = $1 AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped",
        &[tbl.into(), column.into()],
    );
    match row {
        Ok((Some(t), Some(m))) => Ok((t, m)),
        _ => Err(TributaryError::UndefinedColumn { relation: relname.into(), column: column.into() }),
    }
}
