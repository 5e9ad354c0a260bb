//! Predictors that learn: `tributary_train`, `tributary_predict_column(predictor, target)`,
//! `tributary._predict_record` (behind `tributary_predict(predictor, row)`, sql/learn.sql; the
//! work in learn/record.rs) and `tributary_drop_predictor`. The features and the models are `crates/learn`'s; reading the
//! rows and the catalog is `service/learn.rs`'s.

use pgrx::prelude::*;
use tributary_learn as learn;

use crate::pg::error::{raise, spi_error, OrRaise, Result, TributaryError};
use crate::pg::gucs;
use crate::pg::name::Name;
use crate::pg::regclass::{sql_name, RegClass};
use crate::pg::spi::pinned;
mod column;
mod record;
use column::{predict_column, predict_rows};

use crate::service::learn::{
    check_owner, learn_error, load, prediction_outputs, raise_with, short, spec, split_value,
    store, Fnv, Loaded, NewPredictor, Options, PgControl, Source,
};

/// The longest predictor name, in bytes (as PostgreSQL's own object names).
const MAX_NAME: usize = 63;

/// One row of `tributary_train`'s result: method, algorithm, split, rows, accuracy, macro_f1,
/// mae, seconds.
type TrainRow = (
    String,
    String,
    String,
    i64,
    Option<f64>,
    Option<f64>,
    Option<f64>,
    Option<f64>,
);

fn no_nulls(v: Option<Vec<Option<String>>>, what: &'static str) -> Result<Option<Vec<String>>> {
    v.map(|v| crate::api::column::no_nulls(v, what)).transpose()
}

