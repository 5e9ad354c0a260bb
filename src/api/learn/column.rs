//! Writing predictions to a column: `tributary_predict_column(predictor, target)` (every row, or
//! every unlabelled row), and a predict job's refresh of the rows a few changed rows reach
//! (`tributary._predict_rows_job`); the checks of the target and of a job's predictor.

use pgrx::prelude::*;
use tributary_learn as learn;

use crate::pg::error::{spi_error, Result, TributaryError};
use crate::pg::regclass::{sql_name, RegClass};
use crate::pg::spi::pinned;
use crate::service::learn::{
    learn_error, load, raise_with, record_output, short, spec_of, stored, Loaded, PgControl, Source,
};

pub(super) fn predict_rows(
    name: &str,
    target: &str,
    bound: (pg_sys::Oid, pg_sys::Oid),
    changed: pgrx::JsonB,
) -> Result<i64> {
    crate::pg::spi::require_writable(c"tributary_predict_column()");
    let p = stored(name)?;
    check_bound(name, &p, bound);
    let oid = RegClass(p.tbl).lock()?;
    let (table, value) = target_of(name, &p, oid, target)?;
    let plan = spec_of(name, &p)?;
    let (Some(affected), Some(pk)) = (&plan.affected_sql, &plan.primary_key) else {
        return predict_column(name, target, 1000, Some(bound), false);
    };
    let sql = format!(
        "WITH r AS (SELECT pg_catalog.jsonb_populate_record(CAST(NULL AS {table}), e) AS \"row\" \
                      FROM pg_catalog.jsonb_array_elements($1) e), \
              a AS (SELECT DISTINCT a.k FROM r CROSS JOIN LATERAL ({affected}) a(k)), \
              u AS (SELECT t.{pk} AS k, (tributary._predict_record($2, t)).prediction AS p \
                      FROM {table} t WHERE t.{pk} OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT a.k FROM a))) \
         UPDATE {table} AS t SET {col} = {value} FROM u WHERE t.{pk} OPERATOR(pg_catalog.=) u.k",
        affected = crate::service::learn::fill(affected, &[("%ROW%", "(r.\"row\")")]),
        pk = spi_ident(pk),
        col = spi_ident(target),
    );
    let written = pinned(|| {
        Spi::connect_mut(|c| {
            c.update(&sql, None, &[changed.into(), name.into()])
                .map(|t| t.len() as i64)
        })
    })
    .map_err(spi_error)?;
    record_output(name, target)?;
    Ok(written)
}

/// 55000 unless predictor `name` (as stored: `p`) has the table and owner a predict job was made
/// with (`bound`).
fn check_bound(name: &str, p: &crate::service::learn::Stored, bound: (pg_sys::Oid, pg_sys::Oid)) {
    let (tbl, owner) = bound;
    let what = if p.tbl != tbl {
        format!(
            "it is trained on table {} now, not on {}",
            crate::pg::regclass::display_name(p.tbl).unwrap_or_else(|| p.tbl.to_u32().to_string()),
            crate::pg::regclass::display_name(tbl).unwrap_or_else(|| tbl.to_u32().to_string())
        )
    } else if p.owner != owner {
        format!(
            "it belongs to role {} now, not to role {}",
            role_name(p.owner),
            role_name(owner)
        )
    } else {
        return;
    };
    raise_with(
        pgrx::PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("predictor \"{}\" is not the one the predict job was made with", short(name)),
        Some(format!("{what}: nothing was written.")),
        Some("Drop the job (tributary_predict_job_drop) and make it again for the predictor as it is now."),
    );
}

fn role_name(role: pg_sys::Oid) -> String {
    // SAFETY: a syscache lookup; NULL (noerr) for a dropped role.
    let n = unsafe { pg_sys::GetUserNameFromId(role, true) };
    if n.is_null() {
        return role.to_u32().to_string();
    }
    // SAFETY: a palloc'd C string.
    unsafe { std::ffi::CStr::from_ptr(n) }
        .to_string_lossy()
        .into_owned()
}

