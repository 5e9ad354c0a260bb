//! A composite value (a table row, an anonymous record) as the JSON object the row text is made
//! from, with every oversized value read only in part.
//!
//! `row_to_json` of a row holding a 50 MB jsonb value, parsed by serde_json, took 1.37 GB and
//! ignored a statement_timeout for 0.4 s; the text shows a few hundred characters of it. So each
//! value's size is read from its header first (no detoasting), and a value over
//! [`rowtext::oversized_bytes`] is left out of `row_to_json` and replaced by the start of its
//! text ([`rowtext::oversized_text`]): a slice of a text, varchar, bpchar or json value (only
//! that much is fetched and decompressed), or the output of any other type cut short. Rows
//! without such a value take the same path as before, so their text does not change. Values
//! of types a role made (enums, ranges, ...) are rendered by their output functions, never by a
//! cast to json ([`crate::pg::values`]).

use pgrx::prelude::*;
use serde_json::{Map, Value};

use crate::engine::rowtext;
use crate::pg::error::{Result, TributaryError};
use crate::pg::values;

/// The values of the composite `datum` (a `HeapTupleHeader`: a whole-row value) as a map from
/// column name to JSON value in column order, as `row_to_json` writes them, except that a
/// value over [`rowtext::oversized_bytes`]`(max_tokens)` bytes is the JSON string
/// [`rowtext::oversized_text`] of its text; and the table the row type belongs to (`None` for an
/// anonymous record).
///
/// Errors: XX000 if `row_to_json` gives something that is not a JSON object.
///
/// # Safety
/// `datum` must be a valid, non-NULL composite datum in a memory context that outlives the call.
pub(crate) unsafe fn record_values(
    datum: pg_sys::Datum,
    max_tokens: usize,
) -> Result<(Option<pg_sys::Oid>, Map<String, Value>)> {
    // SAFETY (whole function): the caller passes a composite datum; the tuple descriptor comes
    // from the type cache for its type and is released by PgTupleDesc's drop.
    unsafe {
        let values::Deformed {
            typid,
            desc: tupdesc,
            mut values,
            mut nulls,
            header,
        } = values::deform(datum);
        let header_datum = pg_sys::Datum::from(header);
        let relid = pg_sys::get_typ_typrelid(typid);
        let natts = tupdesc.len();
        let limit = rowtext::oversized_bytes(max_tokens);
        let oversized: Vec<usize> = (0..natts)
            .filter(|&i| {
                let att = tupdesc.get(i).expect("i < natts");
                !att.attisdropped
                    && !nulls[i]
                    && att.attlen == -1
                    && pg_sys::toast_raw_datum_size(values[i]) > limit
            })
            .collect();
        let json_of = if oversized.is_empty() {
            header_datum
        } else {
            for &i in &oversized {
                nulls[i] = true;
            }
            let smaller =
                pg_sys::heap_form_tuple(tupdesc.as_ptr(), values.as_mut_ptr(), nulls.as_mut_ptr());
            pg_sys::heap_copy_tuple_as_datum(smaller, tupdesc.as_ptr())
        };
        pgrx::check_for_interrupts!();
        // row_to_json without any cast a role made (crate::pg::values).
        let json = values::row_json(json_of, typid);
        let text = String::from_datum(json, false).unwrap_or_default();
        let mut map = rowtext::parse_row_json(&text).ok_or_else(|| {
            TributaryError::Internal(format!("row_to_json gave no JSON object: {:.80}", text))
        })?;
        for &i in &oversized {
            let att = tupdesc.get(i).expect("i < natts");
            let start = text_start(values[i], att.atttypid, rowtext::kept_bytes(max_tokens));
            map.insert(
                att.name().to_owned(),
                Value::String(rowtext::oversized_text(&start, max_tokens)),
            );
            pgrx::check_for_interrupts!();
        }
        Ok(((relid != pg_sys::InvalidOid).then_some(relid), map))
    }
}

/// At least the first `bytes` bytes of the text of `value` (of type `typid`, a varlena), or all
/// of it when shorter. Text types (and domains over them) are sliced before detoasting, so only
/// the start is fetched and decompressed; jsonb is rendered only up to `bytes`
/// ([`jsonb_start`]); other types go through their output function.
///
/// # Safety
/// `value` must be a valid, non-NULL datum of type `typid`.
unsafe fn text_start(value: pg_sys::Datum, typid: pg_sys::Oid, bytes: usize) -> String {
    // SAFETY: as the caller promises; slices and output strings are palloc'd in the current
    // memory context and freed here.
    unsafe {
        let base = pg_sys::getBaseType(typid);
        let sliceable = [
            pg_sys::TEXTOID,
            pg_sys::VARCHAROID,
            pg_sys::BPCHAROID,
            pg_sys::JSONOID,
        ]
        .contains(&base);
        if base == pg_sys::JSONBOID {
            return jsonb_start(value, bytes);
        }
        let (raw, to_free): (Vec<u8>, *mut std::ffi::c_void) = if sliceable {
            // A few bytes more than asked: the cut then falls on a whole character.
            let count = i32::try_from(bytes + 8).unwrap_or(i32::MAX);
            let slice = pg_sys::pg_detoast_datum_slice(value.cast_mut_ptr(), 0, count);
            let len = pgrx::varsize_any_exhdr(slice);
            let data = pgrx::vardata_any(slice) as *const u8;
            (std::slice::from_raw_parts(data, len).to_vec(), slice.cast())
        } else {
            let mut output = pg_sys::InvalidOid;
            let mut varlena = false;
            pg_sys::getTypeOutputInfo(typid, &mut output, &mut varlena);
            let out = pg_sys::OidOutputFunctionCall(output, value);
            let all = std::ffi::CStr::from_ptr(out).to_bytes();
            (all[..all.len().min(bytes + 8)].to_vec(), out.cast())
        };
        if to_free != value.cast_mut_ptr() {
            pg_sys::pfree(to_free);
        }
        match std::str::from_utf8(&raw) {
            Ok(s) => s.to_owned(),
            Err(e) => String::from_utf8_lossy(&raw[..e.valid_up_to()]).into_owned(),
        }
    }
}

