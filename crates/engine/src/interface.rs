//! What a graph takes and returns, read from the session instead of assumed, and the pooling
//! done in Rust for graphs that return token embeddings.
//!
//! Two kinds of graph run:
//! - tributary's own exports (`ort/scripts/export_model.py`, the default `native` layout):
//!   `input_ids`, `attention_mask` `[batch, seq] int32`, output `[batch, dim]` f32 or f16,
//!   pooled and L2-normalised inside the graph. These run through an IoBinding.
//! - standard exports (Hugging Face Optimum, sentence-transformers' ONNX backend): `input_ids`,
//!   `attention_mask` and usually `token_type_ids` as `[batch, seq] int64` (int32 accepted), and
//!   token embeddings `[batch, seq, hidden]` (`last_hidden_state` or `token_embeddings`). The
//!   sentence-transformers pooling (mean over the attention mask, CLS, last token) and
//!   normalisation are applied here, in Rust, as `sentence_transformers.models.Pooling` and
//!   `Normalize` define them.

use half::f16;
use ort::session::Session;
use ort::value::TensorElementType;

use super::error::{Error, Result};

/// How token embeddings become one vector per text (sentence-transformers'
/// `1_Pooling/config.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pooling {
    /// Mean of the token embeddings whose attention mask is 1 (`pooling_mode_mean_tokens`).
    Mean,
    /// The first token's embedding (`pooling_mode_cls_token`).
    Cls,
    /// The last token whose attention mask is 1 (`pooling_mode_lasttoken`; right padding).
    LastToken,
}

impl Pooling {
    /// `mean`, `cls` or `lasttoken`, as the catalog stores it.
    pub fn as_str(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::LastToken => "lasttoken",
        }
    }

    /// The inverse of [`Pooling::as_str`].
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "mean" => Some(Pooling::Mean),
            "cls" => Some(Pooling::Cls),
            "lasttoken" => Some(Pooling::LastToken),
            _ => None,
        }
    }
}

/// What a graph input carries; found by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputRole {
    /// `input_ids`: token ids.
    Ids,
    /// `attention_mask`: 1 for a token, 0 for padding.
    Mask,
    /// `token_type_ids`: all 0 (one segment).
    TypeIds,
}

/// Integer type of an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntType {
    I32,
    I64,
}

/// A graph's inputs and the output tributary reads, checked against what the model's catalog
/// entry says (pooled in the graph, or pooled here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Every input of the graph, in the graph's order.
    pub inputs: Vec<(String, InputRole, IntType)>,
    /// The output read.
    pub output: String,
    /// Whether that output is f16 (else f32).
    pub f16_output: bool,
    /// `None`: the output is `[batch, dim]`, pooled in the graph. `Some`: it is
    /// `[batch, seq, dim]` and is pooled (and maybe normalised) here.
    pub pooling: Option<Pooling>,
    /// L2-normalise after pooling here (`Normalize` module); unused when pooled in the graph.
    pub normalize: bool,
}

/// Output names of token embeddings in standard exports, in order of preference.
const TOKEN_OUTPUTS: [&str; 2] = ["token_embeddings", "last_hidden_state"];

impl Interface {
    /// Reads the interface of `session`. `pooling` is `None` for graphs that pool inside
    /// (tributary's exports), else the pooling to apply to the token embeddings.
    ///
    /// Errors: [`Error::ModelMismatch`] for an input that is not one of `input_ids`,
    /// `attention_mask`, `token_type_ids` (or not int32/int64), a graph without `input_ids` or
    /// `attention_mask`, or an output of the wrong rank or element type.
    pub fn read(session: &Session, pooling: Option<Pooling>, normalize: bool) -> Result<Self> {
        let mut inputs = Vec::new();
        for input in session.inputs() {
            let name = input.name();
            let role = match name {
                "input_ids" => InputRole::Ids,
                "attention_mask" => InputRole::Mask,
                "token_type_ids" => InputRole::TypeIds,
                other => {
                    return Err(Error::ModelMismatch(format!(
                        "input \"{other}\" is not one of input_ids, attention_mask, token_type_ids"
                    )))
                }
            };
            let ty = match input.dtype().tensor_type() {
                Some(TensorElementType::Int32) => IntType::I32,
                Some(TensorElementType::Int64) => IntType::I64,
                other => {
                    return Err(Error::ModelMismatch(format!(
                        "input \"{name}\" is {other:?}, expected int32 or int64"
                    )))
                }
            };
            inputs.push((name.to_owned(), role, ty));
        }
        for need in [InputRole::Ids, InputRole::Mask] {
            if !inputs.iter().any(|(_, r, _)| *r == need) {
                return Err(Error::ModelMismatch(format!(
                    "the graph has no {} input",
                    if need == InputRole::Ids {
                        "input_ids"
                    } else {
                        "attention_mask"
                    }
                )));
            }
        }
        let outputs = session.outputs();
        let output = match pooling {
            None => outputs.first(),
            Some(_) => TOKEN_OUTPUTS
                .iter()
                .find_map(|n| outputs.iter().find(|o| o.name() == *n))
                .or_else(|| outputs.first()),
        }
        .ok_or_else(|| Error::ModelMismatch("the model has no output".into()))?;
        let f16_output = match output.dtype().tensor_type() {
            Some(TensorElementType::Float32) => false,
            Some(TensorElementType::Float16) => true,
            other => {
                return Err(Error::ModelMismatch(format!(
                    "output \"{}\" is {other:?}, expected float32 or float16",
                    output.name()
                )))
            }
        };
        let rank = output.dtype().tensor_shape().map(|s| s.len());
        let want = if pooling.is_some() { 3 } else { 2 };
        if rank.is_some_and(|r| r != want) {
            return Err(Error::ModelMismatch(format!(
                "output \"{}\" has rank {}, expected {want} ({})",
                output.name(),
                rank.unwrap_or(0),
                if want == 2 {
                    "[batch, dimension]: pooled in the graph"
                } else {
                    "[batch, tokens, dimension]: token embeddings"
                }
            )));
        }
        Ok(Interface {
            inputs,
            output: output.name().to_owned(),
            f16_output,
            pooling,
            normalize,
        })
    }

