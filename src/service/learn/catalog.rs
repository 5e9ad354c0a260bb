//! The catalog `tributary._predictors`: a predictor read (its owner checked, its plan rebuilt and
//! checked against the table as it is now) and written, as the extension's owner.
//!
//! Who may use a predictor ([`stored`]): its owner, a role inheriting the owner's privileges, or
//! a role that may see every row and column it was trained on: for each table it reads (its own,
//! and the parents and link tables of its paths and columns, `read_tables`), USAGE on the
//! schema, SELECT on every column it reads (`read_columns`), and no row-level security applying
//! to the role there (not enabled, or the role is a superuser, BYPASSRLS, or inherits the
//! table owner's privileges and the table does not FORCE it): `tributary._predictor_hidden`,
//! which the view `tributary.predictors` applies too. A predictor trained before 0.11.0 (no
//! tables recorded) is its owner's alone until trained again.

use super::*;

/// `s` cut to 64 characters, for messages (a 1 MB name makes no 1 MB error).
pub use crate::pg::error::short_name as short;

/// Raises an error with `code`, `message`, and optionally a DETAIL and a HINT.
pub fn raise_with(
    code: pgrx::PgSqlErrorCode,
    message: String,
    detail: Option<String>,
    hint: Option<&str>,
) -> ! {
    let mut r = pgrx::pg_sys::panic::ErrorReport::new(code, message, "tributary");
    if let Some(d) = detail {
        r = r.set_detail(d);
    }
    if let Some(h) = hint {
        r = r.set_hint(h.to_string());
    }
    r.report(PgLogLevel::ERROR);
    unreachable!("ERROR returns no control")
}

/// One predictor's catalog row.
pub struct Stored {
    pub owner: pg_sys::Oid,
    pub tbl: pg_sys::Oid,
    pub kind: String,
    pub options: Options,
    pub signature: serde_json::Value,
    pub features: Vec<String>,
    pub model: Vec<u8>,
    /// When it was trained and on what (epoch seconds and the data digest): a new version at
    /// every training.
    pub version: String,
}

/// The owner of predictor `name`, if it exists (read as the extension's owner).
pub fn owner_of(name: &str) -> Result<Option<pg_sys::Oid>> {
    as_role(extension_owner(), || {
        crate::pg::spi::select_one::<pg_sys::Oid>(
            "SELECT CAST(owner AS pg_catalog.oid) FROM tributary._predictors WHERE name OPERATOR(pg_catalog.=) $1",
            &[name.into()],
        )
    })
    .map_err(spi_error)
}

/// Whether the current user is `role` or a member of it (what lets a role retrain or drop a
/// predictor, as for other objects' owners).
pub fn is_member_of(role: pg_sys::Oid) -> Result<bool> {
    crate::pg::spi::select_one::<bool>(
        "SELECT pg_catalog.pg_has_role(CURRENT_USER, $1, 'USAGE')",
        &[role.into()],
    )
    .map_err(spi_error)
    .map(|b| b.unwrap_or(false))
}

/// 42501 unless the current user may retrain or drop predictor `name` (when it exists).
pub fn check_owner(name: &str) -> Result<()> {
    if let Some(owner) = owner_of(name)? {
        if !is_member_of(owner)? {
            return Err(TributaryError::Permission(format!(
                "must be owner of predictor \"{}\"",
                short(name)
            )));
        }
    }
    Ok(())
}

/// Predictor `name` for use by the current user: its owner (or a member) or a role that may see
/// every row and column it was trained on (see the module's comment; 42501 otherwise, DETAIL:
/// why; 42704 unknown name).
pub fn stored(name: &str) -> Result<Stored> {
    stored_with(name, true)
}

/// [`stored`] without the model's bytes (`model` empty): the checks, the table and the version
/// of a predictor whose model a backend may hold already.
pub fn stored_head(name: &str) -> Result<Stored> {
    stored_with(name, false)
}

