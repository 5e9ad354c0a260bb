-- What \df+, \dv+ and \dt+ say about every object of the extension (COMMENT ON), last in the
-- install script. Where objects live: the tributary_* functions in the extension's schema (the
-- one CREATE EXTENSION ... SCHEMA names, else the first schema of the search_path, as for
-- pgvector); tables, views and everything internal in schema tributary (README, Where objects
-- live). Every member of the extension has a comment: tests/pg_regress/sql/schema.sql checks it.

COMMENT ON SCHEMA tributary IS 'tributary: the model catalog, jobs, views and internal functions (the tributary_* functions live in the extension''s schema)';

-- Embedding
COMMENT ON FUNCTION tributary_embed(text, text, text) IS 'Embedding of one text with a model (default: tributary.model) and one of its prompts (default: its default prompt): vector of the model''s dimension, unit L2 norm; NULL in, NULL out. Longer than the window: truncated, as tributary.truncation says. Errors: 42704 unknown model or prompt, 22001 truncation under tributary.truncation = error, 58P01 missing files, 38000 ONNX Runtime failure.';
COMMENT ON FUNCTION tributary_embed(text[], text, text) IS 'Embeddings of many texts in one batched call: vector[] in the same order, NULL elements stay NULL. At most tributary.max_texts_per_call texts (54000 beyond).';
COMMENT ON FUNCTION tributary_embed(record, text, text[], text[], integer, integer, text[], timestamp with time zone, boolean, integer) IS 'Embedding of a whole row with its foreign-key context, exactly the text tributary_row_text() gives for the same options; NULL in, NULL out.';
COMMENT ON FUNCTION tributary_embed_column(regclass, text[], name, text, integer, text[], integer, integer, text[], timestamp with time zone, text, integer) IS 'Fills the target vector/halfvec column for every row where it is NULL (columns, or ''{*}'' for whole rows), batch_size rows at a time, in the caller''s transaction; returns the rows written. Ordinary, partitioned and inheritance tables; 42809 for anything else. Records the model and prompt for the column (22023 if another filled it); counts truncated texts (tributary.truncation).';
COMMENT ON FUNCTION tributary_row_text(record, text[], text[], integer, integer, text[], timestamp with time zone, boolean, integer, text, integer) IS 'The text a row becomes for embedding (row template version ''template''): its columns as "column: value" lines, with parents and children through foreign keys, cut to max_tokens tokens by fair shares.';
COMMENT ON FUNCTION tributary_row_template_version() IS 'The row template version tributary_row_text(), tributary_embed(record), tributary_embed_column(..., ''{*}'') and new whole-row jobs use by default (2; 1 stays selectable).';
COMMENT ON FUNCTION tributary_tokenize(text, text) IS 'The token ids (integer[]) the model sees for a text: special tokens included, truncated to the model''s max length in tokens; NULL in, NULL out.';