/// `tributary_train(predictor text, tbl regclass, label name [, embedding name, as_of name,
/// split_at text, history text[], columns text[], algorithm text = 'auto', k int = 10])` → TABLE
/// (method, algorithm, split, rows, accuracy, macro_f1, mae, seconds): trains a predictor of
/// column `label` of `tbl` (a category, or a number: `tributary.label_kind`) and stores it under
/// the name `predictor` (tributary.predictors; a retrain by its owner replaces it atomically, in
/// the caller's transaction).
///
/// Features, each row's computed AS OF the row (`as_of`: only rows strictly earlier count; without
/// `as_of`, every other row): the similarity-weighted label shares (numbers: mean and spread) of
/// its k and 5k nearest labelled rows by `embedding` (cosine); the class probabilities of a word
/// and word-pair TF-IDF + multinomial logistic regression model of its text columns and the
/// groups it is linked to (out of fold for training rows; of three fitting settings, the one
/// whose own accuracy on the validation slice below is best); the label shares and counts of the
/// rows related to it through each history path (sql/learn.sql, `tributary._learn_spec`: a
/// parent, a parent's parent and its parent, a link table of the row or of a parent); its typed
/// columns and its parents' numbers. The head (`algorithm`): gradient-boosted trees ('gbdt'),
/// multinomial logistic regression ('logistic'), or 'auto': the better of both by the mean of
/// their scores on two forward slices, the latest 20% of the training rows by `as_of` and the
/// 20% before it (each fitted on the rows before the slice, the slice's features computed without
/// any of its labels, as a test period's are), refitted on all of them (crates/learn). Each head
/// is also scored without the k-NN votes, and they are left out when that scores at least as
/// well on the same slices (an embedding whose neighbours do not share the label).
///
/// `split_at` (a value of the `as_of` column's type, as text): rows with `as_of < split_at`
/// train, the others are scored as a test and their labels enter no feature. The result: the
/// predictor, k-NN alone (the vote of the k nearest) and the majority class (numbers: the mean)
/// on the test rows, or without `split_at` on the latest validation slice; accuracy and
/// macro-F1 (numbers: MAE), the rows scored, and the seconds of the whole call on the predictor's
/// row. With `split_at`, each candidate head's rows follow: split 'validation' (the latest slice),
/// 'validation 2' (the slice before it) and 'validation mean' (their mean, what 'auto' compared;
/// the last two only when both slices were used).
///
/// Runs as the caller (row-level security and column privileges choose the rows and columns it
/// learns from); `tributary.learn_threads` threads; `tributary.learn_memory` bounds the rows and
/// features held (54000 past it); a NOTICE every `tributary.progress_interval` ms; a cancel or
/// statement_timeout stops it within about a second and stores nothing. Rows with a NULL
/// `as_of` are left out (a NOTICE counts them); rows with a NULL label are neither trained on nor
/// scored.
///
/// Paths and columns through a table other than `tbl` (a parent's columns, a two- or three-hop
/// path, a link table) are found only when that table belongs to tbl's owner or to a role the
/// caller is a member of (superuser status not counting), or when `history` / `columns` names
/// them (the owner rule of child context; a NOTICE names the tables left out). Infinite dates
/// and timestamps, and infinite or NaN numbers, are missing values.
///
/// Errors: 22004 NULL predictor, tbl, label, algorithm or k, or a NULL element of history or
/// columns; 22023 empty predictor name, k outside 1..1000, unknown algorithm, split_at without
/// as_of, fewer than two classes (or no rows) to train on, a history path or column that does not
/// exist (DETAIL: those found; names in messages are cut to 64 characters); 42622 a predictor
/// name over 63 bytes; 42809 tbl is not a table (a view, a sequence, ...); 42P01 dropped table;
/// 42703 unknown column; 42804 as_of not a number/date/timestamp, embedding not vector/halfvec;
/// 42501 predictor owned by another role, or a column the caller may not read; 54000
/// tributary.learn_memory; 25006 read-only transaction.
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
#[pg_extern(volatile, parallel_unsafe)]
pub(crate) fn tributary_train(
    predictor: Option<&str>,
    tbl: Option<RegClass>,
    label: Option<Name>,
    embedding: default!(Option<Name>, "NULL"),
    as_of: default!(Option<Name>, "NULL"),
    split_at: default!(Option<&str>, "NULL"),
    history: default!(Option<Vec<Option<String>>>, "NULL"),
    columns: default!(Option<Vec<Option<String>>>, "NULL"),
    algorithm: default!(Option<&str>, "'auto'"),
    k: default!(Option<i32>, 10),
) -> TableIterator<
    'static,
    (
        name!(method, String),
        name!(algorithm, String),
        name!(split, String),
        name!(rows, i64),
        name!(accuracy, Option<f64>),
        name!(macro_f1, Option<f64>),
        name!(mae, Option<f64>),
        name!(seconds, Option<f64>),
    ),
> {
    let (Some(predictor), Some(tbl), Some(label), Some(algorithm), Some(k)) =
        (predictor, tbl, label, algorithm, k)
    else {
        raise(TributaryError::NullArgument(
            "predictor, tbl, label, algorithm and k",
        ));
    };
    let rows = train(
        predictor,
        tbl,
        Options {
            label: label.0,
            embedding: embedding.map(|e| e.0),
            as_of: as_of.map(|a| a.0),
            history: no_nulls(history, "an element of history").or_raise(),
            columns: no_nulls(columns, "an element of columns").or_raise(),
            algorithm: algorithm.to_string(),
            k: k.max(0) as usize,
            named: None,
            time_parts: true,
            outputs: Vec::new(),
        },
        split_at,
        k,
    )
    .or_raise();
    TableIterator::new(rows)
}

