//! Rows as a model sees them: `tributary_row_text(record, ...)` and `tributary_embed(record, ...)`.
//!
//! A row becomes typed `column: value` text (template in [`crate::engine::rowtext`]), with what
//! its declared foreign keys reach: parent rows inline, child rows summarised. Context is read
//! with the caller's privileges through SPI, so row-level security applies, and columns the
//! caller may not SELECT are left out: context never shows what the caller could not read.
//! A row is never part of its own context, and each context row is shown at most once.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use pgrx::datum::{DatumWithOid, TimestampWithTimeZone};
use pgrx::prelude::*;
use pgrx::spi::quote_identifier;
use serde_json::{Map, Value};

use crate::engine::rowtext::{self, Children, Field, Row, TEMPLATE_VERSION};
use crate::pg::catalog::{self, ModelRow};
use crate::pg::error::{spi_error, OrRaise, Result, TributaryError};
use crate::pg::vector::Vector;

/// How a row is turned into text: which columns, how much foreign-key context, which template.
#[derive(Debug, Clone, Default)]
pub(crate) struct RowOptions {
    /// Only these columns of the row itself (`None`: all).
    pub include: Option<Vec<String>>,
    /// Left out: `column` of the row itself, or `table.column` in any table of the context.
    /// Leaving out a foreign key column also leaves out the parent it reaches.
    pub exclude: Vec<String>,
    /// Levels of parent rows to follow (0: none).
    pub parents: i32,
    /// Child rows shown per child table (0: none).
    pub children: i32,
    /// Time column names; a table's first one that it has orders its child rows (most recent
    /// first) and is compared with `as_of`.
    pub time_columns: Vec<String>,
    /// No context row whose time column is after this is used.
    pub as_of: Option<TimestampWithTimeZone>,
    /// Show primary and foreign key columns (surrogate ids mean nothing to a language model).
    pub keys: bool,
    /// Token budget for the whole text (`None`: the model's max length).
    pub max_tokens: Option<i32>,
    pub template: i32,
}

impl RowOptions {
    fn check(&self) -> Result<()> {
        let bad = |message: String, hint: Option<&str>| {
            Err(TributaryError::InvalidArgument { message, hint: hint.map(str::to_owned) })
        };
        if self.template != TEMPLATE_VERSION {
            return bad(
                format!("row template version {} does not exist", self.template),
                Some("Version 1 is the only version so far (see the README, \"Rows as text\")."),
            );
        }
        if self.parents < 0 || self.children < 0 {
            return bad(format!("parents and children must be 0 or more, not {} and {}", self.parents, self.children), None);
        }
        if self.max_tokens.is_some_and(|m| m < 1) {
            return bad("max_tokens must be at least 1".into(), None);
        }
        Ok(())
    }
}

/// One column of a table, as the caller sees it.
#[derive(Debug)]
struct Column {
    name: String,
    /// `format_type()` of the column: a cast target for key values.
    sql_type: String,
    timestamp: bool,
    /// vector, halfvec, sparsevec, bytea, tsvector: never part of the text.
    opaque: bool,
    /// The caller may SELECT it.
    readable: bool,
}

/// A foreign key seen from one table: `cols` of this table match `other_cols` of `other`
/// (for a parent link this table references `other`; for a child link `other` references it).
#[derive(Debug)]
struct Link {
    label: String,
    cols: Vec<String>,
    other: pg_sys::Oid,
    other_cols: Vec<String>,
}

#[derive(Debug)]
struct Table {
    oid: pg_sys::Oid,
    /// Relation name, unqualified, for the text.
    name: String,
    /// Schema-qualified, quoted, for queries.
    sql_name: String,
    columns: Vec<Column>,
    primary_key: Vec<String>,
    /// Columns in the primary key or in any foreign key.
    key_columns: HashSet<String>,
    parents: Vec<Link>,
    children: Vec<Link>,
}

impl Table {
    fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    fn readable(&self, names: &[String]) -> bool {
        names.iter().all(|n| self.column(n).is_some_and(|c| c.readable))
    }

