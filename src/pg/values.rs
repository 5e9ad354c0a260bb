//! Values of a user's table as text and JSON without any cast a role could define.
//!
//! The owner of a type may `CREATE CAST (her_type AS text)` (or `AS json`, `AS jsonb`) `WITH
//! FUNCTION her_fn` without being a superuser, and an explicit cast in `pg_cast` replaces the I/O
//! conversion: `v::text`, `to_jsonb(row)` and `row_to_json(row)` then run her function with the
//! caller's rights (a superuser's `tributary_dedup` on her table made her a superuser, issue 46).
//! Output functions are safe: only a superuser can make a base type, and every other kind of type
//! a role can make (enum, composite, range, multirange, domain, array) has PostgreSQL's own output
//! function. So:
//!
//! - [`value_text`]: the text of a value as `CAST(v AS text)` gives it when its type (through
//!   domains) is built in (OID below `FirstNormalObjectId`, 16384: casts between built-in types
//!   are PostgreSQL's own, and no role owns a built-in type), else through the type's output
//!   function. Equal to `v::text` whenever no role-made cast exists.
//! - [`builtin_only`]: a value rebuilt from built-in types only (a value of a non-built-in scalar
//!   type at any depth becomes its output text; arrays and composites holding one are rebuilt as
//!   `text[]` and anonymous records), so that PostgreSQL's own `row_to_json` / `to_jsonb`, which
//!   look up a cast to json only for non-built-in scalar types (`json_categorize_type`,
//!   src/backend/utils/adt/json.c), write exactly what they write when no such cast exists: the
//!   output text as a JSON string.
//!
//! SQL: `tributary._text(anyelement) → text`, `tributary._row_json(anyelement) → json`,
//! `tributary._row_jsonb(anyelement) → jsonb` (src/api/values.rs).

use pgrx::{pg_sys, PgTupleDesc};

/// Whether `typid` is one of PostgreSQL's built-in types (made by initdb, owned by the bootstrap
/// superuser; a role cannot create a cast from it, since that needs owning the source or target).
fn is_builtin(typid: pg_sys::Oid) -> bool {
    u32::from(typid) < pg_sys::FirstNormalObjectId
}

/// Whether this database's tributary SQL has `tributary._text` and its siblings (0.11.0 or
/// later). A library newer than a database's extension serves it until `ALTER EXTENSION
/// tributary UPDATE`: the statements built in Rust then fall back to the casts 0.10.0 used.
pub(crate) fn sql_functions_exist() -> bool {
    crate::pg::spi::select_one::<bool>(
        "SELECT pg_catalog.to_regprocedure('tributary._from_text(text,anyelement)') IS NOT NULL",
        &[],
    )
    .ok()
    .flatten()
    .unwrap_or(false)
}

/// Whether `typid` (through domains) is a built-in type (see [`is_builtin`]); `false` for
/// `InvalidOid`.
pub(crate) fn is_builtin_type(typid: pg_sys::Oid) -> bool {
    // SAFETY: a catalog lookup in a backend with a transaction (relation descriptions).
    typid != pg_sys::InvalidOid && is_builtin(unsafe { pg_sys::getBaseType(typid) })
}

/// The text datum of `value` (of type `typid`, not NULL): `CAST(value AS text)` for built-in
/// types, the type's output function for every other type.
///
/// # Safety
/// `value` must be a valid datum of type `typid`; the result is palloc'd in the current context.
pub(crate) unsafe fn value_text(value: pg_sys::Datum, typid: pg_sys::Oid) -> pg_sys::Datum {
    // SAFETY: catalog lookups and function calls on a valid datum of its own type.
    unsafe {
        let coll = pg_sys::DEFAULT_COLLATION_OID;
        match text_conversion(typid) {
            (Conversion::Relabel, _) => value,
            (Conversion::Cast1, f) => pg_sys::OidFunctionCall1Coll(f, coll, value),
            (Conversion::Cast3, f) => pg_sys::OidFunctionCall3Coll(
                f,
                coll,
                value,
                pg_sys::Datum::from(-1i32),
                pg_sys::Datum::from(true),
            ),
            (_, f) => into_text(pg_sys::OidOutputFunctionCall(f, value)),
        }
    }
}

