//! tributary: transformer models inside PostgreSQL. Text, rows and columns to pgvector
//! embeddings through ONNX Runtime, in batches, in the backend that asks.
//!
//! Layout (README, Architecture): `crates/engine` (its own crate, no pgrx: ORT sessions,
//! tokenization, batching), `pg/` (PostgreSQL glue: settings, errors, catalog, vector datums,
//! transactions, roles, relations), `service/` (texts or rows in, vectors or datums out),
//! `api/` (thin `#[pg_extern]` functions), `worker/` (background workers for jobs).

use pgrx::prelude::*;

pub mod api;
// The pgrx-free engine is its own crate (crates/engine); `crate::engine::...` paths still work.
pub use tributary_engine as engine;
pub mod pg;
pub mod service;
pub mod worker;

::pgrx::pg_module_magic!(name, version);

pgrx::extension_sql_file!("../sql/bootstrap.sql", name = "bootstrap", bootstrap);
// tributary_predict and tributary_evaluate (plain SQL over pgvector; see the file's header).
pgrx::extension_sql_file!(
    "../sql/predict.sql",
    name = "predict",
    requires = ["bootstrap", "values"]
);
// Jobs: tables, views and the SQL side of job management (see the file's header; workers in worker/).
pgrx::extension_sql_file!(
    "../sql/jobs.sql",
    name = "jobs",
    requires = [
        "bootstrap",
        "values",
        "job_trigger",
        worker::_wake_launcher,
        worker::_job_call,
        worker::_run_as,
        worker::_run_as_value,
        worker::_job_parts_status,
        worker::workers,
        worker::_job_service
    ]
);

// Which model filled each embedding column; tributary_embed_for (see the file's header).
pgrx::extension_sql_file!(
    "../sql/columns.sql",
    name = "columns",
    requires = ["bootstrap", api::embed::tributary_embed_text_0_3]
);

// Chunk jobs: a text column as chunks in a chunk table, embedded by a job (see the file's header).
pgrx::extension_sql_file!(
    "../sql/chunks.sql",
    name = "chunks",
    requires = ["jobs", api::chunk::tributary_chunk]
);

// Jobs on partitioned tables whose partitions are postgres_fdw foreign tables: a job on each
// shard (see the file's header).
pgrx::extension_sql_file!("../sql/shards.sql", name = "shards", requires = ["jobs"]);

// tributary_match and tributary_dedup (plpgsql over pgvector and the native helpers; see the
// file's header).
pgrx::extension_sql_file!(
    "../sql/match.sql",
    name = "match",
    requires = [
        "jobs",
        "predict",
        api::matching::_string_similarity,
        api::matching::_match_em,
        api::matching::_match_cut,
        api::matching::_match_clusters,
        api::matching::_match_remember,
        api::matching::tributary_match_explain
    ]
);

// Predictors that learn: the catalog, the features' plan and tributary_predict(predictor, row)
// (see the file's header; training and prediction in api/learn.rs and crates/learn).
pgrx::extension_sql_file!(
    "../sql/learn.sql",
    name = "learn",
    requires = [
        "bootstrap",
        "predict",
        "shards",
        api::learn::_predict_record,
        api::learn::tributary_train,
        api::learn::tributary_predict_column_predictor,
        api::learn::tributary_predict_column_online,
        api::learn::tributary_drop_predictor
    ]
);

// Predict jobs: a predictor's column kept filled by the background workers (see the file's
// header; the refresh in src/worker/predict.rs).
pgrx::extension_sql_file!(
    "../sql/learn_jobs.sql",
    name = "learn_jobs",
    requires = ["learn", "jobs"]
);

// COMMENT ON for every object of the extension, after all of them exist.
pgrx::extension_sql_file!("../sql/comments.sql", name = "comments", finalize);

/// Registers the settings and, when loaded by `shared_preload_libraries`, the jobs' shared
/// memory and launcher (src/worker/). Nothing here touches ONNX Runtime: sessions are created on first use
/// in a backend, never in the postmaster.
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    pg::gucs::init();
    // Long loops over a stored model's data (its checks when read) stop on a cancel,
    // statement_timeout or terminate: crates/learn polls this flag reader between items.
    tributary_learn::set_interrupt_check(Some(pg::interrupt_pending));
    // SAFETY: read-only global of the postmaster, set while it loads preload libraries.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        pg::activity::init_shmem();
    }
    worker::init();
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    include!("tests.rs");
    include!("tests_rows.rs");
    include!("tests_errors.rs");
}

#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
