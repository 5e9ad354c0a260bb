//! Tables as a role sees them, for row texts (src/service/rows.rs): columns (with their types and
//! whether the role may read them), primary key, foreign keys both ways.
//!
//! Cached per (table, role) for one transaction; DDL and GRANT/REVOKE inside the transaction
//! drop what they touch through a relcache invalidation callback, as pg_cron drops its job cache.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use pgrx::prelude::*;

use crate::pg::error::{spi_error, Result};

/// One column of a table, as the caller sees it.
#[derive(Debug)]
pub struct Column {
    pub name: String,
    /// `format_type()` of the column: the type of key values ([`Column::from_text`]).
    pub sql_type: String,
    /// Its type (through domains) is built in: a cast from text to it is PostgreSQL's own.
    pub builtin: bool,
    pub timestamp: bool,
    /// vector, halfvec, sparsevec, bytea, tsvector: never part of the text.
    pub opaque: bool,
    /// Numbers, dates, times, timestamps, intervals, booleans, uuids (type categories N, D, T, B
    /// and uuid, also through domains and arrays): no language, left out by row template 2
    /// ([`crate::engine::rowtext::Field::wordless`]).
    pub wordless: bool,
    /// The caller may SELECT it.
    pub readable: bool,
    /// Its type's equality operator (of its default btree operator class) as
    /// `OPERATOR(schema.name)`, `OPERATOR(pg_catalog.=)` when it has none; and its OID.
    pub eq: (String, Option<pg_sys::Oid>),
}

impl Column {
    /// The SQL of the text expression `param` (a `$n` of type text) as a value of this column's
    /// type: `CAST(param AS type)` for a built-in type, else `tributary._from_text(param,
    /// NULL::type)` (the type's input function), so that a cast from text that a type's owner
    /// made never runs (crate::pg::values); the CAST too where the database's SQL predates
    /// 0.11.0 (no `tributary._from_text` until `ALTER EXTENSION tributary UPDATE`).
    pub fn from_text(&self, param: &str) -> String {
        if self.builtin || !crate::pg::values::sql_functions_exist() {
            format!("CAST({param} AS {})", self.sql_type)
        } else {
            format!("tributary._from_text({param}, NULL::{})", self.sql_type)
        }
    }
}

/// A foreign key seen from one table: `cols` of this table match `other_cols` of `other`
/// (for a parent link this table references `other`; for a child link `other` references it).
#[derive(Debug)]
pub struct Link {
    pub label: String,
    pub cols: Vec<String>,
    pub other: pg_sys::Oid,
    pub other_cols: Vec<String>,
}

#[derive(Debug)]
pub struct Table {
    pub oid: pg_sys::Oid,
    /// Relation name, unqualified, for the text.
    pub name: String,
    /// Its schema's name, unquoted.
    pub schema: String,
    /// The role that owns it.
    pub owner: pg_sys::Oid,
    /// Schema-qualified, quoted, for queries.
    pub sql_name: String,
    pub columns: Vec<Column>,
    pub primary_key: Vec<String>,
    /// Columns in the primary key or in any foreign key.
    pub key_columns: HashSet<String>,
    pub parents: Vec<Link>,
    pub children: Vec<Link>,
}

impl Table {
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The role may read every column in `names`.
    pub fn readable(&self, names: &[String]) -> bool {
        names
            .iter()
            .all(|n| self.column(n).is_some_and(|c| c.readable))
    }

    /// The first of `time_columns` this table has and the role may read.
    pub fn time_column<'a>(&'a self, time_columns: &[String]) -> Option<&'a Column> {
        time_columns
            .iter()
            .find_map(|t| self.column(t).filter(|c| c.readable))
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
    static CALLBACK: Cell<bool> = const { Cell::new(false) };
    /// Relcache invalidations seen so far: a table whose description was being read while one
    /// arrived (another session's DDL, processed when a catalog lock is taken) is not cached,
    /// since what was read may be from before it.
    static INVALIDATIONS: Cell<u64> = const { Cell::new(0) };
}

