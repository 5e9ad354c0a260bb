//! The inference engine: ONNX Runtime sessions, tokenization, batching. No pgrx in here, so all
//! of it is usable and testable without PostgreSQL (`cargo test --lib engine`).

pub mod batch;
pub mod binding;
pub mod error;
pub mod model;
pub mod rowtext;
pub mod signals;
pub mod tokenize;

pub use error::{Error, Result};
pub use model::{Embedder, EmbedderConfig, Embeddings, Provider, ProviderChoice, Runtime, Stats, Values};
