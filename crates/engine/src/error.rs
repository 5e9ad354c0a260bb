//! The engine's error type. The extension's `pg::error` maps it once to a PostgreSQL
//! `ErrorReport` with a SQLSTATE, DETAIL and HINT; nothing in this crate knows about PostgreSQL.
//! (Reading a model directory's `tributary.json` has its own [`crate::ManifestError`].)

use std::path::PathBuf;

/// Everything that can go wrong while loading ONNX Runtime, a model, or running it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The ONNX Runtime shared library could not be loaded (missing file, wrong version, bad ELF).
    #[error("could not load the ONNX Runtime library \"{path}\"")]
    OrtLibrary { path: PathBuf, reason: String },

    /// ONNX Runtime was already loaded into this process from another path; a process can load
    /// only one.
    #[error("ONNX Runtime is already loaded from \"{loaded}\"")]
    OrtLibraryChanged { loaded: PathBuf, requested: PathBuf },

    /// A file the model needs (ONNX graph, tokenizer) is missing or unreadable.
    #[error("model file \"{path}\" is missing")]
    ModelFile { path: PathBuf, reason: String },

    /// The tokenizer file could not be parsed, or encoding failed.
    #[error("tokenizer error: {0}")]
    Tokenizer(String),

    /// An explicitly requested execution provider could not be registered.
    #[error("execution provider \"{provider}\" is not available")]
    Provider {
        provider: &'static str,
        reason: String,
    },

    /// ONNX Runtime failed while creating a session or running the model.
    #[error("ONNX Runtime error: {0}")]
    Ort(String),

    /// An allocation of `bytes` failed (or its size overflowed): an error, not an abort.
    #[error("out of memory: could not allocate {bytes} bytes")]
    OutOfMemory { bytes: usize },

    /// Chunking arguments that cannot work (chunk size 0, overlap not smaller than the chunk).
    #[error("{0}")]
    InvalidChunking(String),

    /// A text longer than one call takes (`limit` bytes).
    #[error("text of {bytes} bytes is longer than the {limit} bytes one call takes")]
    TextTooLong { bytes: usize, limit: usize },

    /// The model ran but its output is not what its catalog entry promises (e.g. dimension).
    #[error("model output does not match its description: {0}")]
    ModelMismatch(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl<T> From<ort::Error<T>> for Error {
    fn from(e: ort::Error<T>) -> Self {
        Error::Ort(e.to_string())
    }
}
