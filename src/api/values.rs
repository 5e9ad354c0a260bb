//! `tributary._text`, `tributary._row_json`, `tributary._row_jsonb`, `tributary._jsonb` and
//! `tributary._from_text`: the only ways tributary's SQL turns a value of a user's table into
//! text or JSON, and a text into a value of a user's type (src/pg/values.rs says why: a type's
//! owner can make a cast that would run with the caller's rights; output functions cannot be
//! made by a role). C functions over `anyelement`, so that the value's type is the argument's.

use pgrx::prelude::*;

use crate::pg::values;

pgrx::extension_sql!(
    r#"
-- Values of a user's table as text and JSON, never through a cast a role made (src/pg/values.rs).
CREATE FUNCTION tributary._text(anyelement) RETURNS text
    LANGUAGE c STRICT STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'tributary_value_text';
CREATE FUNCTION tributary._row_json(anyelement) RETURNS json
    LANGUAGE c STRICT STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'tributary_row_json';
CREATE FUNCTION tributary._row_jsonb(anyelement) RETURNS jsonb
    LANGUAGE c STRICT STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'tributary_row_jsonb';
CREATE FUNCTION tributary._jsonb(anyelement) RETURNS jsonb
    LANGUAGE c STRICT STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'tributary_value_jsonb';
-- Not STRICT: the second argument is a typed NULL (NULL::type) that only gives the type.
CREATE FUNCTION tributary._from_text(text, anyelement) RETURNS anyelement
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'tributary_from_text';
"#,
    name = "values",
    requires = ["bootstrap"]
);

macro_rules! finfo_v1 {
    ($name:ident) => {
        #[doc(hidden)]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> &'static pg_sys::Pg_finfo_record {
            static V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }
    };
}
finfo_v1!(pg_finfo_tributary_value_text);
finfo_v1!(pg_finfo_tributary_row_json);
finfo_v1!(pg_finfo_tributary_row_jsonb);
finfo_v1!(pg_finfo_tributary_value_jsonb);
finfo_v1!(pg_finfo_tributary_from_text);

/// The first argument of a STRICT one-argument call (never NULL) and its type.
///
/// # Safety
/// `fcinfo` must be the call's, with one argument.
unsafe fn argument(fcinfo: pg_sys::FunctionCallInfo) -> (pg_sys::Datum, pg_sys::Oid) {
    // SAFETY: as the caller promises; the argument's type comes from the call's expression.
    unsafe {
        let typid = pg_sys::get_fn_expr_argtype((*fcinfo).flinfo, 0);
        if typid == pg_sys::InvalidOid {
            ereport!(
                ERROR,
                PgSqlErrorCode::ERRCODE_INDETERMINATE_DATATYPE,
                "could not determine the type of the argument"
            );
        }
        ((*fcinfo).args.as_slice(1)[0].value, typid)
    }
}

/// The argument's type, checked to be composite: 42804 otherwise.
fn composite_argument(
    fcinfo: pg_sys::FunctionCallInfo,
    function: &'static str,
) -> (pg_sys::Datum, pg_sys::Oid) {
    // SAFETY: fcinfo is the call's (one argument, STRICT).
    let (value, typid) = unsafe { argument(fcinfo) };
    // SAFETY: a catalog lookup inside the call's transaction.
    if !unsafe { values::is_composite(typid) } {
        pgrx::pg_sys::panic::ErrorReport::new(
            PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
            format!(
                "{function} takes a row, not a value of type {}",
                type_name(typid)
            ),
            function,
        )
        .set_hint("Pass a whole row (t.*, ROW(...)) or a composite value.")
        .report(PgLogLevel::ERROR);
    }
    (value, typid)
}

fn type_name(typid: pg_sys::Oid) -> String {
    // SAFETY: format_type_be returns a palloc'd C string for any type OID.
    unsafe {
        std::ffi::CStr::from_ptr(pg_sys::format_type_be(typid))
            .to_string_lossy()
            .into_owned()
    }
}

/// `tributary._text(v anyelement) → text`: `CAST(v AS text)` for built-in types (through
/// domains), the type's output function for every other type; no role-made cast ever runs.
/// The conversion is found on a call site's first call and kept in its `fn_extra`
/// (`values::value_text_cached`): one function call a value after that.
/// STRICT: NULL in, NULL out (a composite whose fields are all NULL is not NULL).
///
/// Errors: 42P18 when the argument's type cannot be determined.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn tributary_value_text(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fcinfo is the call's; value_text takes a non-NULL datum of its own type.
    unsafe {
        let (value, typid) = argument(fcinfo);
        values::value_text_cached((*fcinfo).flinfo, value, typid)
    }
}

/// `tributary._row_json(row anyelement) → json`: `row_to_json(row)` as PostgreSQL writes it when
/// no role has made a cast to json: values of non-built-in scalar types (enum, range, domain
/// over one, an extension's type), at any depth, as JSON strings of their output text.
///
/// Errors: 42804 when the argument is not a row; 42P18 as [`tributary_value_text`].
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn tributary_row_json(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    let (value, typid) = composite_argument(fcinfo, "tributary._row_json");
    // SAFETY: a non-NULL composite datum of its own type.
    unsafe { values::row_json(value, typid) }
}

/// `tributary._row_jsonb(row anyelement) → jsonb`: `to_jsonb(row)` likewise (the same object as
/// [`tributary_row_json`]'s, as jsonb).
///
/// Errors: as [`tributary_row_json`].
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn tributary_row_jsonb(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    let (value, typid) = composite_argument(fcinfo, "tributary._row_jsonb");
    // SAFETY: as tributary_row_json.
    unsafe { values::row_jsonb(value, typid) }
}

/// `tributary._jsonb(v anyelement) → jsonb`: `to_jsonb(v)` of any value without any cast to json
/// or jsonb (as [`tributary_row_json`] for rows). STRICT. A scalar of a built-in type (through
/// domains) goes to PostgreSQL's `to_jsonb`, found once a call site (`values::value_jsonb_cached`).
///
/// Errors: 42P18 as [`tributary_value_text`].
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn tributary_value_jsonb(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fcinfo is the call's (one argument, STRICT).
    unsafe {
        let (value, typid) = argument(fcinfo);
        values::value_jsonb_cached((*fcinfo).flinfo, value, typid)
    }
}

/// `tributary._from_text(t text, as anyelement) → anyelement`: the value of `as`'s type that `t`
/// stands for, through the type's input function (a domain's constraints apply), never a cast
/// from text a role made: `tributary._from_text(p.prediction, NULL::target_type)`. NULL `t` gives
/// NULL.
///
/// Errors: the input function's (22P02 and the like for a text the type does not take); 42P18 as
/// [`tributary_value_text`].
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn tributary_from_text(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fcinfo is the call's, with two arguments; the result type is the second's.
    unsafe {
        let args = (*fcinfo).args.as_slice(2);
        let typid = pg_sys::get_fn_expr_argtype((*fcinfo).flinfo, 1);
        if typid == pg_sys::InvalidOid {
            ereport!(
                ERROR,
                PgSqlErrorCode::ERRCODE_INDETERMINATE_DATATYPE,
                "could not determine the type of the second argument"
            );
        }
        if args[0].isnull {
            (*fcinfo).isnull = true;
            return pg_sys::Datum::from(0usize);
        }
        values::from_text(args[0].value, typid)
    }
}
