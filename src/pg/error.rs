//! The one place errors become PostgreSQL errors: every failure has a SQLSTATE, a short
//! lowercase message, and DETAIL / HINT where there is something to say.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

use crate::engine;

/// `name` as error messages show a name the caller gave: at most 64 characters, then "...".
pub fn short_name(name: &str) -> String {
    match name.char_indices().nth(64) {
        Some((at, _)) => format!("{}...", &name[..at]),
        None => name.to_owned(),
    }
}

/// Errors of the PostgreSQL side: the engine's, plus catalog and argument errors.
#[derive(Debug, thiserror::Error)]
pub enum TributaryError {
    #[error(transparent)]
    Engine(#[from] engine::Error),

    /// 42704 (a name over 64 characters cut: a 1 MB name is not echoed back whole)
    #[error("model \"{}\" does not exist", short_name(.0))]
    UnknownModel(String),

    /// 42704: a prompt name the model has no prompt for.
    #[error("model \"{model}\" has no prompt \"{prompt}\"")]
    UnknownPrompt {
        model: String,
        prompt: String,
        known: Vec<String>,
    },

    /// 22001 (string data right truncation): a text longer than the model's window while
    /// `tributary.truncation = error`.
    #[error("{count} text(s) longer than model \"{model}\"'s window of {max_length} tokens")]
    Truncated {
        model: String,
        max_length: usize,
        count: usize,
        detail: String,
    },

    /// 22023: a column filled by one model (and prompt) asked to take another's vectors.
    #[error("column {column} holds embeddings of model \"{bound}\", not of \"{asked}\"")]
    ColumnModel {
        column: String,
        bound: String,
        asked: String,
    },

    /// 0A000: a well-formed model directory describing something tributary does not run.
    #[error("model in \"{path}\" is not supported: {reason}")]
    UnsupportedModel { path: String, reason: String },

    /// 22000, worded as pgvector words its dimension errors.
    #[error("expected {expected} dimensions, not {actual}")]
    Dimension {
        expected: usize,
        actual: usize,
        detail: String,
    },

    /// 22023
    #[error("{message}")]
    InvalidArgument {
        message: String,
        hint: Option<String>,
    },

    /// 22004
    #[error("{0} must not be NULL")]
    NullArgument(&'static str),

    /// 42703
    #[error("column \"{column}\" of relation \"{relation}\" does not exist")]
    UndefinedColumn { relation: String, column: String },

    /// 42804
    #[error("column \"{column}\" is of type {actual}, not vector or halfvec")]
    WrongColumnType { column: String, actual: String },

    /// 42704: pgvector's `vector` or `halfvec` type cannot be found.
    #[error("type {0} does not exist: is the vector extension installed?")]
    VectorType(String),

    /// 42501
    #[error("{0}")]
    Privilege(String),

    /// 42P01: a `regclass` argument whose relation does not exist (a dropped table's OID).
    #[error("{0}")]
    UndefinedTable(String),

    /// 42501: the caller lacks a privilege on a user's object (no hint about superusers, unlike
    /// [`TributaryError::Privilege`]).
    #[error("{0}")]
    Permission(String),

    /// 42809
    #[error("\"{0}\" is not a table")]
    NotATable(String),

    /// 54000: more texts in one call than `tributary.max_texts_per_call`.
    #[error("too many texts in one call: {count}")]
    TooManyTexts { count: usize, limit: usize },

    /// 2202E: a multidimensional array where a list of texts is expected.
    #[error("{0}")]
    ArrayShape(String),

    /// 53400: every GPU slot (`tributary.max_gpu_sessions`) is taken and `tributary.gpu_overflow = error`.
    #[error("all {cap} GPU slots are taken")]
    GpuSlots { cap: usize },

    /// 53400: every CPU run slot (`tributary.max_cpu_runs`) is taken and `tributary.cpu_overflow = error`.
    #[error("all {cap} CPU run slots are taken")]
    CpuSlots { cap: usize },

    /// 55P03: `lock_timeout` passed while a call waited for a CPU run slot.
    #[error("canceling statement due to lock timeout")]
    SlotTimeout {
        waited_ms: u64,
        priority: &'static str,
    },

    /// 55000: a view of shared memory was read but tributary is not in `shared_preload_libraries`.
    #[error("{0} needs tributary in shared_preload_libraries")]
    NotPreloaded(&'static str),

    /// 42704: no predictor of that name (tributary.predictors).
    #[error("predictor \"{0}\" does not exist")]
    UnknownPredictor(String),

    /// 54000: training or prediction would hold more than `tributary.learn_memory`.
    #[error("the rows and features need more memory than tributary.learn_memory allows")]
    LearnMemory { needed: usize, limit: usize },

    /// 57014: a cancel seen by the learner that PostgreSQL held off.
    #[error("canceling statement due to user request")]
    Canceled,

    /// 55000: a predictor used on a table whose columns changed since it was trained.
    #[error("{message}")]
    Changed { message: String, detail: String },

    /// XX000: an SPI call failed in a way that is tributary's bug, not the caller's (SQL errors
    /// inside SPI keep their own SQLSTATE).
    #[error("{0}")]
    Internal(String),

    /// 58P01 / 22P02 when a model's metadata file is missing or unreadable.
    #[error("could not read model metadata \"{path}\"")]
    ModelMetadata {
        path: String,
        reason: String,
        missing: bool,
    },
}

pub type Result<T, E = TributaryError> = std::result::Result<T, E>;

impl From<TributaryError> for ErrorReport {
    fn from(e: TributaryError) -> Self {
        use engine::Error as E;
        use TributaryError as T;
        let message = e.to_string();
        let report = |code, detail: Option<String>, hint: Option<&str>| {
            let mut r = ErrorReport::new(code, message.clone(), "tributary");
            if let Some(d) = detail {
                r = r.set_detail(d);
            }
            if let Some(h) = hint {
                r = r.set_hint(h.to_string());
            }
            r
        };
        match &e {
            T::Engine(E::OrtLibrary { reason, .. }) => report(
                PgSqlErrorCode::ERRCODE_UNDEFINED_FILE,
                Some(reason.clone()),
                Some("Set tributary.ort_library to the path of libonnxruntime.so (ONNX Runtime 1.31), or run scripts/setup.sh."),
            ),
            T::Engine(E::OrtLibraryChanged { requested, .. }) => report(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                Some(format!("tributary.ort_library now names \"{}\"; a process can load only one ONNX Runtime", requested.display())),
                Some("Reconnect to start a new backend with the new library."),
            ),
            T::Engine(E::ModelFile { reason, .. }) => report(
                PgSqlErrorCode::ERRCODE_UNDEFINED_FILE,
                Some(reason.clone()),
                Some("Relative model paths are resolved against tributary.model_path; prepare the model with ort/scripts/export_model.py, or run scripts/setup.sh for the default model."),
            ),
            T::Engine(E::Tokenizer(_)) => report(PgSqlErrorCode::ERRCODE_EXTERNAL_ROUTINE_EXCEPTION, None, None),
            T::Engine(E::Provider { reason, .. }) => report(
                PgSqlErrorCode::ERRCODE_EXTERNAL_ROUTINE_EXCEPTION,
                Some(reason.clone()),
                Some("Set tributary.execution_provider to auto or cpu, or install the onnxruntime-gpu library."),
            ),
            T::Engine(E::Ort(_)) => report(PgSqlErrorCode::ERRCODE_EXTERNAL_ROUTINE_EXCEPTION, None, None),
            T::Engine(E::InvalidChunking(_)) => report(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, None, None),
            T::Engine(E::TextTooLong { .. }) => report(
                PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                None,
                Some("Split the text first (for example by paragraphs in SQL), then chunk each part."),
            ),
            T::Engine(E::ModelMismatch(_)) => report(
                PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
                None,
                Some("Check the model's entry in tributary.models against its tributary.json."),
            ),
            T::UnknownModel(_) => report(
                PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
                None,
                Some("Registered models are listed in tributary.models; see tributary_register_model()."),
            ),
            T::UnknownPrompt { known, .. } => report(
                PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
                None,
                Some(&if known.is_empty() {
                    "The model has no prompts; leave prompt NULL, or register it with prompts => '{\"query\": \"query: \"}'.".to_string()
                } else {
                    format!("Its prompts: {} (tributary_info() shows them).", known.join(", "))
                }),
            ),
            T::Truncated { detail, .. } => report(
                PgSqlErrorCode::ERRCODE_STRING_DATA_RIGHT_TRUNCATION,
                Some(detail.clone()),
                Some("Split long texts with tributary_chunk(), or SET tributary.truncation = 'warning' (or 'truncate') to embed their first window."),
            ),
            T::ColumnModel { bound, .. } => report(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                Some("Vectors of different models (or prompts) in one column cannot be compared; tributary.column_models records which model filled each column.".into()),
                Some(&format!("Use model => '{bound}' (tributary_embed_for() picks it for queries), or empty the column and call tributary_forget_column() first.")),
            ),
            T::UnsupportedModel { .. } => report(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                None,
                Some("tributary runs a Transformer, then mean, CLS or last-token pooling, then optional normalisation; export other models with ort/scripts/export_model.py."),
            ),
            T::Dimension { detail, .. } => report(PgSqlErrorCode::ERRCODE_DATA_EXCEPTION, Some(detail.clone()), None),
            T::InvalidArgument { hint, .. } => {
                report(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, None, hint.as_deref())
            }
            T::NullArgument(_) => report(PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED, None, None),
            T::UndefinedColumn { .. } => report(PgSqlErrorCode::ERRCODE_UNDEFINED_COLUMN, None, None),
            T::WrongColumnType { .. } => report(
                PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
                None,
                Some("The target column must be of pgvector's type vector(n) or halfvec(n)."),
            ),
            T::VectorType(_) => report(PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT, None, Some("Install pgvector: CREATE EXTENSION vector.")),
            T::Privilege(_) => report(
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                None,
                Some("Only superusers can register models or name files for tributary to load."),
            ),
            T::GpuSlots { cap } => report(
                PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
                Some(format!("tributary.max_gpu_sessions = {cap}; the holders are listed in tributary.gpu_sessions")),
                Some("Set tributary.gpu_overflow to cpu or wait, raise tributary.max_gpu_sessions, or retry later."),
            ),
            T::CpuSlots { cap } => report(
                PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
                Some(format!("tributary.max_cpu_runs = {cap}: that many model runs on the CPU at once, cluster-wide; the holders are listed in tributary.cpu_runs")),
                Some("Retry later, or ask an administrator to set tributary.cpu_overflow to wait or raise tributary.max_cpu_runs."),
            ),
            T::SlotTimeout { waited_ms, priority } => report(
                PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
                Some(format!("The call waited {waited_ms} ms for a CPU run slot (tributary.max_cpu_runs) at priority {priority}.")),
                Some("Waiters and holders are listed in tributary.cpu_runs; raise lock_timeout, or retry later."),
            ),
            T::NotPreloaded(_) => report(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                Some("Backends report what they do in shared memory, which exists only when tributary is loaded at server start.".into()),
                Some("Add tributary to shared_preload_libraries and restart the server."),
            ),
            T::Engine(E::OutOfMemory { bytes }) => report(
                PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY,
                Some(format!("Failed on a request of size {bytes} bytes.")),
                Some("Embed fewer texts per call, or lower tributary.max_texts_per_call."),
            ),
            T::TooManyTexts { limit, .. } => report(
                PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                Some(format!("tributary.max_texts_per_call is {limit}.")),
                Some("Embed in chunks of fewer texts, or embed a whole table with tributary_embed_column() or a job."),
            ),
            T::NotATable(_) => report(
                PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
                None,
                Some("tributary_embed_column writes ordinary and partitioned tables; for a view, embed its base table (materialized views and foreign tables cannot be written)."),
            ),
            T::Permission(_) => report(PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE, None, None),
            T::UndefinedTable(_) => report(PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE, None, None),
            T::ArrayShape(_) => report(PgSqlErrorCode::ERRCODE_ARRAY_ELEMENT_ERROR, None, Some("Pass a one-dimensional text[].")),
            T::Internal(_) => report(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, None, None),
            T::LearnMemory { needed, limit } => report(
                PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                Some(format!("About {} MB needed; tributary.learn_memory is {} MB.", needed >> 20, limit >> 20)),
                Some("Raise tributary.learn_memory, or train on fewer rows (a table or view of them)."),
            ),
            T::Canceled => report(PgSqlErrorCode::ERRCODE_QUERY_CANCELED, None, None),
            T::UnknownPredictor(_) => report(
                PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
                None,
                Some("Predictors are listed in tributary.predictors; train one with tributary_train()."),
            ),
            T::Changed { detail, .. } => report(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                Some(detail.clone()),
                Some("Train the predictor again with tributary_train() (the same name replaces it)."),
            ),
            T::ModelMetadata { reason, missing, .. } => report(
                if *missing { PgSqlErrorCode::ERRCODE_UNDEFINED_FILE } else { PgSqlErrorCode::ERRCODE_INVALID_TEXT_REPRESENTATION },
                Some(reason.clone()),
                Some("A model directory holds tributary.json (written by ort/scripts/export_model.py) or a sentence-transformers export (modules.json, 1_Pooling/config.json, tokenizer.json, onnx/model.onnx)."),
            ),
        }
    }
}

/// An SPI failure that is tributary's bug, not the caller's (XX000). SQL errors raised inside
/// SPI keep their own SQLSTATE and never come here.
pub(crate) fn spi_error(e: pgrx::spi::Error) -> TributaryError {
    TributaryError::Internal(format!("SPI error: {e}"))
}

/// Raises `e` as a PostgreSQL ERROR; does not return.
pub fn raise(e: TributaryError) -> ! {
    ErrorReport::from(e).report(PgLogLevel::ERROR);
    unreachable!("ereport(ERROR) returned")
}

/// `result?` for `#[pg_extern]` bodies: unwraps or raises the error with its SQLSTATE.
pub trait OrRaise<T> {
    fn or_raise(self) -> T;
}

impl<T, E: Into<TributaryError>> OrRaise<T> for std::result::Result<T, E> {
    fn or_raise(self) -> T {
        match self {
            Ok(v) => v,
            Err(e) => raise(e.into()),
        }
    }
}
