-- Many backends: the settings of shared weights, CPU run admission and idle release, who may
-- change them, the cluster-wide views and who may read them. (This cluster has no
-- shared_preload_libraries: the shared-memory views say so. tests/integration/test_many_backends.py
-- runs them with it, from a second session.)

-- The CPU session maps the model's prepared graph, in the data directory.
SELECT vector_dims(tributary_embed('a query')) AS dims;
SELECT tributary_embed('a query')::text AS v_shared \gset
-- (The settings exist once tributary is loaded: here, by the call above.)
SELECT name, setting, context FROM pg_settings
WHERE name IN ('tributary.shared_weights', 'tributary.shrink_arena', 'tributary.graph_cache_path', 'tributary.intra_op_spinning',
               'tributary.max_cpu_runs', 'tributary.cpu_overflow', 'tributary.session_idle_timeout')
ORDER BY name;
SELECT model_file ~ '/tributary_graphs/all-MiniLM-L6-v2-[0-9a-f]{16}/graph\.onnx$' AS prepared_graph,
       provider_note !~ 'weights copied' AS weights_shared
FROM tributary.sessions WHERE model = 'all-MiniLM-L6-v2';
-- Off: another session, which loads the model file and says so; same vector.
SET tributary.shared_weights = off;
SELECT tributary_embed('a query') <=> :'v_shared'::vector < 1e-6 AS same_vector;
SELECT model_file ~ '/all-MiniLM-L6-v2/model\.onnx$' AS model_file, provider_note ~ 'weights copied into this process \(tributary\.shared_weights is off\)' AS says_why
FROM tributary.sessions WHERE model_file !~ 'tributary_graphs';
RESET tributary.shared_weights;

-- Nothing holds a CPU run slot between calls.
SELECT count(*) AS slots_held FROM tributary.cpu_runs WHERE pid = pg_backend_pid();
-- A CPU-only ONNX Runtime takes no GPU slot, even when asked to fail without one.
SET tributary.gpu_overflow = error;
SELECT count(*) AS gpu_slots_held FROM tributary.gpu_sessions WHERE pid = pg_backend_pid();
RESET tributary.gpu_overflow;

-- Shared memory needs the preload.
SELECT expect_error($$SELECT * FROM tributary.stat_activity$$);
SELECT expect_error($$SELECT * FROM tributary.progress_embed_column$$);

-- A role that is not a superuser: may not change the admission or memory settings, nor read
-- other backends' activity; may read the slot view.
CREATE ROLE activity_user;
SET ROLE activity_user;
SELECT expect_error($$SET tributary.cpu_overflow = error$$);
SELECT expect_error($$SET tributary.shared_weights = off$$);
SELECT expect_error($$SET tributary.shrink_arena = off$$);
SELECT expect_error($$SET tributary.intra_op_spinning = on$$);
SELECT expect_error($$SET tributary.graph_cache_path = '/tmp'$$);
SELECT expect_error($$SET tributary.max_cpu_runs = -1$$);
SELECT expect_error($$SET tributary.session_idle_timeout = 0$$);
SELECT expect_error($$SELECT * FROM tributary.stat_activity$$);
SELECT expect_error($$SELECT * FROM tributary_stat_activity()$$);
SELECT expect_error($$SELECT * FROM tributary.progress_embed_column$$);
SELECT count(*) >= 0 AS reads_cpu_runs FROM tributary.cpu_runs;
RESET ROLE;
-- pg_monitor may read them (here: 55000, the preload is missing, not 42501).
GRANT pg_monitor TO activity_user;
SET ROLE activity_user;
SELECT expect_error($$SELECT * FROM tributary.stat_activity$$);
RESET ROLE;
DROP ROLE activity_user;
