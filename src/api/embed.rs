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
    embed_with(&catalog::model(model)?, texts)
}

/// [`embed`] with the catalog row already read.
fn embed_with(model: &catalog::ModelRow, texts: &[&str]) -> Result<Embeddings> {
    let emb = catalog::with_embedder(model, |e| {
        e.embed(texts, gucs::max_batch_tokens(), &mut || {
            pgrx::check_for_interrupts!();
        })
    })??;
    Ok(emb)
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