-- Models and sessions
COMMENT ON FUNCTION tributary_info(text) IS 'The model (default: tributary.model): dimension, max length in tokens, pooling, precision, the execution provider actually in use and why, the ONNX Runtime version and library, the layout (tributary or sentence-transformers), normalisation and prompts.';
COMMENT ON FUNCTION tributary_register_model(text, text, text, jsonb) IS 'Registers a model directory under a name (superuser only, 42501): tributary''s export (tributary.json) or a standard sentence-transformers/Optimum export (modules.json, 1_Pooling, onnx/model.onnx); prompts adds name -> text prompts. 0A000 for what tributary cannot run.';
COMMENT ON FUNCTION tributary_drop_model(text) IS 'Removes a registered model from tributary.models (superuser only, 42501); its files are left alone.';
COMMENT ON FUNCTION tributary_sessions() IS 'This backend''s ONNX Runtime sessions: execution provider and why, GPU slot, graph, output type, IoBinding, runs, rows, tokens, padded tokens, ms in ONNX Runtime, ms waiting for tokenization, input shapes run, ms reading rows and writing vectors (tributary_embed_column), ms warming shapes.';
COMMENT ON TABLE tributary.models IS 'The model catalog: name, directory, dimension, max length, pooling, precision, layout, normalisation, prompts. Readable by everyone; written by tributary_register_model() and tributary_drop_model().';
COMMENT ON TABLE tributary.column_models IS 'Which model and prompt filled each embedding column (tributary_embed_column, jobs); tributary_embed_for() embeds queries with it. Readable by everyone.';
COMMENT ON FUNCTION tributary._bind_column(regclass, name, text, text, text) IS 'Internal: records the model and prompt filling a column, or 22023 when another filled it.';
COMMENT ON FUNCTION tributary_forget_column(regclass, name) IS 'Forgets which model filled a column (table owners only, 42501), so that another model may fill it.';
COMMENT ON FUNCTION tributary_embed_for(regclass, name, text, text) IS 'Query embedding of a text for a column, by the model recorded for it (prompt default: the model''s query prompt). 42704 when no model is recorded.';
COMMENT ON FUNCTION tributary._column_models_drop() IS 'Internal: forgets the columns of dropped tables and columns.';
COMMENT ON EVENT TRIGGER tributary_column_models_drop IS 'Forgets the models of dropped tables and columns (tributary.column_models).';
COMMENT ON VIEW tributary.sessions IS 'This backend''s ONNX Runtime sessions (tributary_sessions()).';
COMMENT ON VIEW tributary.gpu_sessions IS 'Cluster-wide: the backends that hold a GPU slot (at most tributary.max_gpu_sessions).';
COMMENT ON VIEW tributary.cpu_runs IS 'Cluster-wide: the backends holding a CPU run slot (tributary.max_cpu_runs shared, tributary.interactive_cpu_runs kept for interactive runs), and those waiting in a priority''s queue (interactive, bulk, background; granted: the head of the queue) with the time they began to wait.';
COMMENT ON FUNCTION tributary_stat_activity() IS 'Cluster-wide: every backend and job worker that has run a model: its last model and provider, sessions, calls, rows, tokens, ms in ONNX Runtime, CPU slot waits, the priority of its current or last call and since when it waits for a CPU slot, idle releases, private and shared memory. Needs shared_preload_libraries; pg_monitor only.';
COMMENT ON FUNCTION tributary_progress_embed_column() IS 'Cluster-wide: running tributary_embed_column calls, rows done of rows to embed. Needs shared_preload_libraries; pg_monitor only.';
COMMENT ON VIEW tributary.stat_activity IS 'Cluster-wide: what each backend and job worker does with tributary (tributary_stat_activity() with database, role and backend type). pg_monitor only.';
COMMENT ON VIEW tributary.progress_embed_column IS 'Cluster-wide: the progress of running tributary_embed_column calls, like pg_stat_progress_* views. pg_monitor only.';