    fn time_column<'a>(&'a self, opts: &RowOptions) -> Option<&'a Column> {
        opts.time_columns.iter().find_map(|t| self.column(t).filter(|c| c.readable))
    }

    /// `SELECT <readable columns> FROM <table> WHERE <cols> = <values> [AND ROW(<not cols>) IS
    /// DISTINCT FROM ROW(<not values>) ...] [AND <time> <= as_of]` and its arguments, or `None` if
    /// the caller may read nothing, or not the key columns. `not`: rows to leave out, by a key
    /// (the caller must be able to read its columns, or the query cannot leave them out).
    fn select(
        &self,
        cols: &[String],
        values: &[String],
        not: &[(&[String], &[String])],
        opts: &RowOptions,
    ) -> Option<(String, Vec<DatumWithOid<'static>>)> {
        if !self.readable(cols) || not.iter().any(|(c, _)| !self.readable(c)) {
            return None;
        }
        let list: Vec<String> = self.columns.iter().filter(|c| c.readable && !c.opaque).map(|c| quote_identifier(&c.name)).collect();
        if list.is_empty() {
            return None;
        }
        let mut args: Vec<DatumWithOid> = Vec::new();
        let mut conds = Vec::new();
        for (c, v) in cols.iter().zip(values) {
            args.push(v.clone().into());
            let ty = &self.column(c).expect("readable checked it").sql_type;
            conds.push(format!("{} = CAST(${} AS {ty})", quote_identifier(c), args.len()));
        }
        for (not_cols, not_values) in not {
            let (mut lhs, mut rhs) = (Vec::new(), Vec::new());
            for (c, v) in not_cols.iter().zip(not_values.iter()) {
                args.push(v.clone().into());
                let ty = &self.column(c).expect("readable checked it").sql_type;
                lhs.push(quote_identifier(c));
                rhs.push(format!("CAST(${} AS {ty})", args.len()));
            }
            conds.push(format!("ROW({}) IS DISTINCT FROM ROW({})", lhs.join(", "), rhs.join(", ")));
        }
        if let (Some(t), Some(as_of)) = (self.time_column(opts), opts.as_of) {
            args.push(as_of.into());
            conds.push(format!("{} <= ${}", quote_identifier(&t.name), args.len()));
        }
        Some((format!("SELECT {} FROM {} WHERE {}", list.join(", "), self.sql_name, conds.join(" AND ")), args))
    }
}

/// Table metadata as roles see it (`readable` columns), for one transaction.
struct TableCache {
    /// The transaction the entries belong to (its local transaction id).
    xact: pg_sys::LocalTransactionId,
    /// By (table, role): a `SET ROLE` or a SECURITY DEFINER function is another role, another entry.
    tables: HashMap<(pg_sys::Oid, pg_sys::Oid), Rc<Table>>,
}

thread_local! {
    /// A bulk call reads the catalogs once per table, not once per row. Bounded by the tables
    /// and roles one transaction uses; emptied when the next transaction asks. DDL and
    /// GRANT/REVOKE within the transaction drop the tables they touch ([`invalidate_tables`]).
    /// Backend-local, only ever touched on the backend's own thread: no lock.
    static TABLES: RefCell<TableCache> =
        RefCell::new(TableCache { xact: pg_sys::InvalidLocalTransactionId, tables: HashMap::new() });
    static CALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Relcache invalidation callback: drops `relid` and every table that links to it (all tables
/// for `InvalidOid`). No borrow of `TABLES` spans a call into PostgreSQL, so it is never
/// borrowed here; `try_borrow_mut` makes sure the callback cannot panic if it ever were.
#[pg_guard]
unsafe extern "C-unwind" fn invalidate_tables(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    TABLES.with(|c| {
        if let Ok(mut c) = c.try_borrow_mut() {
            if relid == pg_sys::InvalidOid {
                c.tables.clear();
            } else {
                c.tables.retain(|&(oid, _), t| oid != relid && !t.parents.iter().chain(&t.children).any(|l| l.other == relid));
            }
        }
    });
}

/// Table `oid` as the current role sees it, cached for the transaction.
fn table(oid: pg_sys::Oid) -> Result<Rc<Table>> {
    if !CALLBACK.with(|c| c.replace(true)) {
        // SAFETY: registered once per backend; the callback only touches TABLES.
        unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(invalidate_tables), pg_sys::Datum::from(0)) };
    }
    // SAFETY: MyProc is set in every backend and background worker that runs SQL.
    let xact = unsafe { (*pg_sys::MyProc).lxid };
    let key = (oid, unsafe { pg_sys::GetUserId() });
    if let Some(t) = TABLES.with(|c| {
        let mut c = c.borrow_mut();
        if c.xact != xact {
            *c = TableCache { xact, tables: HashMap::new() };
        }
        c.tables.get(&key).cloned()
    }) {
        return Ok(t);
    }
    let t = Rc::new(load_table(oid)?);
    TABLES.with(|c| c.borrow_mut().tables.insert(key, t.clone()));
    Ok(t)
}

