//! `tributary_embed`: text to embedding, one value or a batch.

use pgrx::prelude::*;

use crate::engine::Embeddings;
use crate::pg::catalog;
use crate::pg::error::{OrRaise, Result, TributaryError};
use crate::pg::gucs;
use crate::pg::vector::Vector;

/// Embeds `texts` with `model` (or `tributary.model`): `[texts.len(), dim]` f32 or f16 (as the
/// graph returns them), unit L2 norm, in input order. Checks for interrupts before every ONNX
/// Runtime run and while planning batches. Each text is cut to 64 bytes per token of the
/// model's window before it is tokenized (engine::tokenize::BYTES_PER_TOKEN).
///
/// Errors: 54000 more than `tributary.max_texts_per_call` texts (checked first); 53200 when the
/// `[texts, dim]` output cannot be allocated; the model's errors.
pub(crate) fn embed(texts: &[&str], model: Option<&str>) -> Result<Embeddings> {
    check_count(texts.len())?;
    embed_with(&catalog::model(model)?, texts)
}

/// 54000 when `count` texts are more than one call may embed (`tributary.max_texts_per_call`).
pub(crate) fn check_count(count: usize) -> Result<()> {
    let limit = gucs::max_texts_per_call();
    if count > limit {
        return Err(TributaryError::TooManyTexts { count, limit });
    }
    Ok(())
}

/// [`embed`] with the catalog row already read.
fn embed_with(model: &catalog::ModelRow, texts: &[&str]) -> Result<Embeddings> {
    check_count(texts.len())?;
    let emb = catalog::with_embedder(model, |e| {
        e.embed(texts, gucs::max_batch_tokens(), &mut || {
            pgrx::check_for_interrupts!();
        })
    })??;
    Ok(emb)
}

/// Hands memory freed by a large call back to the operating system (glibc keeps freed heap
/// pages for reuse otherwise, so a backend that once embedded 100,000 texts would hold that
/// much for its life). Cheap next to a call of that size.
pub(crate) fn release_memory(texts: usize) {
    if texts >= 1024 {
        // SAFETY: malloc_trim only returns free pages of glibc's arenas.
        unsafe { libc::malloc_trim(0) };
    }
}

/// One text's embedding (`[dim]` f32) through this backend's memo
/// ([`catalog::memoized_embedding`]): the model runs once per distinct text and settings.
pub(crate) fn embed_one(model: &catalog::ModelRow, text: &str) -> Result<Vector> {
    let v = catalog::memoized_embedding(model, text, || Ok(embed_with(model, &[text])?.row_f32(0).into_owned()))?;
    Ok(Vector(v.as_ref().clone()))
}

/// [`embed`] as pgvector `vector`s (`[dim] f32` each).
pub(crate) fn embed_texts(texts: &[&str], model: Option<&str>) -> Result<Vec<Vector>> {
    let emb = embed(texts, model)?;
    Ok((0..emb.rows()).map(|i| Vector(emb.row_f32(i).into_owned())).collect())
}

/// `tributary_embed(text [, model]) → vector`: the embedding of one text, `[dim]` f32 with unit
/// L2 norm, truncated to the model's max length (tokens). NULL text gives NULL; `''` gives the
/// embedding of the empty input (`[CLS] [SEP]`).
///
/// PostgreSQL evaluates it wherever the executor needs the value (per row of a sequential scan
/// in `ORDER BY embedding <=> tributary_embed('query')`), so the backend keeps its last 32
/// results (texts up to 8 kB) and the model runs once per distinct text and settings.
///
/// Errors: 42704 unknown model; 58P01 missing ONNX Runtime library or model file (HINT names
/// the setting); 38000 ONNX Runtime failure (its message in the error).
#[pg_extern(name = "tributary_embed", stable, parallel_unsafe)]
fn tributary_embed_text(text: Option<&str>, model: default!(Option<&str>, "NULL")) -> Option<Vector> {
    let text = text?;
    Some(embed_one(&catalog::model(model).or_raise(), text).or_raise())
}

/// `tributary_embed(text[] [, model]) → vector[]`: one batched call, order preserved, NULL
/// elements give NULL elements. Inputs are length-sorted and cut by
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
fn tributary_embed_array(
    texts: Option<Array<&str>>,
    model: default!(Option<&str>, "NULL"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<Vec<Option<Vector>>> {
    let texts = texts?;
    // Before anything is copied: the count (a 20-million-element array once took 30 GB), and
    // the shape, since the result is a one-dimensional array from 1.
    check_count(texts.len()).or_raise();
    check_shape(fcinfo).or_raise();
    let result = {
        let texts: Vec<Option<&str>> = texts.iter().collect();
        let present: Vec<&str> = texts.iter().flatten().copied().collect();
        let mut vectors = embed_texts(&present, model).or_raise().into_iter();
        texts.iter().map(|t| t.and_then(|_| vectors.next())).collect::<Vec<_>>()
    };
    release_memory(result.len());
    Some(result)
}

/// 2202E unless argument 0 of `fcinfo` (a non-NULL array) is one-dimensional with subscripts
/// from 1 (or empty): the result keeps the order but not a shape or other subscripts.
fn check_shape(fcinfo: pg_sys::FunctionCallInfo) -> Result<()> {
    // SAFETY: argument 0 is a non-NULL array datum (checked by the caller); only its header
    // (ndim and the first lower bound, the first 24 bytes) is detoasted.
    let (ndim, lbound) = unsafe {
        let datum = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 0);
        let header = pg_sys::pg_detoast_datum_slice(datum.cast_mut_ptr(), 0, 32).cast::<pg_sys::ArrayType>();
        let ndim = (*header).ndim;
        // ARR_LBOUND: the lower bounds follow the ndim dimensions after the fixed header.
        let dims = header.cast::<u8>().add(std::mem::size_of::<pg_sys::ArrayType>()).cast::<i32>();
        (ndim, if ndim == 1 { *dims.add(1) } else { 1 })
    };
    if ndim > 1 {
        return Err(TributaryError::ArrayShape(format!("tributary_embed takes a one-dimensional text[], not {ndim} dimensions")));
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
fn tributary_tokenize(text: Option<&str>, model: default!(Option<&str>, "NULL")) -> Option<Vec<i32>> {
    let text = text?;
    let model = catalog::model(model).or_raise();
    let tokens = catalog::with_embedder(&model, |e| e.tokenizer().encode(&[text])).or_raise().or_raise();
    tokens.into_iter().next().map(|t| t.ids)
}