/// Relcache invalidation callback: drops `relid` and every table that links to it (all tables
/// for `InvalidOid`). No borrow of `TABLES` spans a call into PostgreSQL, so it is never
/// borrowed here; `try_borrow_mut` makes sure the callback cannot panic if it ever were.
#[pg_guard]
unsafe extern "C-unwind" fn invalidate_tables(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    INVALIDATIONS.set(INVALIDATIONS.get().wrapping_add(1));
    TABLES.with(|c| {
        if let Ok(mut c) = c.try_borrow_mut() {
            if relid == pg_sys::InvalidOid {
                c.tables.clear();
            } else {
                c.tables.retain(|&(oid, _), t| {
                    oid != relid
                        && !t
                            .parents
                            .iter()
                            .chain(&t.children)
                            .any(|l| l.other == relid)
                });
            }
        }
    });
}

/// Table `oid` as the current role sees it, cached for the transaction.
pub fn table(oid: pg_sys::Oid) -> Result<Rc<Table>> {
    if !CALLBACK.with(|c| c.replace(true)) {
        // SAFETY: registered once per backend; the callback only touches TABLES.
        unsafe {
            pg_sys::CacheRegisterRelcacheCallback(Some(invalidate_tables), pg_sys::Datum::from(0))
        };
    }
    // SAFETY: MyProc is set in every backend and background worker that runs SQL.
    // GetUserId: the role now, after any SET ROLE or SECURITY DEFINER switch.
    // The local transaction id moved into MyProc->vxid in PostgreSQL 17.
    #[cfg(any(feature = "pg15", feature = "pg16"))]
    let xact = unsafe { (*pg_sys::MyProc).lxid };
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    let xact = unsafe { (*pg_sys::MyProc).vxid.lxid };
    let role = unsafe { pg_sys::GetUserId() };
    let key = (oid, role);
    if let Some(t) = TABLES.with(|c| {
        let mut c = c.borrow_mut();
        if c.xact != xact {
            *c = TableCache {
                xact,
                tables: HashMap::new(),
            };
        }
        c.tables.get(&key).cloned()
    }) {
        return Ok(t);
    }
    let before = INVALIDATIONS.get();
    let t = Rc::new(load_table(oid)?);
    if INVALIDATIONS.get() == before {
        TABLES.with(|c| c.borrow_mut().tables.insert(key, t.clone()));
    }
    Ok(t)
}

/// The equality operator of type `typid`'s default btree operator class (`OPERATOR(pg_catalog.=)`
/// until it is named by the caller), and its OID when there is one.
fn equality(typid: pg_sys::Oid) -> (String, Option<pg_sys::Oid>) {
    let fallback = "OPERATOR(pg_catalog.=)".to_owned();
    if typid == pg_sys::InvalidOid {
        return (fallback, None);
    }
    // SAFETY: a type cache lookup in a transaction; the entry lives as long as the backend.
    let opr =
        unsafe { (*pg_sys::lookup_type_cache(typid, pg_sys::TYPECACHE_EQ_OPR as i32)).eq_opr };
    (fallback, (opr != pg_sys::InvalidOid).then_some(opr))
}