fn load_table(oid: pg_sys::Oid) -> Result<Table> {
    Spi::connect(|client| -> Result<Table> {
        let args = [oid.into()];
        let head = client
            .select("SELECT c.relname::text, $1::regclass::text FROM pg_catalog.pg_class c WHERE c.oid = $1", None, &args)
            .map_err(spi_error)?;
        let head = head.first();
        let name: String = head.get(1).map_err(spi_error)?.unwrap_or_default();
        let sql_name: String = head.get(2).map_err(spi_error)?.unwrap_or_default();
        let mut columns = Vec::new();
        // A column's type seen through domains and arrays (`u`: the type, its base types and
        // element types): a domain over bytea or a vector[] is opaque, a timestamp[] is dates.
        for r in client
            .select(
                "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), u.dates, u.opaque, \
                        has_column_privilege(a.attrelid, a.attnum, 'SELECT') \
                 FROM pg_catalog.pg_attribute a CROSS JOIN LATERAL ( \
                   WITH RECURSIVE u(oid) AS ( \
                     SELECT a.atttypid \
                     UNION SELECT x.oid FROM u JOIN pg_catalog.pg_type t ON t.oid = u.oid \
                       CROSS JOIN LATERAL (VALUES (t.typbasetype), (CASE WHEN t.typcategory = 'A' THEN t.typelem END)) x(oid) \
                      WHERE x.oid <> 0) \
                   SELECT bool_or(t.typcategory = 'D') AS dates, \
                          bool_or(t.typname::text IN ('vector', 'halfvec', 'sparsevec', 'bytea', 'tsvector')) AS opaque \
                     FROM u JOIN pg_catalog.pg_type t ON t.oid = u.oid) u \
                 WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                None,
                &args,
            )
            .map_err(spi_error)?
        {
            columns.push(Column {
                name: r.get(1).map_err(spi_error)?.unwrap_or_default(),
                sql_type: r.get(2).map_err(spi_error)?.unwrap_or_default(),
                timestamp: r.get(3).map_err(spi_error)?.unwrap_or(false),
                opaque: r.get(4).map_err(spi_error)?.unwrap_or(false),
                readable: r.get(5).map_err(spi_error)?.unwrap_or(false),
            });
        }
        let primary_key: Vec<String> = client
            .select(
                "SELECT array_agg(a.attname::text ORDER BY k.ord) FROM pg_catalog.pg_index i \
                 CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) \
                 JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
                 WHERE i.indrelid = $1 AND i.indisprimary",
                None,
                &args,
            )
            .map_err(spi_error)?
            .first()
            .get(1)
            .map_err(spi_error)?
            .unwrap_or_default();
        // Foreign keys both ways, in name order; column lists in key order.
        // (constraint name, other table, this table's columns, the other table's columns)
        type RawLinks = Vec<(String, pg_sys::Oid, Vec<String>, Vec<String>)>;
        let links = |sql_side: &str| -> Result<RawLinks> {
            let (mine, theirs, other) = if sql_side == "parents" { ("conkey", "confkey", "confrelid") } else { ("confkey", "conkey", "conrelid") };
            let (mine_rel, theirs_rel) = if sql_side == "parents" { ("conrelid", "confrelid") } else { ("confrelid", "conrelid") };
            let sql = format!(
                "SELECT c.conname::text, c.{other}, \
                   (SELECT array_agg(a.attname::text ORDER BY k.ord) FROM unnest(c.{mine}) WITH ORDINALITY AS k(n, ord) \
                      JOIN pg_catalog.pg_attribute a ON a.attrelid = c.{mine_rel} AND a.attnum = k.n), \
                   (SELECT array_agg(a.attname::text ORDER BY k.ord) FROM unnest(c.{theirs}) WITH ORDINALITY AS k(n, ord) \
                      JOIN pg_catalog.pg_attribute a ON a.attrelid = c.{theirs_rel} AND a.attnum = k.n) \
                 FROM pg_catalog.pg_constraint c WHERE c.contype = 'f' AND c.{mine_rel} = $1 ORDER BY c.conname"
            );
            let mut out = Vec::new();
            for r in client.select(&sql, None, &args).map_err(spi_error)? {
                out.push((
                    r.get::<String>(1).map_err(spi_error)?.unwrap_or_default(),
                    r.get::<pg_sys::Oid>(2).map_err(spi_error)?.unwrap_or(pg_sys::InvalidOid),
                    r.get::<Vec<String>>(3).map_err(spi_error)?.unwrap_or_default(),
                    r.get::<Vec<String>>(4).map_err(spi_error)?.unwrap_or_default(),
                ));
            }
            Ok(out)
        };
        let relname = |oid: pg_sys::Oid| -> Result<String> {
            Ok(client
                .select("SELECT relname::text FROM pg_catalog.pg_class WHERE oid = $1", None, &[oid.into()])
                .map_err(spi_error)?
                .first()
                .get::<String>(1)
                .map_err(spi_error)?
                .unwrap_or_default())
        };
        let mut key_columns: HashSet<String> = primary_key.iter().cloned().collect();
        let mut parents = Vec::new();
        let raw = links("parents")?;
        for (_, other, cols, other_cols) in &raw {
            key_columns.extend(cols.iter().cloned());
            // album_id → album, reports_to → reports_to; a composite key: the parent's name.
            let label = match cols.as_slice() {
                [one] => one.strip_suffix("_id").filter(|s| !s.is_empty()).unwrap_or(one).to_owned(),
                _ => relname(*other)?,
            };
            parents.push(Link { label, cols: cols.clone(), other: *other, other_cols: other_cols.clone() });
        }
        let mut children = Vec::new();
        let raw = links("children")?;
        for (_, other, cols, other_cols) in &raw {
            let child = relname(*other)?;
            // Two foreign keys from one child table: tell them apart by the child's column.
            let twice = raw.iter().filter(|(_, o, _, _)| o == other).count() > 1;
            let label = if twice { format!("{child} ({})", other_cols.join(", ")) } else { child };
            children.push(Link { label, cols: cols.clone(), other: *other, other_cols: other_cols.clone() });
        }
        Ok(Table { oid, name, sql_name, columns, primary_key, key_columns, parents, children })
    })
}

