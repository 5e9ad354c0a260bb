//! A model directory's description. Two layouts:
//! - tributary's own: `tributary.json`, what `ort/scripts/export_model.py` writes beside the
//!   graphs and the tokenizer ([`Manifest`]; also read by the session cache for the fp16 graph
//!   and by tools/bench);
//! - a standard export (Hugging Face Optimum, sentence-transformers' ONNX backend): `modules.json`,
//!   `1_Pooling/config.json`, `sentence_bert_config.json`, `config_sentence_transformers.json`,
//!   `tokenizer.json` and the graph in `onnx/` ([`SentenceTransformers`]).
//!
//! [`ModelSpec::from_dir`] reads either into what `tributary_register_model()` stores.

use std::collections::{BTreeMap, HashMap};
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
    /// A well-formed description of something tributary does not run (max pooling, a graph
    /// for a precision the directory lacks, ...). The extension reports it as 0A000.
    #[error("model in \"{}\" is not supported: {reason}", path.display())]
    Unsupported { path: PathBuf, reason: String },
    /// The directory has no graph of the precision asked for; `available` says what it has
    /// (or the files looked for). The extension reports it as 22023.
    #[error("model in \"{}\" has no {precision} graph", path.display())]
    NoGraph {
        path: PathBuf,
        precision: String,
        available: String,
    },
}

impl Manifest {
    /// Reads `dir/tributary.json`.
    pub fn from_dir(dir: &Path) -> Result<Self, ManifestError> {
        Self::from_file(&dir.join(FILE_NAME))
    }

    /// Reads a manifest file. Errors: [`ManifestError::Read`] with the I/O error,
    /// [`ManifestError::Parse`] with serde_json's (line and column included).
    pub fn from_file(path: &Path) -> Result<Self, ManifestError> {
        read_json(path)
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

/// Which layout a model directory has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `tributary.json`, pooling inside the graph.
    Tributary,
    /// A standard sentence-transformers export, pooling done by tributary.
    SentenceTransformers,
}

impl Layout {
    /// `tributary` or `sentence-transformers`, as the catalog stores it.
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::Tributary => "tributary",
            Layout::SentenceTransformers => "sentence-transformers",
        }
    }
}

/// A model directory as `tributary_register_model()` stores it, whichever its layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    pub layout: Layout,
    /// Embedding dimension.
    pub dimension: usize,
    /// Window in tokens, special tokens (and prompt) included.
    pub max_length: usize,
    /// `mean`, `cls` or `lasttoken` ([`crate::Pooling`]).
    pub pooling: String,
    /// L2-normalised embeddings (inside the graph for [`Layout::Tributary`], always true there).
    pub normalize: bool,
    /// The graph file, relative to the directory.
    pub graph: String,
    /// The tokenizer file, relative to the directory.
    pub tokenizer: String,
    /// The graph's SHA-256 if the directory records it.
    pub sha256: Option<String>,
    /// Prompt name -> the text put before each input (`config_sentence_transformers.json`).
    pub prompts: BTreeMap<String, String>,
    /// The prompt used when none is named (`default_prompt_name`), if any.
    pub default_prompt: Option<String>,
}

/// Graph files of a standard export, per precision, in order of preference (the names Optimum
/// and sentence-transformers' `export_*` functions write).
const ST_GRAPHS: [(&str, &[&str]); 3] = [
    ("fp32", &["onnx/model.onnx", "model.onnx"]),
    ("fp16", &["onnx/model_fp16.onnx", "model_fp16.onnx"]),
    (
        "int8",
        &[
            "onnx/model_qint8_avx2.onnx",
            "onnx/model_quint8_avx2.onnx",
            "onnx/model_int8.onnx",
        ],
    ),
];

/// The sentence-transformers configuration files tributary reads.
#[derive(Debug, Default, Deserialize)]
struct StPooling {
    word_embedding_dimension: usize,
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
}

