//! Tokenization with Hugging Face `tokenizers`: truncation to the model's max length, int32 ids.
//! Padding is not done here: `batch` decides each batch's padded width after length sorting.

use std::path::Path;

use tokenizers::{PostProcessor, Tokenizer, TruncationParams};

use super::error::{Error, Result};

/// A tokenizer set up for one model: truncation at `max_length` tokens (special tokens
/// included), no padding.
pub struct TextTokenizer {
    inner: Tokenizer,
    max_length: usize,
    pad_id: i32,
}

/// One tokenized text: `ids` are int32 token ids, `[CLS] ... [SEP]` included, at most
/// `max_length` long. The attention mask is implied: 1 for each id, 0 for padding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens {
    pub ids: Vec<i32>,
    /// The text (prompt included) had more tokens than the window and was truncated.
    pub truncated: bool,
}

/// Bytes of text kept per token of the window before tokenizing ([`TextTokenizer::max_bytes`]).
/// English WordPiece averages about 4 bytes a token and a token covers at least one byte of
/// non-space text, so 64 bytes a token keeps everything the window can hold except for texts
/// made mostly of whitespace or of words over 100 characters (one `[UNK]` each).
pub const BYTES_PER_TOKEN: usize = 64;

/// `text` cut to at most `max_bytes` bytes, on a character boundary.
pub fn cut(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl TextTokenizer {
    /// Loads `tokenizer.json` and sets truncation to `max_length` tokens.
    ///
    /// Errors: [`Error::ModelFile`] if the file cannot be read, [`Error::Tokenizer`] if it does
    /// not parse or `max_length` is too small for the special tokens.
    pub fn from_file(path: &Path, max_length: usize) -> Result<Self> {
        if !path.is_file() {
            return Err(Error::ModelFile {
                path: path.to_owned(),
                reason: "no such file".into(),
            });
        }
        let mut inner = Tokenizer::from_file(path)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
        inner
            .with_truncation(Some(TruncationParams {
                max_length,
                ..Default::default()
            }))
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        inner.with_padding(None);
        let pad_id = ["[PAD]", "<pad>"]
            .iter()
            .find_map(|t| inner.token_to_id(t))
            .unwrap_or(0) as i32;
        Ok(TextTokenizer {
            inner,
            max_length,
            pad_id,
        })
    }

    /// Bytes of a text that are tokenized: `max_length x` [`BYTES_PER_TOKEN`] (16 kB for a
    /// 256-token window). Longer texts are [`cut`] first, so one text costs bounded memory and
    /// time (tokenizing all of a 50 MB text took 5.9 GB and 29 s).
    pub fn max_bytes(&self) -> usize {
        self.max_length.saturating_mul(BYTES_PER_TOKEN)
    }

    /// Tokenizes `texts` (each [`cut`] to [`Self::max_bytes`]) in parallel (HF tokenizers'
    /// thread pool; no PostgreSQL call is made from those threads). Output is in input order,
    /// one [`Tokens`] per text.
    pub fn encode(&self, texts: &[&str]) -> Result<Vec<Tokens>> {
        self.encode_prompted(texts, "")
    }

    /// [`Self::encode`] with `prefix` (a prompt) put before each text, which is cut first, so
    /// the prompt is never cut off. A text is marked truncated when the tokenizer dropped
    /// tokens past `max_length` or when it was cut to [`Self::max_bytes`] (it then had more
    /// bytes than the window can hold at [`BYTES_PER_TOKEN`]).
    pub fn encode_prompted(&self, texts: &[&str], prefix: &str) -> Result<Vec<Tokens>> {
        let max = self.max_bytes();
        let inputs: Vec<String> = texts
            .iter()
            .map(|t| format!("{prefix}{}", cut(t, max)))
            .collect();
        let encodings = self
            .inner
            .encode_batch(inputs, true)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(encodings
            .into_iter()
            .zip(texts)
            .map(|(e, t)| Tokens {
                truncated: !e.get_overflowing().is_empty() || t.len() > max,
                ids: e.get_ids().iter().map(|&id| id as i32).collect(),
            })
            .collect())
    }

    /// For each text, the byte offset in it where each of its tokens ends, special tokens left
    /// out (`[len] usize`, at most `max_length` tokens: longer texts are truncated). Used to cut
    /// a text at a token boundary.
    pub fn token_ends(&self, texts: &[&str]) -> Result<Vec<Vec<usize>>> {
        Ok(self
            .encode_cut(texts, false)?
            .into_iter()
            .map(|e| e.get_offsets().iter().map(|&(_, end)| end).collect())
            .collect())
    }

    /// HF tokenizers' batch encoding of `texts`, each [`cut`] to [`Self::max_bytes`] first.
    fn encode_cut(
        &self,
        texts: &[&str],
        add_special_tokens: bool,
    ) -> Result<Vec<tokenizers::Encoding>> {
        let max = self.max_bytes();
        self.inner
            .encode_batch(
                texts.iter().map(|t| cut(t, max)).collect::<Vec<_>>(),
                add_special_tokens,
            )
            .map_err(|e| Error::Tokenizer(e.to_string()))
    }

    /// Number of special tokens added to one text (`[CLS]` and `[SEP]`: 2 for BERT).
    pub fn count_special(&self) -> usize {
        self.inner
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(false))
    }

    /// The Hugging Face tokenizer (truncation at the window set, no padding), for the chunker.
    pub fn inner(&self) -> &Tokenizer {
        &self.inner
    }

    /// Token id used for padding (`[PAD]`, else 0). Padded positions are masked out anyway.
    pub fn pad_id(&self) -> i32 {
        self.pad_id
    }
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn cut_keeps_short_texts_and_cuts_on_a_character_boundary() {
        assert_eq!(cut("abc", 10), "abc");
        assert_eq!(cut("abcdef", 3), "abc");
        // "é" is 2 bytes: a cut inside it backs off to before it.
        assert_eq!(cut("aé", 2), "a");
        assert_eq!(cut("日本語", 7), "日本");
        assert_eq!(cut("", 0), "");
    }
}