fn stored_with(name: &str, with_model: bool) -> Result<Stored> {
    let sql = format!(
        "SELECT CAST(owner AS pg_catalog.oid), CAST(tbl AS pg_catalog.oid), kind, options, signature, features, {}, \
                CAST(read_tables AS pg_catalog.oid[]), read_columns, \
                CAST(pg_catalog.date_part('epoch', trained_at) AS pg_catalog.text) OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) data_digest \
           FROM tributary._predictors WHERE name OPERATOR(pg_catalog.=) $1",
        if with_model { "model" } else { "CAST(NULL AS pg_catalog.bytea)" }
    );
    let row = as_role(extension_owner(), || {
        pinned(|| {
            Spi::connect(|client| {
                let t = client.select(&sql, Some(1), &[name.into()])?;
                if t.is_empty() {
                    return Ok(None);
                }
                let r = t.first();
                Ok::<_, pgrx::spi::Error>(Some((
                    r.get::<pg_sys::Oid>(1)?.unwrap_or_default(),
                    r.get::<pg_sys::Oid>(2)?.unwrap_or_default(),
                    r.get::<String>(3)?.unwrap_or_default(),
                    r.get::<pgrx::JsonB>(4)?.map(|j| j.0).unwrap_or_default(),
                    r.get::<pgrx::JsonB>(5)?.map(|j| j.0).unwrap_or_default(),
                    r.get::<Vec<String>>(6)?.unwrap_or_default(),
                    r.get::<Vec<u8>>(7)?.unwrap_or_default(),
                    r.get::<Vec<pg_sys::Oid>>(8)?,
                    r.get::<pgrx::JsonB>(9)?,
                    r.get::<String>(10)?.unwrap_or_default(),
                )))
            })
        })
    })
    .map_err(spi_error)?;
    let Some((owner, tbl, kind, options, signature, features, model, tables, columns, version)) =
        row
    else {
        return Err(TributaryError::UnknownPredictor(short(name)));
    };
    let options: Options = serde_json::from_value(options)
        .map_err(|e| TributaryError::Internal(format!("predictor options: {e}")))?;
    if !is_member_of(owner)? {
        // SAFETY: the current user, in a transaction.
        let who = unsafe { pg_sys::GetUserId() };
        let why = crate::pg::spi::select_one::<String>(
            "SELECT tributary._predictor_hidden($1, CAST($2 AS pg_catalog.regclass[]), $3)",
            &[who.into(), tables.into(), columns.into()],
        )
        .map_err(spi_error)?;
        if let Some(why) = why {
            raise_with(
                pgrx::PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                format!("permission denied for predictor \"{}\"", short(name)),
                Some(why),
                Some("A predictor is used by its owner, members of the owning role, and roles that may see every row and column it was trained on (no row-level security policy applies to them there; tributary.predictors lists those)."),
            );
        }
    }
    if crate::pg::regclass::display_name(tbl).is_none() {
        return Err(TributaryError::UndefinedTable(format!(
            "the table of predictor \"{}\" does not exist any more",
            short(name)
        )));
    }
    Ok(Stored {
        owner,
        tbl,
        kind,
        options,
        signature,
        features,
        model,
        version,
    })
}

