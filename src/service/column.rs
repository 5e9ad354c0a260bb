//! A whole table's vector column filled in this backend (`tributary_embed_column`): rows read
//! through one cursor, `batch_size` at a time, embedded ([`RowsToVectors`]) and written back
//! with one UPDATE per batch, by (tableoid, ctid).

use std::time::{Duration, Instant};

use pgrx::prelude::*;
use pgrx::spi::quote_identifier;

use crate::pg::catalog::{self, ModelRow};
use crate::pg::error::{spi_error, Result, TributaryError};
use crate::pg::gucs;
use crate::pg::regclass;
use crate::pg::spi::pinned;
use crate::pg::vector::VectorType;
use crate::service::embed::{apply_truncation, release_memory};
use crate::service::pipeline::{self, IoTime, Read};
use crate::service::rows::RowOptions;
use crate::service::vectors::{RowsToVectors, Vectors};
use pgrx::datum::DatumWithOid;

/// Embeds every row of `tbl` whose `target` is NULL and returns the number of rows written
/// (rows the caller may read but not UPDATE under row-level security are left alone and not
/// counted);
/// see `tributary_embed_column` (src/api/column.rs) for the text of a row. `row_options`: whole
/// rows (`columns` is `{*}`). The arguments are checked by the caller.
///
/// Errors, all before any work: 42809 not a table; 42501 the caller may read no column of
/// `tbl`; 42703 unknown column; 42804 target not
/// vector/halfvec; 22000 target dimension differs from the model's (`tributary._target_column`);
/// 42704 unknown model.
pub(crate) fn embed_column(
    tbl: pg_sys::Oid,
    columns: &[String],
    target: &str,
    model: Option<&str>,
    prompt: Option<&str>,
    batch_size: i32,
    row_options: Option<RowOptions>,
) -> Result<i64> {
    // 25006 in a read-only transaction (a hot standby's), before any work.
    crate::pg::spi::require_writable(c"tributary_embed_column()");
    let model = catalog::model(model)?;
    let plan = Plan::new(tbl, columns, target, &model, row_options.is_some())?;
    let (prompt_name, prefix) = model.prompt(prompt)?;
    bind_column(tbl, target, &model, prompt_name.as_deref())?;
    let row_options = row_options.map(|mut o| {
        o.exclude.push(target.to_owned());
        o
    });
    let rows_to_vectors = RowsToVectors {
        table: tbl,
        row_options: row_options.as_ref(),
        model: &model,
        target: plan.target,
        prompt: prompt_name.as_deref(),
    };
    let total: i64 = pinned(|| Spi::get_one(&plan.count_sql))
        .map_err(spi_error)?
        .unwrap_or(0);
    // Seen by other sessions in tributary.progress_embed_column until this call ends.
    let progress = crate::pg::activity::Progress::start(tbl, target, total);
    let interval = gucs::progress_interval_ms();
    let started = Instant::now();
    let mut last_report = Instant::now();
    let mut done: i64 = 0; // rows written
    let mut embedded: i64 = 0; // rows read and embedded
    let mut truncated: usize = 0; // of those, texts longer than the window

    // The cursor outlives the per-batch SPI connections below, so that each batch's tuples,
    // texts and vector datums are freed when its connection finishes: memory stays flat
    // whatever the table's size.
    let cursor_name = pinned(|| {
        Spi::connect(|c| {
            c.open_cursor(plan.select_sql.as_str(), &[])
                .detach_into_name()
        })
    });
    // At most tributary.max_texts_per_call rows a batch, whatever batch_size says.
    let fetch = (batch_size as i64).min(gucs::max_texts_per_call() as i64);
    let mut read = || read_batch(&cursor_name, fetch, &rows_to_vectors);
    let mut written_batch = |batch: Read<Keys>, vectors: Vectors| -> Result<()> {
        let written = write_batch(&plan, batch.keys, vectors.datum)?;
        truncated += vectors.truncated;
        done += written;
        embedded += batch.texts.len() as i64;
        progress.update(done);
        if interval > 0 && last_report.elapsed() >= Duration::from_millis(interval) {
            last_report = Instant::now();
            let secs = started.elapsed().as_secs_f64();
            pgrx::notice!(
                "tributary_embed_column: {done} of {total} rows embedded ({:.0} rows/s)",
                done as f64 / secs.max(1e-9)
            );
        }
        Ok(())
    };
    let gpu = catalog::with_embedder_unrecorded(&model, |e| e.provider().is_gpu())?;
    let overlapped = match gucs::pipeline() {
        gucs::Pipeline::Off => false,
        gucs::Pipeline::Auto => gpu,
        gucs::Pipeline::On => true,
    };
    if overlapped {
        catalog::with_embedder_detached(&model, |e| {
            pipeline::run(e, &prefix, !gpu, &mut read, &mut |batch, emb| {
                let vectors = rows_to_vectors.datum(&batch.texts, emb.as_ref())?;
                written_batch(batch, vectors)
            })
        })??;
    } else {
        let mut io = IoTime::default();
        loop {
            pgrx::check_for_interrupts!();
            let t = Instant::now();
            let Some(batch) = read()? else { break };
            io.read += t.elapsed();
            let vectors = rows_to_vectors.vectors(&batch.texts)?;
            let t = Instant::now();
            written_batch(batch, vectors)?;
            io.write += t.elapsed();
        }
        catalog::with_embedder_unrecorded(&model, |e| e.add_io_time(io.read, io.write))?;
    }
    release_memory(embedded as usize);
    apply_truncation(&model, truncated, embedded as usize, String::new)?;
    Ok(done)
}

