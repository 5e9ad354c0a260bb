//! Rows as a model sees them: the text `tributary_row_text`, `tributary_embed(record)`,
//! `tributary_embed_column(..., '{*}')` and whole-row jobs embed.
//!
//! A row becomes typed `column: value` text (template in [`crate::engine::rowtext`]), with what
//! its declared foreign keys reach: parent rows inline, child rows summarised. Context is read
//! with the current role's privileges through SPI, so row-level security applies, and columns
//! the role may not SELECT are left out: context never shows what the role could not read.
//! A row is never part of its own context, and each context row is shown at most once. Tables
//! are described by [`crate::pg::relation`] (cached for the transaction).
//!
//! Template version 2 (the default) differs in what is gathered in two ways: fields get
//! [`Field::wordless`] from their column's type (the layout leaves them out), and a child table
//! that links the row to one other table is read joined with that table ([`through_link`]).
//! Version 1 gathers exactly what it always did.

use std::collections::HashSet;

use pgrx::datum::{DatumWithOid, TimestampWithTimeZone};
use pgrx::prelude::*;
use pgrx::spi::quote_identifier;
use serde_json::{Map, Value};

use crate::engine::rowtext::{self, Children, Field, Row, TEMPLATE_VERSIONS};
use crate::pg::catalog::{self, ModelRow};
use crate::pg::error::{spi_error, Result, TributaryError};
use crate::pg::record;
use crate::pg::relation::{self, Link, Table};
use crate::pg::vector::Vector;
use crate::service::embed::embed_one;

mod link;
use link::{far_link, through_link};

/// How a row is turned into text: which columns, how much foreign-key context, which template.
#[derive(Debug, Clone, Default)]
pub(crate) struct RowOptions {
    /// Only these columns of the row itself (`None`: all).
    pub include: Option<Vec<String>>,
    /// Tables named in `include` as `table.*` or `schema.table.*` (unquoted, as in the text):
    /// read as children or link-table context even when another role owns them ([`trusted`]).
    pub tables: Vec<String>,
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
    /// Row template version ([`TEMPLATE_VERSIONS`]); 0 from `Default` is no version (22023).
    pub template: i32,
}

impl RowOptions {
    fn check(&self) -> Result<()> {
        let bad = |message: String, hint: Option<&str>| {
            Err(TributaryError::InvalidArgument {
                message,
                hint: hint.map(str::to_owned),
            })
        };
        if !TEMPLATE_VERSIONS.contains(&self.template) {
            return bad(
                format!("row template version {} does not exist", self.template),
                Some(&format!(
                    "Versions {} exist (see the README, \"Rows as text\").",
                    rowtext::version_list()
                )),
            );
        }
        if self.parents < 0 || self.children < 0 {
            return bad(
                format!(
                    "parents and children must be 0 or more, not {} and {}",
                    self.parents, self.children
                ),
                None,
            );
        }
        if self.max_tokens.is_some_and(|m| m < 1) {
            return bad("max_tokens must be at least 1".into(), None);
        }
        Ok(())
    }
}