/// The plan of a stored predictor, checked against what it was trained on: 55000 when a column
/// or path it reads is gone (or the caller may not read it any more), or changed type, or a
/// category column has become a text of many values. Columns added since change nothing: the
/// predictor names the columns and paths it uses (tributary_train stores the lists).
pub fn spec_of(name: &str, p: &Stored) -> Result<Spec> {
    // The names its trainer gave are read whoever owns their tables; nothing else of another
    // role's is (tributary._learn_trusted, as the current user).
    let named = Some(p.options.named.clone().unwrap_or_default());
    let everything = Options {
        columns: None,
        history: None,
        named: named.clone(),
        ..p.options.clone()
    };
    let found = spec(p.tbl, &everything)?;
    let mut gone: Vec<String> = Vec::new();
    for c in p.options.columns.iter().flatten() {
        if !found.columns.contains(c) {
            gone.push(format!("column {c}"));
        }
    }
    for h in p.options.history.iter().flatten() {
        if !found.paths.contains(h) {
            gone.push(format!("path {h}"));
        }
    }
    if !gone.is_empty() {
        return Err(TributaryError::Changed {
            message: format!(
                "the columns predictor \"{}\" was trained on have changed",
                short(name)
            ),
            detail: format!(
                "Trained on but not found now (or not readable by the current role, or through a table of another role that was not named): {}.",
                gone.join(", ")
            ),
        });
    }
    let s = spec(
        p.tbl,
        &Options {
            named,
            ..p.options.clone()
        },
    )?;
    let now = s.signature();
    if now != p.signature || s.kind != p.kind {
        let was: Vec<String> = sig_list(&p.signature["columns"]);
        let is: Vec<String> = sig_list(&now["columns"]);
        let before: Vec<&String> = was.iter().filter(|c| !is.contains(c)).collect();
        let after: Vec<&String> = is.iter().filter(|c| !was.contains(c)).collect();
        return Err(TributaryError::Changed {
            message: format!(
                "the columns predictor \"{}\" was trained on have changed",
                short(name)
            ),
            detail: if before.is_empty() && after.is_empty() {
                format!(
                    "Its features were {} and would now be {}.",
                    p.signature, now
                )
            } else {
                format!(
                    "Trained on: {}. Now: {}.",
                    before
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    after
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                )
            },
        });
    }
    Ok(s)
}

pub(super) fn sig_list(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    e.as_array()
                        .map(|x| {
                            x.iter()
                                .map(|s| s.as_str().unwrap_or("").to_string())
                                .collect::<Vec<_>>()
                                .join(" ")
                        })
                        .unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Everything `tributary_train` stores.
pub struct NewPredictor<'a> {
    pub name: &'a str,
    pub tbl: pg_sys::Oid,
    pub kind: &'a str,
    pub options: &'a Options,
    pub signature: &'a serde_json::Value,
    pub features: Vec<String>,
    pub algorithm: String,
    pub classes: Option<Vec<String>>,
    pub model: Vec<u8>,
    pub metrics: serde_json::Value,
    pub training_rows: i64,
    pub digest: String,
    /// Every table read, the predictor's own first, and the columns read of each.
    pub reads: &'a [(i64, Vec<String>)],
}

/// Writes (or replaces, in the caller's transaction: atomically) predictor `p.name`, as the
/// extension's owner; the owner is the current user, kept on a retrain. 42501 when another
/// role owns the name by now.
pub fn store(p: NewPredictor<'_>) -> Result<()> {
    // SAFETY: the current user, read before the switch.
    let caller = unsafe { pg_sys::GetUserId() };
    let options =
        serde_json::to_value(p.options).map_err(|e| TributaryError::Internal(e.to_string()))?;
    let read_tables: Vec<pg_sys::Oid> = p
        .reads
        .iter()
        .map(|(t, _)| pg_sys::Oid::from(*t as u32))
        .collect();
    let read_columns = serde_json::json!(p.reads.iter().map(|(_, c)| c).collect::<Vec<_>>());
    let written = as_role(extension_owner(), || {
        pinned(|| {
            Spi::connect_mut(|client| {
                let t = client.update(
                    "INSERT INTO tributary._predictors AS p (name, owner, tbl, label, kind, embedding, as_of, options, \
                         signature, features, algorithm, classes, model, metrics, training_rows, data_digest, \
                         read_tables, read_columns) \
                     VALUES ($1, CAST($2 AS pg_catalog.regrole), CAST($3 AS pg_catalog.regclass), $4, $5, $6, $7, $8, $9, \
                         $10, $11, $12, $13, $14, $15, $16, CAST($17 AS pg_catalog.regclass[]), $18) \
                     ON CONFLICT (name) DO UPDATE SET tbl = EXCLUDED.tbl, label = EXCLUDED.label, kind = EXCLUDED.kind, \
                         embedding = EXCLUDED.embedding, as_of = EXCLUDED.as_of, options = EXCLUDED.options, \
                         signature = EXCLUDED.signature, features = EXCLUDED.features, algorithm = EXCLUDED.algorithm, \
                         classes = EXCLUDED.classes, model = EXCLUDED.model, metrics = EXCLUDED.metrics, \
                         training_rows = EXCLUDED.training_rows, data_digest = EXCLUDED.data_digest, \
                         read_tables = EXCLUDED.read_tables, read_columns = EXCLUDED.read_columns, \
                         trained_at = pg_catalog.now() \
                       WHERE pg_catalog.pg_has_role($2, CAST(p.owner AS pg_catalog.oid), 'USAGE') \
                     RETURNING 1",
                    None,
                    &[
                        p.name.into(),
                        caller.into(),
                        p.tbl.into(),
                        p.options.label.as_str().into(),
                        p.kind.into(),
                        p.options.embedding.as_deref().into(),
                        p.options.as_of.as_deref().into(),
                        pgrx::JsonB(options).into(),
                        pgrx::JsonB(p.signature.clone()).into(),
                        p.features.into(),
                        p.algorithm.into(),
                        p.classes.into(),
                        p.model.into(),
                        pgrx::JsonB(p.metrics).into(),
                        p.training_rows.into(),
                        p.digest.into(),
                        read_tables.into(),
                        pgrx::JsonB(read_columns).into(),
                    ],
                )?;
                Ok::<_, pgrx::spi::Error>(t.len())
            })
        })
    })
    .map_err(spi_error)?;
    if written == 0 {
        return Err(TributaryError::Permission(format!(
            "must be owner of predictor \"{}\"",
            short(p.name)
        )));
    }
    Ok(())
}