/// Whether `column` of `table` is left out of the text by the options (not counting privileges,
/// opaque types and key columns).
fn excluded(table: &Table, column: &str, opts: &RowOptions, root: bool) -> bool {
    let qualified = format!("{}.{column}", table.name);
    opts.exclude.iter().any(|e| *e == qualified || (root && e == column))
        || (root && opts.include.as_ref().is_some_and(|i| !i.iter().any(|c| c == column)))
}

/// A key value from a row's JSON as text that casts back to the column's type; `None` for NULL.
fn key_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// A row's `row_to_json` text as a map from column name to value, in column order. Values
/// nested deeper than serde_json's 128 levels are kept as their compact JSON text
/// ([`rowtext::parse_row_json`]), so a deep json/jsonb value never empties a row.
///
/// Errors: XX000 if `json` is not a JSON object (PostgreSQL's `row_to_json` always gives one).
pub(crate) fn row_values(json: &str) -> Result<Map<String, Value>> {
    rowtext::parse_row_json(json).ok_or_else(|| TributaryError::Internal(format!("row_to_json gave no JSON object: {:.80}", json)))
}

/// Runs `sql` and returns each row's first column parsed as a JSON object and its second as a count.
fn json_rows(sql: &str, args: &[DatumWithOid]) -> Result<Vec<(Map<String, Value>, i64)>> {
    Spi::connect(|client| {
        let mut out = Vec::new();
        for r in client.select(sql, None, args).map_err(spi_error)? {
            let text: String = r.get(1).map_err(spi_error)?.unwrap_or_default();
            let count: i64 = r.get(2).ok().flatten().unwrap_or(1);
            out.push((row_values(&text)?, count));
        }
        Ok(out)
    })
}