/// `SELECT <readable columns> FROM <table> WHERE <cols> = <values> [AND ROW(<not cols>) IS
/// DISTINCT FROM ROW(<not values>) ...] [AND <time> <= as_of]`, its arguments pushed onto
/// `args` (numbered after those already there), or `None` (and `args` untouched) if the caller
/// may read nothing, or not the key columns. `not`: rows to leave out, by a key (the caller
/// must be able to read its columns, or the query cannot leave them out).
fn select(
    table: &Table,
    cols: &[String],
    values: &[String],
    not: &[(&[String], &[String])],
    opts: &RowOptions,
    args: &mut Vec<DatumWithOid<'static>>,
) -> Option<String> {
    if !table.readable(cols) || not.iter().any(|(c, _)| !table.readable(c)) {
        return None;
    }
    let list: Vec<String> = table
        .columns
        .iter()
        .filter(|c| c.readable && !c.opaque)
        .map(|c| quote_identifier(&c.name))
        .collect();
    if list.is_empty() {
        return None;
    }
    let mut conds = Vec::new();
    for (c, v) in cols.iter().zip(values) {
        args.push(v.clone().into());
        let col = table.column(c).expect("readable checked it");
        conds.push(format!(
            "{} {} {}",
            quote_identifier(c),
            col.eq.0,
            col.from_text(&format!("${}", args.len()))
        ));
    }
    for (not_cols, not_values) in not {
        // Not that row: not every key column equal (a NULL column is not equal; the values
        // are never NULL), by the types' own equality operators.
        let mut equal = Vec::new();
        for (c, v) in not_cols.iter().zip(not_values.iter()) {
            args.push(v.clone().into());
            let col = table.column(c).expect("readable checked it");
            equal.push(format!(
                "{} {} {}",
                quote_identifier(c),
                col.eq.0,
                col.from_text(&format!("${}", args.len()))
            ));
        }
        conds.push(format!("({}) IS NOT TRUE", equal.join(" AND ")));
    }
    if let (Some(t), Some(as_of)) = (table.time_column(&opts.time_columns), opts.as_of) {
        args.push(as_of.into());
        conds.push(format!(
            "{} OPERATOR(pg_catalog.<=) ${}",
            quote_identifier(&t.name),
            args.len()
        ));
    }
    if conds.is_empty() {
        conds.push("true".to_owned()); // a far table's rows: all of them (joined by the caller)
    }
    Some(format!(
        "SELECT {} FROM {} WHERE {}",
        list.join(", "),
        table.sql_name,
        conds.join(" AND ")
    ))
}

/// Whether `column` of `table` is left out of the text by the options (not counting privileges,
/// opaque types and key columns).
fn excluded(table: &Table, column: &str, opts: &RowOptions, root: bool) -> bool {
    let qualified = format!("{}.{column}", table.name);
    opts.exclude
        .iter()
        .any(|e| *e == qualified || (root && e == column))
        || (root
            && opts
                .include
                .as_ref()
                .is_some_and(|i| !i.iter().any(|c| c == column)))
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
    rowtext::parse_row_json(json).ok_or_else(|| {
        TributaryError::Internal(format!("row_to_json gave no JSON object: {:.80}", json))
    })
}

/// `N` records' values (column name to value) and a count, a result row of [`json_rows`].
type Records<const N: usize> = ([Map<String, Value>; N], i64);

/// `N` distinct names for subqueries of `tables`' rows that none of their columns has: a bare
/// column name would be taken before the subquery's whole row.
fn row_aliases<const N: usize>(tables: [&Table; N]) -> [String; N] {
    let mut free = (0..)
        .map(|i| format!("r{i}"))
        .filter(|a| tables.iter().all(|t| t.column(a).is_none()));
    std::array::from_fn(|_| free.next().expect("tables have finitely many columns"))
}

/// Runs `sql`, whose first `N` columns are whole rows and the next a count, and returns each
/// result row's records' values ([`record::record_values`]: values too long for a text of
/// `window` tokens read only in part) and its count. A result row with a NULL record is skipped.
fn json_rows<const N: usize>(
    sql: &str,
    args: &[DatumWithOid],
    window: usize,
) -> Result<Vec<Records<N>>> {
    crate::pg::spi::pinned(|| {
        Spi::connect(|client| {
            let mut out = Vec::new();
            let mut table = client.select(sql, None, args).map_err(spi_error)?;
            'rows: while table.next().is_some() {
                let count: i64 = table.get(N + 1).ok().flatten().unwrap_or(1);
                let mut records: [Map<String, Value>; N] = std::array::from_fn(|_| Map::new());
                for (i, record) in records.iter_mut().enumerate() {
                    let Some(datum) = table.get_datum_by_ordinal(i + 1).map_err(spi_error)? else {
                        continue 'rows;
                    };
                    // SAFETY: columns 1..=N are whole-row values (composite datums) of the SPI
                    // result, which lives until the connection closes, after this loop.
                    *record = unsafe { record::record_values(datum, window)? }.1;
                }
                out.push((records, count));
            }
            Ok(out)
        })
    })
}

