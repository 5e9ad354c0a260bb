-- tributary 0.6.0 -> 0.7.0 (ALTER EXTENSION tributary UPDATE). Written from the 0.7.0 sources:
-- priorities in CPU run admission (tributary.priority, tributary.interactive_tokens,
-- tributary.interactive_cpu_runs; src/pg/admission.rs). tributary_stat_activity() gains the
-- columns priority and cpu_wait_start (in the middle, so it and tributary.stat_activity are
-- dropped and created again; the library keeps 0.6.0's entry point with 0.6.0's columns), and
-- tributary.cpu_runs shows the priorities' queues (a new column in the middle: dropped and
-- created again). tests/integration/test_upgrade.py checks that an updated extension equals a
-- fresh 0.7.0 install object by object.
\echo Use "ALTER EXTENSION tributary UPDATE TO '0.7.0'" to load this file. \quit

DROP VIEW tributary.stat_activity;
DROP FUNCTION tributary_stat_activity();

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
	"priority" TEXT,  /* Option < String > */
	"cpu_wait_start" timestamp with time zone,  /* Option < pgrx :: datum :: TimestampWithTimeZone > */
	"idle_releases" INT,  /* i32 */
	"private_mb" double precision,  /* f64 */
	"shared_mb" double precision,  /* f64 */
	"last_call" timestamp with time zone  /* Option < pgrx :: datum :: TimestampWithTimeZone > */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tributary_stat_activity_0_7_wrapper';

-- Every backend and job worker using tributary, cluster-wide (needs shared_preload_libraries).
CREATE VIEW tributary.stat_activity AS
SELECT s.pid, d.datname, r.rolname AS usename, a.backend_type, a.application_name, s.model,
       s.execution_provider, s.sessions, s.calls, s.rows, s.tokens, s.run_ms, s.cpu_waits,
       s.cpu_wait_ms, s.priority, s.cpu_wait_start, s.idle_releases, s.private_mb, s.shared_mb,
       s.last_call, a.state
FROM tributary_stat_activity() s
LEFT JOIN pg_catalog.pg_database d ON d.oid = s.datid
LEFT JOIN pg_catalog.pg_roles r ON r.oid = s.usesysid
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = s.pid;

DROP VIEW tributary.cpu_runs;
-- Backends holding a CPU run slot (tributary.max_cpu_runs; slots from max_cpu_runs on are kept
-- for interactive runs, tributary.interactive_cpu_runs) or waiting in a priority's queue for one:
-- session-level locks in PostgreSQL's lock table, class 'trib' (1953655138), database 0, objsubid
-- 3 (slots) and 6 (queues: the granted entry is the queue's head, which looks for a free slot).
CREATE VIEW tributary.cpu_runs AS
SELECT CASE WHEN l.objsubid = 3 THEN l.objid::integer END AS slot,
       CASE WHEN l.objsubid = 6 THEN (ARRAY['interactive', 'bulk', 'background'])[l.objid::integer + 1] END AS queue,
       l.pid, l.granted, l.waitstart, a.datname, a.usename, a.backend_type, a.wait_event_type,
       a.wait_event
FROM pg_catalog.pg_locks l
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.database = 0 AND l.classid = 1953655138 AND l.objsubid IN (3, 6);
GRANT SELECT ON tributary.cpu_runs TO PUBLIC;

-- What other roles do is for monitoring roles only.
REVOKE ALL ON FUNCTION tributary_stat_activity() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tributary_stat_activity() TO pg_monitor;
REVOKE ALL ON tributary.stat_activity FROM PUBLIC;
GRANT SELECT ON tributary.stat_activity TO pg_monitor;

COMMENT ON VIEW tributary.cpu_runs IS 'Cluster-wide: the backends holding a CPU run slot (tributary.max_cpu_runs shared, tributary.interactive_cpu_runs kept for interactive runs), and those waiting in a priority''s queue (interactive, bulk, background; granted: the head of the queue) with the time they began to wait.';
COMMENT ON FUNCTION tributary_stat_activity() IS 'Cluster-wide: every backend and job worker that has run a model: its last model and provider, sessions, calls, rows, tokens, ms in ONNX Runtime, CPU slot waits, the priority of its current or last call and since when it waits for a CPU slot, idle releases, private and shared memory. Needs shared_preload_libraries; pg_monitor only.';
COMMENT ON VIEW tributary.stat_activity IS 'Cluster-wide: what each backend and job worker does with tributary (tributary_stat_activity() with database, role and backend type). pg_monitor only.';