-- Prediction
COMMENT ON FUNCTION tributary_predict(regclass, name, name, vector, integer, text) IS 'Predicts column label for a query embedding from the k nearest rows of tbl that have it: similarity-weighted vote (categories, with confidence) or weighted mean and stddev (numbers), with the neighbours as evidence.';
COMMENT ON FUNCTION tributary_evaluate(regclass, name, name, name, integer, double precision, text, integer, name, text) IS 'Held-out evaluation of tributary_predict on a table: accuracy and macro-F1 (categories) or MAE (numbers) next to the majority-class or mean baseline, split by a seeded hash of group_by or forward in time (split_column < split_at trains); the split used in the last column.';
COMMENT ON FUNCTION tributary_predict_column(regclass, name, name, name, integer, text, integer) IS 'Fills column target of the unlabelled, embedded rows of tbl with tributary_predict''s prediction from their k nearest labelled rows, in batches; returns the rows updated.';
COMMENT ON FUNCTION tributary_match(regclass, regclass, text[], text[], integer, double precision, boolean, regclass, text, double precision) IS 'The pairs of rows of two tables (or of one table with itself) that are the same thing: candidates from nearest neighbours and blocking, evidence per column, a match probability from a model fitted by EM (or learned from labels); returns the accepted pairs only, with their evidence.';
COMMENT ON FUNCTION tributary_dedup(regclass, text[], integer, double precision, regclass, text, double precision) IS 'Groups of duplicate rows of a table: the pairs tributary_match accepts within it, joined by average linkage over their probabilities.';
COMMENT ON FUNCTION tributary._match_key(regclass, text) IS 'Internal (tributary_match): the text expression of a table''s primary key.';
COMMENT ON FUNCTION tributary._match_values(regclass, text[], text) IS 'Internal (tributary_match): the matched columns of a table as a text[] expression.';
COMMENT ON FUNCTION tributary._match_check_labels(regclass) IS 'Internal (tributary_match): checks that a labels table has left_key, right_key and is_match.';
COMMENT ON FUNCTION tributary._match_pairs(regclass, regclass, text[], text[], integer, double precision, boolean, regclass, text, double precision, boolean) IS 'Internal (tributary_match, tributary_dedup): the candidate pairs, their probabilities, which are accepted and why.';
COMMENT ON FUNCTION tributary._match_em(integer[], integer[], double precision[], double precision[], double precision[], boolean[], double precision, double precision, boolean, boolean) IS 'Internal (tributary_match): the Fellegi-Sunter model of the pairs'' evidence fitted by EM; each pair''s match probability.';
COMMENT ON FUNCTION tributary._match_cut(double precision[], double precision) IS 'Internal (tributary_match): the lowest cut whose pairs have a mean probability of at least min_precision.';
COMMENT ON FUNCTION tributary._match_clusters(integer[], integer[], double precision[], double precision) IS 'Internal (tributary_dedup): groups of rows from scored pairs by average linkage.';
COMMENT ON FUNCTION tributary._match_remember(jsonb) IS 'Internal (tributary_match): keeps the last call''s explanation for tributary_match_explain().';
COMMENT ON FUNCTION tributary_match_explain() IS 'What this session''s last tributary_match or tributary_dedup learned and decided: per column m and u, estimated matches, the cut, expected precision and recall. Only to the role that made the call (NULL to any other, after SET ROLE or inside a SECURITY DEFINER function).';
COMMENT ON FUNCTION tributary._match_accepted(boolean, double precision, boolean) IS 'Internal (tributary_match): the candidate pairs at or above a threshold, mutual best ones only when one to one.';
COMMENT ON FUNCTION tributary._match_drop(oid[]) IS 'Internal (tributary_match, tributary_dedup): drops the temporary tables a call made, by OID (never a caller''s).';
COMMENT ON FUNCTION tributary._embed_text(text, text, text) IS 'Internal (tributary_match): tributary_embed(text) under a name no other role can shadow.';
COMMENT ON FUNCTION tributary._embed_column(regclass, text[], name, text, integer, text[], integer, integer, text[], timestamp with time zone, text, integer) IS 'Internal (tributary_match): tributary_embed_column under a name no other role can shadow.';
COMMENT ON FUNCTION tributary._match_names_free(text) IS 'Internal (tributary_match, tributary_dedup): 42P07 when the session has a temporary table named as their work tables.';
COMMENT ON FUNCTION tributary._string_similarity(text, text) IS 'Internal (tributary_match): similarity of two short values in [0, 1] (normalised Damerau-Levenshtein); NULL when either has no letter or digit.';
COMMENT ON FUNCTION tributary.label_kind(regclass, name, text) IS 'Internal (tributary_predict): whether a label column is a category or a number.';
COMMENT ON FUNCTION tributary.embedding_type(regclass, name) IS 'Internal (tributary_predict): the vector type of an embedding column.';
COMMENT ON FUNCTION tributary.row_key(regclass, text) IS 'Internal (tributary_predict): the jsonb key expression of a table''s rows (primary key, else the shards'' primary key for a table over postgres_fdw shards, else ctid).';
COMMENT ON FUNCTION tributary.knn_vote(text[], double precision[]) IS 'Internal (tributary_predict): similarity-weighted vote over neighbour labels.';
COMMENT ON FUNCTION tributary.knn_mean(double precision[], double precision[]) IS 'Internal (tributary_predict): similarity-weighted mean and standard deviation of neighbour values.';
COMMENT ON FUNCTION tributary._target_column(regclass, name, text, integer, text, text) IS 'Internal: checks a target column (vector or halfvec of the model''s dimension) and returns its type; 42703, 42804, 22000.';

