//! Texts to embeddings under the current settings: model lookup, `tributary.max_texts_per_call`,
//! the engine's batched run (with interrupt checks), pgvector values, memory handed back.

use crate::engine::{Embeddings, Step};
use crate::pg::admission::{self, CpuRuns};
use crate::pg::catalog::{self, ModelRow};
use crate::pg::error::{Result, TributaryError};
use crate::pg::gucs;
use crate::pg::vector::Vector;

/// Embeds `texts` with `model` (or `tributary.model`): `[texts.len(), dim]` f32 or f16 (as the
/// graph returns them), unit L2 norm, in input order. Checks for interrupts before every ONNX
/// Runtime run and while planning batches. Each text is cut to 64 bytes per token of the
/// model's window before it is tokenized (engine::tokenize::BYTES_PER_TOKEN). On the CPU each run
/// first takes a cluster-wide run slot (`tributary.max_cpu_runs`, src/pg/admission.rs), at the
/// priority `tributary.priority` gives the call.
///
/// Errors: 53400 every CPU run slot taken and `tributary.cpu_overflow = error`; 55P03
/// lock_timeout passed while waiting for one; 54000 more than `tributary.max_texts_per_call` texts (checked first); 53200 when the
/// `[texts, dim]` output cannot be allocated; the model's errors.
pub(crate) fn embed(texts: &[&str], model: Option<&str>) -> Result<Embeddings> {
    embed_with(&catalog::model(model)?, texts, None)
}

/// 54000 when `count` texts are more than one call may embed (`tributary.max_texts_per_call`).
pub(crate) fn check_count(count: usize) -> Result<()> {
    let limit = gucs::max_texts_per_call();
    if count > limit {
        return Err(TributaryError::TooManyTexts { count, limit });
    }
    Ok(())
}

/// [`embed`] with the catalog row already read and the prompt named `prompt` (or the model's
/// default prompt) put before each text; checks the count before any work. Texts longer than
/// the window are listed in [`Embeddings::truncated`]; `tributary.truncation` is not applied
/// here (see [`apply_truncation`]).
///
/// Errors: 42704 unknown prompt; those of [`embed`].
pub(crate) fn embed_with(
    model: &ModelRow,
    texts: &[&str],
    prompt: Option<&str>,
) -> Result<Embeddings> {
    check_count(texts.len())?;
    let (_, prefix) = model.prompt(prompt)?;
    let emb = catalog::with_embedder(model, |e| {
        // A CPU run slot (tributary.max_cpu_runs) per ONNX Runtime run, given back at the end,
        // at the call's priority (tributary.priority).
        let class = admission::class_of(texts, model.max_length);
        let mut runs = CpuRuns::new(!e.provider().is_gpu(), class);
        e.embed_prompted(texts, &prefix, batch_tokens(e), &mut |step| {
            pgrx::check_for_interrupts!();
            if step == Step::Run {
                runs.before_run();
            }
        })
    })??;
    Ok(emb)
}

/// The token budget of one ONNX Runtime run of `e`: `tributary.gpu_max_batch_tokens` on a GPU,
/// else `tributary.max_batch_tokens` (tokens).
pub(crate) fn batch_tokens(e: &crate::engine::Embedder) -> usize {
    if e.provider().is_gpu() {
        gucs::gpu_max_batch_tokens()
    } else {
        gucs::max_batch_tokens()
    }
}

/// Applies `tributary.truncation` to `truncated` texts of `total` embedded with `model`:
/// nothing (`truncate`), one WARNING with the count (`warning`), or 22001 (`error`). `first`
/// describes the first truncated text for the error's DETAIL.
pub(crate) fn apply_truncation(
    model: &ModelRow,
    truncated: usize,
    total: usize,
    first: impl FnOnce() -> String,
) -> Result<()> {
    if truncated == 0 {
        return Ok(());
    }
    match gucs::truncation() {
        gucs::Truncation::Truncate => Ok(()),
        gucs::Truncation::Warning => {
            pgrx::warning!(
                "{truncated} of {total} texts were longer than model \"{}\"'s window of {} tokens and were truncated",
                model.name,
                model.max_length
            );
            Ok(())
        }
        gucs::Truncation::Error => Err(TributaryError::Truncated {
            model: model.name.clone(),
            max_length: model.max_length,
            count: truncated,
            detail: first(),
        }),
    }
}

/// [`embed_with`], then [`apply_truncation`] naming the first truncated text by its position.
fn embed_checked(model: &ModelRow, texts: &[&str], prompt: Option<&str>) -> Result<Embeddings> {
    let emb = embed_with(model, texts, prompt)?;
    apply_truncation(model, emb.truncated.len(), texts.len(), || {
        let i = emb.truncated[0];
        format!(
            "Text {} ({} characters) is the first one longer than the window.",
            i + 1,
            texts[i].chars().count()
        )
    })?;
    Ok(emb)
}

/// Hands memory freed by a large call back to the operating system (glibc keeps freed heap
/// pages for reuse otherwise, so a backend that once embedded 100,000 texts would hold that
/// much for its life). Cheap next to a call of that size.
pub(crate) fn release_memory(texts: usize) {
    if texts >= 128 {
        // SAFETY: malloc_trim only returns free pages of glibc's arenas.
        unsafe { libc::malloc_trim(0) };
    }
}

/// One text's embedding (`[dim]` f32) through this backend's memo
/// ([`catalog::memoized_embedding`]): the model runs once per distinct text and settings.
pub(crate) fn embed_one(model: &ModelRow, text: &str, prompt: Option<&str>) -> Result<Vector> {
    let (_, prefix) = model.prompt(prompt)?;
    let v = catalog::memoized_embedding(model, &prefix, text, || {
        let emb = embed_with(model, &[text], prompt)?;
        Ok((emb.row_f32(0).into_owned(), !emb.truncated.is_empty()))
    })?;
    let (vector, truncated) = v.as_ref();
    apply_truncation(model, *truncated as usize, 1, || {
        format!(
            "The text has {} characters; its first {} tokens were embedded.",
            text.chars().count(),
            model.max_length
        )
    })?;
    Ok(Vector(vector.clone()))
}

/// [`embed_one`] with the model named `model` (`None`: `tributary.model`).
pub(crate) fn embed_text(text: &str, model: Option<&str>, prompt: Option<&str>) -> Result<Vector> {
    embed_one(&catalog::model(model)?, text, prompt)
}

/// [`embed`] as pgvector `vector`s (`[dim] f32` each), with a prompt and `tributary.truncation`.
pub(crate) fn embed_texts(
    texts: &[&str],
    model: Option<&str>,
    prompt: Option<&str>,
) -> Result<Vec<Vector>> {
    let emb = embed_checked(&catalog::model(model)?, texts, prompt)?;
    Ok((0..emb.rows())
        .map(|i| Vector(emb.row_f32(i).into_owned()))
        .collect())
}

/// [`embed_texts`] over texts some of which are NULL: one batched call of the others, order
/// kept, NULL for NULL; then the memory of a large call goes back ([`release_memory`]).
pub(crate) fn embed_nullable(
    texts: &[Option<&str>],
    model: Option<&str>,
    prompt: Option<&str>,
) -> Result<Vec<Option<Vector>>> {
    let result: Vec<Option<Vector>> = {
        let present: Vec<&str> = texts.iter().flatten().copied().collect();
        let mut vectors = embed_texts(&present, model, prompt)?.into_iter();
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