#[derive(Debug, Deserialize)]
struct StModule {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Debug, Default, Deserialize)]
struct StConfig {
    #[serde(default)]
    prompts: BTreeMap<String, String>,
    #[serde(default)]
    default_prompt_name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct StBertConfig {
    max_seq_length: Option<usize>,
}

/// A standard export's description, read from its sentence-transformers files.
pub struct SentenceTransformers;

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ManifestError> {
    let text = std::fs::read_to_string(path).map_err(|e| ManifestError::Read {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| ManifestError::Parse {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

impl SentenceTransformers {
    /// Whether `dir` looks like a standard export (has `modules.json`).
    pub fn is_one(dir: &Path) -> bool {
        dir.join("modules.json").is_file()
    }

    /// Reads a standard export in `dir` for `precision` (`fp32`, `fp16`, `int8`).
    ///
    /// - modules: `modules.json` must list a Transformer then a Pooling module (its `path`,
    ///   usually `1_Pooling`), and may list `Normalize`; any other module (Dense, ...) is
    ///   [`ManifestError::Unsupported`].
    /// - pooling: mean, CLS or last token from the Pooling config; max, mean-sqrt-len and
    ///   weighted-mean pooling, or several modes at once, are unsupported.
    /// - window: `sentence_bert_config.json`'s `max_seq_length`, else `max_length`.
    /// - prompts: `config_sentence_transformers.json` (optional file).
    pub fn read(
        dir: &Path,
        precision: &str,
        max_length: Option<usize>,
    ) -> Result<ModelSpec, ManifestError> {
        let unsupported = |reason: String| ManifestError::Unsupported {
            path: dir.to_owned(),
            reason,
        };
        let modules: Vec<StModule> = read_json(&dir.join("modules.json"))?;
        let mut pooling_dir = None;
        let mut normalize = false;
        for (k, m) in modules.iter().enumerate() {
            let kind = m.kind.rsplit('.').next().unwrap_or("");
            match (k, kind) {
                (0, "Transformer") => {}
                (_, "Pooling") if pooling_dir.is_none() => pooling_dir = Some(m.path.clone()),
                (_, "Normalize") => normalize = true,
                _ => {
                    return Err(unsupported(format!(
                        "module {k} is {}; tributary runs Transformer, Pooling and Normalize",
                        m.kind
                    )))
                }
            }
        }
        let pooling_dir = pooling_dir
            .ok_or_else(|| unsupported("modules.json lists no Pooling module".into()))?;
        let p: StPooling = read_json(&dir.join(&pooling_dir).join("config.json"))?;
        let modes = [
            (p.pooling_mode_mean_tokens, "mean"),
            (p.pooling_mode_cls_token, "cls"),
            (p.pooling_mode_lasttoken, "lasttoken"),
            (p.pooling_mode_max_tokens, "max"),
            (p.pooling_mode_mean_sqrt_len_tokens, "mean_sqrt_len"),
            (p.pooling_mode_weightedmean_tokens, "weightedmean"),
        ];
        let on: Vec<&str> = modes.iter().filter(|(b, _)| *b).map(|(_, n)| *n).collect();
        let pooling = match on.as_slice() {
            [one @ ("mean" | "cls" | "lasttoken")] => one.to_string(),
            _ => {
                return Err(unsupported(format!(
                    "pooling {} (tributary pools by mean, cls or lasttoken, one of them)",
                    if on.is_empty() {
                        "none".into()
                    } else {
                        on.join("+")
                    }
                )))
            }
        };
        let bert: StBertConfig = match read_json(&dir.join("sentence_bert_config.json")) {
            Err(ManifestError::Read { .. }) => StBertConfig::default(),
            other => other?,
        };
        let max_length = bert.max_seq_length.or(max_length).ok_or_else(|| {
            unsupported("no max_seq_length in sentence_bert_config.json and none given".into())
        })?;
        let config: StConfig = match read_json(&dir.join("config_sentence_transformers.json")) {
            Err(ManifestError::Read { .. }) => StConfig::default(),
            other => other?,
        };
        let candidates = ST_GRAPHS
            .iter()
            .find(|(p, _)| *p == precision)
            .map_or(&[][..], |(_, files)| *files);
        let graph = candidates
            .iter()
            .find(|f| dir.join(f).is_file())
            .ok_or_else(|| ManifestError::NoGraph {
                path: dir.to_owned(),
                precision: precision.to_owned(),
                available: format!(
                    "Its graphs are looked for as: {}.",
                    ST_GRAPHS
                        .iter()
                        .flat_map(|(_, f)| f.iter().copied())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })?;
        if let Some(name) = &config.default_prompt_name {
            if !config.prompts.contains_key(name) {
                return Err(unsupported(format!(
                    "default_prompt_name \"{name}\" is not one of its prompts"
                )));
            }
        }
        Ok(ModelSpec {
            layout: Layout::SentenceTransformers,
            dimension: p.word_embedding_dimension,
            max_length,
            pooling,
            normalize,
            graph: graph.to_string(),
            tokenizer: DEFAULT_TOKENIZER.into(),
            sha256: None,
            prompts: config.prompts,
            default_prompt: config.default_prompt_name,
        })
    }
}

impl ModelSpec {
    /// Reads `dir` in whichever layout it has: `tributary.json` first, else a standard export
    /// (`modules.json`), else the missing `tributary.json` is reported. `max_length` is used by
    /// standard exports that do not give one.
    pub fn from_dir(
        dir: &Path,
        precision: &str,
        max_length: Option<usize>,
    ) -> Result<Self, ManifestError> {
        if !dir.join(FILE_NAME).is_file() && SentenceTransformers::is_one(dir) {
            return SentenceTransformers::read(dir, precision, max_length);
        }
        let m = Manifest::from_dir(dir)?;
        let graph = m.graph(precision).ok_or_else(|| ManifestError::NoGraph {
            path: dir.to_owned(),
            precision: precision.to_owned(),
            available: format!("Its tributary.json lists: {}.", m.graphs().join(", ")),
        })?;
        Ok(ModelSpec {
            layout: Layout::Tributary,
            dimension: m.dimension,
            max_length: max_length.unwrap_or(m.max_length),
            pooling: m.pooling.clone(),
            normalize: true,
            graph: graph.to_owned(),
            tokenizer: m.tokenizer().to_owned(),
            sha256: m.sha256(graph).map(str::to_owned),
            prompts: BTreeMap::new(),
            default_prompt: None,
        })
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

    #[test]
    fn reads_a_sentence_transformers_export() {
        let dir = std::env::temp_dir().join(format!("tributary-st-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
        std::fs::create_dir_all(dir.join("onnx")).unwrap();
        let w = |f: &str, t: &str| std::fs::write(dir.join(f), t).unwrap();
        w(
            "modules.json",
            r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
                {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
                {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]"#,
        );
        w(
            "1_Pooling/config.json",
            r#"{"word_embedding_dimension": 768, "pooling_mode_cls_token": false,
                "pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": false}"#,
        );
        w("sentence_bert_config.json", r#"{"max_seq_length": 384}"#);
        w(
            "config_sentence_transformers.json",
            r#"{"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": null}"#,
        );
        assert!(matches!(
            ModelSpec::from_dir(&dir, "fp32", None),
            Err(ManifestError::NoGraph { .. })
        ));
        w("onnx/model.onnx", "");
        let m = ModelSpec::from_dir(&dir, "fp32", None).unwrap();
        assert_eq!(m.layout, Layout::SentenceTransformers);
        assert_eq!(
            (m.dimension, m.max_length, m.pooling.as_str()),
            (768, 384, "mean")
        );
        assert!(m.normalize);
        assert_eq!(m.graph, "onnx/model.onnx");
        assert_eq!(m.prompts["query"], "query: ");
        assert_eq!(m.default_prompt, None);
        w(
            "1_Pooling/config.json",
            r#"{"word_embedding_dimension": 768, "pooling_mode_max_tokens": true}"#,
        );
        match ModelSpec::from_dir(&dir, "fp32", None) {
            Err(ManifestError::Unsupported { reason, .. }) => {
                assert!(reason.contains("max"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