/// Rows already in the text: `(table, key columns, key values)`.
type Seen = HashSet<(pg_sys::Oid, Vec<String>, Vec<String>)>;

/// Marks a row of `table` as shown, under its primary key and under every key a foreign key
/// references (each way a link can reach it) whose values it has; false if it was shown already.
fn mark_shown(table: &Table, values: &Map<String, Value>, seen: &mut Seen) -> bool {
    let keys = std::iter::once(table.primary_key.as_slice()).chain(table.children.iter().map(|l| l.cols.as_slice()));
    let ids: Vec<_> = keys
        .filter(|c| !c.is_empty())
        .filter_map(|cols| Some((table.oid, cols.to_vec(), cols.iter().map(|c| key_text(values.get(c))).collect::<Option<Vec<_>>>()?)))
        .collect();
    let new = !ids.iter().any(|id| seen.contains(id));
    seen.extend(ids);
    new
}

/// The row's own fields, then (levels left in `parents`) its parents, then (at the top) its children.
fn gather(table: &Table, values: &Map<String, Value>, opts: &RowOptions, parents: i32, root: bool, seen: &mut Seen) -> Result<Row> {
    let fields = table
        .columns
        .iter()
        .filter(|c| !c.opaque && (root || c.readable))
        .filter(|c| opts.keys || !table.key_columns.contains(&c.name))
        .filter(|c| !excluded(table, &c.name, opts, root))
        .filter_map(|c| values.get(&c.name).map(|v| Field { name: c.name.clone(), value: v.clone(), timestamp: c.timestamp }))
        .collect();
    let mut row = Row { table: Some(table.name.clone()), fields, ..Default::default() };
    if parents > 0 {
        for link in &table.parents {
            if link.cols.iter().any(|c| excluded(table, c, opts, root)) {
                continue;
            }
            let Some(key) = link.cols.iter().map(|c| key_text(values.get(c))).collect::<Option<Vec<_>>>() else {
                continue; // a NULL foreign key reaches no row
            };
            let reached = (link.other, link.other_cols.clone(), key);
            if seen.contains(&reached) {
                continue; // the row itself (a self-reference, a cycle), or a row already shown
            }
            let parent = self::table(link.other)?;
            let Some((select, args)) = parent.select(&link.other_cols, &reached.2, &[], opts) else { continue };
            // `p.*`, not `p`: a column named p would be taken for the row.
            let sql = format!("SELECT row_to_json(p.*)::text, 1::bigint FROM ({select} LIMIT 1) p");
            if let Some((map, _)) = json_rows(&sql, &args)?.into_iter().next() {
                // Reached by another key than the one it was shown under: compare every key.
                if !mark_shown(&parent, &map, seen) {
                    continue;
                }
                seen.insert(reached);
                let p = gather(&parent, &map, opts, parents - 1, false, seen)?;
                row.parents.push((link.label.clone(), p));
            }
        }
    }
    if root && opts.children > 0 {
        for link in &table.children {
            // `cols`: this table's referenced columns; `other_cols`: the child's foreign key.
            let Some(key) = link.cols.iter().map(|c| key_text(values.get(c))).collect::<Option<Vec<_>>>() else {
                continue;
            };
            let child = self::table(link.other)?;
            // Rows already shown (the row itself for a self-reference, parents in a cycle) are
            // not children again: leave them out by their keys the caller can read. The row
            // itself is known by `link.cols` (unique, its values are `key`); if those cannot be
            // read it cannot be left out, so its own table gets no children line.
            if child.oid == table.oid && !child.readable(&link.cols) {
                continue;
            }
            let not: Vec<(&[String], &[String])> = seen
                .iter()
                .filter(|(oid, cols, _)| *oid == child.oid && child.readable(cols))
                .map(|(_, cols, values)| (cols.as_slice(), values.as_slice()))
                .collect();
            let Some((select, args)) = child.select(&link.other_cols, &key, &not, opts) else { continue };
            let mut order: Vec<String> = Vec::new();
            if let Some(t) = child.time_column(opts) {
                order.push(format!("c.{} DESC NULLS LAST", quote_identifier(&t.name)));
            }
            if child.readable(&child.primary_key) {
                order.extend(child.primary_key.iter().map(|k| format!("c.{} DESC", quote_identifier(k))));
            }
            let order = if order.is_empty() { String::new() } else { format!(" ORDER BY {}", order.join(", ")) };
            let sql = format!(
                "SELECT row_to_json(c.*)::text, count(*) OVER ()::bigint FROM ({select}) c{order} LIMIT {}",
                opts.children
            );
            let found = json_rows(&sql, &args)?;
            let total = found.first().map_or(0, |(_, n)| *n);
            if total == 0 {
                continue;
            }
            let mut child_opts = opts.clone();
            // The child's link back is this row: leave it out.
            child_opts.exclude.extend(link.other_cols.iter().map(|c| format!("{}.{c}", child.name)));
            let rows = found
                .iter()
                .map(|(map, _)| gather(&child, map, &child_opts, 0, false, seen).map(|r| r.fields))
                .collect::<Result<Vec<_>>>()?;
            row.children.push(Children { label: link.label.clone(), total, rows });
        }
    }
    Ok(row)
}