fn train(
    predictor: &str,
    tbl: RegClass,
    opts: Options,
    split_at: Option<&str>,
    k: i32,
) -> Result<Vec<TrainRow>> {
    if !(1..=1000).contains(&k) {
        return Err(TributaryError::InvalidArgument {
            message: format!("k must be between 1 and 1000, not {k}"),
            hint: None,
        });
    }
    let algorithm = match opts.algorithm.as_str() {
        "auto" => learn::Algorithm::Auto,
        "gbdt" => learn::Algorithm::Gbdt,
        "logistic" => learn::Algorithm::Logistic,
        other => {
            return Err(TributaryError::InvalidArgument {
                message: format!("algorithm must be auto, gbdt or logistic, not \"{other}\""),
                hint: None,
            })
        }
    };
    if predictor.is_empty() {
        return Err(TributaryError::InvalidArgument {
            message: "predictor must not be empty".into(),
            hint: None,
        });
    }
    if predictor.len() > MAX_NAME {
        raise_with(
            pgrx::PgSqlErrorCode::ERRCODE_NAME_TOO_LONG,
            format!("predictor name \"{}\" is too long", short(predictor)),
            Some(format!(
                "It is {} bytes; a predictor name has at most {MAX_NAME}.",
                predictor.len()
            )),
            None,
        );
    }
    crate::pg::spi::require_writable(c"tributary_train()");
    check_owner(predictor)?;
    let oid = tbl.lock()?;
    let ctl = PgControl::new("tributary_train");
    // Prediction targets are features only when named.
    let mut opts = opts;
    opts.outputs = prediction_outputs(oid)?;
    opts.time_parts = crate::service::learn::spec_is_current()?;
    let plan = spec(oid, &opts)?;
    if !plan.untrusted.is_empty() {
        pgrx::notice!(
            "tributary_train: the paths and columns through {} (owned by other roles) are not read; name them in history or columns to read them",
            plan.untrusted.join(", ")
        );
    }
    if plan.related_sql.is_none() {
        pgrx::notice!(
            "tributary_train: table {} has no one-column primary key: tributary_predict(predictor, row) reads the whole table for each row",
            crate::pg::regclass::display_name(oid).unwrap_or_default()
        );
    } else if !plan.missing_indexes.is_empty() {
        pgrx::pg_sys::panic::ErrorReport::new(
            pgrx::PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
            format!(
                "tributary_train: {} index(es) missing for one row's prediction: tributary_predict(predictor, row) scans the tables where they are missing",
                plan.missing_indexes.len()
            ),
            "tributary",
        )
        .set_hint(format!("{};", plan.missing_indexes.join("; ")))
        .report(pgrx::PgLogLevel::NOTICE);
    }
    // The predictor keeps the columns and paths it uses, by name: columns added later are not
    // features of it; and those its trainer named, which are read whoever owns their tables.
    let mut named: Vec<String> = (opts.history.iter().flatten())
        .chain(opts.columns.iter().flatten())
        .filter(|n| !n.starts_with('-'))
        .filter(|n| plan.paths_used.contains(n) || plan.columns_used.contains(n))
        .cloned()
        .collect();
    for v in &plan.vouched {
        if !named.contains(v) {
            named.push(v.clone());
        }
    }
    opts.named = Some(named);
    opts.columns = Some(plan.columns_used.clone());
    opts.history = Some(plan.paths_used.clone());
    let split = split_at.map(|s| split_value(&plan, s)).transpose()?;
    let table =
        sql_name(oid).ok_or_else(|| TributaryError::UndefinedTable("table dropped".into()))?;
    let Loaded {
        ds,
        keys,
        as_of_null,
        ..
    } = load(&plan, Source::Table(&table), &ctl)?;
    let left_out = as_of_null.iter().filter(|x| **x).count();
    if left_out > 0 {
        pgrx::notice!(
            "tributary_train: {left_out} rows with a NULL {} left out",
            opts.as_of.as_deref().unwrap_or("as_of")
        );
    }
    let labelled = |i: usize| match &ds.label {
        learn::Labels::Category(v) => v[i].is_some(),
        learn::Labels::Number(v) => v[i].is_some(),
    };
    let roles: Vec<learn::Role> = (0..keys.len())
        .map(|i| {
            if as_of_null[i] {
                learn::Role::Ignore
            } else if !labelled(i) {
                learn::Role::Predict
            } else if let (Some(s), Some(t)) = (split, ds.as_of.as_ref()) {
                if t[i] >= s {
                    learn::Role::Test
                } else {
                    learn::Role::Train
                }
            } else {
                learn::Role::Train
            }
        })
        .collect();
    let train_opts = learn::TrainOptions {
        algorithm,
        k: opts.k,
        threads: gucs::learn_threads(),
        max_memory_bytes: gucs::learn_memory_bytes(),
        ..Default::default()
    };
    let trained = learn::train(&ds, &roles, &train_opts, &ctl).map_err(|e| learn_error(e, &ctl))?;
    // The training rows' keys, times and labels.
    let mut digest = Fnv::default();
    let mut training_rows = 0i64;
    for (i, r) in roles.iter().enumerate() {
        if *r == learn::Role::Train {
            use std::hash::Hash;
            training_rows += 1;
            keys[i].hash(&mut digest);
            if let Some(t) = &ds.as_of {
                t[i].to_bits().hash(&mut digest);
            }
            match &ds.label {
                learn::Labels::Category(v) => v[i].hash(&mut digest),
                learn::Labels::Number(v) => v[i].map(f64::to_bits).hash(&mut digest),
            }
        }
    }
    let seconds = ctl.seconds();
    let rows: Vec<TrainRow> = trained
        .report
        .iter()
        .map(|m| {
            (
                m.method.clone(),
                m.algorithm.clone(),
                m.split.clone(),
                m.rows as i64,
                m.accuracy,
                m.macro_f1,
                m.mae,
                (m.method == "predictor").then_some(seconds),
            )
        })
        .collect();
    let metrics = serde_json::Value::Array(
        rows.iter()
            .map(|r| {
                serde_json::json!({"method": r.0, "algorithm": r.1, "split": r.2, "rows": r.3,
                    "accuracy": r.4, "macro_f1": r.5, "mae": r.6, "seconds": r.7})
            })
            .collect(),
    );
    use std::hash::Hasher;
    store(NewPredictor {
        name: predictor,
        tbl: oid,
        kind: &plan.kind,
        options: &opts,
        signature: &plan.signature(),
        features: trained.feature_names.clone(),
        algorithm: trained.model.algorithm().to_string(),
        classes: trained.model.classes().map(<[String]>::to_vec),
        model: trained.model.to_bytes(),
        metrics,
        training_rows,
        digest: format!("{:016x}", digest.finish()),
        reads: &plan.reads,
    })?;
    Ok(rows)
}