/// Rows already in the text: `(table, key columns, key values)`.
type Seen = HashSet<(pg_sys::Oid, Vec<String>, Vec<String>)>;

/// Marks a row of `table` as shown, under its primary key and under every key a foreign key
/// references (each way a link can reach it) whose values it has; false if it was shown already.
fn mark_shown(table: &Table, values: &Map<String, Value>, seen: &mut Seen) -> bool {
    let keys = std::iter::once(table.primary_key.as_slice())
        .chain(table.children.iter().map(|l| l.cols.as_slice()));
    let ids: Vec<_> = keys
        .filter(|c| !c.is_empty())
        .filter_map(|cols| {
            Some((
                table.oid,
                cols.to_vec(),
                cols.iter()
                    .map(|c| key_text(values.get(c)))
                    .collect::<Option<Vec<_>>>()?,
            ))
        })
        .collect();
    let new = !ids.iter().any(|id| seen.contains(id));
    seen.extend(ids);
    new
}

/// The row's own fields, then (levels left in `parents`) its parents, then (at the top) its children.
fn gather(
    table: &Table,
    values: &Map<String, Value>,
    opts: &RowOptions,
    parents: i32,
    root: bool,
    window: usize,
    seen: &mut Seen,
) -> Result<Row> {
    let fields = table
        .columns
        .iter()
        .filter(|c| !c.opaque && (root || c.readable))
        .filter(|c| opts.keys || !table.key_columns.contains(&c.name))
        .filter(|c| !excluded(table, &c.name, opts, root))
        .filter_map(|c| {
            values.get(&c.name).map(|v| Field {
                name: c.name.clone(),
                value: v.clone(),
                timestamp: c.timestamp,
                wordless: c.wordless && !(root && named(opts, &c.name)),
            })
        })
        .collect();
    let mut row = Row {
        table: Some(table.name.clone()),
        fields,
        ..Default::default()
    };
    if parents > 0 {
        for link in &table.parents {
            if link.cols.iter().any(|c| excluded(table, c, opts, root)) {
                continue;
            }
            let Some(key) = link
                .cols
                .iter()
                .map(|c| key_text(values.get(c)))
                .collect::<Option<Vec<_>>>()
            else {
                continue; // a NULL foreign key reaches no row
            };
            let reached = (link.other, link.other_cols.clone(), key);
            if seen.contains(&reached) {
                continue; // the row itself (a self-reference, a cycle), or a row already shown
            }
            let parent = relation::table(link.other)?;
            let mut args = Vec::new();
            let Some(select) = select(&parent, &link.other_cols, &reached.2, &[], opts, &mut args)
            else {
                continue;
            };
            let [p] = row_aliases([&parent]);
            let sql = format!("SELECT {p}, 1::pg_catalog.int8 FROM ({select} LIMIT 1) {p}");
            if let Some(([map], _)) = json_rows(&sql, &args, window)?.into_iter().next() {
                // Reached by another key than the one it was shown under: compare every key.
                if !mark_shown(&parent, &map, seen) {
                    continue;
                }
                seen.insert(reached);
                let p = gather(&parent, &map, opts, parents - 1, false, window, seen)?;
                row.parents.push((link.label.clone(), p));
            }
        }
    }
    if root && opts.children > 0 {
        // Which lines are link tables' (index in `row.children`, the link table's own label in
        // case two lines lead to one table).
        let mut through: Vec<(usize, String)> = Vec::new();
        for link in &table.children {
            // `cols`: this table's referenced columns; `other_cols`: the child's foreign key.
            let Some(key) = link
                .cols
                .iter()
                .map(|c| key_text(values.get(c)))
                .collect::<Option<Vec<_>>>()
            else {
                continue;
            };
            let child = relation::table(link.other)?;
            if !trusted(table, &child, opts) {
                continue;
            }
            if opts.template >= 2 {
                if let Some(far_link) = far_link(table, &child, link, opts) {
                    if !trusted(table, &*relation::table(far_link.other)?, opts) {
                        continue;
                    }
                    if let Some(c) = through_link(&child, link, far_link, &key, opts, window, seen)?
                    {
                        through.push((row.children.len(), link.label.clone()));
                        row.children.push(c);
                    }
                    continue;
                }
            }
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
            let mut args = Vec::new();
            let Some(select) = select(&child, &link.other_cols, &key, &not, opts, &mut args) else {
                continue;
            };
            let [c] = row_aliases([&child]);
            let mut order: Vec<String> = Vec::new();
            if let Some(t) = child.time_column(&opts.time_columns) {
                order.push(format!("{c}.{} DESC NULLS LAST", quote_identifier(&t.name)));
            }
            if child.readable(&child.primary_key) {
                order.extend(
                    child
                        .primary_key
                        .iter()
                        .map(|k| format!("{c}.{} DESC", quote_identifier(k))),
                );
            }
            let order = if order.is_empty() {
                String::new()
            } else {
                format!(" ORDER BY {}", order.join(", "))
            };
            let sql = format!(
                "SELECT {c}, pg_catalog.count(*) OVER ()::pg_catalog.int8 \
                   FROM ({select}) {c}{order} LIMIT {}",
                opts.children
            );
            let found = json_rows::<1>(&sql, &args, window)?;
            let total = found.first().map_or(0, |(_, n)| *n);
            if total == 0 {
                continue;
            }
            let mut child_opts = opts.clone();
            // The child's link back is this row: leave it out.
            child_opts.exclude.extend(
                link.other_cols
                    .iter()
                    .map(|c| format!("{}.{c}", child.name)),
            );
            let rows = found
                .iter()
                .map(|([map], _)| {
                    gather(&child, map, &child_opts, 0, false, window, seen).map(|r| r.fields)
                })
                .collect::<Result<Vec<_>>>()?;
            row.children.push(Children {
                label: link.label.clone(),
                total,
                rows,
            });
        }
        // A far table reached by two link tables (or also a child table): tell the lines apart.
        let labels: Vec<String> = row.children.iter().map(|c| c.label.clone()).collect();
        for (i, via) in through {
            if labels.iter().filter(|l| **l == labels[i]).count() > 1 {
                row.children[i].label = format!("{} (via {via})", labels[i]);
            }
        }
    }
    Ok(row)
}