/// The text of one row given as JSON (`row_to_json`) of table `oid` (`None`: an anonymous
/// record, whose fields are taken as they come).
///
/// `values` should come from [`row_values`]: a table row whose map is empty (serde_json gave up
/// on it) is an error, never an empty text.
///
/// Errors: 22023 bad options, or no values for a table row; 42703 an `include`/`exclude` name
/// the table does not have; 42704 unknown model; 58P01 missing tokenizer file.
pub(crate) fn row_text(oid: Option<pg_sys::Oid>, values: &Map<String, Value>, opts: &RowOptions, model: &ModelRow) -> Result<String> {
    opts.check()?;
    let row = match oid {
        Some(oid) => {
            let table = table(oid)?;
            let names = opts.include.iter().flatten().chain(opts.exclude.iter().filter(|e| !e.contains('.')));
            for n in names {
                if table.column(n).is_none() {
                    return Err(TributaryError::UndefinedColumn { relation: table.name.clone(), column: n.clone() });
                }
            }
            if values.is_empty() && !table.columns.is_empty() {
                return Err(TributaryError::InvalidArgument {
                    message: format!("could not read the row of \"{}\"", table.name),
                    hint: Some("A json, jsonb or composite value in it may be nested deeper than 128 levels.".into()),
                });
            }
            let mut seen = Seen::new();
            mark_shown(&table, values, &mut seen);
            gather(&table, values, opts, opts.parents, true, &mut seen)?
        }
        None => Row {
            table: None,
            fields: values
                .iter()
                .filter(|(k, _)| !opts.exclude.contains(k) && opts.include.as_ref().is_none_or(|i| i.contains(k)))
                .map(|(k, v)| Field { name: k.clone(), value: v.clone(), timestamp: false })
                .collect(),
            ..Default::default()
        },
    };
    let max_tokens = opts.max_tokens.map_or(model.max_length, |m| m as usize);
    catalog::with_tokenizer(model, |t| rowtext::row_text(&row, t, max_tokens))?.map_err(Into::into)
}

