//! `tributary_chunk`: a long text as chunks that fit the model's window.

use pgrx::prelude::*;

use crate::engine::chunk::chunks;
use crate::pg::catalog;
use crate::pg::error::{raise, OrRaise, Result, TributaryError};

/// `tributary_chunk(text [, model, chunk_tokens, overlap_tokens]) → setof (seq, chunk,
/// start_char, end_char)`: splits `text` into chunks of at most `chunk_tokens` tokens of
/// `model`'s own tokenizer (default: the model's window less its special tokens, 254 for
/// all-MiniLM-L6-v2), consecutive chunks sharing up to `overlap_tokens` tokens (default 0), on the
/// largest boundary that fits: paragraphs, then sentences, words, characters (the
/// `text-splitter` crate). `seq` counts from 1; `start_char` and `end_char` are character
/// offsets in `text`, 0-based, end exclusive: `substr(text, start_char + 1, end_char -
/// start_char) = chunk`. Chunks are trimmed of surrounding whitespace; a text of only
/// whitespace (or empty) gives no rows, and so does NULL. Each chunk embedded with the same model
/// fits its window. A cancel or statement_timeout stops it between two chunks.
///
/// Errors: 22004 NULL `overlap_tokens` (NULL `chunk_tokens` is the default size); 22023
/// `chunk_tokens` below 1 or larger than the window allows, `overlap_tokens`
/// negative or not smaller than `chunk_tokens`; 54000 a text over 64 MiB; 42704 unknown model.
#[pg_extern(stable, parallel_safe)]
#[allow(clippy::type_complexity)]
fn tributary_chunk(
    text: Option<&str>,
    model: default!(Option<&str>, "NULL"),
    chunk_tokens: default!(Option<i32>, "NULL"),
    overlap_tokens: default!(Option<i32>, 0),
) -> TableIterator<
    'static,
    (
        name!(seq, i32),
        name!(chunk, String),
        name!(start_char, i32),
        name!(end_char, i32),
    ),
> {
    let Some(text) = text else {
        return TableIterator::new(Vec::new());
    };
    let Some(overlap_tokens) = overlap_tokens else {
        raise(TributaryError::NullArgument("overlap_tokens"));
    };
    TableIterator::new(chunk_rows(text, model, chunk_tokens, overlap_tokens).or_raise())
}

fn chunk_rows(
    text: &str,
    model: Option<&str>,
    chunk_tokens: Option<i32>,
    overlap_tokens: i32,
) -> Result<Vec<(i32, String, i32, i32)>> {
    let model = catalog::model(model)?;
    catalog::with_tokenizer(&model, |tokenizer| {
        let room = model.max_length.saturating_sub(tokenizer.count_special());
        let size = chunk_tokens.unwrap_or(room as i32);
        if size < 1 || size as usize > room {
            return Err(TributaryError::InvalidArgument {
                message: format!("chunk_tokens must be between 1 and {room}, not {size}"),
                hint: Some(format!(
                    "Model \"{}\" has a window of {} tokens, {} of them special tokens.",
                    model.name,
                    model.max_length,
                    tokenizer.count_special()
                )),
            });
        }
        if overlap_tokens < 0 || overlap_tokens >= size {
            return Err(TributaryError::InvalidArgument {
                message: format!(
                    "overlap_tokens must be at least 0 and smaller than chunk_tokens ({size}), not {overlap_tokens}"
                ),
                hint: None,
            });
        }
        let found = chunks(
            tokenizer,
            text,
            size as usize,
            overlap_tokens as usize,
            &mut || {
                pgrx::check_for_interrupts!();
            },
        )?;
        Ok(found
            .into_iter()
            .map(|c| {
                (
                    c.seq as i32,
                    c.text.to_owned(),
                    c.start_char as i32,
                    c.end_char as i32,
                )
            })
            .collect())
    })?
}
