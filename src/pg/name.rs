//! PostgreSQL's `name` type (an identifier, at most 63 bytes) as a function argument, so that SQL
//! signatures say `target name` as PostgreSQL's own catalog functions do.

use pgrx::callconv::{Arg, ArgAbi};
use pgrx::pg_sys;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::FromDatum;

/// A `name` value, copied out of its `NameData`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Name(pub String);

impl FromDatum for Name {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _typoid: pg_sys::Oid,
    ) -> Option<Self> {
        if is_null || datum.is_null() {
            return None;
        }
        // SAFETY: a `name` datum points at a NUL-terminated NameData (NAMEDATALEN bytes).
        let c = unsafe { std::ffi::CStr::from_ptr(datum.cast_mut_ptr::<std::ffi::c_char>()) };
        Some(Name(c.to_string_lossy().into_owned()))
    }
}

// SAFETY: the argument is declared `name` in SQL (below), so the datum is a NameData pointer.
unsafe impl<'fcx> ArgAbi<'fcx> for Name {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        unsafe { arg.unbox_arg_using_from_datum() }
            .unwrap_or_else(|| panic!("argument {index} must not be null"))
    }
}

unsafe impl SqlTranslatable for Name {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(Name);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("name"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        Ok(ReturnsRef::One(SqlMappingRef::literal("name")));
}