/// The start of `value`'s text (a jsonb datum) as `jsonb_out` writes it (`{"k": 1, "a": [1, 2]}`),
/// rendered only until it is `bytes` long: the value is decompressed whole (a jsonb container
/// cannot be read in part), but never printed whole. A 54 MB jsonb value took 289 MB and 1.4 s
/// of a debug build through its output function (src/tests_rows.rs, README "Rows as text").
///
/// # Safety
/// `value` must be a valid, non-NULL jsonb datum.
unsafe fn jsonb_start(value: pg_sys::Datum, bytes: usize) -> String {
    use pg_sys::JsonbIteratorToken::*;
    // SAFETY: the iterator walks the detoasted container, which lives in the current memory
    // context until this function frees it; JsonbValue strings point into it.
    unsafe {
        let jb = pg_sys::pg_detoast_datum(value.cast_mut_ptr()) as *mut pg_sys::Jsonb;
        let mut it = pg_sys::JsonbIteratorInit(&mut (*jb).root);
        let mut v: pg_sys::JsonbValue = std::mem::zeroed();
        let mut out = String::new();
        // Per open container: whether the next member is its first (no ", " before it).
        let mut first: Vec<bool> = Vec::new();
        // A top-level scalar is stored as a one-element array marked raw: no brackets.
        let mut raw = false;
        let mut n = 0u32;
        while out.len() <= bytes {
            let token = pg_sys::JsonbIteratorNext(&mut it, &mut v, false);
            match token {
                WJB_DONE => break,
                WJB_BEGIN_ARRAY | WJB_BEGIN_OBJECT => {
                    if let Some(f) = first.last_mut() {
                        if !std::mem::take(f) && !out.ends_with(": ") {
                            out.push_str(", ");
                        }
                    }
                    first.push(true);
                    if token == WJB_BEGIN_OBJECT {
                        out.push('{');
                    } else if first.len() == 1 && v.val.array.rawScalar {
                        raw = true;
                    } else {
                        out.push('[');
                    }
                }
                WJB_END_ARRAY | WJB_END_OBJECT => {
                    first.pop();
                    if token == WJB_END_OBJECT {
                        out.push('}');
                    } else if !(first.is_empty() && raw) {
                        out.push(']');
                    }
                }
                WJB_KEY | WJB_ELEM | WJB_VALUE => {
                    if token != WJB_VALUE {
                        if let Some(f) = first.last_mut() {
                            if !std::mem::take(f) {
                                out.push_str(", ");
                            }
                        }
                    }
                    scalar(&v, &mut out);
                    if token == WJB_KEY {
                        out.push_str(": ");
                    }
                }
                _ => {}
            }
            n += 1;
            if n.is_multiple_of(4096) {
                pgrx::check_for_interrupts!();
            }
        }
        if jb.cast::<std::ffi::c_void>() != value.cast_mut_ptr::<std::ffi::c_void>() {
            pg_sys::pfree(jb.cast());
        }
        out
    }
}

/// A jsonb scalar as `jsonb_out` writes it, appended to `out`.
///
/// # Safety
/// `v` must be a scalar `JsonbValue` filled by `JsonbIteratorNext`.
unsafe fn scalar(v: &pg_sys::JsonbValue, out: &mut String) {
    // SAFETY: the union field read is the one `type_` names.
    unsafe {
        match v.type_ {
            pg_sys::jbvType::jbvString => {
                let s = v.val.string;
                let raw = std::slice::from_raw_parts(s.val as *const u8, s.len as usize);
                let text = String::from_utf8_lossy(raw);
                out.push_str(&serde_json::to_string(&*text).unwrap_or_default());
            }
            pg_sys::jbvType::jbvNumeric => {
                let c = pg_sys::OidOutputFunctionCall(
                    pg_sys::Oid::from(pg_sys::F_NUMERIC_OUT),
                    pg_sys::Datum::from(v.val.numeric),
                );
                out.push_str(&std::ffi::CStr::from_ptr(c).to_string_lossy());
                pg_sys::pfree(c.cast());
            }
            pg_sys::jbvType::jbvBool => out.push_str(if v.val.boolean { "true" } else { "false" }),
            _ => out.push_str("null"),
        }
    }
}