/// How a value of type `typid` becomes its text, and the function that does it: for a built-in
/// type (through domains) PostgreSQL's own explicit cast to text (none: binary-coercible; a cast
/// function between built-in types such as bool -> text or inet -> text of one argument, or a
/// length coercion of three), else, and for every other type, the type's output function.
///
/// # Safety
/// Catalog lookups: in a transaction.
unsafe fn text_conversion(typid: pg_sys::Oid) -> (Conversion, pg_sys::Oid) {
    // SAFETY: catalog lookups, as the caller promises.
    unsafe {
        let base = pg_sys::getBaseType(typid);
        let mut func = pg_sys::InvalidOid;
        if is_builtin(base) {
            match pg_sys::find_coercion_pathway(
                pg_sys::TEXTOID,
                base,
                pg_sys::CoercionContext::COERCION_EXPLICIT,
                &mut func,
            ) {
                pg_sys::CoercionPathType::COERCION_PATH_RELABELTYPE => {
                    return (Conversion::Relabel, pg_sys::InvalidOid)
                }
                pg_sys::CoercionPathType::COERCION_PATH_FUNC if func != pg_sys::InvalidOid => {
                    let kind = if pg_sys::get_func_nargs(func) >= 3 {
                        Conversion::Cast3
                    } else {
                        Conversion::Cast1
                    };
                    return (kind, func);
                }
                _ => {}
            }
        }
        let mut varlena = false;
        pg_sys::getTypeOutputInfo(base, &mut func, &mut varlena);
        (Conversion::Output, func)
    }
}

/// How a call site of `tributary._text` / `tributary._jsonb` converts values of one type, found
/// once and kept in the call's `fn_extra` (in `fn_mcxt`, as PostgreSQL's own array_out and
/// record_out keep their I/O functions): each call of a statement over many rows then costs one
/// function call, not the catalog lookups of [`value_text`] (a cast pathway, a type's base and
/// output function; a one-row prediction reads ~10 values of each of ~1,000 related rows).
#[repr(C)]
struct CallCache {
    /// The argument's type this was found for (a polymorphic call site has one, but a plan can
    /// be reused with another: checked on every call).
    typid: pg_sys::Oid,
    kind: Conversion,
    /// The function of `kind` (unused for `Relabel` and `Other`).
    func: pg_sys::FmgrInfo,
}

#[repr(C)]
#[derive(Clone, Copy, PartialEq)]
enum Conversion {
    /// Text: the value is its text (a binary-coercible built-in type).
    Relabel,
    /// Text: PostgreSQL's own cast function of one argument.
    Cast1,
    /// Text: a length coercion (value, typmod -1, explicit).
    Cast3,
    /// Text: the type's output function.
    Output,
    /// JSON: PostgreSQL's `to_jsonb` (a scalar of a built-in type, through domains: it looks up
    /// no cast to json for those, `jsonb_categorize_type`).
    ToJsonb,
    /// Neither: the uncached path ([`value_text`] / [`value_jsonb`]).
    Other,
}

/// The call's cache for `typid`, made on its first call (or when the type changed).
///
/// # Safety
/// `flinfo` must be the call's, in a transaction.
unsafe fn call_cache(
    flinfo: *mut pg_sys::FmgrInfo,
    typid: pg_sys::Oid,
    jsonb: bool,
) -> *mut CallCache {
    // SAFETY: fn_extra is ours (only these functions set it) and lives in fn_mcxt; the
    // FmgrInfos are filled in fn_mcxt, so they live as long as the cache.
    unsafe {
        let mut c = (*flinfo).fn_extra as *mut CallCache;
        if !c.is_null() && (*c).typid == typid {
            return c;
        }
        if c.is_null() {
            c = pg_sys::MemoryContextAllocZero((*flinfo).fn_mcxt, std::mem::size_of::<CallCache>())
                as *mut CallCache;
            (*flinfo).fn_extra = c.cast();
        }
        (*c).typid = typid;
        let (kind, func) = if jsonb {
            let base = pg_sys::getBaseType(typid);
            let scalar = is_builtin(base)
                && pg_sys::get_element_type(base) == pg_sys::InvalidOid
                && !pg_sys::type_is_rowtype(base);
            if scalar {
                (Conversion::ToJsonb, pg_sys::Oid::from(pg_sys::F_TO_JSONB))
            } else {
                (Conversion::Other, pg_sys::InvalidOid)
            }
        } else {
            text_conversion(typid)
        };
        (*c).kind = kind;
        if func != pg_sys::InvalidOid && (*c).kind != Conversion::Relabel {
            pg_sys::fmgr_info_cxt(func, &mut (*c).func, (*flinfo).fn_mcxt);
            // to_jsonb finds its argument's type from the call expression: ours, whose one
            // argument is the value.
            (*c).func.fn_expr = (*flinfo).fn_expr;
        }
        c
    }
}

