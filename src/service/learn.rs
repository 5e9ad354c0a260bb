//! Predictors that learn (`tributary_train`, `tributary_predict_column`, `tributary_predict` with
//! a predictor; the SQL surface is in `api/learn.rs`, the catalog in sql/learn.sql, the learning
//! itself in `crates/learn`): the plan of the features (`tributary._learn_spec`), the rows and
//! link tables read through SPI into a [`learn::Dataset`], the catalog row written and read.
//!
//! Everything that reads a user's table runs as the caller (row-level security and column
//! privileges apply: a predictor sees what its caller sees); only the catalog
//! `tributary._predictors` is read and written as the extension's owner, after the caller was
//! checked. Every statement runs [`pinned`].

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use pgrx::prelude::*;
use serde::Deserialize;
use tributary_learn as learn;
use tributary_learn::Control as _;

use crate::pg::error::{spi_error, Result, TributaryError};
use crate::pg::gucs;
use crate::pg::roles::{as_role, extension_owner};
use crate::pg::spi::pinned;

mod catalog;
pub use catalog::*;

/// One link path of a plan: `sql` gives (referenced key, group) text pairs; `ref` indexes the
/// row query's referenced keys.
#[derive(Debug, Deserialize)]
pub struct LinkSpec {
    pub name: String,
    #[serde(rename = "ref")]
    pub ref_idx: usize,
    pub sql: String,
    /// The pairs of the groups one record (`%ROW%`) is linked to (0.12.0's plan; absent before).
    #[serde(default)]
    pub related_sql: Option<String>,
}

/// What `tributary._learn_spec` returns (sql/learn.sql documents each field).
#[derive(Debug, Deserialize)]
pub struct Spec {
    /// One record's related rows (`%ROW%`: the record; `%K5%`: the k-NN candidates), through
    /// indexes; None for a table without a one-column primary key, or a plan before 0.12.0.
    #[serde(default)]
    pub related_sql: Option<String>,
    /// `rows_sql` for `related_sql`'s rows, without the text, embedding, numbers and categories
    /// of the rows that are neither the record's own nor its nearest (their key, time, label and
    /// groups are all their features use); None before this field existed (then `rows_sql`).
    #[serde(default)]
    pub related_rows_sql: Option<String>,
    /// CREATE INDEX statements of the indexes `related_sql` wants and the tables lack.
    #[serde(default)]
    pub missing_indexes: Vec<String>,
    /// The keys of the unlabelled rows a change of one row (`%ROW%`) may change the prediction
    /// of; None without a one-column primary key (`primary_key`: that column).
    #[serde(default)]
    pub affected_sql: Option<String>,
    #[serde(default)]
    pub primary_key: Option<String>,
    pub kind: String,
    pub rows_sql: String,
    pub numbers: Vec<String>,
    pub categories: Vec<String>,
    pub parents: Vec<String>,
    pub links: Vec<LinkSpec>,
    pub as_of_sql: Option<String>,
    pub signature: serde_json::Value,
    pub paths: Vec<String>,
    pub columns: Vec<String>,
    pub columns_used: Vec<String>,
    pub paths_used: Vec<String>,
    /// Every column the chosen features read, by table (its OID), the predictor's own first.
    #[serde(default)]
    pub reads: Vec<(i64, Vec<String>)>,
    /// The tables of other roles that were left out (`tributary._learn_trusted`).
    #[serde(default)]
    pub untrusted: Vec<String>,
    /// The chosen paths and columns through tables that tbl's owner does not own.
    #[serde(default)]
    pub vouched: Vec<String>,
}

impl Spec {
    /// What a predictor depends on: every column read (with its type) and the features' names
    /// by kind, in order.
    pub fn signature(&self) -> serde_json::Value {
        serde_json::json!({
            "columns": self.signature,
            "numbers": self.numbers,
            "categories": self.categories,
            "paths": self.parents.iter().chain(self.links.iter().map(|l| &l.name)).collect::<Vec<_>>(),
        })
    }
}