    /// Whether this is tributary's own interface (two int32 inputs, pooled output), which runs
    /// through [`crate::binding::Bound`].
    pub fn is_native(&self) -> bool {
        self.pooling.is_none()
            && self.inputs.len() == 2
            && self.inputs.iter().all(|(_, _, t)| *t == IntType::I32)
    }

    /// Whether the graph has an input of `role`.
    pub fn has(&self, role: InputRole) -> bool {
        self.inputs.iter().any(|(_, r, _)| *r == role)
    }

    /// The names of the ids and mask inputs, in that order.
    pub fn ids_and_mask(&self) -> [&str; 2] {
        let find = |role| {
            self.inputs
                .iter()
                .find(|(_, r, _)| *r == role)
                .map_or("", |(n, _, _)| n.as_str())
        };
        [find(InputRole::Ids), find(InputRole::Mask)]
    }
}

/// Pools the `[rows, seq, dim]` (`shape`) token embeddings (`hidden`, row-major, f32 or f16 widened) into
/// `[rows, dim]` f32 written to `out`, using `mask` (`[rows, seq]`, 1 = token), then
/// L2-normalises each row if `normalize` (a zero row stays zero).
///
/// Mean: sum of masked token vectors divided by the mask count (clamped to at least 1e-9, as
/// sentence-transformers does). Cls: token 0. LastToken: the last position whose mask is 1.
pub fn pool<T: Copy + Into<f32>>(
    hidden: &[T],
    mask: &[i32],
    [rows, seq, dim]: [usize; 3],
    pooling: Pooling,
    normalize: bool,
    out: &mut [f32],
) {
    debug_assert!(hidden.len() == rows * seq * dim && mask.len() == rows * seq);
    debug_assert!(out.len() == rows * dim);
    for r in 0..rows {
        let o = &mut out[r * dim..(r + 1) * dim];
        let m = &mask[r * seq..(r + 1) * seq];
        let token = |t: usize| &hidden[(r * seq + t) * dim..(r * seq + t + 1) * dim];
        match pooling {
            Pooling::Mean => {
                o.fill(0.0);
                let mut count = 0.0f32;
                for (t, _) in m.iter().enumerate().filter(|(_, &v)| v != 0) {
                    for (acc, &x) in o.iter_mut().zip(token(t)) {
                        *acc += x.into();
                    }
                    count += 1.0;
                }
                let scale = 1.0 / count.max(1e-9);
                o.iter_mut().for_each(|x| *x *= scale);
            }
            Pooling::Cls => {
                for (acc, &x) in o.iter_mut().zip(token(0)) {
                    *acc = x.into();
                }
            }
            Pooling::LastToken => {
                let last = m.iter().rposition(|&v| v != 0).unwrap_or(0);
                for (acc, &x) in o.iter_mut().zip(token(last)) {
                    *acc = x.into();
                }
            }
        }
        if normalize {
            // torch.nn.functional.normalize: x / max(||x||, 1e-12).
            let norm = o.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
            o.iter_mut().for_each(|x| *x /= norm);
        }
    }
}

/// f16 widened for [`pool`].
#[derive(Clone, Copy)]
pub struct F16(pub f16);

impl From<F16> for f32 {
    fn from(v: F16) -> f32 {
        v.0.to_f32()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_cls_and_last_token_follow_the_mask() {
        // 2 rows, 3 positions, dim 2; row 1 has one padded position.
        let hidden = [
            1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, //
            10.0, 0.0, 20.0, 0.0, 99.0, 99.0,
        ];
        let mask = [1, 1, 1, 1, 1, 0];
        let mut out = [0.0f32; 4];
        pool(&hidden, &mask, [2, 3, 2], Pooling::Mean, false, &mut out);
        assert_eq!(out, [3.0, 4.0, 15.0, 0.0]);
        pool(&hidden, &mask, [2, 3, 2], Pooling::Cls, false, &mut out);
        assert_eq!(out, [1.0, 2.0, 10.0, 0.0]);
        pool(
            &hidden,
            &mask,
            [2, 3, 2],
            Pooling::LastToken,
            false,
            &mut out,
        );
        assert_eq!(out, [5.0, 6.0, 20.0, 0.0]);
        pool(&hidden, &mask, [2, 3, 2], Pooling::Mean, true, &mut out);
        assert_eq!(out, [0.6, 0.8, 1.0, 0.0]);
    }

    #[test]
    fn a_row_without_tokens_stays_zero() {
        let mut out = [7.0f32; 2];
        pool(
            &[1.0f32, 1.0],
            &[0],
            [1, 1, 2],
            Pooling::Mean,
            true,
            &mut out,
        );
        assert_eq!(out, [0.0, 0.0]);
    }

    #[test]
    fn pooling_names_round_trip() {
        for p in [Pooling::Mean, Pooling::Cls, Pooling::LastToken] {
            assert_eq!(Pooling::parse(p.as_str()), Some(p));
        }
        assert_eq!(Pooling::parse("max"), None);
    }
}