/// [`value_text`] for the call `flinfo` (SQL `tributary._text`), with its conversion cached in
/// the call (see [`CallCache`]); the same text.
///
/// # Safety
/// As [`value_text`]; `flinfo` must be the call's.
pub(crate) unsafe fn value_text_cached(
    flinfo: *mut pg_sys::FmgrInfo,
    value: pg_sys::Datum,
    typid: pg_sys::Oid,
) -> pg_sys::Datum {
    // SAFETY: as the caller promises; the cache's functions were set up for this type.
    unsafe {
        let c = call_cache(flinfo, typid, false);
        let coll = pg_sys::DEFAULT_COLLATION_OID;
        match (*c).kind {
            Conversion::Relabel => value,
            Conversion::Cast1 => pg_sys::FunctionCall1Coll(&mut (*c).func, coll, value),
            Conversion::Cast3 => pg_sys::FunctionCall3Coll(
                &mut (*c).func,
                coll,
                value,
                pg_sys::Datum::from(-1i32),
                pg_sys::Datum::from(true),
            ),
            Conversion::Output => into_text(pg_sys::OutputFunctionCall(&mut (*c).func, value)),
            Conversion::ToJsonb | Conversion::Other => value_text(value, typid),
        }
    }
}

/// [`value_jsonb`] for the call `flinfo` (SQL `tributary._jsonb`): a scalar of a built-in type
/// through PostgreSQL's `to_jsonb`, found once a call (see [`CallCache`]); the same JSON.
///
/// # Safety
/// As [`value_jsonb`]; `flinfo` must be the call's.
pub(crate) unsafe fn value_jsonb_cached(
    flinfo: *mut pg_sys::FmgrInfo,
    value: pg_sys::Datum,
    typid: pg_sys::Oid,
) -> pg_sys::Datum {
    // SAFETY: as the caller promises.
    unsafe {
        let c = call_cache(flinfo, typid, true);
        if (*c).kind == Conversion::ToJsonb {
            pg_sys::FunctionCall1Coll(&mut (*c).func, pg_sys::InvalidOid, value)
        } else {
            value_jsonb(value, typid)
        }
    }
}

/// The output function's text of `value` (of type `typid`) as a text datum.
///
/// # Safety
/// As [`value_text`].
unsafe fn output_text(value: pg_sys::Datum, typid: pg_sys::Oid) -> pg_sys::Datum {
    // SAFETY: as the caller promises; the cstring is copied into a text and freed.
    unsafe {
        let mut out = pg_sys::InvalidOid;
        let mut varlena = false;
        pg_sys::getTypeOutputInfo(typid, &mut out, &mut varlena);
        into_text(pg_sys::OidOutputFunctionCall(out, value))
    }
}

/// An output function's C string (palloc'd) as a text datum; the string is freed.
///
/// # Safety
/// `cstr` must be a NUL-terminated palloc'd string.
unsafe fn into_text(cstr: *mut std::ffi::c_char) -> pg_sys::Datum {
    // SAFETY: as the caller promises; the text is a copy.
    unsafe {
        let text = pg_sys::cstring_to_text(cstr);
        pg_sys::pfree(cstr.cast());
        pg_sys::Datum::from(text)
    }
}

/// Whether a value of type `typid` may hold a value of a non-built-in scalar type (through
/// domains, array elements and the fields of a named composite type; an anonymous `record` may:
/// its fields are known only from the value).
///
/// # Safety
/// Must run in a backend with a transaction (catalog lookups).
unsafe fn may_need(typid: pg_sys::Oid) -> bool {
    // SAFETY: catalog lookups; the tuple descriptor is released before returning.
    unsafe {
        let base = pg_sys::getBaseType(typid);
        let elem = pg_sys::get_element_type(base);
        if elem != pg_sys::InvalidOid {
            return may_need(elem);
        }
        if base == pg_sys::RECORDOID {
            return true;
        }
        if pg_sys::type_is_rowtype(base) {
            let desc = PgTupleDesc::from_pg(pg_sys::lookup_rowtype_tupdesc(base, -1));
            return desc.iter().any(|a| !a.attisdropped && may_need(a.atttypid));
        }
        !is_builtin(base)
    }
}

