//! tributary's inference engine: ONNX Runtime sessions, tokenization, batching, rows as text and
//! model directories. No pgrx in this crate, so all of it is usable and testable without
//! PostgreSQL (`cargo test -p tributary-engine`); the extension re-exports it as `crate::engine`.

pub mod batch;
pub mod binding;
pub mod chunk;
pub mod embeddings;
pub mod error;
pub mod interface;
pub mod manifest;
pub mod model;
pub mod prepared;
pub mod rowtext;
pub mod runtime;
pub mod signals;
pub mod tokenize;

pub use error::{Error, Result};
pub use interface::Pooling;
pub use manifest::{Layout, Manifest, ManifestError, ModelSpec};
pub use model::{
    Embedder, EmbedderConfig, Embeddings, Provider, ProviderChoice, RunThread, Runtime,
    ShapeBuckets, Stats, Step, Values,
};
