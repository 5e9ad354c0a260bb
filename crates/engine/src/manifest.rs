//! A model directory's `tributary.json`: what `ort/scripts/export_model.py` writes beside the
//! graphs and the tokenizer, read by `tributary_register_model()`, the session cache (for the
//! fp16 graph) and tools/bench. The one parser of that file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The file name of a model directory's manifest.
pub const FILE_NAME: &str = "tributary.json";

/// The graphs a model directory can hold, as keys of `files`: `fp32`, `fp16` (for GPUs) and
/// `int8` (dynamically quantized, for CPUs).
pub const PRECISIONS: [&str; 3] = ["fp16", "fp32", "int8"];

/// The tokenizer file when `files` has no `tokenizer` entry.
pub const DEFAULT_TOKENIZER: &str = "tokenizer.json";

/// The parts of `tributary.json` that tributary uses; other keys (`format`, `name`, `check`, ...)
/// are ignored.
///
/// Required: `dimension`, `max_length`, `pooling` and `files`, a map of strings from a graph's
/// precision (or `tokenizer`) to a file name relative to the directory. Optional: `sha256`, a map
/// from file name to its digest. A graph is found only under its precision's key (no default
/// file name), while the tokenizer entry may be left out and then means
/// [`DEFAULT_TOKENIZER`], as `tributary_register_model()` has always read it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Manifest {
    /// Embedding dimension: the graphs return `[rows, dimension]`.
    pub dimension: usize,
    /// Truncation length in tokens, special tokens included.
    pub max_length: usize,
    /// `mean` or `cls`; the pooling is inside the graph, this is for the catalog.
    pub pooling: String,
    /// Precision (`fp32`, `fp16`, `int8`) or `tokenizer` -> file name in the directory.
    pub files: HashMap<String, String>,
    /// File name -> SHA-256, hex.
    #[serde(default)]
    pub sha256: HashMap<String, String>,
}

/// Why a manifest could not be read: the file is missing or unreadable, or it is not a manifest.
/// The extension reports the first as SQLSTATE 58P01 and the second as 22P02.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("could not read \"{}\": {reason}", path.display())]
    Read { path: PathBuf, reason: String },
    #[error("could not parse \"{}\": {reason}", path.display())]
    Parse { path: PathBuf, reason: String },
}

impl Manifest {
    /// Reads `dir/tributary.json`.
    pub fn from_dir(dir: &Path) -> Result<Self, ManifestError> {
        Self::from_file(&dir.join(FILE_NAME))
    }

    /// Reads a manifest file. Errors: [`ManifestError::Read`] with the I/O error,
    /// [`ManifestError::Parse`] with serde_json's (line and column included).
    pub fn from_file(path: &Path) -> Result<Self, ManifestError> {
        let text = std::fs::read_to_string(path).map_err(|e| ManifestError::Read {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        serde_json::from_str(&text).map_err(|e| ManifestError::Parse {
            path: path.to_owned(),
            reason: e.to_string(),
        })
    }

    /// The graph file of `precision` (one of [`PRECISIONS`]), if the directory has one.
    pub fn graph(&self, precision: &str) -> Option<&str> {
        self.files
            .get(precision)
            .filter(|_| PRECISIONS.contains(&precision))
            .map(String::as_str)
    }

    /// The precisions that have a graph, sorted (`fp16`, `fp32`, `int8`).
    pub fn graphs(&self) -> Vec<&str> {
        PRECISIONS
            .into_iter()
            .filter(|p| self.files.contains_key(*p))
            .collect()
    }

    /// The tokenizer file: `files.tokenizer`, else [`DEFAULT_TOKENIZER`].
    pub fn tokenizer(&self) -> &str {
        self.files
            .get("tokenizer")
            .map_or(DEFAULT_TOKENIZER, String::as_str)
    }

    /// The SHA-256 the export recorded for `file`, if any.
    pub fn sha256(&self, file: &str) -> Option<&str> {
        self.sha256.get(file).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Manifest, serde_json::Error> {
        serde_json::from_str(text)
    }

    #[test]
    fn reads_what_export_model_writes() {
        let m = parse(
            r#"{"format": 3, "name": "m", "dimension": 384, "pooling": "mean", "max_length": 256,
                "files": {"fp32": "model.onnx", "tokenizer": "tok.json", "int8": "model_int8.onnx"},
                "sha256": {"model.onnx": "ab"}, "check": {"x": 0.5}}"#,
        )
        .unwrap();
        assert_eq!(
            (m.dimension, m.max_length, m.pooling.as_str()),
            (384, 256, "mean")
        );
        assert_eq!(m.graph("fp32"), Some("model.onnx"));
        assert_eq!(m.graph("fp16"), None);
        assert_eq!(m.graph("tokenizer"), None, "not a precision");
        assert_eq!(m.graphs(), ["fp32", "int8"]);
        assert_eq!(m.tokenizer(), "tok.json");
        assert_eq!(m.sha256("model.onnx"), Some("ab"));
        assert_eq!(m.sha256("tok.json"), None);
    }

    #[test]
    fn tokenizer_and_sha256_are_optional_the_rest_is_not() {
        let m = parse(
            r#"{"dimension": 8, "pooling": "cls", "max_length": 16, "files": {"fp16": "h.onnx"}}"#,
        )
        .unwrap();
        assert_eq!(m.tokenizer(), DEFAULT_TOKENIZER);
        assert!(m.sha256.is_empty());
        for bad in [
            r#"{"pooling": "cls", "max_length": 16, "files": {}}"#,
            r#"{"dimension": 8, "pooling": "cls", "max_length": 16}"#,
            r#"{"dimension": -8, "pooling": "cls", "max_length": 16, "files": {}}"#,
            r#"{"dimension": 8, "pooling": "cls", "max_length": 16, "files": {"fp32": 1}}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn read_and_parse_errors_are_told_apart() {
        let dir = std::env::temp_dir().join(format!("tributary-manifest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(matches!(
            Manifest::from_dir(&dir),
            Err(ManifestError::Read { .. })
        ));
        std::fs::write(dir.join(FILE_NAME), "{not json").unwrap();
        match Manifest::from_dir(&dir) {
            Err(ManifestError::Parse { path, reason }) => {
                assert_eq!(path, dir.join(FILE_NAME));
                assert!(reason.contains("line 1"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