/// `tributary_predict_column(predictor text, target name [, batch_size int = 1000])` → bigint:
/// fills column `target` of the predictor's table, for every row whose label is NULL (and whose
/// `as_of` is not NULL, when the predictor has one), with the predictor's prediction, each row's
/// features as of its own `as_of` (every labelled row strictly earlier; without `as_of`, every
/// other labelled row) — the features tributary_train computed for its training rows. Returns
/// the rows written. A whole period unlabelled is the *period-ahead* protocol (its rows' history
/// stops at the last label known); `tributary_predict_column_online` predicts every row, labelled
/// or not (the *online* protocol).
/// `target` is remembered (`tributary._predictors.outputs`): no later `tributary_train` on this
/// table uses it as a feature unless `columns` names it.
///
/// Reads the table as the caller (row-level security chooses the rows learnt from and written),
/// predicts all rows at once (`tributary.learn_threads`, `tributary.learn_memory`), then writes
/// `batch_size` rows a statement by (tableoid, ctid); a NOTICE every
/// `tributary.progress_interval` ms; a cancel or statement_timeout stops it and nothing is
/// written (one statement).
///
/// The prediction becomes a value of target's type by PostgreSQL's own cast from text when that
/// type is built in (through domains), else by the type's input function (`tributary._text_as`):
/// never by a cast from text that a type's owner made.
///
/// Errors: 22004 NULL argument; 22023 batch_size < 1, target = the label column; 42704 unknown
/// predictor; 42501 neither its owner (or a member) nor a role that may see every row and column
/// it was trained on (DETAIL: why; `tributary._predictor_hidden`), or no UPDATE on target; 42703
/// unknown target; 55000 the table's columns changed since training (DETAIL: what changed); 42P01
/// its table was dropped.
#[pg_extern(name = "tributary_predict_column", volatile, parallel_unsafe)]
pub(crate) fn tributary_predict_column_predictor(
    predictor: Option<&str>,
    target: Option<Name>,
    batch_size: default!(Option<i32>, 1000),
) -> i64 {
    let (Some(predictor), Some(target), Some(batch_size)) = (predictor, target, batch_size) else {
        raise(TributaryError::NullArgument(
            "predictor, target and batch_size",
        ));
    };
    predict_column(predictor, &target.0, batch_size, None, false).or_raise()
}