/// The columns of table `tbl` that predictions are written to: the targets of its predict jobs
/// and the columns `tributary_predict_column` wrote for any predictor ([`record_output`]), read
/// as the extension's owner. `tributary_train` leaves them out of the features unless `columns`
/// names them (a prediction as a feature changes with every refresh, and an empty target column
/// would be a feature once filled).
pub fn prediction_outputs(tbl: pg_sys::Oid) -> Result<Vec<String>> {
    let recorded = if has_outputs()? {
        "UNION ALL SELECT CAST(pg_catalog.unnest(outputs) AS pg_catalog.text) FROM tributary._predictors \
          WHERE CAST(tbl AS pg_catalog.oid) OPERATOR(pg_catalog.=) $1"
    } else {
        ""
    };
    as_role(extension_owner(), || {
        pinned(|| {
            Spi::get_one_with_args::<Vec<String>>(
                &format!(
                    "SELECT pg_catalog.array_agg(DISTINCT c) FROM ( \
                     SELECT CAST(target AS pg_catalog.text) FROM tributary._predict_jobs \
                      WHERE CAST(tbl AS pg_catalog.oid) OPERATOR(pg_catalog.=) $1 {recorded}) o(c)"
                ),
                &[tbl.into()],
            )
        })
    })
    .map(Option::unwrap_or_default)
    .map_err(spi_error)
}

/// Whether `tributary._predictors` has `outputs` (0.12.0's SQL; not before `ALTER EXTENSION
/// tributary UPDATE`).
fn has_outputs() -> Result<bool> {
    crate::pg::spi::select_one::<bool>(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute \
          WHERE attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('tributary._predictors') \
            AND attname OPERATOR(pg_catalog.=) 'outputs' AND NOT attisdropped)",
        &[],
    )
    .map(|b| b.unwrap_or(false))
    .map_err(spi_error)
}

/// Records that predictor `name` wrote column `target` (`tributary._predictors.outputs`), as the
/// extension's owner: see [`prediction_outputs`].
pub fn record_output(name: &str, target: &str) -> Result<()> {
    if !has_outputs()? {
        return Ok(());
    }
    as_role(extension_owner(), || {
        pinned(|| {
            Spi::run_with_args(
                "UPDATE tributary._predictors SET outputs = pg_catalog.array_append(outputs, CAST($2 AS pg_catalog.name)) \
                  WHERE name OPERATOR(pg_catalog.=) $1 AND NOT CAST($2 AS pg_catalog.name) OPERATOR(pg_catalog.=) ANY (outputs)",
                &[name.into(), target.into()],
            )
        })
    })
    .map_err(spi_error)
}