/// A batch's rows, by (tableoid, ctid).
type Keys = (Vec<pg_sys::Oid>, Vec<pg_sys::ItemPointerData>);

/// The next `fetch` rows of the cursor `cursor_name` with their texts (whole rows made into
/// texts here, reading their context rows as the caller); `None` (the cursor closed) at the end.
fn read_batch(
    cursor_name: &str,
    fetch: i64,
    rows_to_vectors: &RowsToVectors<'_>,
) -> Result<Option<Read<Keys>>> {
    pinned(|| {
        Spi::connect_mut(|client| -> Result<Option<Read<Keys>>> {
            let mut cursor = client.find_cursor(cursor_name).map_err(spi_error)?;
            let rows = cursor.fetch(fetch).map_err(spi_error)?;
            let mut tids = Vec::with_capacity(rows.len());
            let mut rels = Vec::with_capacity(rows.len());
            let mut raw = Vec::with_capacity(rows.len());
            for row in rows {
                tids.push(
                    row.get::<pg_sys::ItemPointerData>(1)
                        .map_err(spi_error)?
                        .expect("ctid is never NULL"),
                );
                rels.push(
                    row.get::<pg_sys::Oid>(3)
                        .map_err(spi_error)?
                        .expect("tableoid is never NULL"),
                );
                // Never NULL: the filter asks for some text (a whole row's JSON is never NULL).
                raw.push(Some(
                    row.get::<String>(2).map_err(spi_error)?.unwrap_or_default(),
                ));
            }
            if tids.is_empty() {
                // Dropping the found cursor closes it.
                return Ok(None);
            }
            std::mem::forget(cursor);
            Ok(Some(Read {
                keys: (rels, tids),
                texts: rows_to_vectors.texts(raw)?,
            }))
        })
    })
}

/// Writes a batch's vectors by (tableoid, ctid) and returns the rows the UPDATE wrote, which can
/// be fewer than those read: row-level security lets the caller read rows its UPDATE policies
/// hide, and a row changed by another transaction since the cursor's snapshot has a new ctid.
/// Those rows are not written and not counted.
fn write_batch(plan: &Plan, (rels, tids): Keys, datum: DatumWithOid<'static>) -> Result<i64> {
    pinned(|| {
        Spi::connect_mut(|client| {
            Ok(client
                .update(
                    plan.update_sql.as_str(),
                    None,
                    &[rels.into(), tids.into(), datum],
                )
                .map_err(spi_error)?
                .len() as i64)
        })
    })
}

/// Records that `model` (with the prompt named `prompt`) fills column `target` of `tbl`, or
/// checks it against the model recorded (`tributary._bind_column`, sql/columns.sql: 22023 when
/// another model or prompt filled it). Only a caller that may UPDATE the column records
/// anything (the call would fail later otherwise; a caller without the right must not bind
/// another role's column to a model); the record is written as the extension's owner.
fn bind_column(
    tbl: pg_sys::Oid,
    target: &str,
    model: &ModelRow,
    prompt: Option<&str>,
) -> Result<()> {
    let may_update = pinned(|| {
        Spi::get_one_with_args::<bool>(
            "SELECT pg_catalog.has_column_privilege($1, $2::pg_catalog.text, 'UPDATE')",
            &[tbl.into(), target.into()],
        )
    })
    .map_err(spi_error)?
    .unwrap_or(false);
    // No _bind_column before 0.3.0 (ALTER EXTENSION tributary UPDATE not run): nothing recorded.
    let bindable = pinned(|| {
        Spi::get_one::<bool>(
            "SELECT pg_catalog.to_regprocedure('tributary._bind_column(regclass, name, text, text, text)') IS NOT NULL",
        )
    })
    .map_err(spi_error)?
    .unwrap_or(false);
    if !may_update || !bindable {
        return Ok(());
    }
    crate::pg::roles::as_role(crate::pg::roles::extension_owner(), || {
        pinned(|| {
            Spi::get_one_with_args::<bool>(
                "SELECT tributary._bind_column($1::pg_catalog.regclass, $2::pg_catalog.name, \
                    $3::pg_catalog.text, $4::pg_catalog.text, 'tributary_embed_column')",
                &[
                    tbl.into(),
                    target.into(),
                    model.name.as_str().into(),
                    prompt.into(),
                ],
            )
        })
    })
    .map_err(spi_error)?;
    Ok(())
}