/// `tributary_predict_column_online(predictor text, target name [, batch_size int = 1000])` →
/// bigint: `tributary_predict_column` for every row, labelled or not (whose `as_of` is not NULL):
/// the *online* protocol, each row predicted at its own time with every label strictly before it
/// (its own never counts), as a predict job or `tributary_predict_trigger` predicts a row when it
/// arrives (README, "In time: two protocols"). Returns the rows written; errors as
/// `tributary_predict_column`'s. (A separate name: a fourth argument of
/// `tributary_predict_column(predictor, ...)` would make four-argument calls of the k-NN
/// `tributary_predict_column(tbl, label, embedding, target)` ambiguous, 42725.)
#[pg_extern(volatile, parallel_unsafe)]
pub(crate) fn tributary_predict_column_online(
    predictor: Option<&str>,
    target: Option<Name>,
    batch_size: default!(Option<i32>, 1000),
) -> i64 {
    let (Some(predictor), Some(target), Some(batch_size)) = (predictor, target, batch_size) else {
        raise(TributaryError::NullArgument(
            "predictor, target and batch_size",
        ));
    };
    predict_column(predictor, &target.0, batch_size, None, true).or_raise()
}

/// `tributary._predict_column_job(predictor text, target name, tbl oid, predictor_owner oid)` →
/// bigint: `tributary_predict_column(predictor, target)` for a predict job (src/worker/predict.rs
/// calls it as the table's owner, by its schema and exact argument types, so that no overload
/// made in another schema can be called instead or make the call ambiguous). Refused (55000,
/// nothing written) unless the predictor is still trained on table `tbl` and owned by
/// `predictor_owner`, as when the job was made.
#[pg_extern(volatile, parallel_unsafe)]
pub(crate) fn _predict_column_job(
    predictor: Option<&str>,
    target: Option<Name>,
    tbl: Option<pg_sys::Oid>,
    predictor_owner: Option<pg_sys::Oid>,
) -> i64 {
    let (Some(predictor), Some(target), Some(tbl), Some(owner)) =
        (predictor, target, tbl, predictor_owner)
    else {
        raise(TributaryError::NullArgument(
            "predictor, target, tbl and predictor_owner",
        ));
    };
    predict_column(predictor, &target.0, 1000, Some((tbl, owner)), false).or_raise()
}

/// `tributary._predict_rows_job(predictor text, target name, tbl oid, predictor_owner oid,
/// changed jsonb)` → bigint: a predict job's refresh of the rows a few changed rows reach
/// (src/worker/predict.rs calls it as the table's owner). `changed`: the changed rows' old and
/// new versions (`tributary._row_jsonb`, queued by `tributary._predict_trigger_rows`). Each
/// unlabelled row they may change the prediction of (`Spec::affected_sql`: itself, the rows
/// sharing a group with it that are later in as_of) is predicted as `tributary_predict(predictor,
/// row)` predicts it (through indexes) and written; returns the rows written. The k-NN votes of
/// other rows that a changed label is among are refreshed by the next refresh of every row (a
/// statement of more than `tributary.predict_job_rows` rows, a change of a parent or link table).
/// A table without a one-column primary key: every row, as `_predict_column_job`. Refused
/// (55000) as `_predict_column_job` is.
#[pg_extern(volatile, parallel_unsafe)]
pub(crate) fn _predict_rows_job(
    predictor: Option<&str>,
    target: Option<Name>,
    tbl: Option<pg_sys::Oid>,
    predictor_owner: Option<pg_sys::Oid>,
    changed: Option<pgrx::JsonB>,
) -> i64 {
    let (Some(predictor), Some(target), Some(tbl), Some(owner), Some(changed)) =
        (predictor, target, tbl, predictor_owner, changed)
    else {
        raise(TributaryError::NullArgument(
            "predictor, target, tbl, predictor_owner and changed",
        ));
    };
    predict_rows(predictor, &target.0, (tbl, owner), changed).or_raise()
}

