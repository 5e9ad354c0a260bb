//! `[rows, dimension]` embeddings as a model returns them (f32 or f16), in input order.

use std::borrow::Cow;

use half::f16;

use super::error::{Error, Result};

/// Embedding values as the model returns them: f32 from fp32 graphs, f16 from fp16 graphs
/// exported with an fp16 output.
#[derive(Debug, Clone)]
pub enum Values {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

/// `[rows, dimension]` embeddings in input order, row-major, plus what they cost.
#[derive(Debug, Clone)]
pub struct Embeddings {
    pub dimension: usize,
    pub values: Values,
    /// Real (non-padding) tokens fed to the model.
    pub tokens: usize,
    /// Tokens including padding (rows * padded width, summed over batches).
    pub padded_tokens: usize,
    pub batches: usize,
    /// Input positions of the texts longer than the window (`max_length` tokens, prompt and
    /// special tokens included), which were truncated to it; ascending.
    pub truncated: Vec<usize>,
}

impl Embeddings {
    /// `[rows, dimension]` zeros. Errors: [`Error::OutOfMemory`] when the allocation fails
    /// (or its size overflows), instead of aborting the process.
    pub(crate) fn zeroed(dimension: usize, rows: usize, f16_output: bool) -> Result<Self> {
        let n = rows
            .checked_mul(dimension)
            .ok_or(Error::OutOfMemory { bytes: usize::MAX })?;
        fn filled<T: Clone>(n: usize, zero: T) -> Result<Vec<T>> {
            let mut v = Vec::new();
            v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
                bytes: n.saturating_mul(std::mem::size_of::<T>()),
            })?;
            v.resize(n, zero);
            Ok(v)
        }
        let values = if f16_output {
            Values::F16(filled(n, f16::ZERO)?)
        } else {
            Values::F32(filled(n, 0.0f32)?)
        };
        Ok(Embeddings {
            dimension,
            values,
            tokens: 0,
            padded_tokens: 0,
            batches: 0,
            truncated: Vec::new(),
        })
    }

    pub fn rows(&self) -> usize {
        let len = match &self.values {
            Values::F32(v) => v.len(),
            Values::F16(v) => v.len(),
        };
        len.checked_div(self.dimension).unwrap_or(0)
    }

    /// Row `i` as `[dimension]` f32 (converted when the model returned f16).
    pub fn row_f32(&self, i: usize) -> Cow<'_, [f32]> {
        let r = i * self.dimension..(i + 1) * self.dimension;
        match &self.values {
            Values::F32(v) => Cow::Borrowed(&v[r]),
            Values::F16(v) => Cow::Owned(v[r].iter().map(|x| x.to_f32()).collect()),
        }
    }

    /// Row `i` as `[dimension]` f16 (converted, rounding to nearest, when the model returned f32).
    pub fn row_f16(&self, i: usize) -> Cow<'_, [f16]> {
        let r = i * self.dimension..(i + 1) * self.dimension;
        match &self.values {
            Values::F16(v) => Cow::Borrowed(&v[r]),
            Values::F32(v) => Cow::Owned(v[r].iter().map(|&x| f16::from_f32(x)).collect()),
        }
    }

    /// Whether the model returned f16 (so a halfvec needs no conversion).
    pub fn is_f16(&self) -> bool {
        matches!(self.values, Values::F16(_))
    }
}
