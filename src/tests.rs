// `#[pg_test]`: behaviour inside a backend (run by `cargo pgrx test`, with the real ONNX
// Runtime library and the default model that scripts/setup.sh installs).

use pgrx::prelude::*;

use crate::pg::catalog;

fn dims_and_norm(sql: &str) -> (i32, f64) {
    let (d, n) = Spi::get_two::<i32, f64>(sql).expect("query failed");
    (d.expect("dims"), n.expect("norm"))
}

#[pg_test]
fn vector_datum_is_a_real_pgvector_value() {
    Spi::run("CREATE EXTENSION IF NOT EXISTS vector").unwrap();
    // Built by Vector::into_datum, read back through pgvector's own functions and text output.
    let (dims, norm) = dims_and_norm(
        "SELECT vector_dims(e), vector_norm(e)::float8 FROM (SELECT tributary_embed('hello') e) s",
    );
    assert_eq!(dims, 384);
    assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    let text = Spi::get_one::<String>("SELECT tributary_embed('hello')::text").unwrap().unwrap();
    let values: Vec<f32> = text.trim_matches(['[', ']']).split(',').map(|v| v.parse().unwrap()).collect();
    assert_eq!(values.len(), 384);
    // Identical to what the engine returned, value for value.
    let direct = crate::service::embed::embed_texts(&["hello"], None, None).unwrap();
    for (a, b) in values.iter().zip(&direct[0].0) {
        assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{a} vs {b}");
    }
}

#[pg_test]
fn one_session_per_backend_and_model_reused_across_calls() {
    catalog::clear_sessions();
    assert_eq!(catalog::session_count(), 0);
    Spi::run("SELECT tributary_embed('a')").unwrap();
    Spi::run("SELECT tributary_embed(ARRAY['b', 'c'])").unwrap();
    Spi::run("SELECT tributary_embed('d', 'all-MiniLM-L6-v2')").unwrap();
    assert_eq!(catalog::session_count(), 1);
    // A different thread count is a different session; the cache stays bounded.
    for threads in 1..=5 {
        Spi::run(&format!("SET tributary.intra_op_threads = {threads}")).unwrap();
        Spi::run("SELECT tributary_embed('e')").unwrap();
    }
    assert_eq!(catalog::session_count(), 3);
    Spi::run("RESET tributary.intra_op_threads").unwrap();
}

#[pg_test]
fn auto_provider_falls_back_to_cpu_and_says_why() {
    let (provider, note) = Spi::get_two::<String, String>(
        "SELECT execution_provider, provider_note FROM tributary_info()",
    )
    .unwrap();
    // auto: CUDA when the library has it and a GPU answers; otherwise the CPU, and the note says
    // why (the CPU wheel of ONNX Runtime that setup installs has no CUDA provider).
    match provider.as_deref() {
        Some("cpu") => assert!(note.unwrap_or_default().contains("cuda"), "the fallback reason names CUDA"),
        Some("cuda") => {}
        other => panic!("auto chose {other:?}"),
    }
}

#[pg_test(error = "execution provider \"cuda\" is not available")]
fn explicit_cuda_without_gpu_is_an_error() {
    Spi::run("SET tributary.execution_provider = 'cuda'").unwrap();
    Spi::run("SELECT tributary_embed('x')").unwrap();
}

#[pg_test]
fn batch_budget_does_not_change_results() {
    let texts = "ARRAY['short', repeat('a longer text ', 50), 'medium sized text here', '', 'x']";
    let baseline = Spi::get_one::<String>(&format!("SELECT tributary_embed({texts})::text")).unwrap();
    Spi::run("SET tributary.max_batch_tokens = 256").unwrap();
    let small = Spi::get_one::<String>(&format!("SELECT tributary_embed({texts})::text")).unwrap();
    Spi::run("RESET tributary.max_batch_tokens").unwrap();
    let parse = |s: String| -> Vec<f32> {
        s.replace(['{', '}', '"', '[', ']'], "").split(',').map(|v| v.parse().unwrap()).collect()
    };
    let (a, b) = (parse(baseline.unwrap()), parse(small.unwrap()));
    assert_eq!(a.len(), 5 * 384);
    let max_diff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    assert!(max_diff < 1e-4, "padding to other widths changed results by {max_diff}");
}