/// The table a composite datum belongs to (`None` for an anonymous record) and its JSON.
fn record_json(row: pgrx::composite_type!("record")) -> (Option<pg_sys::Oid>, Map<String, Value>) {
    let datum = row.into_composite_datum().expect("a composite value has a datum");
    // SAFETY: `datum` is a HeapTupleHeader just built by into_composite_datum; row_to_json(record)
    // reads the row type from the header.
    let (typid, json) = unsafe {
        let header = datum.cast_mut_ptr::<pg_sys::HeapTupleHeaderData>();
        let typid = pgrx::heap_tuple_header_get_type_id(header);
        let json = pg_sys::OidFunctionCall1Coll(pg_sys::Oid::from(pg_sys::F_ROW_TO_JSON_RECORD), pg_sys::InvalidOid, datum);
        (typid, String::from_datum(json, false).unwrap_or_default())
    };
    let relid = unsafe { pg_sys::get_typ_typrelid(typid) };
    ((relid != pg_sys::InvalidOid).then_some(relid), row_values(&json).or_raise())
}

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
        a.map(|v| v.into_iter().collect::<Option<Vec<_>>>().ok_or(TributaryError::NullArgument(what))).transpose()
    }
    Ok(RowOptions {
        include: names(include, "an element of include")?,
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
/// → text`: the text `tributary_embed(record)` embeds for `row`. Template version 1:
/// `table: <name>`, then `column: value` lines in column order (NULL and empty values skipped,
/// key columns skipped unless `keys`, vector/halfvec/sparsevec/bytea/tsvector columns never, also
/// through domains and arrays), then parents' columns prefixed by their path
/// (`album.artist.name: ...`, `parents` levels deep; the row itself and rows already shown are
/// not repeated, so foreign-key cycles end), then one line per child table (`invoice (3 of 7):
/// ...`, at most `children` rows each, most recent first by the first of `time_columns` the table
/// has; never the row itself). No context row after `as_of` (by that time column) is used.
/// Values are cut to a fair share of `max_tokens` tokens (default: the model's max length, 256
/// for all-MiniLM-L6-v2); json values nested deeper than 128 levels are kept, compact. Context
/// is read as the current role: row-level security and column privileges apply.
///
/// NULL `row` gives NULL (whatever the options); NULL `include`, `exclude`, `time_columns`, `as_of`, `max_tokens` are
/// "not given", NULL `model` the default model (`tributary.model`).
///
/// Errors: 22004 NULL `parents`, `children`, `keys` or `template`, or a NULL element in
/// `include`, `exclude` or `time_columns`; 22023 bad options (negative `parents`/`children`,
/// `max_tokens` < 1) or unknown template version; 42703 `include`/`exclude` names a column the
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
    template: default!(Option<i32>, 1),
) -> Option<String> {
    let row = row?;
    let opts = options(include, exclude, parents, children, time_columns, as_of, keys, max_tokens, template).or_raise();
    let (oid, values) = record_json(row);
    let model = catalog::model(model).or_raise();
    Some(row_text(oid, &values, &opts, &model).or_raise())
}

/// `tributary_embed(row record [, model text, include text[], exclude text[], parents int,
/// children int, time_columns text[], as_of timestamptz, keys bool, template int]) → vector`: the
/// embedding (`[dim]` f32, unit L2 norm; dim 384 for all-MiniLM-L6-v2) of
/// `tributary_row_text(row, ...)` with the same options. NULL row gives NULL; NULL options as in
/// `tributary_row_text`.
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
    template: default!(Option<i32>, 1),
) -> Option<Vector> {
    let row = row?;
    let opts = options(include, exclude, parents, children, time_columns, as_of, keys, None, template).or_raise();
    let (oid, values) = record_json(row);
    let model = catalog::model(model).or_raise();
    let text = row_text(oid, &values, &opts, &model).or_raise();
    Some(crate::api::embed::embed_one(&model, &text).or_raise())
}

/// `tributary_row_template_version() → integer`: the row template version `tributary_row_text`
/// uses by default (1).
#[pg_extern(immutable, parallel_safe)]
fn tributary_row_template_version() -> i32 {
    TEMPLATE_VERSION
}