/// `value` (of type `typid`, not NULL) rebuilt from built-in types only, with its new type; `None`
/// when it holds no value of a non-built-in scalar type (then it can be used as it is). A scalar
/// of a non-built-in type becomes its output text (`text`); an array holding such values an array
/// of the rebuilt elements (`text[]`, or `record[]`) with the same dimensions and bounds; a
/// composite an anonymous record (blessed) with the same column names in the same order, dropped
/// columns left out, as `row_to_json` leaves them out.
///
/// # Safety
/// `value` must be a valid datum of type `typid`; results are palloc'd in the current context.
pub(crate) unsafe fn builtin_only(
    value: pg_sys::Datum,
    typid: pg_sys::Oid,
) -> Option<(pg_sys::Datum, pg_sys::Oid)> {
    // SAFETY: as the caller promises; arrays and tuples are deconstructed with their own
    // types' length, by-value and alignment, tuple descriptors are released after use.
    unsafe {
        if !may_need(typid) {
            return None;
        }
        pgrx::check_for_interrupts!();
        let base = pg_sys::getBaseType(typid);
        let elem = pg_sys::get_element_type(base);
        if elem != pg_sys::InvalidOid {
            return rebuild_array(value, elem);
        }
        if pg_sys::type_is_rowtype(base) {
            return rebuild_record(value);
        }
        Some((output_text(value, base), pg_sys::TEXTOID))
    }
}

/// [`builtin_only`] of an array whose elements are of type `elem`.
///
/// # Safety
/// As [`builtin_only`].
unsafe fn rebuild_array(
    value: pg_sys::Datum,
    elem: pg_sys::Oid,
) -> Option<(pg_sys::Datum, pg_sys::Oid)> {
    // SAFETY: as the caller promises.
    unsafe {
        let arr = pg_sys::pg_detoast_datum(value.cast_mut_ptr()) as *mut pg_sys::ArrayType;
        let (mut len, mut byval, mut align) = (0i16, false, 0 as std::ffi::c_char);
        pg_sys::get_typlenbyvalalign(elem, &mut len, &mut byval, &mut align);
        let mut elems: *mut pg_sys::Datum = std::ptr::null_mut();
        let mut nulls: *mut bool = std::ptr::null_mut();
        let mut n: i32 = 0;
        pg_sys::deconstruct_array(
            arr, elem, len as i32, byval, align, &mut elems, &mut nulls, &mut n,
        );
        let n = n as usize;
        let mut out: Vec<pg_sys::Datum> = Vec::with_capacity(n);
        let mut out_nulls: Vec<bool> = Vec::with_capacity(n);
        let mut new_elem = pg_sys::InvalidOid;
        let mut changed = false;
        for i in 0..n {
            let is_null = *nulls.add(i);
            out_nulls.push(is_null);
            if is_null {
                out.push(pg_sys::Datum::from(0usize));
                continue;
            }
            match builtin_only(*elems.add(i), elem) {
                Some((d, t)) => {
                    changed = true;
                    new_elem = t;
                    out.push(d);
                }
                // An element with nothing to rebuild (in a record[], an anonymous record of
                // built-in types beside others that had to be rebuilt): kept as it is.
                None => out.push(*elems.add(i)),
            }
        }
        // Every element NULL (or none), or nothing to rebuild: nothing of the type is rendered.
        if !changed {
            return None;
        }
        // ARR_DIMS and ARR_LBOUND (utils/array.h): the dimensions, then the lower bounds,
        // right after the ArrayType header.
        let ndim = (*arr).ndim;
        let dims = arr
            .cast::<u8>()
            .add(std::mem::size_of::<pg_sys::ArrayType>())
            .cast::<i32>();
        let lbs = dims.add(ndim as usize);
        let (mut nlen, mut nbyval, mut nalign) = (0i16, false, 0 as std::ffi::c_char);
        pg_sys::get_typlenbyvalalign(new_elem, &mut nlen, &mut nbyval, &mut nalign);
        let built = pg_sys::construct_md_array(
            out.as_mut_ptr(),
            out_nulls.as_mut_ptr(),
            ndim,
            dims,
            lbs,
            new_elem,
            nlen as i32,
            nbyval,
            nalign,
        );
        let array_type = pg_sys::get_array_type(new_elem);
        Some((pg_sys::Datum::from(built), array_type))
    }
}

