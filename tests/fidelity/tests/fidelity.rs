//! Fidelity: embeddings from SQL (tributary, ONNX Runtime) against the same checkpoint run by an
//! independent implementation on CPU in f32: HF candle's BERT (`candle_transformers::models::bert`)
//! for BERT checkpoints, and for MPNet checkpoints the candle MPNet of `mpnet/mod.rs` (candle-
//! transformers has none). Every text must reach cosine >= 0.9999.
//!
//! Needs two environment variables (scripts/test.sh sets them), and takes a third:
//! - TRIBUTARY_CHECKPOINT: the Hugging Face checkpoint directory (config.json, model.safetensors,
//!   tokenizer.json, sentence_bert_config.json, 1_Pooling/config.json); `model_type` in its
//!   config.json picks the reference;
//! - TRIBUTARY_FIDELITY_DSN: a libpq connection string to a database with tributary installed;
//! - TRIBUTARY_FIDELITY_MODEL: the registered models to check, comma-separated (default:
//!   `tributary.model`); the reference runs once for all of them.

mod mpnet;

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

enum Encoder {
    Bert(BertModel),
    MpNet(mpnet::MpNet),
}

struct Reference {
    model: Encoder,
    tokenizer: Tokenizer,
    mean_pooling: bool,
}

impl Reference {
    fn load(dir: &Path) -> Result<Self> {
        let config_text = std::fs::read_to_string(dir.join("config.json"))?;
        let arch: serde_json::Value = serde_json::from_str(&config_text)?;
        let vb = unsafe {
            VarBuilder::from_mmaped_safetensors(
                &[dir.join("model.safetensors")],
                DType::F32,
                &Device::Cpu,
            )?
        };
        let model = match arch["model_type"].as_str() {
            Some("mpnet") => Encoder::MpNet(mpnet::MpNet::load(
                vb,
                &serde_json::from_str(&config_text)?,
            )?),
            _ => {
                let config: Config = serde_json::from_str(&config_text)?;
                Encoder::Bert(BertModel::load(vb, &config)?)
            }
        };
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
        let hidden = match &self.model {
            Encoder::Bert(model) => {
                let input = Tensor::new(ids.as_slice(), &Device::Cpu)?.unsqueeze(0)?;
                let types = input.zeros_like()?;
                let mask = Tensor::ones((1, n), DType::U32, &Device::Cpu)?;
                model.forward(&input, &types, Some(&mask))? // [1, n, dim]
            }
            Encoder::MpNet(model) => model.forward(&ids)?.unsqueeze(0)?,
        };
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
    // Comma-separated: every model is checked against one run of the reference.
    let models: Vec<Option<String>> = match std::env::var("TRIBUTARY_FIDELITY_MODEL") {
        Ok(list) => list.split(',').map(|m| Some(m.trim().to_owned())).collect(),
        Err(_) => vec![None],
    };
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

    let expected: Vec<Vec<f32>> = texts
        .iter()
        .map(|t| reference.embed(t))
        .collect::<Result<_>>()?;
    let mut client = postgres::Client::connect(&dsn, postgres::NoTls)?;
    let mut failures = Vec::new();
    for model in &models {
        if let Err(e) = check_model(&mut client, model.as_deref(), &texts, &expected, truncated) {
            failures.push(format!(
                "{}: {e}",
                model.as_deref().unwrap_or("tributary.model")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

/// `model`'s SQL embeddings of `texts` against the reference's `expected`: one batched call for
/// all texts (length sorting, token-budget batches and padding), and the scalar function on a
/// few. Prints min and mean cosine and the worst texts; fails below [`MIN_COSINE`].
fn check_model(
    client: &mut postgres::Client,
    model: Option<&str>,
    texts: &[String],
    expected: &[Vec<f32>],
    truncated: usize,
) -> Result<()> {
    let rows = client.query(
        "SELECT e::real[] FROM unnest(tributary_embed($1::text[], $2::text)) WITH ORDINALITY AS u(e, i) ORDER BY i",
        &[&texts, &model],
    )?;
    assert_eq!(rows.len(), texts.len());
    let sql: Vec<Vec<f32>> = rows.iter().map(|r| r.get::<_, Vec<f32>>(0)).collect();

    let mut scored = Vec::with_capacity(texts.len());
    for (i, e) in expected.iter().enumerate() {
        assert_eq!(sql[i].len(), e.len(), "dimension");
        scored.push((cosine(&sql[i], e), i));
    }
    for &i in &[0usize, 60, 100, texts.len() - 1] {
        let row = client.query_one(
            "SELECT tributary_embed($1::text, $2::text)::real[]",
            &[&texts[i], &model],
        )?;
        let one: Vec<f32> = row.get(0);
        scored.push((cosine(&one, &expected[i]), i));
    }
    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mean = scored.iter().map(|s| s.0 as f64).sum::<f64>() / scored.len() as f64;
    println!(
        "fidelity of {}: {} comparisons over {} texts ({truncated} truncated), dim {}: min cosine {:.7}, mean {:.7}",
        model.unwrap_or("tributary.model"),
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
    anyhow::ensure!(
        bad.is_empty(),
        "{} texts below cosine {MIN_COSINE}, worst {:.6}",
        bad.len(),
        scored[0].0
    );
    Ok(())
}