fn load_table(oid: pg_sys::Oid) -> Result<Table> {
    crate::pg::spi::pinned(|| {
        Spi::connect(|client| -> Result<Table> {
            let args = [oid.into()];
            let head = client
                .select(
                    "SELECT c.relname::pg_catalog.text, n.nspname::pg_catalog.text, \
                        pg_catalog.format('%I.%I', n.nspname, c.relname), c.relowner \
                   FROM pg_catalog.pg_class c \
                   JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
                  WHERE c.oid OPERATOR(pg_catalog.=) $1",
                    None,
                    &args,
                )
                .map_err(spi_error)?;
            let head = head.first();
            let name: String = head.get(1).map_err(spi_error)?.unwrap_or_default();
            let schema: String = head.get(2).map_err(spi_error)?.unwrap_or_default();
            let sql_name: String = head.get(3).map_err(spi_error)?.unwrap_or_default();
            let owner: pg_sys::Oid = head
                .get(4)
                .map_err(spi_error)?
                .unwrap_or(pg_sys::InvalidOid);
            let mut columns = Vec::new();
            // A column's type seen through domains and arrays (`u`: the type, its base types and
            // element types): a domain over bytea or a vector[] is opaque, a timestamp[] is dates,
            // an int[] wordless.
            for r in client
            .select(
                "SELECT a.attname::pg_catalog.text, pg_catalog.format_type(a.atttypid, a.atttypmod), u.dates, u.opaque, \
                        pg_catalog.has_column_privilege(a.attrelid, a.attnum, 'SELECT'), u.wordless, a.atttypid \
                 FROM pg_catalog.pg_attribute a CROSS JOIN LATERAL ( \
                   WITH RECURSIVE u(oid) AS ( \
                     SELECT a.atttypid \
                     UNION SELECT x.oid FROM u JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) u.oid \
                       CROSS JOIN LATERAL (VALUES (t.typbasetype), \
                         (CASE WHEN t.typcategory OPERATOR(pg_catalog.=) 'A' THEN t.typelem END)) x(oid) \
                      WHERE x.oid OPERATOR(pg_catalog.<>) 0) \
                   SELECT pg_catalog.bool_or(t.typcategory OPERATOR(pg_catalog.=) 'D') AS dates, \
                          pg_catalog.bool_or(t.typname::pg_catalog.text OPERATOR(pg_catalog.=) \
                            ANY ('{vector,halfvec,sparsevec,bytea,tsvector}'::pg_catalog.text[])) AS opaque, \
                          pg_catalog.bool_or(t.typcategory OPERATOR(pg_catalog.=) ANY ('{N,D,T,B}'::pg_catalog.\"char\"[]) \
                                  OR t.oid OPERATOR(pg_catalog.=) 'pg_catalog.uuid'::pg_catalog.regtype) AS wordless \
                     FROM u JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) u.oid) u \
                 WHERE a.attrelid OPERATOR(pg_catalog.=) $1 AND a.attnum OPERATOR(pg_catalog.>) 0 \
                   AND NOT a.attisdropped ORDER BY a.attnum",
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
                wordless: r.get(6).map_err(spi_error)?.unwrap_or(false),
                builtin: crate::pg::values::is_builtin_type(
                    r.get(7).map_err(spi_error)?.unwrap_or(pg_sys::InvalidOid),
                ),
                eq: equality(r.get(7).map_err(spi_error)?.unwrap_or(pg_sys::InvalidOid)),
            });
        }
            // The equality operators by name, qualified: `=` of a type outside pg_catalog (citext)
            // is found whatever the search_path.
            let oprs: Vec<pg_sys::Oid> = columns.iter().filter_map(|c| c.eq.1).collect();
            let mut named = std::collections::HashMap::new();
            for r in client
                .select(
                    "SELECT o.oid, pg_catalog.format('OPERATOR(%I.%s)', n.nspname, o.oprname) \
                   FROM pg_catalog.pg_operator o \
                   JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) o.oprnamespace \
                  WHERE o.oid OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.oid[])",
                    None,
                    &[oprs.into()],
                )
                .map_err(spi_error)?
            {
                let oid: Option<pg_sys::Oid> = r.get(1).map_err(spi_error)?;
                let name: Option<String> = r.get(2).map_err(spi_error)?;
                if let (Some(oid), Some(name)) = (oid, name) {
                    named.insert(oid, name);
                }
            }
            for c in &mut columns {
                if let Some(name) = c.eq.1.and_then(|o| named.get(&o)) {
                    c.eq.0 = name.clone();
                }
            }
            let primary_key: Vec<String> = client
            .select(
                "SELECT pg_catalog.array_agg(a.attname::pg_catalog.text ORDER BY k.ord) FROM pg_catalog.pg_index i \
                 CROSS JOIN LATERAL pg_catalog.unnest(i.indkey::pg_catalog.int2[]) WITH ORDINALITY AS k(attnum, ord) \
                 JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) i.indrelid \
                   AND a.attnum OPERATOR(pg_catalog.=) k.attnum \
                 WHERE i.indrelid OPERATOR(pg_catalog.=) $1 AND i.indisprimary",
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
                let (mine, theirs, other) = if sql_side == "parents" {
                    ("conkey", "confkey", "confrelid")
                } else {
                    ("confkey", "conkey", "conrelid")
                };
                let (mine_rel, theirs_rel) = if sql_side == "parents" {
                    ("conrelid", "confrelid")
                } else {
                    ("confrelid", "conrelid")
                };
                // A partitioned table once: for parents, not the copies of a foreign key that
                // PostgreSQL keeps for each partition of the referenced table (same conrelid as
                // their conparentid's); for children, not the partitions of a partitioned child.
                let once = if sql_side == "parents" {
                    "NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint p \
                       WHERE p.oid OPERATOR(pg_catalog.=) c.conparentid \
                         AND p.conrelid OPERATOR(pg_catalog.=) c.conrelid)"
                } else {
                    "NOT (SELECT k.relispartition FROM pg_catalog.pg_class k \
                       WHERE k.oid OPERATOR(pg_catalog.=) c.conrelid)"
                };
                let sql = format!(
                "SELECT c.conname::pg_catalog.text, c.{other}, \
                   (SELECT pg_catalog.array_agg(a.attname::pg_catalog.text ORDER BY k.ord) \
                      FROM pg_catalog.unnest(c.{mine}) WITH ORDINALITY AS k(n, ord) \
                      JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.{mine_rel} \
                       AND a.attnum OPERATOR(pg_catalog.=) k.n), \
                   (SELECT pg_catalog.array_agg(a.attname::pg_catalog.text ORDER BY k.ord) \
                      FROM pg_catalog.unnest(c.{theirs}) WITH ORDINALITY AS k(n, ord) \
                      JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.{theirs_rel} \
                       AND a.attnum OPERATOR(pg_catalog.=) k.n) \
                 FROM pg_catalog.pg_constraint c \
                 WHERE c.contype OPERATOR(pg_catalog.=) 'f' AND c.{mine_rel} OPERATOR(pg_catalog.=) $1 \
                   AND {once} \
                 ORDER BY c.conname"
            );
                let mut out = Vec::new();
                for r in client.select(&sql, None, &args).map_err(spi_error)? {
                    out.push((
                        r.get::<String>(1).map_err(spi_error)?.unwrap_or_default(),
                        r.get::<pg_sys::Oid>(2)
                            .map_err(spi_error)?
                            .unwrap_or(pg_sys::InvalidOid),
                        r.get::<Vec<String>>(3)
                            .map_err(spi_error)?
                            .unwrap_or_default(),
                        r.get::<Vec<String>>(4)
                            .map_err(spi_error)?
                            .unwrap_or_default(),
                    ));
                }
                Ok(out)
            };
            let relname = |oid: pg_sys::Oid| -> Result<String> {
                Ok(client
                    .select(
                        "SELECT relname::pg_catalog.text FROM pg_catalog.pg_class \
                      WHERE oid OPERATOR(pg_catalog.=) $1",
                        None,
                        &[oid.into()],
                    )
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
                    [one] => one
                        .strip_suffix("_id")
                        .filter(|s| !s.is_empty())
                        .unwrap_or(one)
                        .to_owned(),
                    _ => relname(*other)?,
                };
                parents.push(Link {
                    label,
                    cols: cols.clone(),
                    other: *other,
                    other_cols: other_cols.clone(),
                });
            }
            let mut children = Vec::new();
            let raw = links("children")?;
            for (_, other, cols, other_cols) in &raw {
                let child = relname(*other)?;
                // Two foreign keys from one child table: tell them apart by the child's column.
                let twice = raw.iter().filter(|(_, o, _, _)| o == other).count() > 1;
                let label = if twice {
                    format!("{child} ({})", other_cols.join(", "))
                } else {
                    child
                };
                children.push(Link {
                    label,
                    cols: cols.clone(),
                    other: *other,
                    other_cols: other_cols.clone(),
                });
            }
            Ok(Table {
                oid,
                name,
                schema,
                owner,
                sql_name,
                columns,
                primary_key,
                key_columns,
                parents,
                children,
            })
        })
    })
}