/// A composite value taken apart: its type (read from the value itself, so an anonymous record
/// works too), its descriptor (from the type cache, released when dropped), its columns' values
/// and nulls, and the detoasted value.
pub(crate) struct Deformed {
    pub typid: pg_sys::Oid,
    pub desc: PgTupleDesc<'static>,
    pub values: Vec<pg_sys::Datum>,
    pub nulls: Vec<bool>,
    pub header: pg_sys::HeapTupleHeader,
}

/// [`Deformed`] of the composite `value`.
///
/// # Safety
/// `value` must be a valid, non-NULL composite datum in a memory context that outlives the
/// result.
pub(crate) unsafe fn deform(value: pg_sys::Datum) -> Deformed {
    // SAFETY: as the caller promises; the descriptor is the type cache's for the value's type.
    unsafe {
        let header = pg_sys::pg_detoast_datum(value.cast_mut_ptr()) as pg_sys::HeapTupleHeader;
        let typid = pgrx::heap_tuple_header_get_type_id(header);
        let typmod = pgrx::heap_tuple_header_get_typmod(header);
        let desc = PgTupleDesc::from_pg(pg_sys::lookup_rowtype_tupdesc(typid, typmod));
        let natts = desc.len();
        let mut tuple = pg_sys::HeapTupleData {
            t_len: pgrx::heap_tuple_header_get_datum_length(header) as u32,
            t_self: pg_sys::ItemPointerData::default(),
            t_tableOid: pg_sys::InvalidOid,
            t_data: header,
        };
        let mut values = vec![pg_sys::Datum::from(0usize); natts];
        let mut nulls = vec![false; natts];
        pg_sys::heap_deform_tuple(
            &mut tuple,
            desc.as_ptr(),
            values.as_mut_ptr(),
            nulls.as_mut_ptr(),
        );
        Deformed {
            typid,
            desc,
            values,
            nulls,
            header,
        }
    }
}

/// [`builtin_only`] of a composite value (its type and typmod read from the value itself, so an
/// anonymous record works too).
///
/// # Safety
/// As [`builtin_only`].
unsafe fn rebuild_record(value: pg_sys::Datum) -> Option<(pg_sys::Datum, pg_sys::Oid)> {
    // SAFETY: as the caller promises; the value's own descriptor is released before returning.
    unsafe {
        let Deformed {
            desc,
            values,
            nulls,
            ..
        } = deform(value);
        let natts = desc.len();
        let attrs: Vec<pg_sys::FormData_pg_attribute> = desc.iter().copied().collect();
        drop(desc);
        let kept: Vec<usize> = (0..natts).filter(|&i| !attrs[i].attisdropped).collect();
        let mut changed = false;
        let mut new_values = Vec::with_capacity(kept.len());
        let mut new_nulls = Vec::with_capacity(kept.len());
        let mut new_types = Vec::with_capacity(kept.len());
        for &i in &kept {
            let att = &attrs[i];
            new_nulls.push(nulls[i]);
            let rebuilt = if nulls[i] {
                None
            } else {
                builtin_only(values[i], att.atttypid)
            };
            match rebuilt {
                Some((d, t)) => {
                    changed = true;
                    new_values.push(d);
                    new_types.push((t, -1));
                }
                None => {
                    new_values.push(values[i]);
                    new_types.push((att.atttypid, att.atttypmod));
                }
            }
        }
        if !changed {
            return None;
        }
        let new_desc = pg_sys::CreateTemplateTupleDesc(kept.len() as i32);
        for (j, &i) in kept.iter().enumerate() {
            let (t, m) = new_types[j];
            pg_sys::TupleDescInitEntry(
                new_desc,
                (j + 1) as pg_sys::AttrNumber,
                attrs[i].attname.data.as_ptr(),
                t,
                m,
                0,
            );
        }
        let new_desc = pg_sys::BlessTupleDesc(new_desc);
        let formed =
            pg_sys::heap_form_tuple(new_desc, new_values.as_mut_ptr(), new_nulls.as_mut_ptr());
        Some((
            pg_sys::heap_copy_tuple_as_datum(formed, new_desc),
            pg_sys::RECORDOID,
        ))
    }
}

