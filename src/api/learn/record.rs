//! One row's prediction by a predictor (`tributary._predict_record`, in `api/learn.rs`): the rows
//! related to it read through indexes ([`predict_related`]), or, for a table without a
//! one-column primary key, the table read once per statement ([`TableCache`]); the row appended
//! to them, predicted, taken out.

use pgrx::prelude::*;
use tributary_learn as learn;

use crate::pg::error::{spi_error, Result, TributaryError};
use crate::pg::regclass::{display_name, sql_name, RegClass};
use crate::service::learn::{
    learn_error, load, raise_with, spec_of, stored, Loaded, PgControl, Source, Spec,
};

type Predicted = (Option<String>, Option<f64>, Option<pgrx::JsonB>);

pub(super) fn predict_record(name: &str, row: pgrx::AnyElement) -> Result<Predicted> {
    let ctl = PgControl::new("tributary_predict");
    if let Some(done) = predict_related(name, &row, &ctl)? {
        return Ok(done);
    }
    let key = TableCache::key(name);
    let cached = TABLE_CACHE.with(|c| c.borrow_mut().take().filter(|t| t.key == key));
    let mut cache = match cached {
        Some(c) => c,
        None => {
            let p = stored(name)?;
            let oid = RegClass(p.tbl).lock()?;
            let table = sql_name(oid)
                .ok_or_else(|| TributaryError::UndefinedTable("table dropped".into()))?;
            let plan = spec_of(name, &p)?;
            let types = row_types(oid)?;
            if !types.contains(&row.oid()) {
                wrong_row(oid, row.oid());
            }
            let all = load(&plan, Source::Table(&table), &ctl)?;
            let model = learn::Model::from_bytes(&p.model).map_err(|e| learn_error(e, &ctl))?;
            TableCache {
                key,
                oid,
                types,
                plan,
                model,
                all,
                index: Default::default(),
            }
        }
    };
    if !cache.types.contains(&row.oid()) {
        let oid = cache.oid;
        TableCache::keep(cache);
        wrong_row(oid, row.oid());
    }
    let one = load(
        &cache.plan,
        Source::Record {
            datum: row.datum(),
            typoid: row.oid(),
        },
        &ctl,
    )?;
    let Some(key) = one.keys.first().cloned() else {
        TableCache::keep(cache);
        return Ok((None, None, None));
    };
    if one.as_of_null[0] {
        TableCache::keep(cache);
        return Ok((None, None, None));
    }
    // The same row in the table: its own label and its link groups (a new row has none yet).
    if cache.index.is_empty() {
        cache.index = (cache.all.keys.iter().enumerate())
            .map(|(i, k)| (k.clone(), i))
            .collect();
    }
    let same = cache.index.get(&key).copied();
    let all = &mut cache.all;
    let target = all.keys.len() as u32;
    let undo = append(all, one, same);
    let preds = learn::predict(&cache.model, &all.ds, &[target], &ctl);
    let evidence_keys: Vec<String> = match &preds {
        Ok(p) => p
            .iter()
            .flat_map(|p| {
                p.neighbours
                    .iter()
                    .map(|(i, _)| all.keys[*i as usize].clone())
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    undo.apply(all);
    TableCache::keep(cache);
    Ok(answer(
        preds.map_err(|e| learn_error(e, &ctl))?,
        &evidence_keys,
    ))
}

/// The first prediction of `preds` as `tributary_predict` returns it; `evidence_keys`: the keys
/// of its neighbours, in order.
fn answer(preds: Vec<learn::Prediction>, evidence_keys: &[String]) -> Predicted {
    let Some(pred) = preds.into_iter().next() else {
        return (None, None, None);
    };
    let evidence = serde_json::json!({
        "neighbours": pred.neighbours.iter().zip(evidence_keys).map(|((_, s), k)| serde_json::json!({
            "key": serde_json::from_str::<serde_json::Value>(k).unwrap_or(serde_json::Value::Null),
            "similarity": s})).collect::<Vec<_>>(),
        "history": pred.history.iter().map(|(p, c)| (p.clone(), serde_json::json!(c))).collect::<serde_json::Map<_, _>>(),
        "features": pred.top_features.iter().map(|(n, v)| (n.clone(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
    });
    (pred.label, pred.confidence, Some(pgrx::JsonB(evidence)))
}

/// A predictor's plan and model as one backend's last call of it had them, for its next calls
/// while the predictor (its version), the table (its pg_class row and its pg_attribute rows:
/// columns added, renamed or dropped, privileges, row-level security switched on or off) and the
/// user are the same.
struct PlanCache {
    key: (String, u32, String),
    oid: pg_sys::Oid,
    types: Vec<pg_sys::Oid>,
    plan: Spec,
    model: Option<learn::Model>,
}

thread_local! {
    /// By predictor name; at most [`PLAN_CACHE_SIZE`] predictors, the oldest dropped first.
    static PLAN_CACHE: std::cell::RefCell<Vec<(String, PlanCache)>> = const { std::cell::RefCell::new(Vec::new()) };
}
const PLAN_CACHE_SIZE: usize = 8;

/// One row's prediction from the rows related to it alone (`Spec::related_sql`: its own row in
/// the table, and those strictly earlier that share a group with it or are among the 5k
/// labelled rows nearest to its embedding, read through indexes), with the plan and the model
/// kept per backend ([`PlanCache`]): what makes one row a few milliseconds on a table of any
/// size. The features are those of the whole table's (the same history counts; the k-NN votes
/// exact unless an approximate index answers the nearest rows' query). None when the plan has
/// no related rows' query (no one-column primary key): the caller reads the whole table.
fn predict_related(
    name: &str,
    row: &pgrx::AnyElement,
    ctl: &PgControl,
) -> Result<Option<Predicted>> {
    let head = crate::service::learn::stored_head(name)?;
    let oid = RegClass(head.tbl).lock()?;
    let table_version = crate::pg::spi::select_one::<String>(
        "SELECT CAST(c.xmin AS pg_catalog.text) OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) \
                (SELECT pg_catalog.string_agg(CAST(a.xmin AS pg_catalog.text), ',' ORDER BY a.attnum) \
                   FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid) \
           FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) $1",
        &[oid.into()],
    )
    .map_err(spi_error)?
    .unwrap_or_default();
    // SAFETY: the current user, in a transaction.
    let user = unsafe { pg_sys::GetUserId() }.to_u32();
    let key = (head.version.clone(), user, table_version);
    let cached = PLAN_CACHE.with(|c| {
        let mut c = c.borrow_mut();
        c.iter()
            .position(|(n, e)| n == name && e.key == key && e.oid == oid)
            .map(|i| c.remove(i).1)
    });
    let entry = match cached {
        Some(e) => e,
        None => {
            let plan = spec_of(name, &head)?;
            let (model, types) = if plan.related_sql.is_some() {
                let bytes = stored(name)?.model;
                let model = learn::Model::from_bytes(&bytes).map_err(|e| learn_error(e, ctl))?;
                (Some(model), row_types(oid)?)
            } else {
                (None, Vec::new())
            };
            PlanCache {
                key,
                oid,
                types,
                plan,
                model,
            }
        }
    };
    let result = (|| -> Result<Option<Predicted>> {
        let Some(model) = &entry.model else {
            return Ok(None);
        };
        if !entry.types.contains(&row.oid()) {
            wrong_row(oid, row.oid());
        }
        let record = Source::Record {
            datum: row.datum(),
            typoid: row.oid(),
        };
        let one = load(&entry.plan, record, ctl)?;
        let Some(key) = one.keys.first().cloned() else {
            return Ok(Some((None, None, None)));
        };
        if one.as_of_null[0] {
            return Ok(Some((None, None, None)));
        }
        let related = Source::Related {
            datum: row.datum(),
            typoid: row.oid(),
            k5: 5 * head.options.k.max(1),
        };
        // The nearest rows' query filters (labelled, earlier): an approximate index keeps
        // scanning until it has them all (pgvector's iterative scans), set for the read only.
        let saved = iterative_scans(None)?;
        let all = load(&entry.plan, related, ctl);
        iterative_scans(Some(saved))?;
        let mut all = all?;
        let same = all.keys.iter().position(|k| *k == key);
        let target = all.keys.len() as u32;
        append(&mut all, one, same);
        let preds =
            learn::predict(model, &all.ds, &[target], ctl).map_err(|e| learn_error(e, ctl))?;
        let keys: Vec<String> = preds
            .iter()
            .flat_map(|p| {
                p.neighbours
                    .iter()
                    .map(|(i, _)| all.keys[*i as usize].clone())
            })
            .collect();
        Ok(Some(answer(preds, &keys)))
    })();
    PLAN_CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= PLAN_CACHE_SIZE {
            c.remove(0);
        }
        c.push((name.to_string(), entry));
    });
    result
}

/// pgvector's `hnsw.iterative_scan` and `ivfflat.iterative_scan`: set to relaxed_order for the
/// transaction (`None`), returning their values before; or set back to `saved`. Settings that do
/// not exist (pgvector before 0.8, or not loaded) are left alone.
fn iterative_scans(
    saved: Option<Vec<(&'static str, String)>>,
) -> Result<Vec<(&'static str, String)>> {
    let mut before = Vec::new();
    for name in ["hnsw.iterative_scan", "ivfflat.iterative_scan"] {
        let value = match &saved {
            Some(s) => match s.iter().find(|(n, _)| *n == name) {
                Some((_, v)) => v.clone(),
                None => continue,
            },
            None => "relaxed_order".to_string(),
        };
        let old = crate::pg::spi::select_one::<String>(
            "SELECT pg_catalog.current_setting($1, true)",
            &[name.into()],
        )
        .map_err(spi_error)?;
        let Some(old) = old else { continue };
        crate::pg::spi::select_one::<String>(
            "SELECT pg_catalog.set_config($1, $2, true)",
            &[name.into(), value.as_str().into()],
        )
        .map_err(spi_error)?;
        before.push((name, old));
    }
    Ok(before)
}

/// The row types a row of table `oid` may have: the table's, its partitions'.
fn row_types(oid: pg_sys::Oid) -> Result<Vec<pg_sys::Oid>> {
    Ok(crate::pg::spi::select_one::<Vec<pg_sys::Oid>>(
        "SELECT pg_catalog.array_agg(c.reltype) FROM pg_catalog.pg_class c \
          WHERE c.oid OPERATOR(pg_catalog.=) $1 \
             OR c.oid OPERATOR(pg_catalog.=) ANY (SELECT t.relid FROM pg_catalog.pg_partition_tree($1) t)",
        &[oid.into()],
    )
    .map_err(spi_error)?
    .unwrap_or_default())
}

/// The rows of a predictor's table as one statement's first `tributary_predict` call read them,
/// with its plan and model,
/// for the statement's other calls: the predictor (its catalog row read, its access checked and
/// its table locked by the first call) as the statement's first call found it. Key: the
/// predictor's name, the transaction's and the statement's start times and the current user
/// (row-level security: another role may see other rows). One entry per backend, dropped at
/// the end of the transaction.
struct TableCache {
    key: (String, i64, i64, u32),
    /// The predictor's table (locked for the transaction by the first call).
    oid: pg_sys::Oid,
    /// The row types a row passed may have: the table's and its partitions'.
    types: Vec<pg_sys::Oid>,
    /// The plan of the features (checked against the table once: the table is locked for the
    /// statement) and the model, deserialised once.
    plan: Spec,
    model: learn::Model,
    all: Loaded,
    /// Row of each key in `all` (built once per statement).
    index: std::collections::HashMap<String, usize>,
}

/// 42804: a row of type `got` passed for predictor over table `tbl`.
fn wrong_row(tbl: pg_sys::Oid, got: pg_sys::Oid) -> ! {
    raise_with(
        pgrx::PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
        format!(
            "row must be a row of table {}, not of type {}",
            display_name(tbl).unwrap_or_default(),
            type_name(got)
        ),
        None,
        Some("Pass the table's own rows (SELECT p.* FROM t, tributary_predict('predictor', t) p), or ROW(...)::t for a new row."),
    )
}

/// Type `typ` as format_type writes it, for messages.
fn type_name(typ: pg_sys::Oid) -> String {
    // SAFETY: a catalog lookup in a transaction; a palloc'd C string ("???" for an unknown OID).
    unsafe { std::ffi::CStr::from_ptr(pg_sys::format_type_be(typ)) }
        .to_string_lossy()
        .into_owned()
}

thread_local! {
    static TABLE_CACHE: std::cell::RefCell<Option<TableCache>> = const { std::cell::RefCell::new(None) };
    static CACHE_CALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl TableCache {
    fn key(name: &str) -> (String, i64, i64, u32) {
        // SAFETY: plain reads of this backend's state in a transaction.
        let (xact, started, user) = unsafe {
            (
                pg_sys::GetCurrentTransactionStartTimestamp(),
                pg_sys::GetCurrentStatementStartTimestamp(),
                pg_sys::GetUserId().to_u32(),
            )
        };
        (name.to_string(), xact, started, user)
    }

    /// Keeps `cache` for the statement's next call; dropped when the transaction ends.
    fn keep(cache: TableCache) {
        TABLE_CACHE.with(|c| *c.borrow_mut() = Some(cache));
        if !CACHE_CALLBACK.with(|c| c.replace(true)) {
            for event in [
                pgrx::PgXactCallbackEvent::Commit,
                pgrx::PgXactCallbackEvent::Abort,
            ] {
                pgrx::register_xact_callback(event, || {
                    TABLE_CACHE.with(|c| c.borrow_mut().take());
                    CACHE_CALLBACK.with(|c| c.set(false));
                });
            }
        }
    }
}

/// What [`append`] changed, to give `all` back as it was read.
struct Undo {
    n: usize,
    same: Option<(usize, Option<String>, Option<f64>)>,
    pairs: Vec<usize>,
}

impl Undo {
    fn apply(self, all: &mut Loaded) {
        let n = self.n;
        let ds = &mut all.ds;
        match &mut ds.label {
            learn::Labels::Category(v) => {
                v.truncate(n);
                if let Some((s, l, _)) = self.same {
                    v[s] = l;
                }
            }
            learn::Labels::Number(v) => {
                v.truncate(n);
                if let Some((s, _, l)) = self.same {
                    v[s] = l;
                }
            }
        }
        if let Some(a) = ds.as_of.as_mut() {
            a.truncate(n);
        }
        if let Some(t) = ds.text.as_mut() {
            t.truncate(n);
        }
        if let Some(e) = ds.embedding.as_mut() {
            e.data.truncate(n * e.dim);
            e.present.truncate(n);
        }
        for (p, len) in ds.paths.iter_mut().zip(self.pairs) {
            p.pairs.truncate(len);
        }
        for (_, v) in ds.numbers.iter_mut() {
            v.truncate(n);
        }
        for (_, v) in ds.categories.iter_mut() {
            v.truncate(n);
        }
        all.keys.truncate(n);
        all.tids.truncate(n);
        all.as_of_null.truncate(n);
    }
}

/// Appends the one row of `one` to `all`; the row of `all` with its key (`same`) loses its label
/// (it is the row being predicted) and gives the new row its link-table groups. The [`Undo`]
/// gives `all` back as it was.
fn append(all: &mut Loaded, one: Loaded, same: Option<usize>) -> Undo {
    let n = all.keys.len() as u32;
    let ds = &mut all.ds;
    let o = one.ds;
    let undo = Undo {
        n: n as usize,
        same: same.map(|s| match &ds.label {
            learn::Labels::Category(v) => (s, v[s].clone(), None),
            learn::Labels::Number(v) => (s, None, v[s]),
        }),
        pairs: ds.paths.iter().map(|p| p.pairs.len()).collect(),
    };
    if let Some(s) = same {
        match &mut ds.label {
            learn::Labels::Category(v) => v[s] = None,
            learn::Labels::Number(v) => v[s] = None,
        }
    }
    match (&mut ds.label, o.label) {
        // The row being predicted has no known label.
        (learn::Labels::Category(v), learn::Labels::Category(_)) => v.push(None),
        (learn::Labels::Number(v), learn::Labels::Number(_)) => v.push(None),
        _ => {}
    }
    if let (Some(a), Some(b)) = (ds.as_of.as_mut(), o.as_of.as_ref()) {
        a.push(b[0]);
    }
    if let (Some(a), Some(b)) = (ds.text.as_mut(), o.text.as_ref()) {
        let mut t = b[0].clone();
        // Link groups of the same row in the table (the record's own text has its parents').
        if let Some(s) = same {
            let own = &a[s];
            for tok in own
                .split(' ')
                .filter(|w| w.starts_with('g') && w.len() == 17)
            {
                if !t.contains(tok) {
                    t.push(' ');
                    t.push_str(tok);
                }
            }
        }
        a.push(t);
    }
    match (ds.embedding.as_mut(), o.embedding) {
        (Some(a), Some(b)) if a.dim == b.dim => {
            a.data.extend_from_slice(&b.data[..b.dim]);
            a.present.push(b.present[0]);
        }
        (Some(a), _) => {
            a.data.extend(std::iter::repeat_n(0.0, a.dim));
            a.present.push(false);
        }
        _ => {}
    }
    for (pa, pb) in ds.paths.iter_mut().zip(o.paths) {
        // Parent paths come from the record itself; link paths from the table's same row.
        let from_record: Vec<(u32, u64)> = pb.pairs.iter().map(|&(_, g)| (n, g)).collect();
        let from_table: Vec<(u32, u64)> = match same {
            Some(s) if from_record.is_empty() => pa
                .pairs
                .iter()
                .filter(|(i, _)| *i as usize == s)
                .map(|&(_, g)| (n, g))
                .collect(),
            _ => Vec::new(),
        };
        pa.pairs.extend(from_record);
        pa.pairs.extend(from_table);
    }
    for ((_, a), (_, b)) in ds.numbers.iter_mut().zip(o.numbers) {
        a.push(b.into_iter().next().flatten());
    }
    for ((_, a), (_, b)) in ds.categories.iter_mut().zip(o.categories) {
        a.push(b.into_iter().next().flatten());
    }
    all.keys
        .push(one.keys.into_iter().next().unwrap_or_default());
    all.tids.push(None);
    all.as_of_null.push(false);
    undo
}