/// The arguments that choose a predictor's features.
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
pub struct Options {
    pub label: String,
    pub embedding: Option<String>,
    pub as_of: Option<String>,
    pub history: Option<Vec<String>>,
    pub columns: Option<Vec<String>>,
    pub algorithm: String,
    pub k: usize,
    /// The history paths and columns read even through tables of other roles
    /// (`tributary._learn_trusted`). `None` in the plan of a training call (the names in
    /// `history` and `columns`); a stored predictor's: those its trainer named and those through
    /// tables of other roles it used (as a member of their owner), so that whoever may use the
    /// predictor reads what it was trained on (absent before 0.11.0: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub named: Option<Vec<String>>,
    /// The as_of's month, weekday and hour are features (`tributary._learn_spec`'s
    /// `time_parts`): predictors trained since 0.12.0; false (absent) before.
    #[serde(default)]
    pub time_parts: bool,
    /// Columns predictions are written to (`prediction_outputs`): not features unless `columns`
    /// names them. Only for the plan of a training call; never stored.
    #[serde(skip)]
    pub outputs: Vec<String>,
}

/// The plan for `tbl` under `opts`, as the caller sees the table (42809, 42703, 42804, 22023
/// from sql/learn.sql). A database still at 0.11.0's SQL (before `ALTER EXTENSION tributary
/// UPDATE`) has the `_learn_spec` without `time_parts` and `outputs`: it is called without
/// them (the features of 0.11.0).
pub fn spec(tbl: pg_sys::Oid, opts: &Options) -> Result<Spec> {
    let current = spec_is_current()?;
    let json = pinned(|| {
        let args: Vec<pgrx::datum::DatumWithOid> = vec![
            tbl.into(),
            opts.label.as_str().into(),
            opts.embedding.as_deref().into(),
            opts.as_of.as_deref().into(),
            opts.history.clone().into(),
            opts.columns.clone().into(),
            opts.named.clone().into(),
            opts.time_parts.into(),
            opts.outputs.clone().into(),
        ];
        let head = "SELECT tributary._learn_spec($1::pg_catalog.regclass, $2::pg_catalog.name, \
             $3::pg_catalog.name, $4::pg_catalog.name, $5::pg_catalog.text[], $6::pg_catalog.text[], \
             $7::pg_catalog.text[]";
        if current {
            Spi::get_one_with_args::<pgrx::JsonB>(
                &format!("{head}, $8::pg_catalog.bool, $9::pg_catalog.text[])"),
                &args,
            )
        } else {
            Spi::get_one_with_args::<pgrx::JsonB>(&format!("{head})"), &args[..7])
        }
    })
    .map_err(spi_error)?
    .ok_or_else(|| TributaryError::Internal("tributary._learn_spec returned NULL".into()))?;
    serde_json::from_value(json.0).map_err(|e| TributaryError::Internal(format!("plan: {e}")))
}

/// Whether the database's SQL has 0.12.0's `tributary._learn_spec` (`time_parts`, `outputs`):
/// false before `ALTER EXTENSION tributary UPDATE`, and a predictor trained then has 0.11.0's
/// features (its options say `time_parts: false`).
pub fn spec_is_current() -> Result<bool> {
    crate::pg::spi::select_one::<bool>(
        "SELECT pg_catalog.to_regprocedure('tributary._learn_spec(pg_catalog.regclass, pg_catalog.name, \
         pg_catalog.name, pg_catalog.name, pg_catalog.text[], pg_catalog.text[], pg_catalog.text[], \
         pg_catalog.bool, pg_catalog.text[])') IS NOT NULL",
        &[],
    )
    .map(|b| b.unwrap_or(false))
    .map_err(spi_error)
}

/// `split_at` as the as_of column's float8 (the column's type's input function: 22007/22P02
/// for a value it cannot read).
pub fn split_value(spec: &Spec, split_at: &str) -> Result<f64> {
    let Some(sql) = &spec.as_of_sql else {
        return Err(TributaryError::InvalidArgument {
            message: "split_at needs as_of".into(),
            hint: Some("Name the column that dates each row with as_of => 'column'.".into()),
        });
    };
    pinned(|| Spi::get_one_with_args::<f64>(sql, &[split_at.into()]))
        .map_err(spi_error)?
        .ok_or_else(|| TributaryError::InvalidArgument {
            message: "split_at must not be NULL after conversion".into(),
            hint: None,
        })
}

