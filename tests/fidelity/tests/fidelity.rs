//! Fidelity: embeddings from SQL (tributary, ONNX Runtime) against the same checkpoint run by HF
//! candle's BERT (`candle_transformers::models::bert`), an independent implementation, on CPU in
//! f32. Every text must reach cosine >= 0.9999.
//!
//! Needs two environment variables (scripts/test.sh sets them):
//! - TRIBUTARY_CHECKPOINT: the Hugging Face checkpoint directory (config.json, model.safetensors,
//!   tokenizer.json, sentence_bert_config.json, 1_Pooling/config.json);
//! - TRIBUTARY_FIDELITY_DSN: a libpq connection string to a database with tributary installed.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{Tokenizer, TruncationParams};

const MIN_COSINE: f32 = 0.9999;

fn env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run this test through scripts/test.sh"))
}

struct Reference {
    model: BertModel,
    tokenizer: Tokenizer,
    mean_pooling: bool,
}

impl Reference {
    fn load(dir: &Path) -> Result<Self> {
        let config: Config =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json"))?)?;
        let vb = unsafe {
            VarBuilder::from_mmaped_safetensors(
                &[dir.join("model.safetensors")],
                DType::F32,
                &Device::Cpu,
            )?
        };
        let model = BertModel::load(vb, &config)?;
        let st: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
            dir.join("sentence_bert_config.json"),
        )?)?;
        let max_length = st["max_seq_length"].as_u64().context("max_seq_length")? as usize;
        let pooling: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("1_Pooling/config.json"))?)?;
        let mean_pooling = pooling["pooling_mode_mean_tokens"].as_bool() == Some(true);
        assert!(
            mean_pooling || pooling["pooling_mode_cls_token"].as_bool() == Some(true),
            "mean or CLS pooling"
        );
        let mut tokenizer =
            Tokenizer::from_file(dir.join("tokenizer.json")).map_err(anyhow::Error::msg)?;
        // tokenizer.json may carry its own truncation/padding settings: set them explicitly.
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length,
                ..Default::default()
            }))
            .map_err(anyhow::Error::msg)?;
        tokenizer.with_padding(None);
        Ok(Reference {
            model,
            tokenizer,
            mean_pooling,
        })
    }

    /// One text at a time (no padding at all): `[dim]` f32, L2-normalised.
    fn embed(&self, text: &str) -> Result<Vec<f32>> {
        let enc = self
            .tokenizer
            .encode(text, true)
            .map_err(anyhow::Error::msg)?;
        let ids: Vec<u32> = enc.get_ids().to_vec();
        let n = ids.len();
        let input = Tensor::new(ids.as_slice(), &Device::Cpu)?.unsqueeze(0)?;
        let types = input.zeros_like()?;
        let mask = Tensor::ones((1, n), DType::U32, &Device::Cpu)?;
        let hidden = self.model.forward(&input, &types, Some(&mask))?; // [1, n, dim]
        let pooled = if self.mean_pooling {
            hidden.mean(1)?
        } else {
            hidden.get_on_dim(1, 0)?
        }; // [1, dim]
        let v: Vec<f32> = pooled.squeeze(0)?.to_vec1()?;
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        Ok(v.into_iter().map(|x| x / norm).collect())
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb).max(1e-12)
}

#[test]
fn sql_matches_candle() -> Result<()> {
    let checkpoint = PathBuf::from(env("TRIBUTARY_CHECKPOINT"));
    let dsn = env("TRIBUTARY_FIDELITY_DSN");
    let texts: Vec<String> = serde_json::from_str(&std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("texts.json"),
    )?)?;
    assert!(texts.len() >= 200, "at least 200 texts");
    assert!(
        texts.iter().any(String::is_empty),
        "the empty string is covered"
    );
    assert!(
        texts.iter().any(|t| !t.is_ascii()),
        "non-ASCII text is covered"
    );

    let reference = Reference::load(&checkpoint)?;
    let truncated = texts
        .iter()
        .filter(|t| {
            reference
                .tokenizer
                .encode(t.as_str(), true)
                .map(|e| !e.get_overflowing().is_empty())
                .unwrap_or(false)
        })
        .count();
    assert!(
        truncated >= 5,
        "texts long enough to be truncated are covered ({truncated})"
    );

    let mut client = postgres::Client::connect(&dsn, postgres::NoTls)?;
    // One batched call for all texts (exercises length sorting, token-budget batches and padding).
    let rows = client.query(
        "SELECT e::real[] FROM unnest(tributary_embed($1::text[])) WITH ORDINALITY AS u(e, i) ORDER BY i",
        &[&texts],
    )?;
    assert_eq!(rows.len(), texts.len());
    let sql: Vec<Vec<f32>> = rows.iter().map(|r| r.get::<_, Vec<f32>>(0)).collect();

    let mut scored = Vec::with_capacity(texts.len());
    for (i, text) in texts.iter().enumerate() {
        let expected = reference.embed(text)?;
        assert_eq!(sql[i].len(), expected.len(), "dimension");
        scored.push((cosine(&sql[i], &expected), i));
    }
    // The scalar function too, on a few texts.
    for &i in &[0usize, 60, 100, texts.len() - 1] {
        let row = client.query_one("SELECT tributary_embed($1::text)::real[]", &[&texts[i]])?;
        let one: Vec<f32> = row.get(0);
        let c = cosine(&one, &reference.embed(&texts[i])?);
        scored.push((c, i));
    }

    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mean = scored.iter().map(|s| s.0 as f64).sum::<f64>() / scored.len() as f64;
    println!(
        "fidelity: {} comparisons over {} texts ({truncated} truncated), dim {}: min cosine {:.7}, mean {:.7}",
        scored.len(),
        texts.len(),
        sql[0].len(),
        scored[0].0,
        mean
    );
    for (c, i) in scored.iter().take(5) {
        println!(
            "  worst: {c:.7}  {:?}",
            texts[*i].chars().take(40).collect::<String>()
        );
    }
    let bad: Vec<_> = scored.iter().filter(|s| s.0 < MIN_COSINE).collect();
    assert!(
        bad.is_empty(),
        "{} texts below cosine {MIN_COSINE}, worst {:.6}",
        bad.len(),
        scored[0].0
    );
    Ok(())
}
