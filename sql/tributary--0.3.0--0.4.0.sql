-- tributary 0.3.0 -> 0.4.0 (ALTER EXTENSION tributary UPDATE). Written from the 0.4.0 sources:
-- the new cluster-wide views (activity, embed_column progress, CPU run slots) and their functions,
-- created as src/api/activity.rs creates them, with their privileges and comments. Nothing that
-- existed in 0.3.0 changes. tests/integration/test_upgrade.py checks that an updated extension
-- equals a fresh 0.4.0 install object by object.
\echo Use "ALTER EXTENSION tributary UPDATE TO '0.4.0'" to load this file. \quit

CREATE  FUNCTION "tributary_progress_embed_column"() RETURNS TABLE (
	"pid" INT,  /* i32 */
	"datid" oid,  /* pg_sys :: Oid */
	"relid" oid,  /* pg_sys :: Oid */
	"target" TEXT,  /* String */
	"rows_total" bigint,  /* i64 */
	"rows_done" bigint,  /* i64 */
	"started" timestamp with time zone  /* Option < pgrx :: datum :: TimestampWithTimeZone > */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tributary_progress_embed_column_wrapper';

CREATE  FUNCTION "tributary_stat_activity"() RETURNS TABLE (
	"pid" INT,  /* i32 */
	"datid" oid,  /* pg_sys :: Oid */
	"usesysid" oid,  /* pg_sys :: Oid */
	"model" TEXT,  /* String */
	"execution_provider" TEXT,  /* String */
	"sessions" INT,  /* i32 */
	"calls" bigint,  /* i64 */
	"rows" bigint,  /* i64 */
	"tokens" bigint,  /* i64 */
	"run_ms" double precision,  /* f64 */
	"cpu_waits" bigint,  /* i64 */
	"cpu_wait_ms" double precision,  /* f64 */
	"idle_releases" INT,  /* i32 */
	"private_mb" double precision,  /* f64 */
	"shared_mb" double precision,  /* f64 */
	"last_call" timestamp with time zone  /* Option < pgrx :: datum :: TimestampWithTimeZone > */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tributary_stat_activity_wrapper';

-- Every backend and job worker using tributary, cluster-wide (needs shared_preload_libraries).
CREATE VIEW tributary.stat_activity AS
SELECT s.pid, d.datname, r.rolname AS usename, a.backend_type, a.application_name, s.model,
       s.execution_provider, s.sessions, s.calls, s.rows, s.tokens, s.run_ms, s.cpu_waits,
       s.cpu_wait_ms, s.idle_releases, s.private_mb, s.shared_mb, s.last_call, a.state
FROM tributary_stat_activity() s
LEFT JOIN pg_catalog.pg_database d ON d.oid = s.datid
LEFT JOIN pg_catalog.pg_roles r ON r.oid = s.usesysid
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = s.pid;

-- Running tributary_embed_column calls, cluster-wide, like pg_stat_progress_*.
CREATE VIEW tributary.progress_embed_column AS
SELECT p.pid, p.datid, d.datname, p.relid, p.target, p.rows_total, p.rows_done,
       round(100.0 * p.rows_done / nullif(p.rows_total, 0), 1) AS percent, p.started
FROM tributary_progress_embed_column() p
LEFT JOIN pg_catalog.pg_database d ON d.oid = p.datid;

-- Backends holding or waiting for a CPU run slot (tributary.max_cpu_runs): session-level locks in
-- PostgreSQL's lock table, class 'trib' (1953655138), database 0, objsubid 3.
CREATE VIEW tributary.cpu_runs AS
SELECT l.objid::integer AS slot, l.pid, l.granted, a.datname, a.usename, a.backend_type,
       a.wait_event_type, a.wait_event
FROM pg_catalog.pg_locks l
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.database = 0 AND l.classid = 1953655138 AND l.objsubid = 3;
GRANT SELECT ON tributary.cpu_runs TO PUBLIC;

-- What other roles do is for monitoring roles only.
REVOKE ALL ON FUNCTION tributary_stat_activity() FROM PUBLIC;
REVOKE ALL ON FUNCTION tributary_progress_embed_column() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tributary_stat_activity() TO pg_monitor;
GRANT EXECUTE ON FUNCTION tributary_progress_embed_column() TO pg_monitor;
REVOKE ALL ON tributary.stat_activity, tributary.progress_embed_column FROM PUBLIC;
GRANT SELECT ON tributary.stat_activity, tributary.progress_embed_column TO pg_monitor;

COMMENT ON VIEW tributary.cpu_runs IS 'Cluster-wide: the backends holding (granted) or waiting for a CPU run slot (at most tributary.max_cpu_runs runs at once).';
COMMENT ON FUNCTION tributary_stat_activity() IS 'Cluster-wide: every backend and job worker that has run a model: its last model and provider, sessions, calls, rows, tokens, ms in ONNX Runtime, CPU slot waits, idle releases, private and shared memory. Needs shared_preload_libraries; pg_monitor only.';
COMMENT ON FUNCTION tributary_progress_embed_column() IS 'Cluster-wide: running tributary_embed_column calls, rows done of rows to embed. Needs shared_preload_libraries; pg_monitor only.';
COMMENT ON VIEW tributary.stat_activity IS 'Cluster-wide: what each backend and job worker does with tributary (tributary_stat_activity() with database, role and backend type). pg_monitor only.';
COMMENT ON VIEW tributary.progress_embed_column IS 'Cluster-wide: the progress of running tributary_embed_column calls, like pg_stat_progress_* views. pg_monitor only.';
