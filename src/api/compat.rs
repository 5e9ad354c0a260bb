//! The C entry points that 0.2.0's (and 0.1.0's) SQL definitions name, with their old
//! arguments and results, so that a database whose extension is still at an older version keeps
//! working with this library (between installing it and `ALTER EXTENSION tributary UPDATE`, or
//! for as long as the database stays there). No SQL is generated for them: 0.3.0 names the
//! `*_0_3` functions beside each (0.6.0: `tributary_embed_column_0_6`; 0.7.0:
//! `tributary_stat_activity_0_7`). Each calls the current
//! function with the new arguments' defaults (no prompt, no prompts; row template version 1).

use pgrx::prelude::*;

use crate::pg::name::Name;
use crate::pg::regclass::RegClass;
use crate::pg::vector::Vector;

/// 0.2.0's `tributary_embed(text, model)`.
#[pg_extern(sql = false, stable, parallel_unsafe)]
fn tributary_embed_text(text: Option<&str>, model: Option<&str>) -> Option<Vector> {
    super::embed::tributary_embed_text_0_3(text, model, None)
}

/// 0.2.0's `tributary_embed(text[], model)`.
#[pg_extern(sql = false, volatile, parallel_unsafe)]
fn tributary_embed_array(
    texts: Option<Array<&str>>,
    model: Option<&str>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<Vec<Option<Vector>>> {
    super::embed::tributary_embed_array_0_3(texts, model, None, fcinfo)
}

/// 0.2.0's `tributary_embed_column(tbl, columns, target, model, batch_size, exclude, parents,
/// children, time_columns, as_of)`.
#[allow(clippy::too_many_arguments)]
#[pg_extern(sql = false, volatile, parallel_unsafe)]
fn tributary_embed_column(
    tbl: Option<RegClass>,
    columns: Option<Vec<Option<String>>>,
    target: Option<Name>,
    model: Option<&str>,
    batch_size: Option<i32>,
    exclude: Option<Vec<Option<String>>>,
    parents: Option<i32>,
    children: Option<i32>,
    time_columns: Option<Vec<Option<String>>>,
    as_of: Option<pgrx::datum::TimestampWithTimeZone>,
) -> i64 {
    tributary_embed_column_0_3(
        tbl,
        columns,
        target,
        model,
        batch_size,
        exclude,
        parents,
        children,
        time_columns,
        as_of,
        None,
    )
}

/// 0.3.0 to 0.5.0's `tributary_embed_column(tbl, columns, target, model, batch_size, exclude,
/// parents, children, time_columns, as_of, prompt)`: whole rows with row template version 1, the
/// only one then (and what those versions' `tributary_row_text` gives by default).
#[allow(clippy::too_many_arguments)]
#[pg_extern(sql = false, volatile, parallel_unsafe)]
fn tributary_embed_column_0_3(
    tbl: Option<RegClass>,
    columns: Option<Vec<Option<String>>>,
    target: Option<Name>,
    model: Option<&str>,
    batch_size: Option<i32>,
    exclude: Option<Vec<Option<String>>>,
    parents: Option<i32>,
    children: Option<i32>,
    time_columns: Option<Vec<Option<String>>>,
    as_of: Option<pgrx::datum::TimestampWithTimeZone>,
    prompt: Option<&str>,
) -> i64 {
    super::column::tributary_embed_column_0_6(
        tbl,
        columns,
        target,
        model,
        batch_size,
        exclude,
        parents,
        children,
        time_columns,
        as_of,
        prompt,
        Some(1),
    )
}

/// 0.2.0's `tributary_register_model(name, path, precision)` (STRICT).
#[pg_extern(sql = false, volatile, parallel_unsafe)]
fn tributary_register_model(name: &str, path: &str, precision: &str) {
    super::models::tributary_register_model_0_3(Some(name), Some(path), Some(precision), None)
}

/// 0.2.0's `tributary_info(model)`: its eleven columns.
#[pg_extern(sql = false, stable, parallel_unsafe)]
#[allow(clippy::type_complexity)]
fn tributary_info(
    model: Option<&str>,
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
    ),
> {
    TableIterator::new(
        super::models::tributary_info_0_3(model)
            .map(|(a, b, c, d, e, f, g, h, i, j, k, ..)| (a, b, c, d, e, f, g, h, i, j, k)),
    )
}

/// 0.4.0 to 0.6.0's `tributary_stat_activity()`: the current one without `priority` and
/// `cpu_wait_start`.
#[pg_extern(sql = false, volatile, parallel_restricted)]
#[allow(clippy::type_complexity)]
fn tributary_stat_activity() -> TableIterator<
    'static,
    (
        name!(pid, i32),
        name!(datid, pg_sys::Oid),
        name!(usesysid, pg_sys::Oid),
        name!(model, String),
        name!(execution_provider, String),
        name!(sessions, i32),
        name!(calls, i64),
        name!(rows, i64),
        name!(tokens, i64),
        name!(run_ms, f64),
        name!(cpu_waits, i64),
        name!(cpu_wait_ms, f64),
        name!(idle_releases, i32),
        name!(private_mb, f64),
        name!(shared_mb, f64),
        name!(last_call, Option<pgrx::datum::TimestampWithTimeZone>),
    ),
> {
    TableIterator::new(super::activity::tributary_stat_activity_0_7().map(
        |(
            pid,
            db,
            role,
            model,
            ep,
            sessions,
            calls,
            rows,
            tokens,
            run,
            waits,
            wait,
            _,
            _,
            idle,
            private,
            shared,
            last,
        )| {
            (
                pid, db, role, model, ep, sessions, calls, rows, tokens, run, waits, wait, idle,
                private, shared, last,
            )
        },
    ))
}
