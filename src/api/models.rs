//! Model catalog functions and the runtime info function.

use std::path::{Path, PathBuf};

use pgrx::prelude::*;

use crate::engine::{ManifestError, ModelSpec};
use crate::pg::catalog;
use crate::pg::error::{OrRaise, Result, TributaryError};
use crate::pg::gucs;

/// `tributary_register_model(name, path [, precision, prompts]) → void`: registers (or
/// re-registers) the model in directory `path` (absolute, or relative to
/// `tributary.model_path`). Two layouts are read:
/// - tributary's exports (`ort/scripts/export_model.py`): `tributary.json` gives the dimension,
///   pooling (inside the graph), max length and files;
/// - standard exports (Hugging Face Optimum, sentence-transformers' ONNX backend): `modules.json`,
///   `1_Pooling/config.json` (mean, CLS or last-token pooling, done by tributary),
///   `sentence_bert_config.json` (max_seq_length), `config_sentence_transformers.json` (prompts,
///   default prompt), `tokenizer.json` and `onnx/model.onnx`; the graph's input names and types
///   (int64 or int32) are read when a session loads it.
///
/// `precision` picks the graph: `fp32`, `fp16` (for GPUs) or `int8` (dynamically quantized, for
/// CPUs: about 1.5x the fp32 rows/s at mean cosine 0.994 on AVX2, see BENCHMARKS.md).
/// `prompts`, a JSON object of prompt name to text (`{"query": "query: "}`), adds to or replaces
/// the directory's prompts. Superuser only, since it names files the server will load.
/// Re-registering with another model file removes the prepared graphs of the file it had
/// (tributary.graph_cache_path) unless another model of this database uses it; registering also
/// removes those whose model file is gone or changed. What cannot be removed is a WARNING.
///
/// Errors: 22004 NULL name, path or precision; 42501 not a superuser; 58P01 no
/// tributary.json/modules.json or model file; 22P02 an
/// unreadable description file; 0A000 a graph for `precision` the directory lacks, or a
/// description tributary cannot run (max pooling, a Dense module, ...); 22023 prompts not an
/// object of strings.
#[pg_extern(name = "tributary_register_model", volatile, parallel_unsafe)]
pub(crate) fn tributary_register_model_0_3(
    name: Option<&str>,
    path: Option<&str>,
    precision: default!(Option<&str>, "'fp32'"),
    prompts: default!(Option<pgrx::JsonB>, "NULL"),
) {
    let (Some(name), Some(path), Some(precision)) = (name, path, precision) else {
        crate::pg::error::raise(TributaryError::NullArgument("name, path and precision"));
    };
    let before = register(name, path, precision, prompts).or_raise();
    catalog::clear_sessions();
    crate::pg::graph_cache::tidy_graph_cache(before.as_deref());
}