/// Whether `other`'s rows may be read as children or link-table context of a row of `table`:
/// it is owned by `table`'s owner or by a role the current role is a member of (superuser
/// status not counting), or `include` names it (`table.*`, `schema.table.*`). Reading a table
/// runs its owner's code (row-level security policies, functions in them) as the reader, and a
/// role needs only REFERENCES on `table` to make a table that references it; a table left out
/// is not read at all (README, "Rows as text").
fn trusted(table: &Table, other: &Table, opts: &RowOptions) -> bool {
    // SAFETY: a role membership lookup (cached by the backend) in a transaction.
    other.owner == table.owner
        || unsafe { pg_sys::is_member_of_role_nosuper(pg_sys::GetUserId(), other.owner) }
        || opts.tables.iter().any(|t| {
            *t == other.name
                || t.strip_prefix(&*other.schema)
                    .and_then(|r| r.strip_prefix('.'))
                    == Some(&*other.name)
        })
}

/// Whether `column` of the row itself is named in `include` (so shown whatever its type).
fn named(opts: &RowOptions, column: &str) -> bool {
    opts.include
        .as_ref()
        .is_some_and(|i| i.iter().any(|c| c == column))
}

/// The text of one row given as JSON (`row_to_json`) of table `oid` (`None`: an anonymous
/// record, whose fields are taken as they come).
///
/// `values` should come from [`row_values`]: a table row whose map is empty (serde_json gave up
/// on it) is an error, never an empty text.
///
/// Errors: 22023 bad options, or no values for a table row; 42703 an `include`/`exclude` name
/// the table does not have; 42704 unknown model; 58P01 missing tokenizer file.
pub(crate) fn row_text(
    oid: Option<pg_sys::Oid>,
    values: &Map<String, Value>,
    opts: &RowOptions,
    model: &ModelRow,
) -> Result<String> {
    opts.check()?;
    let row = match oid {
        Some(oid) => {
            let table = relation::table(oid)?;
            let names = opts
                .include
                .iter()
                .flatten()
                .chain(opts.exclude.iter().filter(|e| !e.contains('.')));
            for n in names {
                if table.column(n).is_none() {
                    return Err(TributaryError::UndefinedColumn {
                        relation: table.name.clone(),
                        column: n.clone(),
                    });
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
            gather(
                &table,
                values,
                opts,
                opts.parents,
                true,
                window(opts, model),
                &mut seen,
            )?
        }
        None => Row {
            table: None,
            fields: values
                .iter()
                .filter(|(k, _)| {
                    !opts.exclude.contains(k) && opts.include.as_ref().is_none_or(|i| i.contains(k))
                })
                .map(|(k, v)| Field {
                    name: k.clone(),
                    value: v.clone(),
                    timestamp: false,
                    // An anonymous record's types are not looked up: its JSON numbers and
                    // booleans are what has no language (its dates are strings, kept).
                    wordless: matches!(v, Value::Number(_) | Value::Bool(_)) && !named(opts, k),
                })
                .collect(),
            ..Default::default()
        },
    };
    catalog::with_tokenizer(model, |t| {
        rowtext::row_text(&row, opts.template, t, window(opts, model))
    })?
    .map_err(Into::into)
}

/// The tokens a row's text may take: `max_tokens`, else the model's max length.
fn window(opts: &RowOptions, model: &ModelRow) -> usize {
    opts.max_tokens.map_or(model.max_length, |m| m as usize)
}

/// The table of the composite `row` (`None`: an anonymous record) and its values, those too
/// long for the text read only in part ([`record::record_values`]).
fn record_values(
    row: pgrx::composite_type!("record"),
    opts: &RowOptions,
    model: &ModelRow,
) -> Result<(Option<pg_sys::Oid>, Map<String, Value>)> {
    let datum = row
        .into_composite_datum()
        .expect("a composite value has a datum");
    // SAFETY: `datum` is the HeapTupleHeader into_composite_datum just built, in the current
    // memory context.
    unsafe { record::record_values(datum, window(opts, model)) }
}

/// [`row_text`] of the composite value `row` (a table's row or an anonymous record), with the
/// model named `model` (`None`: `tributary.model`).
///
/// Errors: as [`row_text`].
pub(crate) fn record_text(
    row: pgrx::composite_type!("record"),
    opts: &RowOptions,
    model: Option<&str>,
) -> Result<String> {
    let model = catalog::model(model)?;
    let (oid, values) = record_values(row, opts, &model)?;
    row_text(oid, &values, opts, &model)
}

/// The embedding of [`row_text`] (`[dim]` f32, unit L2 norm), through the backend's memo of
/// recent texts ([`embed_one`]).
///
/// Errors: as [`row_text`] and [`crate::service::embed::embed`].
pub(crate) fn record_embedding(
    row: pgrx::composite_type!("record"),
    opts: &RowOptions,
    model: Option<&str>,
) -> Result<Vector> {
    let model = catalog::model(model)?;
    let (oid, values) = record_values(row, opts, &model)?;
    let text = row_text(oid, &values, opts, &model)?;
    embed_one(&model, &text, None)
}