-- Jobs
COMMENT ON FUNCTION tributary_job_create(regclass, text[], name, text, text, text, integer, integer, text, text[], integer, integer, text[], text, integer) IS 'prompt: the model''s prompt to embed with; template: whole rows'' row template version, kept for the job''s life. Creates a job: background workers embed every row of a table (once), or keep embedding new and changed rows (continuous), batch by batch, each batch its own transaction. Table owner only. Needs tributary in shared_preload_libraries.';
COMMENT ON FUNCTION tributary_job_pause(bigint) IS 'Pauses a job of yours: workers stop after their current batch; tributary_job_resume() goes on.';
COMMENT ON FUNCTION tributary_job_resume(bigint) IS 'Resumes a paused or failed job of yours, giving its failed rows a new chance (55000 for a cancelled job).';
COMMENT ON FUNCTION tributary_job_cancel(bigint) IS 'Cancels a job of yours: no more batches; what was written stays.';
COMMENT ON FUNCTION tributary_job_drop(bigint) IS 'Drops a job of yours: its queue, its triggers and its row in tributary.jobs; embeddings already written stay.';
COMMENT ON FUNCTION tributary.workers() IS 'Job background workers and the launcher: pid, database, job, rows and batches; other roles'' workers are shown only to superusers and members of pg_read_all_stats.';
COMMENT ON VIEW tributary.jobs IS 'The jobs of the roles you are a member of: state (waiting: running but no worker can serve it now, see waiting_for), mode, rows done, queued and failed, rows per second and seconds left, the workers embedding it, the last error; for a job on a table with foreign partitions, the sums of its parts on the shards (parts: each, as tributary.job_parts).';
COMMENT ON VIEW tributary.job_errors IS 'Rows of your jobs that failed: key, SQLSTATE, message, attempts, and whether they wait for a retry, are queued again or were given up.';
COMMENT ON TABLE tributary._jobs IS 'Internal: one row per job, with the statements its workers run (written only by the extension''s functions; see tributary.jobs).';
COMMENT ON TABLE tributary._job_errors IS 'Internal: one row per failed key of a job (see tributary.job_errors).';
COMMENT ON TABLE tributary._job_batches IS 'Internal: committed batches of the last hour, for rows_per_second.';
COMMENT ON SEQUENCE tributary._jobs_id_seq IS 'Internal: job ids.';
COMMENT ON FUNCTION tributary._job_call(text, jsonb) IS 'Internal: runs tributary._job_<op>(caller, args) as the extension''s owner for the tributary_job_* functions, with the calling role as caller.';
COMMENT ON FUNCTION tributary._job_trigger() IS 'Internal: the statement-level trigger of continuous jobs; queues changed rows'' keys as the job''s owner.';
COMMENT ON FUNCTION tributary._run_as(oid, text, jsonb) IS 'Internal: runs a statement as a role, security-restricted, with the default search_path.';
COMMENT ON FUNCTION tributary._wake_launcher() IS 'Internal: asks the launcher, at commit, for a worker in this database.';
COMMENT ON FUNCTION tributary._queued(regclass) IS 'Internal: rows in a job''s queue, NULL without SELECT on it.';
COMMENT ON FUNCTION tributary._vector_type(text) IS 'Internal: the schema-qualified name of pgvector''s vector or halfvec type.';
COMMENT ON FUNCTION tributary._own_job(oid, bigint, boolean) IS 'Internal: a job the caller owns (42704 otherwise), locked.';
COMMENT ON FUNCTION tributary._job_create(oid, jsonb) IS 'Internal: tributary_job_create() as the extension''s owner.';
COMMENT ON FUNCTION tributary._job_pause(oid, jsonb) IS 'Internal: tributary_job_pause() as the extension''s owner.';
COMMENT ON FUNCTION tributary._job_resume(oid, jsonb) IS 'Internal: tributary_job_resume() as the extension''s owner.';
COMMENT ON FUNCTION tributary._job_cancel(oid, jsonb) IS 'Internal: tributary_job_cancel() as the extension''s owner.';
COMMENT ON FUNCTION tributary._job_drop(oid, jsonb) IS 'Internal: tributary_job_drop() as the extension''s owner.';
COMMENT ON FUNCTION tributary._job_cleanup(tributary._jobs) IS 'Internal: removes a job''s queue and triggers.';
COMMENT ON FUNCTION tributary._requeue_due(bigint) IS 'Internal: puts a job''s failed rows whose retry time has come back into its queue, as the job''s owner.';
COMMENT ON FUNCTION tributary._finish_if_done(bigint) IS 'Internal: marks a once job done when its queue is empty and no row waits for a retry.';
COMMENT ON FUNCTION tributary._job_tables(regclass) IS 'Internal: the tables a continuous job''s triggers belong on (the source and, for a partitioned source, every table of its tree).';
COMMENT ON FUNCTION tributary._job_ancestors(regclass) IS 'Internal: the partition and inheritance ancestors of a table, nearest first.';
COMMENT ON FUNCTION tributary._job_watchers(regclass, oid) IS 'Internal: the ancestors of a job''s source that get "via" triggers (owned by the job''s owner, with the source''s key columns).';
COMMENT ON FUNCTION tributary._job_triggers(bigint) IS 'Internal: a job''s triggers wherever they are, detached partitions included.';
COMMENT ON FUNCTION tributary._job_fill_sql(tributary._jobs, regclass) IS 'Internal: the statement that queues the rows of a table of a job''s source still to embed (run as the job''s owner).';
COMMENT ON FUNCTION tributary._job_sync_tables(tributary._jobs, boolean) IS 'Internal: puts a continuous job''s triggers on tables that joined its source''s tree (queuing their rows) and takes them off tables that left it.';
COMMENT ON FUNCTION tributary._job_ddl() IS 'Internal: the event trigger function that keeps jobs in step with DDL on their tables: renames followed, a dropped column stops the job (triggers off, paused, last_error), owner changes, partitions created, attached or detached.';
COMMENT ON EVENT TRIGGER tributary_job_partitions IS 'Keeps jobs in step with DDL on their tables: RENAME (table, column, schema), DROP COLUMN, OWNER TO, CREATE TABLE ... PARTITION OF, ATTACH and DETACH PARTITION.';
COMMENT ON FUNCTION tributary._job_owner(tributary._jobs) IS 'Internal: the role a job acts as, the owner of its source table.';
COMMENT ON FUNCTION tributary._job_sync_owner(bigint) IS 'Internal: brings a job''s recorded owner and its queue''s privileges in step with its source table''s owner; returns the owner.';
COMMENT ON FUNCTION tributary._job_build(tributary._jobs) IS 'Internal: a job''s statements, built from the catalog as it is now.';
COMMENT ON FUNCTION tributary._key_columns(regclass) IS 'Internal: the primary key columns of a table, quoted, in key order.';
COMMENT ON FUNCTION tributary._follow_names(regclass, text[], text[]) IS 'Internal: the column names a job uses, after a DDL command renamed or dropped columns.';
COMMENT ON FUNCTION tributary._job_drop_triggers(tributary._jobs) IS 'Internal: takes a job''s triggers off every table.';
COMMENT ON FUNCTION tributary._chunk_function_sql(tributary._jobs) IS 'Internal: the CREATE OR REPLACE FUNCTION of a chunk job''s trigger function, under the names its tables have now.';
COMMENT ON FUNCTION tributary._chunk_sync(tributary._jobs) IS 'Internal: keeps a chunk job''s trigger function in step with its source after DDL (names, owner).';
COMMENT ON FUNCTION tributary._chunk_job_create(oid, jsonb) IS 'Internal: tributary_chunk_job_create() as the extension''s owner; what it makes belongs to the source''s owner.';
COMMENT ON FUNCTION tributary._chunk_job_drop(oid, jsonb) IS 'Internal: tributary_chunk_job_drop() as the extension''s owner.';
COMMENT ON FUNCTION tributary._forget_column(oid, jsonb) IS 'Internal: tributary_forget_column() as the extension''s owner, for the table''s owner.';
COMMENT ON FUNCTION tributary._column_models_rename() IS 'Internal: records of tributary.column_models follow a renamed column.';
COMMENT ON EVENT TRIGGER tributary_column_models_rename IS 'Records of tributary.column_models follow ALTER TABLE ... RENAME COLUMN.';
COMMENT ON FUNCTION tributary._vector_schema() IS 'Internal: pgvector''s schema, quoted, for operators and functions in dynamic SQL whatever the search_path.';
COMMENT ON FUNCTION tributary._job_service() IS 'Internal: whether a job worker can serve this database now (workers in it, or what a job waits for), for tributary.jobs.';
COMMENT ON FUNCTION tributary._jobs_added() IS 'Internal: the trigger on tributary._jobs that asks the launcher for a worker when jobs arrive other than through tributary_job_create (pg_restore).';
COMMENT ON FUNCTION tributary_chunk(text, text, integer, integer) IS 'A long text as chunks that fit the model''s window, by its tokenizer, with overlap, on paragraph and sentence boundaries where possible: seq, chunk, start_char, end_char (0-based, end exclusive). 22023 for a chunk size below 1 or over the window, or an overlap not smaller than it.';
COMMENT ON FUNCTION tributary_chunk_job_create(regclass, name, text, text, integer, integer, text, text) IS 'Creates a chunk table for a text column (one row per chunk, kept in step with the source by a trigger) and a continuous job that embeds the chunks; returns the job id.';
COMMENT ON FUNCTION tributary_chunk_job_drop(bigint) IS 'Drops a chunk job: its embedding job and its trigger on the source (the chunk table stays).';