// Internal, in schema tributary (which only the extension's owner may create objects in).
pgrx::extension_sql!(
    r#"
ALTER FUNCTION _predict_rows_job(text, name, oid, oid, jsonb) SET SCHEMA tributary;
COMMENT ON FUNCTION tributary._predict_rows_job(text, name, oid, oid, jsonb) IS 'Internal: a predict job''s refresh of the rows a few changed rows reach.';
ALTER FUNCTION _predict_column_job(text, name, oid, oid) SET SCHEMA tributary;
COMMENT ON FUNCTION tributary._predict_column_job(text, name, oid, oid) IS 'Internal: tributary_predict_column for a predict job, refused unless the predictor still has the table and owner the job was made with.';
"#,
    name = "predict_column_job",
    requires = ["bootstrap", _predict_column_job, _predict_rows_job]
);

/// `tributary._predict_record(predictor text, "row" anyelement)` → (prediction text, confidence
/// float8, evidence jsonb): one row's prediction (`tributary_predict(predictor, row)` in
/// sql/learn.sql passes the row on), its features as of its own `as_of`. The row must be of the
/// predictor's table's row type or of one of its partitions' (42804 otherwise: an anonymous
/// `ROW(...)`, another table's row); it is read by column name as it is, with no text or JSON
/// round trip. A row of the table with the same key is left out of the rows it learns from (its
/// own label never counts). The table's rows are
/// read once per statement ([`TableCache`]): the first call of a statement reads them, the
/// others of the same statement (`SELECT tributary_predict('p', t) FROM t WHERE ...`) reuse
/// them and compute only their own row's features (O(rows) each: the k-NN search and the
/// history counts); for every NULL label of a table, tributary_predict_column. `evidence`:
/// {"neighbours": [{key, similarity}], "history": {path: related labelled rows},
/// "features": {name: value}} (the nearest labelled rows, the history counts per path, the
/// features that weigh most in the model). Errors: as tributary_predict_column's.
#[pg_extern(volatile, parallel_unsafe)]
pub(crate) fn _predict_record(
    predictor: Option<&str>,
    row: Option<pgrx::AnyElement>,
) -> TableIterator<
    'static,
    (
        name!(prediction, Option<String>),
        name!(confidence, Option<f64>),
        name!(evidence, Option<pgrx::JsonB>),
    ),
> {
    let Some(predictor) = predictor else {
        raise(TributaryError::NullArgument("predictor"));
    };
    let Some(row) = row else {
        return TableIterator::once((None, None, None));
    };
    TableIterator::once(record::predict_record(predictor, row).or_raise())
}

/// `tributary_drop_predictor(predictor text)` → boolean: drops the predictor; false when none has
/// that name. Errors: 22004 NULL; 42501 not its owner (or a member of the owning role).
#[pg_extern(volatile, parallel_unsafe)]
pub(crate) fn tributary_drop_predictor(predictor: Option<&str>) -> bool {
    let Some(predictor) = predictor else {
        raise(TributaryError::NullArgument("predictor"));
    };
    crate::pg::spi::require_writable(c"tributary_drop_predictor()");
    check_owner(predictor).or_raise();
    crate::pg::roles::as_role(crate::pg::roles::extension_owner(), || {
        pinned(|| {
            Spi::connect_mut(|c| {
                c.update(
                    "DELETE FROM tributary._predictors WHERE name OPERATOR(pg_catalog.=) $1 RETURNING 1",
                    None,
                    &[predictor.into()],
                )
                .map(|t| !t.is_empty())
            })
        })
    })
    .map_err(spi_error)
    .or_raise()
}
