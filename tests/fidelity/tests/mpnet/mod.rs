//! HF MPNet (`MPNetModel`, the encoder of sentence-transformers' all-mpnet-base-v2) in candle, on
//! CPU in f32, one text at a time (no padding): the fidelity test's independent reference for
//! MPNet checkpoints, since candle-transformers has no MPNet. Written from the model's
//! definition (Song et al. 2020, "MPNet: Masked and Permuted Pre-training for Language
//! Understanding", and Hugging Face's `modeling_mpnet`), not from tributary's exporter:
//!
//! - embeddings: word + position, positions counted from `pad_token_id + 1` over the tokens
//!   that are not padding; LayerNorm; no token types;
//! - a relative position bias `[heads, n, n]`, computed once from `relative_attention_bias`
//!   (`[buckets, heads]`) with T5's bidirectional bucketing (max distance 128) and added to
//!   every layer's attention scores;
//! - post-LN layers: attention (q, k, v, o) + residual + LayerNorm, then GELU (erf) feed-forward
//!   + residual + LayerNorm.

use anyhow::Result;
use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{embedding, layer_norm, linear, Embedding, LayerNorm, Linear, VarBuilder};

/// The parts of an MPNet `config.json` the forward pass needs.
#[derive(serde::Deserialize)]
pub struct MpNetConfig {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    layer_norm_eps: f64,
    pad_token_id: u32,
    #[serde(default = "thirty_two")]
    relative_attention_num_buckets: usize,
}

fn thirty_two() -> usize {
    32
}

struct Layer {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
}

pub struct MpNet {
    words: Embedding,
    positions: Embedding,
    embedding_norm: LayerNorm,
    relative_bias: Embedding,
    layers: Vec<Layer>,
    heads: usize,
    pad: u32,
    buckets: usize,
}

/// T5's bidirectional relative position bucket of `relative` (key position minus query
/// position): keys after the query take the upper half of the buckets; in each half, the first
/// half of the buckets are exact distances and the rest logarithmic bins up to `max_distance`.
fn bucket(relative: i64, buckets: usize, max_distance: f64) -> u32 {
    let half = (buckets / 2) as i64;
    let mut b = if relative > 0 { half } else { 0 };
    let n = relative.abs();
    let exact = half / 2;
    b += if n < exact {
        n
    } else {
        let log = ((n as f64 / exact as f64).ln() / (max_distance / exact as f64).ln()
            * (half - exact) as f64) as i64;
        (exact + log).min(half - 1)
    };
    b as u32
}

impl MpNet {
    pub fn load(vb: VarBuilder, c: &MpNetConfig) -> Result<Self> {
        let e = vb.pp("embeddings");
        let layers = (0..c.num_hidden_layers)
            .map(|i| {
                let l = vb.pp(format!("encoder.layer.{i}"));
                let a = l.pp("attention");
                Ok(Layer {
                    q: linear(c.hidden_size, c.hidden_size, a.pp("attn.q"))?,
                    k: linear(c.hidden_size, c.hidden_size, a.pp("attn.k"))?,
                    v: linear(c.hidden_size, c.hidden_size, a.pp("attn.v"))?,
                    o: linear(c.hidden_size, c.hidden_size, a.pp("attn.o"))?,
                    attention_norm: layer_norm(c.hidden_size, c.layer_norm_eps, a.pp("LayerNorm"))?,
                    intermediate: linear(
                        c.hidden_size,
                        c.intermediate_size,
                        l.pp("intermediate.dense"),
                    )?,
                    output: linear(c.intermediate_size, c.hidden_size, l.pp("output.dense"))?,
                    output_norm: layer_norm(
                        c.hidden_size,
                        c.layer_norm_eps,
                        l.pp("output.LayerNorm"),
                    )?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(MpNet {
            words: embedding(c.vocab_size, c.hidden_size, e.pp("word_embeddings"))?,
            positions: embedding(
                c.max_position_embeddings,
                c.hidden_size,
                e.pp("position_embeddings"),
            )?,
            embedding_norm: layer_norm(c.hidden_size, c.layer_norm_eps, e.pp("LayerNorm"))?,
            relative_bias: embedding(
                c.relative_attention_num_buckets,
                c.num_attention_heads,
                vb.pp("encoder.relative_attention_bias"),
            )?,
            layers,
            heads: c.num_attention_heads,
            pad: c.pad_token_id,
            buckets: c.relative_attention_num_buckets,
        })
    }

    /// The token embeddings `[n, hidden]` of one text's `ids` (special tokens included).
    pub fn forward(&self, ids: &[u32]) -> Result<Tensor> {
        let dev = Device::Cpu;
        let n = ids.len();
        let mut count = 0;
        let position_ids: Vec<u32> = ids
            .iter()
            .map(|&id| {
                if id == self.pad {
                    self.pad
                } else {
                    count += 1;
                    count + self.pad
                }
            })
            .collect();
        let ids_t = Tensor::new(ids, &dev)?;
        let pos_t = Tensor::new(position_ids.as_slice(), &dev)?;
        let mut x = (self.words.forward(&ids_t)? + self.positions.forward(&pos_t)?)?;
        x = self.embedding_norm.forward(&x)?;

        let buckets: Vec<u32> = (0..n as i64)
            .flat_map(|q| (0..n as i64).map(move |k| (q, k)))
            .map(|(q, k)| bucket(k - q, self.buckets, 128.0))
            .collect();
        let buckets = Tensor::from_vec(buckets, (n * n,), &dev)?;
        // [n*n, heads] -> [heads, n, n]
        let bias = self
            .relative_bias
            .forward(&buckets)?
            .reshape((n, n, self.heads))?
            .permute((2, 0, 1))?
            .contiguous()?;

        let hidden = x.dim(D::Minus1)?;
        let head_dim = hidden / self.heads;
        let scale = (head_dim as f64).sqrt();
        let split = |t: Tensor| -> Result<Tensor> {
            Ok(t.reshape((n, self.heads, head_dim))?
                .transpose(0, 1)?
                .contiguous()?)
        };
        for l in &self.layers {
            let q = split(l.q.forward(&x)?)?;
            let k = split(l.k.forward(&x)?)?;
            let v = split(l.v.forward(&x)?)?;
            let scores = ((q.matmul(&k.t()?)? / scale)? + &bias)?;
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            let context = probs
                .matmul(&v)?
                .transpose(0, 1)?
                .contiguous()?
                .reshape((n, hidden))?;
            let attended = l.attention_norm.forward(&(l.o.forward(&context)? + &x)?)?;
            let h = l.intermediate.forward(&attended)?.gelu_erf()?;
            x = l
                .output_norm
                .forward(&(l.output.forward(&h)? + &attended)?)?;
        }
        Ok(x.to_dtype(DType::F32)?)
    }
}

#[cfg(test)]
mod tests {
    use super::bucket;

    #[test]
    fn buckets_follow_t5() {
        // Exact below 8 each side, keys after the query in the upper half.
        assert_eq!(bucket(0, 32, 128.0), 0);
        assert_eq!(bucket(-3, 32, 128.0), 3);
        assert_eq!(bucket(3, 32, 128.0), 19);
        // Logarithmic from 8 up to max_distance, capped at the last bucket of the half.
        assert_eq!(bucket(-8, 32, 128.0), 8);
        assert_eq!(bucket(-127, 32, 128.0), 15);
        assert_eq!(bucket(-1000, 32, 128.0), 15);
        assert_eq!(bucket(500, 32, 128.0), 31);
    }
}
