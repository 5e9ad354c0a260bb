//! Splitting a long text into chunks that fit a model's window, measured by the model's own
//! tokenizer, with overlap, on the largest semantic boundary that fits (paragraphs, then
//! sentences, words, characters): the `text-splitter` crate's `TextSplitter` with HF
//! `tokenizers` as its sizer (<https://docs.rs/text-splitter>).

use text_splitter::{ChunkConfig, TextSplitter};

use super::error::{Error, Result};
use super::tokenize::TextTokenizer;

/// One chunk of a text: its 1-based sequence number, its text (a slice of the input, trimmed of
/// surrounding whitespace) and its character offsets in the input, 0-based, end exclusive
/// (`chars().skip(start).take(end - start)` is the chunk).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk<'t> {
    pub seq: usize,
    pub text: &'t str,
    pub start_char: usize,
    pub end_char: usize,
}

/// Bytes of text [`chunks`] takes in one call: 64 MiB. The splitter holds offsets for every
/// boundary it finds and tokenizes candidates repeatedly, so its time and memory grow with the
/// text; a larger text is an error (the extension: 54000) rather than minutes of work.
pub const MAX_TEXT_BYTES: usize = 64 << 20;

/// Splits `text` into chunks of at most `chunk_tokens` tokens (special tokens not counted: the
/// caller leaves room for them), consecutive chunks sharing up to `overlap_tokens` tokens.
/// `between_chunks` runs on the calling thread after each chunk (the extension checks for
/// interrupts there).
///
/// Errors: [`Error::InvalidChunking`] when `chunk_tokens` is 0, `overlap_tokens >=
/// chunk_tokens`, or the text is longer than [`MAX_TEXT_BYTES`].
pub fn chunks<'t>(
    tokenizer: &TextTokenizer,
    text: &'t str,
    chunk_tokens: usize,
    overlap_tokens: usize,
    between_chunks: &mut dyn FnMut(),
) -> Result<Vec<Chunk<'t>>> {
    if chunk_tokens == 0 {
        return Err(Error::InvalidChunking(
            "chunk size must be at least 1 token".into(),
        ));
    }
    if overlap_tokens >= chunk_tokens {
        return Err(Error::InvalidChunking(format!(
            "overlap ({overlap_tokens} tokens) must be smaller than the chunk size ({chunk_tokens} tokens)"
        )));
    }
    if text.len() > MAX_TEXT_BYTES {
        return Err(Error::TextTooLong {
            bytes: text.len(),
            limit: MAX_TEXT_BYTES,
        });
    }
    let config = ChunkConfig::new(chunk_tokens)
        .with_sizer(tokenizer.inner())
        .with_overlap(overlap_tokens)
        .map_err(|e| Error::InvalidChunking(e.to_string()))?;
    let splitter = TextSplitter::new(config);
    let mut out = Vec::new();
    for (k, c) in splitter.chunk_char_indices(text).enumerate() {
        let len = c.chunk.chars().count();
        out.push(Chunk {
            seq: k + 1,
            text: c.chunk,
            start_char: c.char_offset,
            end_char: c.char_offset + len,
        });
        between_chunks();
    }
    Ok(out)
}