/// Where the rows come from: the whole table, or one record: a datum of the table's row type (or
/// of one of its partitions'), read by column name as it is (no text or JSON round trip, so no
/// cast, input function or domain CHECK runs on it), or the rows of the table related to such a
/// record (`Spec::related_sql`: its own row, and those strictly earlier that share a group with
/// it or are among its `k5` nearest labelled rows), with the link pairs of its groups only.
pub enum Source<'a> {
    Table(&'a str),
    Record {
        datum: pg_sys::Datum,
        typoid: pg_sys::Oid,
    },
    Related {
        datum: pg_sys::Datum,
        typoid: pg_sys::Oid,
        k5: usize,
    },
}

/// The rows of a plan, read: the dataset and what identifies each row.
pub struct Loaded {
    pub ds: learn::Dataset,
    /// Each row's key as jsonb text (tributary.row_key).
    pub keys: Vec<String>,
    /// Each row's (tableoid, ctid), for writes; `None` for a record.
    pub tids: Vec<Option<(pg_sys::Oid, pg_sys::ItemPointerData)>>,
    /// Rows whose as_of is NULL (never trained on, never predicted).
    pub as_of_null: Vec<bool>,
}

/// FNV-1a, 64 bits (Fowler, Noll, Vo): group ids and the training data's digest, the same on
/// every platform and Rust version.
pub struct Fnv(u64);
impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}
impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// `sql` (a statement of the plan) with its placeholders (`%ROW%`, `%SOURCE%`, ...) replaced by
/// `subs`, only where they stand as SQL, outside quoted identifiers and string literals: a
/// column named `"%ROW%"` (or a key literal `'%SOURCE%'` made of its name) stays as it is. The
/// plan quotes with `format('%I')` / `%L`, which double the quote inside, so each quote toggles.
/// Values are inserted as given, not scanned again.
pub(crate) fn fill(sql: &str, subs: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(sql.len() + 256);
    let (mut single, mut double) = (false, false);
    let mut rest = sql;
    'scan: while let Some(c) = rest.chars().next() {
        if !single && !double && c == '%' {
            for (ph, value) in subs {
                if let Some(after) = rest.strip_prefix(ph) {
                    out.push_str(value);
                    rest = after;
                    continue 'scan;
                }
            }
        }
        // (The quotes as escapes: a quote character in this file would look like the start of
        // a string to the tests that read the SQL in its string literals.)
        match c {
            '\u{27}' if !double => single = !single,
            '\u{22}' if !single => double = !double,
            _ => {}
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// A related rows' query of the plan with the record (`$1`) and the k-NN candidates' count.
fn related_rows(sql: &str, k5: usize) -> String {
    fill(sql, &[("%ROW%", "($1)"), ("%K5%", &k5.to_string())])
}

fn group_id(path: usize, text: &str) -> u64 {
    let mut h = Fnv::default();
    path.hash(&mut h);
    text.hash(&mut h);
    h.finish()
}

/// Reads the rows of `spec` from `source` (as the caller), and the pairs of every link path,
/// into a dataset; `ctl` is checked between batches. Rows are read through a cursor, 1,000 at a
/// time; the memory they take (embeddings, texts, features) is counted against
/// `tributary.learn_memory` (54000 past it).
pub fn load(spec: &Spec, source: Source<'_>, ctl: &PgControl) -> Result<Loaded> {
    let limit = gucs::learn_memory_bytes();
    let (sql, record) = match &source {
        Source::Table(t) => (
            fill(
                &spec.rows_sql,
                &[
                    ("%TABLEOID%", "t.tableoid"),
                    ("%CTID%", "t.ctid"),
                    ("%SOURCE%", t),
                ],
            ),
            None,
        ),
        Source::Record { datum, typoid } => (
            fill(
                &spec.rows_sql,
                &[
                    ("%TABLEOID%", "CAST(NULL AS pg_catalog.oid)"),
                    ("%CTID%", "CAST(NULL AS pg_catalog.tid)"),
                    ("%SOURCE%", "(SELECT ($1).*)"),
                ],
            ),
            Some((*datum, *typoid)),
        ),
        Source::Related { datum, typoid, k5 } => {
            let related = spec.related_sql.as_deref().ok_or_else(|| {
                TributaryError::Internal("the plan has no related rows' query".into())
            })?;
            let rows_sql = spec.related_rows_sql.as_deref().unwrap_or(&spec.rows_sql);
            let k5 = k5.to_string();
            let subs = [("%ROW%", "($1)"), ("%K5%", k5.as_str())];
            let source = fill(related, &subs);
            (
                fill(
                    rows_sql,
                    &[
                        ("%TABLEOID%", "CAST(NULL AS pg_catalog.oid)"),
                        ("%CTID%", "CAST(NULL AS pg_catalog.tid)"),
                        ("%SOURCE%", &source),
                        subs[0],
                        subs[1],
                    ],
                ),
                Some((*datum, *typoid)),
            )
        }
    };
    let number = spec.kind == "number";
    let mut keys = Vec::new();
    let mut tids = Vec::new();
    let mut as_of: Vec<f64> = Vec::new();
    let mut as_of_null = Vec::new();
    let mut cat_labels: Vec<Option<String>> = Vec::new();
    let mut num_labels: Vec<Option<f64>> = Vec::new();
    let mut texts: Vec<String> = Vec::new();
    let mut emb: Vec<f32> = Vec::new();
    let mut present: Vec<bool> = Vec::new();
    let mut dim: Option<usize> = None;
    let mut numbers: Vec<Vec<Option<f64>>> = vec![Vec::new(); spec.numbers.len()];
    let mut cats: Vec<Vec<Option<String>>> = vec![Vec::new(); spec.categories.len()];
    let mut paths: Vec<learn::GroupPath> = spec
        .parents
        .iter()
        .chain(spec.links.iter().map(|l| &l.name))
        .map(|n| learn::GroupPath {
            name: n.clone(),
            pairs: Vec::new(),
        })
        .collect();
    let mut refs: Vec<HashMap<String, Vec<u32>>> = Vec::new();
    let mut bytes = 0usize;
    let has_embedding = spec.rows_sql.contains(".vector) AS pg_catalog.float4[])");
    let has_as_of = spec.as_of_sql.is_some();

    pinned(|| -> Result<()> {
        Spi::connect(|client| -> Result<()> {
            let args: Vec<pgrx::datum::DatumWithOid> = record
                .into_iter()
                // SAFETY: the datum is a non-NULL value of type `typoid` (the call's argument),
                // valid for the call.
                .map(|(d, t)| unsafe { pgrx::datum::DatumWithOid::new(d, t) })
                .collect();
            let mut cursor = client.open_cursor(&sql, &args);
            loop {
                ctl.check_raise();
                let rows = cursor.fetch(1000).map_err(spi_error)?;
                if rows.is_empty() {
                    break;
                }
                for row in rows {
                    let i = keys.len() as u32;
                    keys.push(row.get::<String>(1).map_err(spi_error)?.unwrap_or_default());
                    let rel = row.get::<pg_sys::Oid>(2).map_err(spi_error)?;
                    let tid = row.get::<pg_sys::ItemPointerData>(3).map_err(spi_error)?;
                    tids.push(rel.zip(tid));
                    // An infinite or NaN time is no time (an infinite date is NULL already).
                    let t = row
                        .get::<f64>(4)
                        .map_err(spi_error)?
                        .filter(|t| t.is_finite());
                    as_of_null.push(has_as_of && t.is_none());
                    // A row of unknown time is never earlier than another: it counts for nothing.
                    as_of.push(t.unwrap_or(f64::MAX));
                    if number {
                        num_labels.push(row.get::<f64>(5).map_err(spi_error)?);
                    } else {
                        cat_labels.push(row.get::<String>(5).map_err(spi_error)?);
                    }
                    let text = row.get::<String>(6).map_err(spi_error)?.unwrap_or_default();
                    bytes += text.len() + 64;
                    texts.push(text);
                    if has_embedding {
                        // The float4[] read in place (a slice of its data), not element by
                        // element: 384 floats a row, every row of a training.
                        let arr: Option<pgrx::Array<f32>> = row.get(7).map_err(spi_error)?;
                        match arr.as_ref().and_then(|a| a.as_slice().ok()) {
                            Some(v) => {
                                let d = *dim.get_or_insert(v.len());
                                if d != v.len() {
                                    return Err(TributaryError::Dimension {
                                        expected: d,
                                        actual: v.len(),
                                        detail: "the embedding column holds vectors of different dimensions".into(),
                                    });
                                }
                                emb.extend_from_slice(v);
                                present.push(true);
                            }
                            _ => {
                                if let Some(d) = dim {
                                    emb.extend(std::iter::repeat_n(0.0, d));
                                } else {
                                    // Filled once the dimension is known.
                                }
                                present.push(false);
                            }
                        }
                    }
                    let nums = row
                        .get::<Vec<Option<f64>>>(8)
                        .map_err(spi_error)?
                        .unwrap_or_default();
                    // An infinite or NaN number is a missing value.
                    for (j, col) in numbers.iter_mut().enumerate() {
                        col.push(nums.get(j).copied().flatten().filter(|x| x.is_finite()));
                    }
                    let cs = row
                        .get::<Vec<Option<String>>>(9)
                        .map_err(spi_error)?
                        .unwrap_or_default();
                    for (j, col) in cats.iter_mut().enumerate() {
                        col.push(cs.get(j).cloned().flatten());
                    }
                    let groups = row
                        .get::<Vec<Option<String>>>(10)
                        .map_err(spi_error)?
                        .unwrap_or_default();
                    for (j, g) in groups.into_iter().enumerate() {
                        if let Some(g) = g {
                            paths[j].pairs.push((i, group_id(j, &g)));
                        }
                    }
                    let rs = row
                        .get::<Vec<Option<String>>>(11)
                        .map_err(spi_error)?
                        .unwrap_or_default();
                    if refs.len() < rs.len() {
                        refs.resize_with(rs.len(), HashMap::new);
                    }
                    for (j, r) in rs.into_iter().enumerate() {
                        if let Some(r) = r {
                            refs[j].entry(r).or_default().push(i);
                        }
                    }
                    bytes += 16 * (numbers.len() + cats.len() + paths.len()) + 48;
                }
                let total = bytes + emb.len() * 4;
                if total > limit {
                    return Err(memory_error(total, limit));
                }
                ctl.progress("reading rows", keys.len() as u64, 0);
            }
            Ok(())
        })
    })?;

    // Rows read before the first embedding gave the dimension: fill their zeros now.
    if let Some(d) = dim {
        if emb.len() != present.len() * d {
            let mut full = Vec::with_capacity(present.len() * d);
            let mut src = emb.chunks_exact(d);
            for p in &present {
                if *p {
                    full.extend_from_slice(src.next().expect("one vector per present row"));
                } else {
                    full.extend(std::iter::repeat_n(0.0, d));
                }
            }
            emb = full;
        }
    }

    // Link paths: (referenced key, group) pairs from each link table, as the caller.
    let n_parents = spec.parents.len();
    let links: &[LinkSpec] = match source {
        Source::Table(_) | Source::Related { .. } => &spec.links,
        // A record's link groups are its row's in the table (api/learn.rs).
        Source::Record { .. } => &[],
    };
    for (li, link) in links.iter().enumerate() {
        let path = n_parents + li;
        let Some(map) = refs.get(link.ref_idx) else {
            continue;
        };
        let (link_sql, link_args) = match (&source, &link.related_sql) {
            (Source::Related { .. }, Some(r)) => (related_rows(r, 0), record),
            (Source::Related { .. }, None) => {
                return Err(TributaryError::Internal(
                    "the plan has no related link pairs' query".into(),
                ))
            }
            _ => (link.sql.clone(), None),
        };
        pinned(|| -> Result<()> {
            Spi::connect(|client| -> Result<()> {
                let args: Vec<pgrx::datum::DatumWithOid> = link_args
                    .into_iter()
                    // SAFETY: as for the rows' query: the call's non-NULL argument.
                    .map(|(d, t)| unsafe { pgrx::datum::DatumWithOid::new(d, t) })
                    .collect();
                let mut cursor = client.open_cursor(&link_sql, &args);
                loop {
                    ctl.check_raise();
                    let rows = cursor.fetch(10_000).map_err(spi_error)?;
                    if rows.is_empty() {
                        break;
                    }
                    for row in rows {
                        let (Some(r), Some(g)) = (
                            row.get::<String>(1).map_err(spi_error)?,
                            row.get::<String>(2).map_err(spi_error)?,
                        ) else {
                            continue;
                        };
                        if let Some(rows) = map.get(&r) {
                            let gid = group_id(path, &g);
                            for &i in rows {
                                paths[path].pairs.push((i, gid));
                            }
                        }
                    }
                    bytes += 16 * 10_000;
                    if bytes + emb.len() * 4 > limit {
                        return Err(memory_error(bytes + emb.len() * 4, limit));
                    }
                }
                Ok(())
            })
        })?;
    }

    // The lexical view: the row's text, and one token per group it belongs to (the names of its
    // people, its album, ...: what a data scientist's TF-IDF over "the row and its links" sees).
    for p in &paths {
        for &(i, g) in &p.pairs {
            let t = &mut texts[i as usize];
            t.push_str(&format!(" g{g:016x}"));
        }
    }

    let n = keys.len();
    let ds = learn::Dataset {
        as_of: has_as_of.then_some(as_of),
        label: if number {
            learn::Labels::Number(num_labels)
        } else {
            learn::Labels::Category(cat_labels)
        },
        text: Some(texts),
        embedding: dim.map(|d| learn::Embeddings {
            dim: d,
            data: emb,
            present,
        }),
        paths,
        numbers: spec.numbers.iter().cloned().zip(numbers).collect(),
        categories: spec.categories.iter().cloned().zip(cats).collect(),
    };
    debug_assert!(ds.as_of.as_ref().is_none_or(|a| a.len() == n));
    Ok(Loaded {
        ds,
        keys,
        tids,
        as_of_null,
    })
}

fn memory_error(needed: usize, limit: usize) -> TributaryError {
    TributaryError::LearnMemory { needed, limit }
}

/// [`learn::Control`] for a call in a backend: cancel and statement_timeout seen between two
/// pieces of work (InterruptPending, read without processing it: the learner stops its threads
/// and returns, then [`PgControl::check_raise`] raises the real error), progress NOTICEs every
/// `tributary.progress_interval` ms.
pub struct PgControl {
    what: &'static str,
    interval: u64,
    last: std::cell::Cell<Instant>,
    started: Instant,
}

impl PgControl {
    pub fn new(what: &'static str) -> PgControl {
        PgControl {
            what,
            interval: gucs::progress_interval_ms(),
            last: std::cell::Cell::new(Instant::now()),
            started: Instant::now(),
        }
    }

    /// Raises the pending cancel or statement_timeout, if any (on the backend's own thread).
    pub fn check_raise(&self) {
        pgrx::check_for_interrupts!();
    }

    pub fn seconds(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}

impl learn::Control for PgControl {
    fn check(&self) -> std::result::Result<(), learn::Error> {
        // InterruptPending alone is also set for interrupts that raise nothing (sinval catchup,
        // barriers, ...): those wait for the next CHECK_FOR_INTERRUPTS after the learner returns.
        if crate::pg::interrupt_pending() {
            Err(learn::Error::Cancelled("query cancel pending".into()))
        } else {
            Ok(())
        }
    }

    fn progress(&self, stage: &str, done: u64, total: u64) {
        if self.interval == 0 || self.last.get().elapsed() < Duration::from_millis(self.interval) {
            return;
        }
        self.last.set(Instant::now());
        if total > 0 {
            pgrx::notice!(
                "{}: {stage}: {done} of {total} ({:.0} s)",
                self.what,
                self.seconds()
            );
        } else {
            pgrx::notice!("{}: {stage}: {done} ({:.0} s)", self.what, self.seconds());
        }
    }
}

/// A learner's error as the call's: a cancel raises the pending interrupt (57014, with
/// statement_timeout's message when it was that), memory 54000, bad data 22023, a stored model
/// that is not valid XX001 (raised here).
pub fn learn_error(e: learn::Error, ctl: &PgControl) -> TributaryError {
    match e {
        learn::Error::Cancelled(_) => {
            ctl.check_raise();
            // A cancel that CHECK_FOR_INTERRUPTS did not raise (it ignores one while
            // QueryCancelHoldoffCount is set, or a die while InterruptHoldoffCount is):
            // PostgreSQL's own message for a user's cancel.
            TributaryError::Canceled
        }
        learn::Error::Memory { needed, limit } => memory_error(needed, limit),
        learn::Error::Invalid(m) => TributaryError::InvalidArgument {
            message: m,
            hint: None,
        },
        // A stored model that fails validation when read (crates/learn): damaged data.
        learn::Error::Model(m) => raise_with(
            pgrx::PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("predictor: {m}"),
            None,
            Some("The stored model cannot be used: train the predictor again (tributary_train)."),
        ),
    }
}