/// A GPU slot released under the backend by `pg_advisory_unlock_all()` (or `DISCARD ALL`) is
/// taken back before the next GPU run, so the cap holds. Driven through the admission functions
/// directly: without a GPU no session would keep a slot.
#[pg_test]
fn gpu_slot_is_taken_back_after_advisory_unlock_all() {
    use crate::pg::gpu;
    assert!(gpu::admit().unwrap(), "a free slot under the default cap");
    let slot = gpu::held_slot().expect("admit took a slot");
    let held = || {
        Spi::get_one::<i64>(&format!(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = 0 AND classid = {} \
             AND objid = {slot} AND pid = pg_backend_pid() AND granted",
            gpu::LOCK_CLASS
        ))
        .unwrap()
        .unwrap()
    };
    assert_eq!(held(), 1);
    Spi::run("SELECT pg_advisory_unlock_all()").unwrap();
    assert_eq!(held(), 0, "pg_advisory_unlock_all released the slot's lock");
    gpu::ensure_held();
    assert_eq!(held(), 1, "taken back");
    assert_eq!(gpu::held_slot(), Some(slot));
    gpu::release();
    assert_eq!(held(), 0);
}

#[pg_test]
fn sessions_view_shows_provider_binding_and_counters() {
    Spi::run("CREATE EXTENSION IF NOT EXISTS vector").unwrap();
    catalog::clear_sessions();
    Spi::run("SELECT tributary_embed(ARRAY['one', 'two', repeat('three ', 40)])").unwrap();
    let (provider, binding) = Spi::get_two::<String, bool>("SELECT execution_provider, io_binding FROM tributary.sessions").unwrap();
    assert!(matches!(provider.as_deref(), Some("cpu") | Some("cuda")), "{provider:?}");
    assert_eq!(binding, Some(true), "IoBinding on the provider in use");
    let (rows, output) = Spi::get_two::<i64, String>("SELECT rows, output_type FROM tributary.sessions").unwrap();
    assert_eq!(rows, Some(3));
    assert_eq!(output.as_deref(), Some("float32"));
    let slot = Spi::get_one::<i32>("SELECT gpu_slot FROM tributary.sessions").unwrap();
    assert_eq!(slot, None, "no GPU session, no slot");
    // auto asked for a GPU slot, found no GPU and gave the slot back.
    let held = Spi::get_one::<i64>("SELECT count(*) FROM tributary.gpu_sessions WHERE pid = pg_backend_pid()").unwrap();
    assert_eq!(held, Some(0));
    Spi::run("SET tributary.io_binding = off").unwrap();
    let note = Spi::get_one::<String>("SELECT io_binding_note FROM tributary.sessions WHERE NOT io_binding").unwrap_or(None);
    assert_eq!(note, None, "the setting applies to new sessions only: none yet");
    Spi::run("SELECT tributary_embed('x')").unwrap();
    let note = Spi::get_one::<String>("SELECT io_binding_note FROM tributary.sessions WHERE NOT io_binding").unwrap();
    assert!(note.unwrap().contains("off"));
    Spi::run("RESET tributary.io_binding").unwrap();
}

#[pg_test]
fn halfvec_column_gets_halfvec_datums() {
    Spi::run("CREATE EXTENSION IF NOT EXISTS vector").unwrap();
    Spi::run("CREATE TABLE hv (id int, body text, e halfvec(384), f vector(384))").unwrap();
    Spi::run("INSERT INTO hv SELECT g, 'text number ' || g FROM generate_series(1, 20) g").unwrap();
    let n = Spi::get_one::<i64>("SELECT tributary_embed_column('hv', ARRAY['body'], 'e')").unwrap();
    assert_eq!(n, Some(20));
    Spi::run("SELECT tributary_embed_column('hv', ARRAY['body'], 'f')").unwrap();
    // The halfvec is the vector rounded to fp16: cosine ~1, and values within fp16 rounding.
    let worst = Spi::get_one::<f64>("SELECT max(e::vector <=> f) FROM hv").unwrap().unwrap();
    assert!(worst < 1e-5, "halfvec vs vector cosine distance {worst}");
}
