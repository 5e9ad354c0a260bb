//! `tributary_embed` (one text, an array of texts) and `tributary_tokenize`.

use pgrx::prelude::*;

use crate::pg::error::{OrRaise, Result, TributaryError};
use crate::pg::vector::Vector;
use crate::service::embed::{check_count, embed_nullable, embed_text, token_ids};

/// `tributary_embed(text [, model, prompt]) → vector`: the embedding of one text, `[dim]` f32
/// with unit L2 norm. NULL text gives NULL; `''` gives the embedding of the empty input
/// (`[CLS] [SEP]`). `prompt` names one of the model's prompts (`query`, `passage`, ... as
/// `tributary_info()` lists them), whose text is put before the text, as sentence-transformers
/// does; NULL means the model's default prompt, if it has one. A text longer than the window
/// (`max_length` tokens, prompt included) is truncated to it, with a WARNING or error 22001 as
/// `tributary.truncation` says.
///
/// PostgreSQL evaluates it wherever the executor needs the value (per row of a sequential scan
/// in `ORDER BY embedding <=> tributary_embed('query')`), so the backend keeps its last 32
/// results (texts up to 8 kB) and the model runs once per distinct text and settings.
///
/// Errors: 42704 unknown model or prompt; 22001 truncation under `tributary.truncation =
/// error`; 58P01 missing ONNX Runtime library or model file (HINT names the setting); 38000
/// ONNX Runtime failure (its message in the error).
#[pg_extern(name = "tributary_embed", stable, parallel_unsafe)]
pub(crate) fn tributary_embed_text_0_3(
    text: Option<&str>,
    model: default!(Option<&str>, "NULL"),
    prompt: default!(Option<&str>, "NULL"),
) -> Option<Vector> {
    let text = text?;
    Some(embed_text(text, model, prompt).or_raise())
}

/// `tributary_embed(text[] [, model, prompt]) → vector[]`: one batched call, order preserved,
/// NULL elements give NULL elements; `prompt` and truncation as for one text (one WARNING
/// with the count of truncated texts). Inputs are length-sorted and cut by
/// `tributary.max_batch_tokens`; a cancel stops it between two ONNX Runtime runs.
///
/// VOLATILE on purpose, unlike `tributary_embed(text)`: the planner evaluates stable functions
/// whose arguments are known at planning time to estimate row counts (unnest's support function
/// calls `estimate_expression_value` on its array argument), so `unnest(tributary_embed($1))`
/// embedded the whole batch twice, once to plan and once to run. Nothing needs this form to be
/// stable: it is not an index ORDER BY argument, as the text form is.
///
/// Errors: as `tributary_embed(text)`.
#[pg_extern(name = "tributary_embed", volatile, parallel_unsafe)]
pub(crate) fn tributary_embed_array_0_3(
    texts: Option<Array<&str>>,
    model: default!(Option<&str>, "NULL"),
    prompt: default!(Option<&str>, "NULL"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<Vec<Option<Vector>>> {
    let texts = texts?;
    // Before anything is copied: the count (a 20-million-element array once took 30 GB), and
    // the shape, since the result is a one-dimensional array from 1.
    check_count(texts.len()).or_raise();
    check_shape(fcinfo).or_raise();
    let texts: Vec<Option<&str>> = texts.iter().collect();
    Some(embed_nullable(&texts, model, prompt).or_raise())
}

/// 2202E unless argument 0 of `fcinfo` (a non-NULL array) is one-dimensional with subscripts
/// from 1 (or empty): the result keeps the order but not a shape or other subscripts.
pub(crate) fn check_shape(fcinfo: pg_sys::FunctionCallInfo) -> Result<()> {
    // SAFETY: argument 0 is a non-NULL array datum (checked by the caller); only its header
    // (ndim and the first lower bound, the first 24 bytes) is detoasted.
    let (ndim, lbound) = unsafe {
        let datum = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 0);
        let header =
            pg_sys::pg_detoast_datum_slice(datum.cast_mut_ptr(), 0, 32).cast::<pg_sys::ArrayType>();
        let ndim = (*header).ndim;
        // ARR_LBOUND: the lower bounds follow the ndim dimensions after the fixed header.
        let dims = header
            .cast::<u8>()
            .add(std::mem::size_of::<pg_sys::ArrayType>())
            .cast::<i32>();
        (ndim, if ndim == 1 { *dims.add(1) } else { 1 })
    };
    if ndim > 1 {
        return Err(TributaryError::ArrayShape(format!(
            "tributary_embed takes a one-dimensional text[], not {ndim} dimensions"
        )));
    }
    if lbound != 1 {
        return Err(TributaryError::ArrayShape(format!(
            "tributary_embed takes a text[] with subscripts from 1, not from {lbound}"
        )));
    }
    Ok(())
}

/// `tributary_tokenize(text [, model]) → integer[]`: the token ids the model sees for `text`,
/// special tokens included, truncated to the model's max length (so `cardinality()` is at most
/// `max_length` tokens). NULL gives NULL.
///
/// Errors: as `tributary_embed(text)`.
#[pg_extern(stable, parallel_unsafe)]
fn tributary_tokenize(
    text: Option<&str>,
    model: default!(Option<&str>, "NULL"),
) -> Option<Vec<i32>> {
    let text = text?;
    token_ids(text, model).or_raise()
}