/// Registers the model; returns the model file it had before (see `catalog::model_file`), if
/// it was registered already, whose prepared graphs may now be unused.
fn register(
    name: &str,
    path: &str,
    precision: &str,
    prompts: Option<pgrx::JsonB>,
) -> Result<Option<PathBuf>> {
    if !unsafe { pg_sys::superuser() } {
        return Err(TributaryError::Privilege(
            "permission denied to register a model".into(),
        ));
    }
    let before = catalog::model_files(Some(name))?.pop();
    let dir = if Path::new(path).is_absolute() {
        Path::new(path).to_owned()
    } else {
        gucs::model_path().join(path)
    };
    let mut spec = ModelSpec::from_dir(&dir, precision, None).map_err(metadata_error)?;
    if let Some(pgrx::JsonB(extra)) = prompts {
        let bad = || TributaryError::InvalidArgument {
            message: "prompts must be a JSON object of prompt name to text".into(),
            hint: Some(
                r#"For example: prompts => '{"query": "query: ", "passage": "passage: "}'"#.into(),
            ),
        };
        for (k, v) in extra.as_object().ok_or_else(bad)? {
            spec.prompts
                .insert(k.clone(), v.as_str().ok_or_else(bad)?.to_owned());
        }
    }
    for f in [&spec.graph, &spec.tokenizer] {
        if !dir.join(f).is_file() {
            return Err(crate::engine::Error::ModelFile {
                path: dir.join(f),
                reason: "no such file".into(),
            }
            .into());
        }
    }
    let mut columns = vec![
        "path",
        "onnx_file",
        "tokenizer_file",
        "dimension",
        "max_length",
        "pooling",
        "precision",
        "sha256",
    ];
    let mut values: Vec<pgrx::datum::DatumWithOid> = vec![
        name.into(),
        path.into(),
        spec.graph.as_str().into(),
        spec.tokenizer.as_str().into(),
        (spec.dimension as i32).into(),
        (spec.max_length as i32).into(),
        spec.pooling.as_str().into(),
        precision.into(),
        spec.sha256.as_deref().into(),
    ];
    if catalog_has_prompts()? {
        columns.extend(["layout", "normalize", "prompts", "default_prompt"]);
        values.extend([
            spec.layout.as_str().into(),
            spec.normalize.into(),
            pgrx::JsonB(serde_json::to_value(&spec.prompts).unwrap_or_default()).into(),
            spec.default_prompt.as_deref().into(),
        ]);
    } else if spec.layout != crate::engine::Layout::Tributary || !spec.prompts.is_empty() {
        // The extension is still at 0.2.0 or older (ALTER EXTENSION tributary UPDATE not run):
        // its catalog takes tributary's exports only.
        return Err(TributaryError::UnsupportedModel {
            path: dir.display().to_string(),
            reason: "standard exports and prompts need tributary 0.3.0: run ALTER EXTENSION tributary UPDATE".into(),
        });
    }
    let sql = format!(
        "INSERT INTO tributary.models AS m (name, {}) VALUES ($1, {}) \
         ON CONFLICT (name) DO UPDATE SET {}, registered_at = pg_catalog.now()",
        columns.join(", "),
        (2..=columns.len() + 1)
            .map(|k| format!("${k}"))
            .collect::<Vec<_>>()
            .join(", "),
        columns
            .iter()
            .map(|c| format!("{c} = EXCLUDED.{c}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    crate::pg::spi::pinned(|| Spi::run_with_args(&sql, &values))
        .map_err(|e| TributaryError::Internal(format!("registering model failed: {e}")))?;
    Ok(before)
}

/// Whether `tributary.models` has the columns of 0.3.0 (prompts, layout): false in a database
/// whose extension has not been updated yet.
fn catalog_has_prompts() -> Result<bool> {
    crate::pg::spi::select_one::<bool>(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute \
          WHERE attrelid OPERATOR(pg_catalog.=) 'tributary.models'::pg_catalog.regclass \
            AND attname OPERATOR(pg_catalog.=) 'prompts' AND NOT attisdropped)",
        &[],
    )
    .map(|b| b.unwrap_or(false))
    .map_err(|e| TributaryError::Internal(format!("reading tributary.models failed: {e}")))
}

/// A model directory's description that cannot be read (58P01), parsed (22P02) or run (0A000).
fn metadata_error(e: ManifestError) -> TributaryError {
    let (path, reason, missing) = match e {
        ManifestError::Read { path, reason } => (path, reason, true),
        ManifestError::Parse { path, reason } => (path, reason, false),
        ManifestError::NoGraph {
            path,
            precision,
            available,
        } => {
            return TributaryError::InvalidArgument {
                message: format!("model in \"{}\" has no {precision} graph", path.display()),
                hint: Some(available),
            }
        }
        ManifestError::Unsupported { path, reason } => {
            return TributaryError::UnsupportedModel {
                path: path.display().to_string(),
                reason,
            }
        }
    };
    TributaryError::ModelMetadata {
        path: path.display().to_string(),
        reason,
        missing,
    }
}

/// `tributary_drop_model(name) → void`: removes a model from the catalog, and its prepared
/// graphs (tributary.graph_cache_path) unless another model of this database uses the same
/// model file; what cannot be removed is a WARNING. Superuser only.
///
/// Errors: 42501 not a superuser; 42704 unknown model.
#[pg_extern(volatile, parallel_unsafe)]
fn tributary_drop_model(name: &str) {
    if !unsafe { pg_sys::superuser() } {
        crate::pg::error::raise(TributaryError::Privilege(
            "permission denied to drop a model".into(),
        ));
    }
    let deleted = crate::pg::spi::pinned(|| {
        Spi::get_two_with_args::<String, String>(
            "DELETE FROM tributary.models WHERE name OPERATOR(pg_catalog.=) $1::pg_catalog.text \
             RETURNING path, onnx_file",
            &[name.into()],
        )
    });
    let Ok((Some(path), Some(onnx_file))) = deleted else {
        crate::pg::error::raise(TributaryError::UnknownModel(name.into()));
    };
    catalog::clear_sessions();
    crate::pg::graph_cache::tidy_graph_cache(Some(&catalog::model_file(&path, &onnx_file)));
}

/// `tributary_info([model]) → table`: loads `model` (default `tributary.model`) in this backend
/// if it is not loaded yet, and shows what actually runs: the execution provider in use (and
/// why `auto` fell back to CPU), the model's dimension, max length (tokens) and pooling, the
/// ONNX Runtime version and library, the files, the layout (`tributary` or
/// `sentence-transformers`: pooled inside the graph or by tributary), whether embeddings are
/// normalised, and the prompts (name to text) with the default prompt.
///
/// Errors: as `tributary_embed`.
#[pg_extern(name = "tributary_info", stable, parallel_unsafe)]
#[allow(clippy::type_complexity)]
pub(crate) fn tributary_info_0_3(
    model: default!(Option<&str>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(model, String),
        name!(dimension, i32),
        name!(max_length, i32),
        name!(pooling, String),
        name!(precision, String),
        name!(execution_provider, String),
        name!(provider_note, String),
        name!(intra_op_threads, i32),
        name!(ort_version, String),
        name!(ort_library, String),
        name!(model_file, String),
        name!(layout, String),
        name!(normalize, bool),
        name!(prompts, pgrx::JsonB),
        name!(default_prompt, Option<String>),
    ),
> {
    let row = catalog::model(model).or_raise();
    let (provider, note, threads, model_file) = catalog::with_embedder(&row, |e| {
        (
            e.provider().as_str().to_string(),
            [e.provider_note(), e.graph_note()]
                .into_iter()
                .filter(|n| !n.is_empty())
                .collect::<Vec<_>>()
                .join("; "),
            e.config().intra_op_threads as i32,
            e.loaded_file().display().to_string(),
        )
    })
    .or_raise();
    let rt = crate::engine::model::runtime(&gucs::ort_library()).or_raise();
    TableIterator::once((
        row.name.clone(),
        row.dimension as i32,
        row.max_length as i32,
        row.pooling.clone(),
        row.precision.clone(),
        provider,
        note,
        threads,
        rt.version.clone(),
        rt.library.display().to_string(),
        model_file,
        row.layout.clone(),
        row.normalize,
        pgrx::JsonB(serde_json::to_value(&row.prompts).unwrap_or_default()),
        row.default_prompt.clone(),
    ))
}

/// `tributary_sessions() → table`: the model sessions this backend holds (at most 3, least
/// recently used first) and what each has done: the execution provider actually in use and why
/// (auto's fallback, or GPU admission sending it to the CPU), the GPU slot held
/// (`tributary.max_gpu_sessions`), the graph file loaded (the fp16 graph on a GPU), the output
/// type (`float32` or `float16`), whether runs go through an IoBinding (and if not, why), and
/// counters since the session was created: ORT runs (batches), rows, tokens and padded tokens,
/// milliseconds inside ORT runs, and milliseconds spent waiting for tokenization (the part not
/// overlapped with ORT runs). The `tributary.sessions` view shows the same.
#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::type_complexity)]
fn tributary_sessions() -> TableIterator<
    'static,
    (
        name!(model, String),
        name!(execution_provider, String),
        name!(provider_note, String),
        name!(gpu_slot, Option<i32>),
        name!(model_file, String),
        name!(output_type, String),
        name!(io_binding, bool),
        name!(io_binding_note, String),
        name!(runs, i64),
        name!(rows, i64),
        name!(tokens, i64),
        name!(padded_tokens, i64),
        name!(run_ms, f64),
        name!(tokenize_wait_ms, f64),
        name!(shapes, i64),
        name!(read_ms, f64),
        name!(write_ms, f64),
        name!(warm_up_ms, f64),
    ),
> {
    let mut rows = Vec::new();
    let slot = crate::pg::gpu::held_slot().map(|s| s as i32);
    catalog::for_each_session(|name, e| {
        let st = e.stats();
        let why = [e.provider_note(), e.graph_note()]
            .into_iter()
            .filter(|n| !n.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        rows.push((
            name.to_owned(),
            e.provider().as_str().to_owned(),
            why,
            slot.filter(|_| e.provider().is_gpu()),
            e.loaded_file().display().to_string(),
            if e.f16_output() { "float16" } else { "float32" }.to_owned(),
            e.io_binding(),
            e.io_binding_note().to_owned(),
            st.runs as i64,
            st.rows as i64,
            st.tokens as i64,
            st.padded_tokens as i64,
            st.run_time.as_secs_f64() * 1e3,
            st.tokenize_wait.as_secs_f64() * 1e3,
            st.shapes as i64,
            st.read_time.as_secs_f64() * 1e3,
            st.write_time.as_secs_f64() * 1e3,
            st.warm_up_time.as_secs_f64() * 1e3,
        ));
    });
    TableIterator::new(rows)
}

extension_sql!(
    r#"
-- This backend's sessions and counters.
CREATE VIEW tributary.sessions AS SELECT * FROM tributary_sessions();
GRANT SELECT ON tributary.sessions TO PUBLIC;

-- Backends holding a GPU slot (tributary.max_gpu_sessions), cluster-wide: session-level locks in
-- PostgreSQL's lock table, class 'trib' (1953655138), database 0.
CREATE VIEW tributary.gpu_sessions AS
SELECT l.objid::integer AS slot, l.pid, a.datname, a.usename, a.application_name, a.backend_start, a.state
FROM pg_catalog.pg_locks l
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.database = 0 AND l.classid = 1953655138 AND l.objsubid = 2 AND l.granted;
GRANT SELECT ON tributary.gpu_sessions TO PUBLIC;
"#,
    name = "views",
    requires = [tributary_sessions]
);