pub(super) fn predict_column(
    name: &str,
    target: &str,
    batch_size: i32,
    bound: Option<(pg_sys::Oid, pg_sys::Oid)>,
    labelled: bool,
) -> Result<i64> {
    if batch_size < 1 {
        return Err(TributaryError::InvalidArgument {
            message: format!("batch_size must be at least 1, not {batch_size}"),
            hint: None,
        });
    }
    crate::pg::spi::require_writable(c"tributary_predict_column()");
    let p = stored(name)?;
    if let Some(b) = bound {
        check_bound(name, &p, b);
    }
    let oid = RegClass(p.tbl).lock()?;
    let (table, value) = target_of(name, &p, oid, target)?;
    let plan = spec_of(name, &p)?;
    let ctl = PgControl::new("tributary_predict_column");
    let Loaded {
        ds,
        tids,
        as_of_null,
        ..
    } = load(&plan, Source::Table(&table), &ctl)?;
    let model = learn::Model::from_bytes(&p.model).map_err(|e| learn_error(e, &ctl))?;
    let unlabelled = |i: usize| match &ds.label {
        learn::Labels::Category(v) => v[i].is_none(),
        learn::Labels::Number(v) => v[i].is_none(),
    };
    let mut skipped = 0usize;
    let targets: Vec<u32> = (0..tids.len())
        .filter(|&i| {
            if !labelled && !unlabelled(i) {
                return false;
            }
            if as_of_null[i] {
                skipped += 1;
                return false;
            }
            true
        })
        .map(|i| i as u32)
        .collect();
    if skipped > 0 {
        pgrx::notice!("tributary_predict_column: {skipped} rows with a NULL as_of not predicted");
    }
    let preds = learn::predict(&model, &ds, &targets, &ctl).map_err(|e| learn_error(e, &ctl))?;
    let update = format!(
        "UPDATE {table} AS t SET {col} = {value} \
           FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.oid[]), pg_catalog.unnest($2::pg_catalog.tid[]), \
                           pg_catalog.unnest($3::pg_catalog.text[])) AS u(rel, id, p) \
          WHERE t.tableoid OPERATOR(pg_catalog.=) u.rel AND t.ctid OPERATOR(pg_catalog.=) u.id",
        col = spi_ident(target),
    );
    let mut written = 0i64;
    for chunk in targets
        .iter()
        .zip(&preds)
        .collect::<Vec<_>>()
        .chunks(batch_size as usize)
    {
        // Cancel and statement_timeout between two statements (and in the learner's loops).
        ctl.check_raise();
        let mut rels = Vec::with_capacity(chunk.len());
        let mut ids = Vec::with_capacity(chunk.len());
        let mut values = Vec::with_capacity(chunk.len());
        for (&i, pred) in chunk {
            let (rel, id) = tids[i as usize].expect("table rows have a ctid");
            rels.push(rel);
            ids.push(id);
            values.push(pred.label.clone());
        }
        written += pinned(|| {
            Spi::connect_mut(|c| {
                c.update(&update, None, &[rels.into(), ids.into(), values.into()])
                    .map(|t| t.len() as i64)
            })
        })
        .map_err(spi_error)?;
        learn::Control::progress(&ctl, "rows written", written as u64, targets.len() as u64);
    }
    record_output(name, target)?;
    Ok(written)
}

/// The table's name and the SQL expression that turns prediction `u.p` (text) into a value of
/// column `target` (checked: not the label, not a feature of the predictor, a column of the
/// table; 22023, 42703).
fn target_of(
    name: &str,
    p: &crate::service::learn::Stored,
    oid: pg_sys::Oid,
    target: &str,
) -> Result<(String, String)> {
    if target == p.options.label {
        return Err(TributaryError::InvalidArgument {
            message: format!("target must not be the label column \"{target}\""),
            hint: Some("Predictions written to the label column would count as labels; write them to another column.".into()),
        });
    }
    if p.options.columns.iter().flatten().any(|c| c == target) {
        return Err(TributaryError::InvalidArgument {
            message: format!(
                "target \"{target}\" is a feature of predictor \"{}\"",
                short(name)
            ),
            hint: Some(format!(
                "Write to another column, or train again without it: columns => '{{-{target}}}'."
            )),
        });
    }
    let table =
        sql_name(oid).ok_or_else(|| TributaryError::UndefinedTable("table dropped".into()))?;
    // The prediction (text) as a value of target's type: a built-in type's cast, or the type's
    // input function (never a cast from text that a role made).
    let value = crate::pg::spi::select_one::<String>(
        "SELECT tributary._text_as('u.p', a.atttypid, a.atttypmod) FROM pg_catalog.pg_attribute a \
          WHERE a.attrelid OPERATOR(pg_catalog.=) $1 AND a.attname OPERATOR(pg_catalog.=) $2 \
            AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped",
        &[oid.into(), target.into()],
    )
    .map_err(spi_error)?
    .ok_or_else(|| TributaryError::UndefinedColumn {
        relation: crate::pg::regclass::display_name(oid).unwrap_or_default(),
        column: target.into(),
    })?;
    Ok((table, value))
}

fn spi_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}