-- Sharded jobs (sql/shards.sql)
COMMENT ON TABLE tributary._sharded_jobs IS 'Internal: one row per job made on a partitioned table whose partitions are postgres_fdw foreign tables (a job on each shard; see tributary.job_parts).';
COMMENT ON TABLE tributary._job_parts IS 'Internal: the parts of a sharded job: the coordinator''s foreign table, its server, the shard''s table and the job id there.';
COMMENT ON FUNCTION tributary._sharded_owner(tributary._sharded_jobs) IS 'Internal: the role a sharded job acts as, the owner of its table.';
COMMENT ON FUNCTION tributary._run_as_value(oid, text, jsonb) IS 'Internal: runs a statement that returns one jsonb value with a role''s rights (security-restricted), for the sharded jobs'' calls to their shards.';
COMMENT ON FUNCTION tributary._job_parts_status(bigint) IS 'Internal: the parts of a sharded job with the state each shard reports now, for tributary.jobs and tributary.job_parts (NULL unless the calling role is a member of the job''s owner).';
COMMENT ON FUNCTION tributary._job_parts_of(oid, bigint) IS 'Internal: tributary._job_parts_status() as the extension''s owner, for the calling role.';
COMMENT ON FUNCTION tributary._shard_wait(text, text, timestamp with time zone, bigint, text) IS 'Internal: waits for a dblink query''s result in pg_sleep steps, so statement_timeout and pg_cancel_backend end the wait; 08006 at its limit.';
COMMENT ON FUNCTION tributary._shard_query(jsonb) IS 'Internal: a statement on a foreign server through dblink as the current role (its user mapping); its one jsonb value.';
COMMENT ON FUNCTION tributary._shard_call(oid, oid, regclass, text, boolean) IS 'Internal: a statement on a shard as a job''s owner, its errors named by the shard.';
COMMENT ON FUNCTION tributary._shard_leaves(regclass) IS 'Internal: the leaf partitions of a table with, for foreign tables, their server, wrapper and the shard''s table.';
COMMENT ON FUNCTION tributary._sharded_job_create(oid, jsonb, regclass, oid) IS 'Internal: tributary_job_create() on a table with foreign partitions: the job on every shard, recorded here as one job with parts.';
COMMENT ON FUNCTION tributary._sharded_job_op(oid, text, bigint) IS 'Internal: pause, resume, cancel or drop of a sharded job, on every part.';
COMMENT ON VIEW tributary.job_parts IS 'The parts of your sharded jobs (jobs on a table whose partitions are postgres_fdw foreign tables): per partition, its server, the shard''s table and job id, and the state and counts the shard reports now (unreachable, with the error, when it cannot be reached).';
COMMENT ON FUNCTION tributary._shard_key_columns(regclass) IS 'Internal: the primary key columns of the shards'' tables behind a partitioned table over postgres_fdw shards, when they agree (through dblink as the current role); else NULL.';
COMMENT ON FUNCTION tributary._match_stored(regclass, text[]) IS 'Internal (tributary_match): which matched columns are pgvector vector columns (stored embeddings, used as they are).';

-- Values of a user's table as text and JSON, never through a cast a role made (src/pg/values.rs)
COMMENT ON FUNCTION tributary._text(anyelement) IS 'Internal: a value as text, CAST(v AS text) for built-in types, the output function for any other type (a cast a role made never runs); NULL in, NULL out.';
COMMENT ON FUNCTION tributary._row_json(anyelement) IS 'Internal: row_to_json(row) without any cast to json a role made (values of other than built-in scalar types through their output functions).';
COMMENT ON FUNCTION tributary._row_jsonb(anyelement) IS 'Internal: to_jsonb(row) without any cast to json a role made.';
COMMENT ON FUNCTION tributary._jsonb(anyelement) IS 'Internal: to_jsonb(value) without any cast to json a role made.';
COMMENT ON FUNCTION tributary._from_text(text, anyelement) IS 'Internal: the value of the second argument''s type that a text stands for, through the type''s input function (never a cast from text a role made).';
COMMENT ON FUNCTION tributary._text_as(text, oid, integer) IS 'Internal: the SQL of a text expression as a value of a type: CAST for built-in types, tributary._from_text for others.';
COMMENT ON FUNCTION tributary._base_type(oid) IS 'Internal: the base type of a type (through domains).';
