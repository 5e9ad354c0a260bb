//! Texts to embeddings under the current settings: model lookup, `tributary.max_texts_per_call`,
//! the engine's batched run (with interrupt checks), pgvector values, memory handed back.

use crate::engine::Embeddings;
use crate::pg::catalog::{self, ModelRow};
use crate::pg::error::{Result, TributaryError};
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

/// [`embed`] with the catalog row already read; checks the count before any work.
fn embed_with(model: &ModelRow, texts: &[&str]) -> Result<Embeddings> {
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
pub(crate) fn embed_one(model: &ModelRow, text: &str) -> Result<Vector> {
    let v = catalog::memoized_embedding(model, text, || {
        Ok(embed_with(model, &[text])?.row_f32(0).into_owned())
    })?;
    Ok(Vector(v.as_ref().clone()))
}

/// [`embed_one`] with the model named `model` (`None`: `tributary.model`).
pub(crate) fn embed_text(text: &str, model: Option<&str>) -> Result<Vector> {
    embed_one(&catalog::model(model)?, text)
}

/// [`embed`] as pgvector `vector`s (`[dim] f32` each).
pub(crate) fn embed_texts(texts: &[&str], model: Option<&str>) -> Result<Vec<Vector>> {
    let emb = embed(texts, model)?;
    Ok((0..emb.rows())
        .map(|i| Vector(emb.row_f32(i).into_owned()))
        .collect())
}

/// [`embed_texts`] over texts some of which are NULL: one batched call of the others, order
/// kept, NULL for NULL; then the memory of a large call goes back ([`release_memory`]).
pub(crate) fn embed_nullable(
    texts: &[Option<&str>],
    model: Option<&str>,
) -> Result<Vec<Option<Vector>>> {
    let result: Vec<Option<Vector>> = {
        let present: Vec<&str> = texts.iter().flatten().copied().collect();
        let mut vectors = embed_texts(&present, model)?.into_iter();
        texts
            .iter()
            .map(|t| t.and_then(|_| vectors.next()))
            .collect()
    };
    release_memory(result.len());
    Ok(result)
}

/// The token ids the model sees for `text`, special tokens included, truncated to the model's
/// max length.
pub(crate) fn token_ids(text: &str, model: Option<&str>) -> Result<Option<Vec<i32>>> {
    let model = catalog::model(model)?;
    let tokens = catalog::with_embedder(&model, |e| e.tokenizer().encode(&[text]))??;
    Ok(tokens.into_iter().next().map(|t| t.ids))
}
