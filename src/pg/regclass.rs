//! A `regclass` argument that is only an OID until the function looks the relation up itself,
//! so that a dropped or made-up OID is 42P01 "relation with OID ... does not exist" rather than
//! the XX000 "could not open relation" that opening it while unboxing the argument gives
//! (pgrx's `PgRelation`).

use pgrx::callconv::{Arg, ArgAbi};
use pgrx::pg_sys;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::FromDatum;

use crate::pg::error::{Result, TributaryError};

/// A `regclass` value: a relation's OID, not checked yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegClass(pub pg_sys::Oid);

impl RegClass {
    /// The relation's OID, after taking an AccessShareLock on it (held to the end of the
    /// transaction, as opening it would), so that it cannot be dropped under the call.
    ///
    /// Errors: 42P01 when no relation has this OID (before or after the lock is granted).
    pub fn lock(self) -> Result<pg_sys::Oid> {
        let exists = || {
            // SAFETY: a syscache lookup by OID; NULL when there is no such relation.
            let name = unsafe { pg_sys::get_rel_name(self.0) };
            if name.is_null() {
                false
            } else {
                // SAFETY: get_rel_name pallocs the name.
                unsafe { pg_sys::pfree(name.cast()) };
                true
            }
        };
        let missing = || {
            TributaryError::UndefinedTable(format!(
                "relation with OID {} does not exist",
                self.0.to_u32()
            ))
        };
        if !exists() {
            return Err(missing());
        }
        // SAFETY: locking an OID; a dropped relation's lock is harmless and released at the end
        // of the transaction. Taking the lock processes invalidations, so the second look sees a
        // concurrent DROP that committed while waiting.
        unsafe { pg_sys::LockRelationOid(self.0, pg_sys::AccessShareLock as pg_sys::LOCKMODE) };
        if !exists() {
            return Err(missing());
        }
        Ok(self.0)
    }
}

/// Relation `oid` as `regclass` prints it under the caller's `search_path` (qualified only when
/// not visible), for messages; `None` when no relation has this OID. Computed here rather than
/// by a statement, so that it names the table as the caller would whatever path the statements
/// run with ([`crate::pg::spi::pinned`]).
pub fn display_name(oid: pg_sys::Oid) -> Option<String> {
    let (schema, name) = names(oid)?;
    // SAFETY: a namespace-search lookup in a transaction; it runs no user code.
    if unsafe { pg_sys::RelationIsVisible(oid) } {
        Some(quote(&name))
    } else {
        Some(format!("{}.{}", quote(&schema), quote(&name)))
    }
}

/// Relation `oid` schema-qualified and quoted, for statements; `None` when no relation has this OID.
pub fn sql_name(oid: pg_sys::Oid) -> Option<String> {
    let (schema, name) = names(oid)?;
    Some(format!("{}.{}", quote(&schema), quote(&name)))
}

/// (schema, relation name) of `oid`, unquoted.
fn names(oid: pg_sys::Oid) -> Option<(String, String)> {
    // SAFETY: syscache lookups by OID; each returns NULL or a palloc'd copy, read here.
    unsafe {
        let name = pg_sys::get_rel_name(oid);
        if name.is_null() {
            return None;
        }
        let schema = pg_sys::get_namespace_name(pg_sys::get_rel_namespace(oid));
        if schema.is_null() {
            return None;
        }
        Some((
            std::ffi::CStr::from_ptr(schema)
                .to_string_lossy()
                .into_owned(),
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned(),
        ))
    }
}

fn quote(ident: &str) -> String {
    pgrx::spi::quote_identifier(ident)
}

impl FromDatum for RegClass {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _typoid: pg_sys::Oid,
    ) -> Option<Self> {
        // SAFETY: a regclass datum is an OID by value.
        unsafe { pg_sys::Oid::from_datum(datum, is_null) }.map(RegClass)
    }
}

// SAFETY: the argument is declared `regclass` in SQL (below), so the datum is an OID.
unsafe impl<'fcx> ArgAbi<'fcx> for RegClass {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        unsafe { arg.unbox_arg_using_from_datum() }
            .unwrap_or_else(|| panic!("argument {index} must not be null"))
    }
}

unsafe impl SqlTranslatable for RegClass {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(RegClass);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> =
        Ok(SqlMappingRef::literal("regclass"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        Ok(ReturnsRef::One(SqlMappingRef::literal("regclass")));
}
