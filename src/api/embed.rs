//! `tributary_embed`: text to embedding, one value or a batch.

use pgrx::prelude::*;

use crate::engine::Embeddings;
use crate::pg::catalog;
use crate::pg::error::{OrRaise, Result};
use crate::pg::gucs;
use crate::pg::vector::Vector;

/// Embeds `texts` with `model` (or `tributary.model`): `[texts.len(), dim]` f32 or f16 (as the
/// graph returns them), unit L2 norm, in input order. Checks for interrupts before every ONNX
/// Runtime run.
pub(crate) fn embed(texts: &[&str], model: Option<&str>) -> Result<Embeddings> {
    let model = catalog::model(model)?;
    let emb = catalog::with_embedder(&model, |e| {
        e.embed(texts, gucs::max_batch_tokens(), &mut || {
            pgrx::check_for_interrupts!();
        })
    })??;
    Ok(emb)
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
/// Errors: 42704 unknown model; 58P01 missing ONNX Runtime library or model file (HINT names
/// the setting); 38000 ONNX Runtime failure (its message in the error).
#[pg_extern(name = "tributary_embed", stable, parallel_unsafe)]
fn tributary_embed_text(text: Option<&str>, model: default!(Option<&str>, "NULL")) -> Option<Vector> {
    let text = text?;
    embed_texts(&[text], model).or_raise().pop()
}

/// `tributary_embed(text[] [, model]) → vector[]`: one batched call, order preserved, NULL
/// elements give NULL elements. Inputs are length-sorted and cut by
/// `tributary.max_batch_tokens`; a cancel stops it between two ONNX Runtime runs.
///
/// Errors: as `tributary_embed(text)`.
#[pg_extern(name = "tributary_embed", stable, parallel_unsafe)]
fn tributary_embed_array(
    texts: Option<Array<&str>>,
    model: default!(Option<&str>, "NULL"),
) -> Option<Vec<Option<Vector>>> {
    let texts = texts?;
    let texts: Vec<Option<&str>> = texts.iter().collect();
    let present: Vec<&str> = texts.iter().flatten().copied().collect();
    let mut vectors = embed_texts(&present, model).or_raise().into_iter();
    Some(texts.iter().map(|t| t.and_then(|_| vectors.next())).collect())
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