/// `row_to_json` of the composite `value` (of type `typid`) without any cast to json: the json
/// datum.
///
/// # Safety
/// `value` must be a valid composite datum of type `typid`.
pub(crate) unsafe fn row_json(value: pg_sys::Datum, typid: pg_sys::Oid) -> pg_sys::Datum {
    // SAFETY: as the caller promises; row_to_json takes any composite datum.
    unsafe {
        let safe = builtin_only(value, typid).map_or(value, |(d, _)| d);
        pg_sys::OidFunctionCall1Coll(
            pg_sys::Oid::from(pg_sys::F_ROW_TO_JSON_RECORD),
            pg_sys::InvalidOid,
            safe,
        )
    }
}

/// `to_jsonb` of the composite `value` without any cast to json or jsonb: the jsonb datum (the
/// JSON text of [`row_json`] read by `jsonb_in`, which is what `to_jsonb` of a row builds: the
/// same keys, numbers as numeric, the same strings).
///
/// # Safety
/// As [`row_json`].
pub(crate) unsafe fn row_jsonb(value: pg_sys::Datum, typid: pg_sys::Oid) -> pg_sys::Datum {
    // SAFETY: as the caller promises; the json datum is a text-like varlena.
    unsafe {
        let json = row_json(value, typid);
        let cstr = pg_sys::text_to_cstring(json.cast_mut_ptr::<pg_sys::text>());
        pg_sys::OidFunctionCall1Coll(
            pg_sys::Oid::from(pg_sys::F_JSONB_IN),
            pg_sys::InvalidOid,
            pg_sys::Datum::from(cstr),
        )
    }
}

/// Whether `typid` (through domains) is a composite type.
///
/// # Safety
/// Must run in a backend with a transaction (catalog lookups).
pub(crate) unsafe fn is_composite(typid: pg_sys::Oid) -> bool {
    // SAFETY: a catalog lookup.
    unsafe { pg_sys::type_is_rowtype(pg_sys::getBaseType(typid)) }
}

/// `to_jsonb` of any `value` (of type `typid`, not NULL) without any cast to json or jsonb: the
/// jsonb datum. A scalar or array is put in a one-column anonymous record and taken out of its
/// [`row_jsonb`] again (`to_jsonb` of a value needs the value's type from the call's
/// expression, which a call from C has not).
///
/// # Safety
/// `value` must be a valid datum of type `typid`.
pub(crate) unsafe fn value_jsonb(value: pg_sys::Datum, typid: pg_sys::Oid) -> pg_sys::Datum {
    // SAFETY: as the caller promises; the one-column descriptor is blessed (kept by the
    // backend's record type cache), the tuple palloc'd in the current context.
    unsafe {
        if is_composite(typid) {
            return row_jsonb(value, typid);
        }
        let (v, t) = builtin_only(value, typid).unwrap_or((value, typid));
        let desc = pg_sys::CreateTemplateTupleDesc(1);
        pg_sys::TupleDescInitEntry(desc, 1, c"v".as_ptr(), t, -1, 0);
        let desc = pg_sys::BlessTupleDesc(desc);
        let mut values = [v];
        let mut nulls = [false];
        let formed = pg_sys::heap_form_tuple(desc, values.as_mut_ptr(), nulls.as_mut_ptr());
        let row = pg_sys::heap_copy_tuple_as_datum(formed, desc);
        let object = row_jsonb(row, pg_sys::RECORDOID);
        let key = pg_sys::cstring_to_text(c"v".as_ptr());
        pg_sys::OidFunctionCall2Coll(
            pg_sys::Oid::from(pg_sys::F_JSONB_OBJECT_FIELD),
            pg_sys::InvalidOid,
            object,
            pg_sys::Datum::from(key),
        )
    }
}

/// The value of type `typid` that the text `text` stands for, through the type's input function
/// (for a domain, `domain_in`: the base type's input and the domain's constraints), never through
/// a cast from text a role made; what `CAST('literal' AS type)` does with a literal.
///
/// # Safety
/// `text` must be a valid, non-NULL text datum.
pub(crate) unsafe fn from_text(text: pg_sys::Datum, typid: pg_sys::Oid) -> pg_sys::Datum {
    // SAFETY: as the caller promises; the input function takes a C string.
    unsafe {
        let mut input = pg_sys::InvalidOid;
        let mut ioparam = pg_sys::InvalidOid;
        pg_sys::getTypeInputInfo(typid, &mut input, &mut ioparam);
        let cstr = pg_sys::text_to_cstring(text.cast_mut_ptr::<pg_sys::text>());
        pg_sys::OidInputFunctionCall(input, cstr, ioparam, -1)
    }
}