/// The three statements of one call, with identifiers quoted.
struct Plan {
    target: VectorType,
    count_sql: String,
    select_sql: String,
    update_sql: String,
}

impl Plan {
    /// `whole_row`: the text is the row's JSON (`tributary._row_json`), not its `columns`.
    fn new(
        tbl: pg_sys::Oid,
        columns: &[String],
        target: &str,
        model: &ModelRow,
        whole_row: bool,
    ) -> Result<Self> {
        // Messages name the table as the caller's search_path shows it; statements by its
        // qualified name.
        let missing = || TributaryError::InvalidArgument {
            message: format!("relation with OID {} does not exist", tbl.to_u32()),
            hint: None,
        };
        let relname = regclass::display_name(tbl).ok_or_else(missing)?;
        let sql_name = regclass::sql_name(tbl).ok_or_else(missing)?;
        // Rows are written back by (tableoid, ctid): ordinary and partitioned tables (with
        // their partitions and inheritance children) only.
        let relkind: Option<i8> = pinned(|| {
            Spi::get_one_with_args(
                "SELECT (SELECT relkind FROM pg_catalog.pg_class WHERE oid OPERATOR(pg_catalog.=) $1)",
                &[tbl.into()],
            )
        })
        .map_err(spi_error)?;
        if !matches!(relkind.map(|k| k as u8), Some(b'r') | Some(b'p')) {
            return Err(TributaryError::NotATable(relname));
        }
        // Privileges before names: a caller who may read nothing of the table learns nothing
        // of its columns (42501, not 42703). Per-column SELECT is checked by the reads themselves.
        let readable = pinned(|| {
            Spi::get_one_with_args::<bool>(
                "SELECT pg_catalog.has_any_column_privilege($1, 'SELECT')",
                &[tbl.into()],
            )
        })
        .map_err(spi_error)?
        .unwrap_or(false);
        if !readable {
            return Err(TributaryError::Permission(format!(
                "permission denied for table {relname}"
            )));
        }
        notice_foreign_partitions(tbl, &relname)?;
        for c in columns.iter().filter(|_| !whole_row) {
            require_column(tbl, &relname, c)?;
        }
        let target_type = target_column(tbl, target, model)?;
        let cols: Vec<String> = columns.iter().map(quote_identifier).collect();
        // Values as text through tributary._text, never a cast a role made (src/pg/values.rs);
        // a database whose SQL predates 0.11.0 has no tributary._text: the casts of 0.10.0.
        let safe = crate::pg::values::sql_functions_exist();
        let as_text = |c: &str| {
            if safe {
                format!("tributary._text({c})")
            } else {
                format!("{c}::pg_catalog.text")
            }
        };
        let text_expr = if cols.len() == 1 {
            as_text(&cols[0])
        } else {
            format!(
                "pg_catalog.concat_ws(E'\\n', {})",
                cols.iter()
                    .map(|c| as_text(c))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let target = quote_identifier(target);
        let (text_expr, filter) = if whole_row {
            // t.*: the row, even when the table has a column named t.
            (
                if safe {
                    "tributary._row_json(t.*)::pg_catalog.text".to_owned()
                } else {
                    "pg_catalog.row_to_json(t.*)::pg_catalog.text".to_owned()
                },
                format!("{target} IS NULL"),
            )
        } else {
            (
                text_expr,
                format!(
                    "{target} IS NULL AND pg_catalog.num_nonnulls({}) OPERATOR(pg_catalog.>) 0",
                    cols.join(", ")
                ),
            )
        };
        Ok(Plan {
            target: target_type,
            count_sql: format!("SELECT pg_catalog.count(*) FROM {sql_name} AS t WHERE {filter}"),
            // A ctid is unique within one table only: rows of partitions and inheritance
            // children are told apart by tableoid.
            select_sql: format!("SELECT ctid, {text_expr}, tableoid FROM {sql_name} AS t WHERE {filter}"),
            update_sql: format!(
                "UPDATE {sql_name} AS t SET {target} = u.e \
                   FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.oid[]), \
                                   pg_catalog.unnest($2::pg_catalog.tid[]), pg_catalog.unnest($3)) AS u(rel, id, e) \
                 WHERE t.tableoid OPERATOR(pg_catalog.=) u.rel AND t.ctid OPERATOR(pg_catalog.=) u.id"
            ),
        })
    }
}

/// A NOTICE when some of `tbl`'s partitions are foreign tables (postgres_fdw shards): their rows
/// are read from and written back through the foreign servers while the model runs here, so the
/// shards' own CPUs or GPUs do nothing. A job on the table embeds on each shard instead
/// (sql/shards.sql). README, "Past one server".
fn notice_foreign_partitions(tbl: pg_sys::Oid, relname: &str) -> Result<()> {
    let servers: Option<String> = pinned(|| {
        Spi::get_one_with_args(
            "SELECT pg_catalog.string_agg(DISTINCT pg_catalog.quote_ident(s.srvname), ', ')
               FROM pg_catalog.pg_partition_tree($1) t
               JOIN pg_catalog.pg_foreign_table f ON f.ftrelid OPERATOR(pg_catalog.=) t.relid
               JOIN pg_catalog.pg_foreign_server s ON s.oid OPERATOR(pg_catalog.=) f.ftserver",
            &[tbl.into()],
        )
    })
    .map_err(spi_error)?;
    if let Some(servers) = servers {
        pgrx::pg_sys::panic::ErrorReport::new(
            pgrx::PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
            format!("tributary_embed_column embeds the foreign partitions of {relname} on this server"),
            "tributary",
        )
        .set_detail(format!(
            "Their rows are read from and written back through the foreign servers {servers}; the model runs here."
        ))
        .set_hint("tributary_job_create() on this table embeds on each shard, where the rows live (README, \"Past one server\").")
        .report(PgLogLevel::NOTICE);
    }
    Ok(())
}

/// 42703 unless `tbl` has a column `column`.
fn require_column(tbl: pg_sys::Oid, relname: &str, column: &str) -> Result<()> {
    let found = pinned(|| {
        Spi::get_one_with_args::<bool>(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a \
             WHERE a.attrelid OPERATOR(pg_catalog.=) $1 \
               AND a.attname OPERATOR(pg_catalog.=) $2::pg_catalog.name \
               AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped)",
            &[tbl.into(), column.into()],
        )
    })
    .map_err(spi_error)?;
    if found != Some(true) {
        return Err(TributaryError::UndefinedColumn {
            relation: relname.into(),
            column: column.into(),
        });
    }
    Ok(())
}

/// The type of target column `target` of `tbl`, checked against `model` by
/// `tributary._target_column` (sql/bootstrap.sql), the one check jobs and prediction use too:
/// 42703 no such column, 42804 not vector/halfvec, 22000 a dimension other than the model's.
fn target_column(tbl: pg_sys::Oid, target: &str, model: &ModelRow) -> Result<VectorType> {
    // Its messages name the table as the caller's search_path shows it (`relname`, 0.8.0's
    // function has no such argument: there it prints the regclass under its own pinned path).
    let named = pinned(|| {
        Spi::get_one::<bool>(
            "SELECT pg_catalog.to_regprocedure('tributary._target_column(regclass, name, text, integer, text, text)') IS NOT NULL",
        )
    })
    .map_err(spi_error)?
    .unwrap_or(false);
    let sql = if named {
        "SELECT tributary._target_column($1::pg_catalog.regclass, $2::pg_catalog.name, \
                $3::pg_catalog.text, $4::pg_catalog.int4, relname => $5::pg_catalog.text)"
    } else {
        "SELECT tributary._target_column($1::pg_catalog.regclass, $2::pg_catalog.name, \
                $3::pg_catalog.text, $4::pg_catalog.int4)"
    };
    let relname = crate::pg::regclass::display_name(tbl).unwrap_or_default();
    let mut args = vec![
        tbl.into(),
        target.into(),
        model.name.as_str().into(),
        (model.dimension as i32).into(),
    ];
    if named {
        args.push(relname.as_str().into());
    }
    let typname = pinned(|| Spi::get_one_with_args::<String>(sql, &args))
        .map_err(spi_error)?
        .unwrap_or_default();
    VectorType::from_name(&typname).ok_or_else(|| {
        TributaryError::Internal(format!(
            "tributary._target_column gave \"{typname}\" for column \"{target}\""
        ))
    })
}
