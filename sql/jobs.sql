-- Jobs: whole tables embedded by background workers (src/worker/), batch by batch, each batch in
-- its own transaction, kept in sync with new and changed rows in continuous mode.
--
-- A job owns a queue table (tributary._queue_<id>, the source's primary key columns): creating
-- the job fills it with every row still to embed; in continuous mode statement-level triggers on
-- the source (on every table of a partitioned source's tree, kept in step with partitions created,
-- attached and detached by the event trigger tributary_job_partitions) add inserted rows and
-- updated rows whose source columns changed. A job on an ordinary table covers that table's own
-- rows only (ONLY): a primary key is not unique across inheritance children. A worker claims a
-- batch (DELETE ... FOR UPDATE SKIP LOCKED), reads the rows' text as the job's owner, embeds
-- them, writes the vectors as the owner, adds the batch to the job's progress and commits: the
-- claim, the vectors and the progress are one transaction, so a crash loses or repeats nothing.
--
-- The statements a worker runs are generated here once, with every identifier quoted, and kept
-- in the job's row. Only the extension's owner (through these SECURITY DEFINER functions) writes
-- the tables below; users see their own jobs through the views tributary.jobs and
-- tributary.job_errors.

-- Rust helpers (src/worker/), generated in the extension's schema, moved next to the rest.
ALTER FUNCTION _wake_launcher() SET SCHEMA tributary;
ALTER FUNCTION _job_call(text, jsonb) SET SCHEMA tributary;
ALTER FUNCTION _job_trigger() SET SCHEMA tributary;
ALTER FUNCTION workers() SET SCHEMA tributary;
ALTER FUNCTION _run_as(oid, text, jsonb) SET SCHEMA tributary;
ALTER FUNCTION _job_service() SET SCHEMA tributary;
ALTER FUNCTION _run_as_value(oid, text, jsonb) SET SCHEMA tributary;
ALTER FUNCTION _job_parts_status(bigint) SET SCHEMA tributary;
REVOKE ALL ON FUNCTION tributary._wake_launcher(), tributary._run_as(oid, text, jsonb),
    tributary._run_as_value(oid, text, jsonb) FROM PUBLIC;
-- The trigger of continuous jobs (owned by the extension's owner, so no job owner can alter it).
REVOKE ALL ON FUNCTION tributary._job_trigger() FROM PUBLIC;

CREATE TABLE tributary._jobs (
    id            bigserial PRIMARY KEY,
    name          text NOT NULL,                 -- unique per owner
    source        regclass NOT NULL,
    columns       text[] NOT NULL,               -- '{*}': whole rows (tributary_row_text)
    target_table  regclass,                      -- NULL: target is a column of source
    target        name NOT NULL,
    target_type   text NOT NULL CHECK (target_type IN ('vector', 'halfvec')),
    model         text NOT NULL,
    batch_size    integer NOT NULL CHECK (batch_size BETWEEN 1 AND 100000),   -- rows
    mode          text NOT NULL CHECK (mode IN ('once', 'continuous')),
    workers       integer NOT NULL CHECK (workers BETWEEN 1 AND 32),
    row_options   jsonb,                         -- whole rows: exclude, parents, children, time_columns
    owner         regrole NOT NULL,              -- the source's owner: rows are read and written with its rights
                                                 -- (kept in step by tributary._job_sync_owner)
    state         text NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'running', 'paused', 'done', 'failed', 'cancelled')),
    queue         regclass NOT NULL,
    rows_done     bigint NOT NULL DEFAULT 0,     -- rows embedded and written, by committed batches
    created_at    timestamptz NOT NULL DEFAULT now(),
    started_at    timestamptz,
    finished_at   timestamptz,
    last_batch_at timestamptz,
    last_error    text,
    last_error_at timestamptz,
    claim_sql      text NOT NULL,   -- $1 rows          -> jsonb array of claimed keys
    claim_keys_sql text NOT NULL,   -- $1 jsonb keys    -> jsonb array of claimed keys
    select_sql     text NOT NULL,   -- $1 jsonb keys    -> (key jsonb text, text), rows locked FOR KEY SHARE
    write_sql      text NOT NULL,   -- $1 jsonb[] keys, $2 vector[]/halfvec[] (NULL: no text, clear)
    requeue_sql    text NOT NULL,   -- $1 jsonb keys    -> back into the queue
    enqueue_sql    jsonb,           -- continuous: {"INSERT": sql, "UPDATE": ..., ...} over the
                                    -- transition tables new_rows/old_rows, run by _job_trigger
        UNIQUE (owner, name),
    rows_truncated bigint NOT NULL DEFAULT 0,    -- of rows_done, texts longer than the model's window (cut to it)
    prompt        text,                          -- the model's prompt the texts are embedded with, or NULL
    -- A chunk job's (sql/chunks.sql; NULL for other jobs): the table whose text column it chunks,
    -- its trigger function there (the trigger is the one on chunk_source calling it), and the
    -- sizes. Typed references, so pg_dump and pg_restore carry them by name.
    chunk_source   regclass,
    chunk_function regprocedure,
    chunk_tokens   integer,
    chunk_overlap  integer,
    -- Whole rows: the row template version the texts are made with (tributary_row_text). Kept
    -- for the job's life, so that its embeddings stay comparable when the default changes.
    -- tributary._job_create always sets it (2 unless told); the default, 1, is for rows that
    -- come without it: jobs made before 0.6.0, by the update or from an older dump (pg_restore
    -- names the dump's columns). Last, so that an updated installation has the same row type.
    template       integer NOT NULL DEFAULT 1 CHECK (template >= 1)
);

-- One row per key that failed. status: waiting (retried at next_attempt_at), queued (back in the
-- queue), gave_up (tributary.job_max_attempts reached; the row is not embedded).
CREATE TABLE tributary._job_errors (
    job_id          bigint NOT NULL REFERENCES tributary._jobs ON DELETE CASCADE,
    key             jsonb NOT NULL,
    sqlstate        text,
    message         text NOT NULL,
    detail          text,
    attempts        integer NOT NULL DEFAULT 1,
    status          text NOT NULL CHECK (status IN ('waiting', 'queued', 'gave_up')),
    first_failed_at timestamptz NOT NULL DEFAULT now(),
    last_failed_at  timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz,
    PRIMARY KEY (job_id, key)
);

-- Committed batches, for rows/s; pruned to the last hour by the workers.
CREATE TABLE tributary._job_batches (
    job_id      bigint NOT NULL REFERENCES tributary._jobs ON DELETE CASCADE,
    finished_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    rows        integer NOT NULL,
    ms          double precision NOT NULL,   -- the whole batch transaction
    embed_ms    double precision NOT NULL,   -- of which tokenizing and running the model
    pid         integer NOT NULL
);
CREATE INDEX ON tributary._job_batches (job_id, finished_at);
REVOKE ALL ON tributary._jobs, tributary._job_errors, tributary._job_batches FROM PUBLIC;
-- pg_dump keeps the jobs (and their failed rows) with the database: the job tables' rows and the id
-- sequence are dumped and restored with it. The queues (tributary._queue_<id>, not members of the
-- extension) and the continuous jobs' triggers on the sources are dumped as ordinary objects, so a
-- restored job goes on where the dump left it (README, Dump and restore). _job_batches only
-- feeds rows_per_second and is not kept.
SELECT pg_catalog.pg_extension_config_dump('tributary._jobs', '');
SELECT pg_catalog.pg_extension_config_dump('tributary._jobs_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('tributary._job_errors', '');

-- Rows coming into tributary._jobs other than through tributary_job_create (pg_restore loading a
-- dump's jobs, which it does with COPY after the database exists) ask the launcher for a worker in
-- this database when they commit: a restored running job does not wait for anyone to ask.
CREATE FUNCTION tributary._jobs_added() RETURNS trigger
-- (client_min_messages: tributary_job_create has already said it when tributary is not preloaded)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET client_min_messages = error AS $$
BEGIN
    PERFORM tributary._wake_launcher();
    RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION tributary._jobs_added() FROM PUBLIC;
CREATE TRIGGER jobs_added AFTER INSERT ON tributary._jobs
    FOR EACH STATEMENT EXECUTE FUNCTION tributary._jobs_added();

-- The role a job acts as: the owner of its source table, read from the table (pg_class), so
-- that ALTER TABLE ... OWNER TO and REASSIGN OWNED take effect at once; the owner recorded in
-- the job when its source is gone.
CREATE FUNCTION tributary._job_owner(j tributary._jobs) RETURNS oid
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce((SELECT c.relowner FROM pg_class c WHERE c.oid = j.source), j.owner)
$$;

-- Rows waiting in a job's queue (claimed rows of batches not yet committed included).
-- Runs with the caller's rights: a job's owner may read its queue, nobody else.
CREATE FUNCTION tributary._queued(queue regclass) RETURNS bigint
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE n bigint;
BEGIN
    IF queue IS NULL OR NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = queue)
       OR NOT has_table_privilege(queue, 'SELECT') THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT count(*) FROM %s', queue) INTO n;
    RETURN n;
END $$;

-- Sharded jobs (sql/shards.sql): a job on a partitioned table whose partitions are postgres_fdw
-- foreign tables is made of one job on each shard's table, made there through the foreign
-- server (dblink, with the job owner's user mapping) and run by the shard's own workers. The
-- coordinator keeps the job here and its parts below; their state is read from the shards when
-- tributary.jobs or tributary.job_parts is read. Ids come from the same sequence as local jobs:
-- a job id names one job of this database.
CREATE TABLE tributary._sharded_jobs (
    id         bigint PRIMARY KEY DEFAULT nextval('tributary._jobs_id_seq'),
    name       text NOT NULL,
    source     regclass NOT NULL,           -- the coordinator's partitioned table
    owner      regrole NOT NULL,            -- its owner when the job was made (tributary._sharded_owner)
    mode       text NOT NULL CHECK (mode IN ('once', 'continuous')),
    args       jsonb NOT NULL,              -- the arguments each shard's tributary_job_create got
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (owner, name)
);
CREATE TABLE tributary._job_parts (
    job_id        bigint NOT NULL REFERENCES tributary._sharded_jobs ON DELETE CASCADE,
    partition     regclass NOT NULL,        -- the coordinator's foreign table
    server        oid NOT NULL,             -- its foreign server (pg_foreign_server)
    remote_schema text NOT NULL,            -- tributary's schema on the shard, quoted
    remote_table  text NOT NULL,            -- the shard's table, schema-qualified, quoted
    remote_job    bigint NOT NULL,          -- the part's job id on the shard
    PRIMARY KEY (job_id, partition)
);
REVOKE ALL ON tributary._sharded_jobs, tributary._job_parts FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('tributary._sharded_jobs', '');
SELECT pg_catalog.pg_extension_config_dump('tributary._job_parts', '');

-- The role a sharded job acts as: its table's owner (as tributary._job_owner).
CREATE FUNCTION tributary._sharded_owner(s tributary._sharded_jobs) RETURNS oid
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce((SELECT c.relowner FROM pg_class c WHERE c.oid = s.source), s.owner)
$$;

-- Status of the jobs the current role owns (or is a member of the owner of).
-- rows_per_second: rows of the batches committed in the last minute (or since the job started,
-- if later) over that time; seconds_left: rows_queued at that rate.
-- state: as in tributary._jobs, except that a running job that no worker serves now (no job
-- worker runs in its database: tributary not preloaded, the launcher down, no worker slot, or a
-- worker about to start) shows as 'waiting'. worker_pids: the workers embedding the job now
-- (tributary.workers(); an idle worker watching continuous jobs embeds none). waiting_for: for
-- a pending or waiting job without a worker in its database, what it waits for
-- (tributary._job_service()).
CREATE VIEW tributary.jobs WITH (security_barrier) AS
WITH wk AS (SELECT pid, job FROM tributary.workers())
SELECT j.id, j.name,
       CASE WHEN j.state = 'running' AND s.workers_in_database = 0 THEN 'waiting' ELSE j.state END AS state,
       j.mode, j.source, j.columns,
              coalesce(j.target_table, j.source) AS target_table, j.target, j.model, j.prompt, j.batch_size, j.workers,
       tributary._job_owner(j)::regrole AS owner,
       j.rows_done,
       j.rows_truncated,
       q.queued AS rows_queued,
       e.failed AS rows_failed,
       j.rows_done + coalesce(q.queued, 0) + e.failed AS rows_total,
       r.rate AS rows_per_second,
       CASE WHEN r.rate > 0 THEN round(q.queued / r.rate) END AS seconds_left,
       j.last_error, j.last_error_at, j.created_at, j.started_at, j.last_batch_at, j.finished_at,
       p.pids AS worker_pids,
       CASE WHEN j.state IN ('pending', 'running') AND s.workers_in_database = 0
            THEN coalesce(s.waiting_for, 'a job worker to start') END AS waiting_for,
       NULL::jsonb AS parts                  -- sharded jobs: their parts (tributary.job_parts)
FROM tributary._jobs j
CROSS JOIN tributary._job_service() s
CROSS JOIN LATERAL (SELECT tributary._queued(j.queue) AS queued) q
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE status <> 'queued') AS failed
    FROM tributary._job_errors x WHERE x.job_id = j.id) e
CROSS JOIN LATERAL (
    SELECT round((sum(b.rows) / greatest(extract(epoch FROM now() - max(w.since)), 0.001))::numeric, 1) AS rate
    FROM (SELECT greatest(now() - interval '1 minute', j.started_at) AS since) w
    LEFT JOIN tributary._job_batches b ON b.job_id = j.id AND b.finished_at > w.since) r
CROSS JOIN LATERAL (
    SELECT coalesce(array_agg(wk.pid ORDER BY wk.pid), '{}') AS pids FROM wk WHERE wk.job = j.id) p
WHERE pg_has_role(tributary._job_owner(j), 'USAGE')
UNION ALL
-- Sharded jobs: the sums of their parts as the shards report them now (tributary.job_parts
-- for each part). state: unreachable when a shard cannot be reached, else invalid when a shard
-- answered an invalid state, else failed when a part failed, else done / cancelled / paused
-- when every part is, waiting when a part waits, else running.
SELECT s.id, s.name, a.state, s.mode, s.source,
       ARRAY(SELECT jsonb_array_elements_text(s.args->'columns')),
       NULL::regclass, (s.args->>'target')::name, s.args->>'model', s.args->>'prompt',
       (s.args->>'batch_size')::integer, (s.args->>'workers')::integer,
       tributary._sharded_owner(s)::regrole,
       a.rows_done, a.rows_truncated, a.rows_queued, a.rows_failed,
       a.rows_done + coalesce(a.rows_queued, 0) + a.rows_failed,
       a.rate, CASE WHEN a.rate > 0 THEN round(a.rows_queued / a.rate) END,
       a.last_error, a.last_error_at, s.created_at, a.started_at, a.last_batch_at, a.finished_at,
       '{}'::integer[], a.waiting_for, x.parts
FROM tributary._sharded_jobs s
CROSS JOIN LATERAL (SELECT tributary._job_parts_status(s.id) AS parts) x
CROSS JOIN LATERAL (
    SELECT CASE WHEN bool_or(p->>'state' = 'unreachable') THEN 'unreachable'
                WHEN bool_or(p->>'state' = 'invalid') THEN 'invalid'
                WHEN bool_or(p->>'state' IN ('failed', 'missing')) THEN 'failed'
                WHEN bool_and(p->>'state' = 'done') THEN 'done'
                WHEN bool_and(p->>'state' = 'cancelled') THEN 'cancelled'
                WHEN bool_and(p->>'state' = 'paused') THEN 'paused'
                WHEN bool_or(p->>'state' = 'waiting') THEN 'waiting'
                ELSE 'running' END AS state,
           coalesce(sum((p->>'rows_done')::bigint), 0)::bigint AS rows_done,
           coalesce(sum((p->>'rows_truncated')::bigint), 0)::bigint AS rows_truncated,
           sum((p->>'rows_queued')::bigint)::bigint AS rows_queued,
           coalesce(sum((p->>'rows_failed')::bigint), 0)::bigint AS rows_failed,
           sum((p->>'rows_per_second')::numeric) AS rate,
           string_agg(format('%s: %s', p->>'server', p->>'last_error'), '; ' ORDER BY p->>'server')
               FILTER (WHERE p->>'last_error' IS NOT NULL) AS last_error,
           max((p->>'last_error_at')::timestamptz) AS last_error_at,
           min((p->>'started_at')::timestamptz) AS started_at,
           max((p->>'last_batch_at')::timestamptz) AS last_batch_at,
           CASE WHEN bool_and(p->>'finished_at' IS NOT NULL) THEN max((p->>'finished_at')::timestamptz) END AS finished_at,
           string_agg(format('%s: %s', p->>'server', p->>'waiting_for'), '; ' ORDER BY p->>'server')
               FILTER (WHERE p->>'waiting_for' IS NOT NULL) AS waiting_for
    FROM jsonb_array_elements(coalesce(x.parts, '[]')) p) a
WHERE pg_has_role(tributary._sharded_owner(s), 'USAGE');

CREATE VIEW tributary.job_errors WITH (security_barrier) AS
SELECT x.job_id, j.name AS job_name, x.key, x.sqlstate, x.message, x.detail, x.attempts, x.status,
       x.first_failed_at, x.last_failed_at, x.next_attempt_at
FROM tributary._job_errors x JOIN tributary._jobs j ON j.id = x.job_id
WHERE pg_has_role(tributary._job_owner(j), 'USAGE');
GRANT SELECT ON tributary.jobs, tributary.job_errors TO PUBLIC;

-- pgvector's vector or halfvec type, schema-qualified.
CREATE FUNCTION tributary._vector_type(typname text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT format_type(t.oid, NULL) FROM pg_type t
      JOIN pg_depend d ON d.classid = 'pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e'
      JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'vector'
     WHERE t.typname = _vector_type.typname
$$;

-- Brings the job's recorded owner, and its queue's privileges, in step with the source table's
-- owner (after ALTER TABLE ... OWNER TO, REASSIGN OWNED, or a job made before 0.5.0 by a role
-- other than the table's owner): the new owner gets the queue, the old one loses it. Returns
-- the owner. Called by the continuous trigger, the workers and the event trigger before they
-- act as the owner.
CREATE FUNCTION tributary._job_sync_owner(job bigint) RETURNS oid
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    j tributary._jobs;
    o oid;
BEGIN
    SELECT * INTO j FROM tributary._jobs WHERE id = job;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    o := tributary._job_owner(j);
    IF o = j.owner AND coalesce(has_table_privilege(o, j.queue, 'INSERT'), true) THEN
        RETURN o;
    END IF;
    -- One session changes it; the others wait here and find it done.
    SELECT * INTO j FROM tributary._jobs WHERE id = job FOR UPDATE;
    o := tributary._job_owner(j);
    IF EXISTS (SELECT 1 FROM pg_class WHERE oid = j.queue) THEN
        IF o <> j.owner AND EXISTS (SELECT 1 FROM pg_roles WHERE oid = j.owner) THEN
            EXECUTE format('REVOKE ALL ON %s FROM %s', j.queue, j.owner::regrole);
        END IF;
        IF NOT has_table_privilege(o, j.queue, 'INSERT') THEN
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO %s', j.queue, o::regrole);
        END IF;
    END IF;
    IF o <> j.owner THEN
        UPDATE tributary._jobs SET owner = o WHERE id = job;
    END IF;
    RETURN o;
END $$;

-- The caller's job, or 42704: a job on a table whose owner the caller is not a member of does
-- not exist for the caller (the same error as an unknown id: other users' job ids are not
-- revealed). lock: also lock the job's row (not before dropping a job's triggers and queue,
-- which wait for the batch in flight, whose commit updates that row).
CREATE FUNCTION tributary._own_job(caller oid, job bigint, lock boolean DEFAULT true) RETURNS tributary._jobs
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE j tributary._jobs;
BEGIN
    IF job IS NULL THEN
        RAISE EXCEPTION 'job must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF lock THEN
        SELECT * INTO j FROM tributary._jobs x WHERE x.id = job AND pg_has_role(caller, tributary._job_owner(x), 'USAGE') FOR UPDATE;
    ELSE
        SELECT * INTO j FROM tributary._jobs x WHERE x.id = job AND pg_has_role(caller, tributary._job_owner(x), 'USAGE');
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object',
            HINT = 'Your jobs are listed in tributary.jobs.';
    END IF;
    RETURN j;
END $$;

-- The job functions below run as the extension's owner (tributary's bookkeeping) and are called
-- only through tributary._job_call (src/worker/), which passes the role that called the public
-- function (GetUserId(), not the session's outer role) as `caller` and the arguments as `a`.
-- Whatever reads or writes the owner's tables or values runs as the owner (tributary._run_as).

CREATE FUNCTION tributary._job_create(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
    source       regclass := (a->>'source')::oid;
    columns      text[] := CASE WHEN jsonb_typeof(a->'columns') = 'array'
                            THEN coalesce((SELECT array_agg(x) FROM jsonb_array_elements_text(a->'columns') x), '{}') END;
    target       name := a->>'target';
    model        text := a->>'model';
    mode         text := a->>'mode';
    target_table text := a->>'target_table';
    batch_size   integer := (a->>'batch_size')::integer;
    workers      integer := (a->>'workers')::integer;
    name         text := a->>'name';
    exclude      text[] := (SELECT array_agg(x) FROM jsonb_array_elements_text(CASE WHEN jsonb_typeof(a->'exclude') = 'array' THEN a->'exclude' END) x);
    parents      integer := coalesce((a->>'parents')::integer, 0);
    children     integer := coalesce((a->>'children')::integer, 0);
    time_columns text[] := (SELECT array_agg(x) FROM jsonb_array_elements_text(CASE WHEN jsonb_typeof(a->'time_columns') = 'array' THEN a->'time_columns' END) x);
    prompt       text := a->>'prompt';
    template     integer := coalesce((a->>'template')::integer, 2);
    whole     boolean := columns = '{*}';
    owner     oid;      -- the source's owner: the job acts as this role, whoever makes it
    m         tributary.models;
    pk        text[];           -- primary key columns, quoted
    pk_types  text[];
    src       text;     -- the source's name, schema-qualified
    tgt       regclass;
    tgt_name  text;
    tgt_type  text;
    c         text;
    id        bigint := nextval('tributary._jobs_id_seq');
    q         text := format('tributary.%I', '_queue_' || id);
    skind     "char";   -- the source's relkind: r or p
    src_from  text;     -- the source in FROM: ONLY for an ordinary table (not its inheritance children)
    n_kids    integer;
    ancestors text;
    jr        tributary._jobs;
BEGIN
    IF source IS NULL OR columns IS NULL OR target IS NULL THEN
        RAISE EXCEPTION 'source, columns and target must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT format('%I.%I', n.nspname, c.relname), c.relowner INTO src, owner
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = source;
    IF src IS NULL THEN
        RAISE EXCEPTION 'relation with OID % does not exist', source::oid USING ERRCODE = 'undefined_table';
    END IF;
    -- A temporary table lives in the creating session only; a worker would find another table
    -- of the same name, or none.
    IF (SELECT relpersistence FROM pg_class WHERE oid = source) = 't' THEN
        RAISE EXCEPTION 'jobs cannot embed temporary table "%"', (SELECT relname FROM pg_class WHERE oid = source) USING ERRCODE = 'feature_not_supported',
            HINT = 'Use tributary_embed_column() on temporary tables.';
    END IF;
    IF cardinality(columns) IS NULL OR cardinality(columns) = 0 THEN
        RAISE EXCEPTION 'columns must name at least one column' USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Name the text columns, or pass ''{*}'' to embed whole rows.';
    END IF;
    IF array_position(columns, NULL) IS NOT NULL OR array_position(exclude, NULL) IS NOT NULL
       OR array_position(time_columns, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'column names must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF mode IS NULL OR mode NOT IN ('once', 'continuous') THEN
        RAISE EXCEPTION 'mode must be once or continuous, not %', coalesce(mode, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF batch_size IS NULL OR batch_size NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'batch_size must be between 1 and 100000, not %', coalesce(batch_size::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF workers IS NULL OR workers NOT BETWEEN 1 AND 32 THEN
        RAISE EXCEPTION 'workers must be between 1 and 32, not %', coalesce(workers::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT whole AND (exclude IS NOT NULL OR parents <> 0 OR children <> 0 OR time_columns IS NOT NULL) THEN
        RAISE EXCEPTION 'exclude, parents, children and time_columns apply to whole rows only'
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Pass columns => ''{*}'' to embed whole rows.';
    END IF;
    IF parents < 0 OR children < 0 THEN
        RAISE EXCEPTION 'parents and children must be 0 or more' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The versions src/service/rows.rs knows (crates/engine/src/rowtext.rs TEMPLATE_VERSIONS).
    IF template NOT BETWEEN 1 AND 2 THEN
        RAISE EXCEPTION 'row template version % does not exist', template USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Versions 1, 2 exist (see the README, "Rows as text").';
    END IF;
    -- Only the table's owner (or a member of it) makes jobs on it: a job adds triggers to it and
    -- writes every row. The job acts as the table's owner, never as the caller.
    IF NOT pg_has_role(caller, owner, 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table %', src USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- Partitioned tables: the primary key holds the partition key, so a key is unique across the
    -- whole tree and the job covers every partition. An ordinary table: its own rows only (ONLY),
    -- since a primary key is not unique across inheritance children.
    skind := (SELECT relkind FROM pg_class WHERE oid = source);
    IF skind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION '"%" is not a table', src USING ERRCODE = 'wrong_object_type',
            HINT = 'Jobs embed ordinary and partitioned tables; for a view, make the job on its base table.';
    END IF;
    src_from := CASE WHEN skind = 'r' THEN 'ONLY ' ELSE '' END || src;
    -- Partitions that are foreign tables (postgres_fdw shards): a job on each shard, made there
    -- (sql/shards.sql); the model, the key and the target are the shards'.
    IF skind = 'p' AND EXISTS (SELECT 1 FROM pg_partition_tree(source) t JOIN pg_class r ON r.oid = t.relid
                               WHERE t.isleaf AND r.relkind = 'f') THEN
        RETURN tributary._sharded_job_create(caller, a, source, owner);
    END IF;

    SELECT * INTO m FROM tributary.models x WHERE x.name = coalesce(model, current_setting('tributary.model'));
    IF NOT FOUND THEN
        RAISE EXCEPTION 'model "%" does not exist', coalesce(model, current_setting('tributary.model'))
            USING ERRCODE = 'undefined_object',
                        HINT = 'Registered models are listed in tributary.models; see tributary_register_model().';
    END IF;
    prompt := coalesce(prompt, m.default_prompt);
    IF prompt IS NOT NULL AND NOT m.prompts ? prompt THEN
        RAISE EXCEPTION 'model "%" has no prompt "%"', m.name, prompt USING ERRCODE = 'undefined_object',
            HINT = CASE WHEN m.prompts = '{}' THEN 'The model has no prompts; leave prompt NULL.'
                        ELSE format('Its prompts: %s (tributary_info() shows them).',
                                    (SELECT string_agg(k, ', ' ORDER BY k) FROM jsonb_object_keys(m.prompts) k)) END;
    END IF;

    SELECT array_agg(quote_ident(a.attname) ORDER BY k.ord), array_agg(format_type(a.atttypid, a.atttypmod) ORDER BY k.ord)
      INTO pk, pk_types
      FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
     WHERE i.indrelid = source AND i.indisprimary;
    IF pk IS NULL THEN
        RAISE EXCEPTION 'table % has no primary key', src USING ERRCODE = 'invalid_table_definition',
            DETAIL = 'A job keeps track of rows by their primary key.',
            HINT = 'Add one, for example: ALTER TABLE ... ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY.';
    END IF;

    IF NOT whole THEN
        FOREACH c IN ARRAY columns LOOP
            IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = source AND attname = c AND attnum > 0 AND NOT attisdropped) THEN
                RAISE EXCEPTION 'column "%" of relation "%" does not exist', c, src USING ERRCODE = 'undefined_column';
            END IF;
        END LOOP;
    END IF;

    -- The target: a column of source, or of a separate table keyed like source (made if missing,
    -- owned by the source's owner).
    IF target_table IS NULL THEN
        tgt := source;
    ELSE
        -- An unqualified name goes into the source's schema; the name is rebuilt from its parts,
        -- quoted (parse_ident raises 22023 on anything that is not a name).
        IF cardinality(parse_ident(target_table)) = 1 THEN
            target_table := format('%I.%I', (SELECT n.nspname FROM pg_namespace n JOIN pg_class r ON r.relnamespace = n.oid
                                            WHERE r.oid = source), (parse_ident(target_table))[1]);
        ELSE
            target_table := (SELECT string_agg(quote_ident(x), '.') FROM unnest(parse_ident(target_table)) x);
        END IF;
        tgt := to_regclass(target_table);
        IF tgt IS NULL THEN
            IF NOT has_schema_privilege(caller, (parse_ident(target_table))[1], 'CREATE')
               OR NOT has_schema_privilege(owner, (parse_ident(target_table))[1], 'CREATE') THEN
                RAISE EXCEPTION 'permission denied to create table % in its schema', target_table
                    USING ERRCODE = 'insufficient_privilege',
                          DETAIL = format('The target table is made for the source''s owner, %s.', owner::regrole);
            END IF;
            EXECUTE format('CREATE TABLE %s (%s, %I %s(%s), PRIMARY KEY (%s))', target_table,
                (SELECT string_agg(p || ' ' || t, ', ') FROM unnest(pk, pk_types) AS x(p, t)),
                target, tributary._vector_type(CASE WHEN m.precision = 'fp16' THEN 'halfvec' ELSE 'vector' END), m.dimension,
                array_to_string(pk, ', '));
            tgt := to_regclass(target_table);
            EXECUTE format('ALTER TABLE %s OWNER TO %s', tgt, owner::regrole);
        ELSIF NOT pg_has_role(caller, (SELECT relowner FROM pg_class WHERE oid = tgt), 'USAGE') THEN
            RAISE EXCEPTION 'must be owner of table %', tgt USING ERRCODE = 'insufficient_privilege';
        ELSIF (SELECT relkind FROM pg_class WHERE oid = tgt) NOT IN ('r', 'p') THEN
            RAISE EXCEPTION '"%" is not a table', tgt USING ERRCODE = 'wrong_object_type',
                HINT = 'A target table is an ordinary or partitioned table.';
        ELSIF (SELECT relpersistence FROM pg_class WHERE oid = tgt) = 't' THEN
            RAISE EXCEPTION 'jobs cannot write to temporary table %', tgt USING ERRCODE = 'feature_not_supported';
        ELSIF NOT has_table_privilege(owner, tgt, 'SELECT, INSERT, UPDATE, DELETE') THEN
            RAISE EXCEPTION 'the owner of table %, %, may not write table %', src, owner::regrole, tgt
                USING ERRCODE = 'insufficient_privilege',
                      DETAIL = 'A job reads and writes as its source table''s owner.',
                      HINT = format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO %s;', tgt, owner::regrole);
        END IF;
    END IF;
    tgt_name := (SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tgt);
    -- 42703, 42804, 22000 (sql/bootstrap.sql), as tributary_embed_column checks its target.
    tgt_type := tributary._target_column(tgt, target, m.name, m.dimension, relname => tgt_name);
    -- 22023 when another model filled the target column (sql/columns.sql); else recorded.
    PERFORM tributary._bind_column(tgt, target, m.name, prompt, format('a job of %s', owner::regrole));
    IF tgt <> source AND NOT EXISTS (
        SELECT 1 FROM pg_index i WHERE i.indrelid = tgt AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
           AND (SELECT array_agg(quote_ident(a.attname) ORDER BY a.attname) FROM unnest(i.indkey) k(n)
                JOIN pg_attribute a ON a.attrelid = tgt AND a.attnum = k.n)
             = (SELECT array_agg(x ORDER BY x) FROM unnest(pk) x)) THEN
        RAISE EXCEPTION 'table % has no unique key on (%)', tgt_name, array_to_string(pk, ', ')
            USING ERRCODE = 'invalid_table_definition',
            HINT = 'A target table holds one embedding per source row: its primary key must be the source''s primary key columns.';
    END IF;

    IF name IS NOT NULL AND EXISTS (SELECT 1 FROM tributary._jobs x WHERE x.owner = owner AND x.name = name) THEN
        RAISE EXCEPTION 'job "%" already exists', name USING ERRCODE = 'duplicate_object',
            HINT = 'Job names are unique per owner; pick another name, or drop the old job with tributary_job_drop().';
    END IF;

    -- The queue: source keys still to embed. No unique key: a trigger never waits for (or is
    -- skipped because of) a batch that holds the same key; a claim takes a key's duplicates once.
    EXECUTE format('CREATE TABLE %s (%s)', q, (SELECT string_agg(p || ' ' || t, ', ') FROM unnest(pk, pk_types) AS x(p, t)));
    EXECUTE format('CREATE INDEX ON %s (%s)', q, array_to_string(pk, ', '));
    -- Every statement over the queue's rows (claims, requeues, the continuous trigger's inserts)
    -- runs as the owner: its key values are of the owner's types, whose domains' checks and
    -- casts are the owner's code.
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO %s', q, owner::regrole);
    -- No write between the fill and the triggers goes unseen.
    -- (A partitioned table's partitions are locked with it; an ordinary table's children are not
    -- the job's.)
    IF mode = 'continuous' THEN
        EXECUTE format('LOCK TABLE %s IN SHARE MODE', src_from);
    END IF;

    INSERT INTO tributary._jobs (id, name, source, columns, target_table, target, target_type, model, prompt, batch_size,
        mode, workers, row_options, owner, queue, claim_sql, claim_keys_sql, select_sql, write_sql, requeue_sql, template)
    VALUES (id, coalesce(name, CASE WHEN EXISTS (SELECT 1 FROM tributary._jobs x WHERE x.owner = owner AND x.name = format('%s.%s', src, target))
                                THEN format('%s.%s (job %s)', src, target, id) ELSE format('%s.%s', src, target) END), source, columns, nullif(tgt, source), target, tgt_type,
        m.name, prompt, batch_size, mode, workers,
        CASE WHEN whole THEN jsonb_build_object('exclude', coalesce(exclude, '{}'), 'parents', parents,
             'children', children, 'time_columns', coalesce(time_columns, '{}')) END,
        owner, q::regclass, '', '', '', '', '', template);
    SELECT * INTO jr FROM tributary._jobs x WHERE x.id = id;
    jr := tributary._job_build(jr);
    UPDATE tributary._jobs x SET claim_sql = jr.claim_sql, claim_keys_sql = jr.claim_keys_sql, select_sql = jr.select_sql,
           write_sql = jr.write_sql, requeue_sql = jr.requeue_sql, enqueue_sql = jr.enqueue_sql
     WHERE x.id = id;
    -- Read as the owner: the owner's types, casts and policies run with the owner's rights.
    PERFORM tributary._run_as(owner, tributary._job_fill_sql(jr, source));
    IF mode = 'continuous' THEN
        -- On every table of a partitioned source's tree: a statement fires the statement-level
        -- triggers of the table it names only, and may name any partition. Partitions attached
        -- or created later get them from the event trigger tributary_job_partitions.
        PERFORM tributary._job_sync_tables(jr, false);
        -- Ancestors that get no trigger (tributary._job_watchers): their statements go unseen.
        SELECT string_agg(x.rel::regclass::text, ', ' ORDER BY x.depth) INTO ancestors
          FROM tributary._job_ancestors(source) x
         WHERE x.rel NOT IN (SELECT tributary._job_watchers(source, owner));
        IF ancestors IS NOT NULL THEN
            RAISE NOTICE 'continuous job % does not see writes to "%" made through %', id, src, ancestors
                USING DETAIL = 'A statement fires the statement-level triggers of the table it names only; the job''s owner must own an ancestor, and the ancestor have the key''s columns, for the job to put triggers on it.',
                      HINT = 'Write to the table itself, not through these tables.';
        END IF;
    END IF;
    IF skind = 'r' THEN
        WITH RECURSIVE down(rel) AS (SELECT inhrelid FROM pg_inherits WHERE inhparent = source
                                     UNION SELECT i.inhrelid FROM pg_inherits i JOIN down ON i.inhparent = down.rel)
        SELECT count(*) INTO n_kids FROM down;
        IF n_kids > 0 THEN
            RAISE NOTICE 'job % embeds the rows of "%" only, not those of its % inheritance child table(s)', id, src, n_kids
                USING DETAIL = 'A primary key is not unique across an inheritance tree.',
                      HINT = 'Make a job for each child table.';
        END IF;
    END IF;
    PERFORM tributary._wake_launcher();
    RETURN id;
END $fn$;

-- A job's statements (claim_sql ... enqueue_sql), built from the catalog as it is now: the
-- names of the source, its target and their columns are read afresh, so a job rebuilt after
-- ALTER TABLE ... RENAME (of the table, a column or its schema) runs under the new names. Key
-- values travel as jsonb keyed by the queue's own column names (fixed when the job was made);
-- the source's primary key columns and the target table's key columns are matched to them by
-- position. Every identifier is quoted; nothing here runs a user's code.
-- Errors: 42P01 source gone; 42P16 no primary key; 42703 a text or target column missing.
CREATE FUNCTION tributary._job_build(j tributary._jobs) RETURNS tributary._jobs
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    whole     boolean := j.columns = '{*}';
    src       text;
    skind     "char";
    src_from  text;
    tgt       regclass := coalesce(j.target_table, j.source);
    tgt_name  text;
    tgt_from  text;
    vtype     text := tributary._vector_type(j.target_type);
    pk        text[];   -- the source's primary key columns, quoted, in key order
    qk        text[];   -- the queue's columns, quoted (the same number, in key order)
    tk        text[];   -- the target table's key columns, quoted
    c         text;
    k_src text; k_new text; k_old text; k_kk text; k_k text; k_g text; k_q text; q_cols text; t_cols text; k_u text;
    text_expr text;
    differs   text;
    nonnull   text := 'true';   -- over the new rows n
    nonnull_t text := 'true';   -- over the source rows t
    excl      text[];
    arr       text;
    guard     text;
    checked   text;
BEGIN
    SELECT format('%I.%I', n.nspname, c.relname), c.relkind INTO src, skind
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = j.source;
    IF src IS NULL THEN
        RAISE EXCEPTION 'the source table of job % (OID %) does not exist', j.id, j.source::oid USING ERRCODE = 'undefined_table';
    END IF;
    src_from := CASE WHEN skind = 'r' THEN 'ONLY ' ELSE '' END || src;
    SELECT array_agg(quote_ident(a.attname) ORDER BY k.ord) INTO pk
      FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
     WHERE i.indrelid = j.source AND i.indisprimary;
    SELECT array_agg(quote_ident(a.attname) ORDER BY a.attnum) INTO qk
      FROM pg_attribute a WHERE a.attrelid = j.queue AND a.attnum > 0 AND NOT a.attisdropped;
    IF pk IS NULL OR cardinality(pk) <> cardinality(qk) THEN
        RAISE EXCEPTION 'table % has no primary key of % column(s)', src, cardinality(qk) USING ERRCODE = 'invalid_table_definition',
            DETAIL = format('Job %s keeps track of rows by the primary key the table had when it was made.', j.id);
    END IF;
    IF NOT whole THEN
        FOREACH c IN ARRAY j.columns LOOP
            IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = j.source AND attname = c AND attnum > 0 AND NOT attisdropped) THEN
                RAISE EXCEPTION 'column "%" of relation "%" does not exist', c, src USING ERRCODE = 'undefined_column';
            END IF;
        END LOOP;
    END IF;
    tgt_name := (SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tgt);
    IF tgt_name IS NULL THEN
        RAISE EXCEPTION 'the target table of job % (OID %) does not exist', j.id, tgt::oid USING ERRCODE = 'undefined_table';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = tgt AND attname = j.target AND attnum > 0 AND NOT attisdropped) THEN
        RAISE EXCEPTION 'column "%" of relation "%" does not exist', j.target, tgt_name USING ERRCODE = 'undefined_column';
    END IF;
    tgt_from := CASE WHEN (SELECT relkind FROM pg_class WHERE oid = tgt) = 'r' THEN 'ONLY ' ELSE '' END || tgt_name;
    IF tgt = j.source THEN
        tk := pk;
    ELSE
        -- The target table's primary key, by position; else columns named as the source's key.
        SELECT array_agg(quote_ident(a.attname) ORDER BY k.ord) INTO tk
          FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
          JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
         WHERE i.indrelid = tgt AND i.indisprimary;
        IF tk IS NULL OR cardinality(tk) <> cardinality(pk) THEN
            tk := pk;
        END IF;
    END IF;

    -- Key expressions: t = source row, k/kk = key from a jsonb (queue columns), q = queue row,
    -- n/o = new/old rows (source columns), g = target row, u = a written row (queue columns).
    k_src := (SELECT string_agg('t.' || p, ', ') FROM unnest(pk) p);
    k_new := (SELECT string_agg('n.' || p, ', ') FROM unnest(pk) p);
    k_old := (SELECT string_agg('o.' || p, ', ') FROM unnest(pk) p);
    k_k   := (SELECT string_agg('k.' || p, ', ') FROM unnest(qk) p);
    k_kk  := (SELECT string_agg('kk.' || p, ', ') FROM unnest(qk) p);
    k_q   := (SELECT string_agg('q.' || p, ', ') FROM unnest(qk) p);
    k_u   := (SELECT string_agg('u.' || p, ', ') FROM unnest(qk) p);
    k_g   := (SELECT string_agg('g.' || p, ', ') FROM unnest(tk) p);
    q_cols := array_to_string(qk, ', ');
    t_cols := array_to_string(tk, ', ');

    IF whole THEN
        text_expr := 'tributary._row_json(t.*)::pg_catalog.text';   -- t.*: never a column named t
        -- Columns whose change does not change the row's text: the target and other embeddings.
        SELECT array_agg(a.attname::text) INTO excl FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
         WHERE a.attrelid = j.source AND a.attnum > 0 AND NOT a.attisdropped
           AND (t.typname IN ('vector', 'halfvec', 'sparsevec', 'bytea', 'tsvector') OR (tgt = j.source AND a.attname = j.target));
        excl := coalesce(excl, '{}') || coalesce((SELECT array_agg(x) FROM jsonb_array_elements_text(j.row_options->'exclude') x), '{}');
        differs := format('(tributary._row_jsonb(o.*) OPERATOR(pg_catalog.-) %L::pg_catalog.text[]) IS DISTINCT FROM (tributary._row_jsonb(n.*) OPERATOR(pg_catalog.-) %L::pg_catalog.text[])', excl, excl);
        guard := format('(tributary._row_jsonb(t.*) OPERATOR(pg_catalog.-) %L::pg_catalog.text[])::pg_catalog.text', excl);
    ELSE
        arr := (SELECT string_agg('tributary._text(t.' || quote_ident(x) || ')', ', ') FROM unnest(j.columns) x);
        text_expr := format('CASE WHEN pg_catalog.num_nonnulls(%s) OPERATOR(pg_catalog.>) 0 THEN pg_catalog.concat_ws(E''\n'', %s) END', arr, arr);
        -- As text: every type has one, not every type has "=".
        differs := format('ROW(%s) IS DISTINCT FROM ROW(%s)',
            (SELECT string_agg('tributary._text(o.' || quote_ident(x) || ')', ', ') FROM unnest(j.columns) x),
            (SELECT string_agg('tributary._text(n.' || quote_ident(x) || ')', ', ') FROM unnest(j.columns) x));
        nonnull := format('pg_catalog.num_nonnulls(%s) OPERATOR(pg_catalog.>) 0', (SELECT string_agg('n.' || quote_ident(x), ', ') FROM unnest(j.columns) x));
        nonnull_t := format('pg_catalog.num_nonnulls(%s) OPERATOR(pg_catalog.>) 0', arr);
        guard := text_expr;
    END IF;
    checked := CASE WHEN j.mode = 'continuous' THEN format('%s IS NOT DISTINCT FROM u.g', guard) ELSE 'true' END;

    j.claim_sql := format('WITH c AS (DELETE FROM %s AS q USING (SELECT ctid AS tid FROM %s ORDER BY %s LIMIT $1 FOR UPDATE SKIP LOCKED) AS s '
               'WHERE q.ctid OPERATOR(pg_catalog.=) s.tid RETURNING q.*) SELECT pg_catalog.jsonb_agg(DISTINCT tributary._row_jsonb(c.*))::text FROM c', j.queue, j.queue, q_cols);
    j.claim_keys_sql := format('WITH c AS (DELETE FROM %s AS q USING pg_catalog.jsonb_populate_recordset(NULL::%s, $1::pg_catalog.jsonb) AS kk WHERE (%s) OPERATOR(pg_catalog.=) (%s) RETURNING q.*) '
               'SELECT pg_catalog.jsonb_agg(DISTINCT tributary._row_jsonb(c.*))::text FROM c', j.queue, j.queue, k_q, k_kk);
    j.select_sql := format('SELECT tributary._row_jsonb(k.*)::pg_catalog.text, %s, %s FROM %s AS t JOIN pg_catalog.jsonb_populate_recordset(NULL::%s, $1::pg_catalog.jsonb) AS k ON (%s) OPERATOR(pg_catalog.=) (%s) '
               'FOR KEY SHARE OF t', text_expr, guard, src_from, j.queue, k_src, k_k);
    j.write_sql := CASE WHEN tgt = j.source THEN
            format('UPDATE %s AS t SET %I = u.e FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.jsonb[]), pg_catalog.unnest($2::%s[]), pg_catalog.unnest($3::pg_catalog.text[])) AS u(k, e, g) '
                   'CROSS JOIN LATERAL pg_catalog.jsonb_populate_record(NULL::%s, u.k) AS kk WHERE (%s) OPERATOR(pg_catalog.=) (%s) AND %s',
                   src_from, j.target, vtype, j.queue, k_src, k_kk, checked)
        ELSE
            format('WITH u AS (SELECT kk.*, u.e FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.jsonb[]), pg_catalog.unnest($2::%s[]), pg_catalog.unnest($3::pg_catalog.text[])) AS u(k, e, g) '
                   'CROSS JOIN LATERAL pg_catalog.jsonb_populate_record(NULL::%s, u.k) AS kk '
                   'WHERE EXISTS (SELECT 1 FROM %s AS t WHERE (%s) OPERATOR(pg_catalog.=) (%s) AND %s)), '
                   'd AS (DELETE FROM %s AS g USING u WHERE u.e IS NULL AND (%s) OPERATOR(pg_catalog.=) (%s)) '
                   'INSERT INTO %s AS g (%s, %I) SELECT %s, u.e FROM u WHERE u.e IS NOT NULL '
                   'ON CONFLICT (%s) DO UPDATE SET %I = EXCLUDED.%I',
                   vtype, j.queue, src_from, k_src, k_kk, checked, tgt_from, k_g, k_u,
                   tgt_name, t_cols, j.target, k_u, t_cols, j.target, j.target)
        END;
    j.requeue_sql := format('INSERT INTO %s SELECT (pg_catalog.jsonb_populate_record(NULL::%s, k)).* FROM pg_catalog.jsonb_array_elements($1::pg_catalog.jsonb) AS x(k) '
               'ON CONFLICT DO NOTHING', j.queue, j.queue);

    IF j.mode = 'continuous' THEN
        -- Run by tributary._job_trigger as the owner over the transition tables new_rows and
        -- old_rows of the statement that fired it (the source's columns).
        j.enqueue_sql := jsonb_strip_nulls(jsonb_build_object(
            'INSERT', format('INSERT INTO %s SELECT %s FROM new_rows n WHERE %s', j.queue, k_new, nonnull),
            'UPDATE', format('INSERT INTO %s SELECT %s FROM new_rows n LEFT JOIN old_rows o ON (%s) OPERATOR(pg_catalog.=) (%s) WHERE (%s) IS NULL OR %s',
                             j.queue, k_new, k_old, k_new, k_old, differs)
                      || CASE WHEN tgt <> j.source THEN
                             -- separate target table: keys that went away take their embedding along
                             format('; DELETE FROM %s g USING old_rows o WHERE (%s) OPERATOR(pg_catalog.=) (%s) AND NOT EXISTS (SELECT 1 FROM new_rows n WHERE (%s) OPERATOR(pg_catalog.=) (%s))',
                                    tgt_from, k_g, k_old, k_new, k_old) ELSE '' END,
            'DELETE', CASE WHEN tgt <> j.source THEN format('DELETE FROM %s g USING old_rows o WHERE (%s) OPERATOR(pg_catalog.=) (%s)', tgt_from, k_g, k_old) END,
            -- A TRUNCATE fires the trigger of every table it empties: of one partition, only the
            -- embeddings of rows gone go.
            'TRUNCATE', CASE WHEN tgt <> j.source AND skind = 'r' THEN format('TRUNCATE %s', tgt_from)
                             WHEN tgt <> j.source THEN format('DELETE FROM %s g WHERE NOT EXISTS (SELECT 1 FROM %s t WHERE (%s) OPERATOR(pg_catalog.=) (%s))',
                                                           tgt_from, src, k_src, k_g) END,
            -- The triggers on the source's ancestors (partitioned tables above a partition,
            -- inheritance parents), whose transition tables hold rows of other tables too: keys
            -- of rows now in the source are queued (of the ancestor's columns only the key's are
            -- used), and with a target table, embeddings of keys no longer in it go.
            'INSERT via', format('INSERT INTO %s SELECT DISTINCT %s FROM new_rows n WHERE EXISTS (SELECT 1 FROM %s t WHERE (%s) OPERATOR(pg_catalog.=) (%s) AND %s)',
                                 j.queue, k_new, src_from, k_src, k_new, nonnull_t),
            'UPDATE via', format('INSERT INTO %s SELECT DISTINCT %s FROM new_rows n WHERE EXISTS (SELECT 1 FROM %s t WHERE (%s) OPERATOR(pg_catalog.=) (%s) AND %s)',
                                 j.queue, k_new, src_from, k_src, k_new, nonnull_t)
                          || CASE WHEN tgt <> j.source THEN
                                 format('; DELETE FROM %s g USING old_rows o WHERE (%s) OPERATOR(pg_catalog.=) (%s) AND NOT EXISTS (SELECT 1 FROM %s t WHERE (%s) OPERATOR(pg_catalog.=) (%s))',
                                        tgt_from, k_g, k_old, src_from, k_src, k_old) ELSE '' END,
            'DELETE via', CASE WHEN tgt <> j.source THEN
                                 format('DELETE FROM %s g USING old_rows o WHERE (%s) OPERATOR(pg_catalog.=) (%s) AND NOT EXISTS (SELECT 1 FROM %s t WHERE (%s) OPERATOR(pg_catalog.=) (%s))',
                                        tgt_from, k_g, k_old, src_from, k_src, k_old) END));
    ELSE
        j.enqueue_sql := NULL;
    END IF;
    RETURN j;
END $$;

-- The tables a continuous job's triggers belong on: the source, and for a partitioned source
-- every partitioned table and partition of its tree, at any depth (foreign-table partitions
-- cannot have triggers with transition tables and are left out).
CREATE FUNCTION tributary._job_tables(source regclass) RETURNS SETOF regclass
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT source
    UNION
    SELECT p.relid FROM pg_partition_tree(source) p JOIN pg_class c ON c.oid = p.relid
     WHERE c.relkind IN ('r', 'p')
$$;

-- The partition and inheritance ancestors of `source`, nearest first.
CREATE FUNCTION tributary._job_ancestors(source regclass) RETURNS TABLE (rel regclass, depth integer)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    WITH RECURSIVE up(rel, depth) AS (SELECT inhparent, 1 FROM pg_inherits WHERE inhrelid = source
                                      UNION ALL SELECT i.inhparent, up.depth + 1 FROM pg_inherits i JOIN up ON i.inhrelid = up.rel)
    SELECT rel::regclass, min(depth) FROM up GROUP BY rel
$$;

-- The ancestors of a continuous job's source that get its "via" triggers: a statement naming
-- an ancestor fires the ancestor's statement-level triggers only, whatever rows of the source it
-- changes. Only ordinary and partitioned tables owned by the job's owner (or a role it is a
-- member of: the triggers run the owner's statements on that table's writes) and having every
-- column of the source's primary key.
CREATE FUNCTION tributary._job_watchers(source regclass, owner oid) RETURNS SETOF regclass
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT a.rel FROM tributary._job_ancestors(source) a JOIN pg_class c ON c.oid = a.rel
     WHERE c.relkind IN ('r', 'p') AND pg_has_role(owner, c.relowner, 'USAGE')
       AND NOT EXISTS (
           SELECT 1 FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) k(attnum)
             JOIN pg_attribute sa ON sa.attrelid = i.indrelid AND sa.attnum = k.attnum
            WHERE i.indrelid = source AND i.indisprimary
              AND NOT EXISTS (SELECT 1 FROM pg_attribute aa WHERE aa.attrelid = a.rel AND aa.attname = sa.attname
                                AND aa.atttypid = sa.atttypid AND aa.attnum > 0 AND NOT aa.attisdropped))
$$;

-- The job's triggers, wherever they are: (table, trigger name). Found by function and name, so
-- a partition detached since still gives its triggers back.
CREATE FUNCTION tributary._job_triggers(job bigint) RETURNS TABLE (rel regclass, tgname name)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT t.tgrelid::regclass, t.tgname FROM pg_trigger t
     WHERE t.tgfoid = 'tributary._job_trigger()'::regprocedure
       AND t.tgname IN (SELECT ('tributary_job_' || job || '_' || v || x)::name
                          FROM unnest(ARRAY['insert', 'update', 'delete', 'truncate']) x, unnest(ARRAY['', 'via_']) v)
$$;

-- The primary key columns of `rel`, quoted, in key order (NULL: no primary key).
CREATE FUNCTION tributary._key_columns(rel regclass) RETURNS text[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT array_agg(quote_ident(a.attname) ORDER BY k.ord)
      FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
     WHERE i.indrelid = rel AND i.indisprimary
$$;

-- The statement that queues the rows of `rel` still to embed (rows whose target is NULL, or
-- missing from the target table, and that have some text): `rel` is the job's source (the whole
-- tree of a partitioned one; an ordinary table's own rows only) or a table of its tree. Run as
-- the job's owner.
CREATE FUNCTION tributary._job_fill_sql(j tributary._jobs, rel regclass) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    pk       text[] := tributary._key_columns(j.source);
    tk       text[];
    tgt_from text;
    filter   text;
    nonnull  text := 'true';
BEGIN
    IF j.target_table IS NULL THEN
        filter := format('t.%I IS NULL', j.target);
    ELSE
        tgt_from := (SELECT CASE WHEN c.relkind = 'r' THEN 'ONLY ' ELSE '' END || format('%I.%I', n.nspname, c.relname)
                       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = j.target_table);
        tk := tributary._key_columns(j.target_table);
        IF tk IS NULL OR cardinality(tk) <> cardinality(pk) THEN
            tk := pk;
        END IF;
        filter := format('NOT EXISTS (SELECT 1 FROM %s g WHERE (%s) OPERATOR(pg_catalog.=) (%s))', tgt_from,
                         (SELECT string_agg('g.' || p, ', ') FROM unnest(tk) p), (SELECT string_agg('t.' || p, ', ') FROM unnest(pk) p));
    END IF;
    IF j.columns <> '{*}' THEN
        nonnull := format('pg_catalog.num_nonnulls(%s) OPERATOR(pg_catalog.>) 0', (SELECT string_agg('t.' || quote_ident(x), ', ') FROM unnest(j.columns) x));
    END IF;
    RETURN (SELECT format('INSERT INTO %s SELECT %s FROM %s%I.%I t WHERE %s AND %s', j.queue,
                          (SELECT string_agg('t.' || p, ', ') FROM unnest(pk) p),
                          CASE WHEN c.relkind = 'r' THEN 'ONLY ' ELSE '' END, n.nspname, c.relname, filter, nonnull)
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = rel);
END $$;

-- Puts a continuous job's triggers on exactly the tables of tributary._job_tables(source): adds
-- them where missing (a partition created or attached since; with `fill`, its rows still to
-- embed are queued, as the owner) and drops them from tables that left the tree (a detached
-- partition). Runs as the extension's owner: CREATE/DROP TRIGGER only, no code of a user's.
CREATE FUNCTION tributary._job_sync_tables(j tributary._jobs, fill boolean) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r     record;
    rel   regclass;
    owner oid := tributary._job_owner(j);
BEGIN
    FOR r IN SELECT x.rel, x.tgname FROM tributary._job_triggers(j.id) x
              WHERE (CASE WHEN x.tgname LIKE '%\_via\_%' THEN x.rel NOT IN (SELECT tributary._job_watchers(j.source, owner))
                          ELSE x.rel NOT IN (SELECT tributary._job_tables(j.source)) END) LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', r.tgname, r.rel);
    END LOOP;
    -- The source's ancestors: statements naming them.
    FOR rel IN SELECT x FROM tributary._job_watchers(j.source, owner) x
                WHERE NOT EXISTS (SELECT 1 FROM tributary._job_triggers(j.id) t WHERE t.rel = x AND t.tgname = ('tributary_job_' || j.id || '_via_insert')::name)
                ORDER BY x::oid LOOP
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON %s REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tributary._job_trigger(%s, ''via'')',
            'tributary_job_' || j.id || '_via_insert', rel, j.id);
        EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %s REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tributary._job_trigger(%s, ''via'')',
            'tributary_job_' || j.id || '_via_update', rel, j.id);
        IF j.target_table IS NOT NULL THEN
            EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON %s REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION tributary._job_trigger(%s, ''via'')',
                'tributary_job_' || j.id || '_via_delete', rel, j.id);
        END IF;
    END LOOP;
    FOR rel IN SELECT x FROM tributary._job_tables(j.source) x
                WHERE NOT EXISTS (SELECT 1 FROM tributary._job_triggers(j.id) t WHERE t.rel = x AND t.tgname = ('tributary_job_' || j.id || '_insert')::name)
                ORDER BY x::oid LOOP
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON %s REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tributary._job_trigger(%s)',
            'tributary_job_' || j.id || '_insert', rel, j.id);
        EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %s REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tributary._job_trigger(%s)',
            'tributary_job_' || j.id || '_update', rel, j.id);
        IF j.target_table IS NOT NULL THEN
            EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON %s REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION tributary._job_trigger(%s)',
                'tributary_job_' || j.id || '_delete', rel, j.id);
            EXECUTE format('CREATE TRIGGER %I AFTER TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION tributary._job_trigger(%s)',
                'tributary_job_' || j.id || '_truncate', rel, j.id);
        END IF;
        IF fill AND (SELECT relkind FROM pg_class WHERE oid = rel) = 'r' THEN
            BEGIN
                PERFORM tributary._run_as(owner, tributary._job_fill_sql(j, rel));
            EXCEPTION WHEN insufficient_privilege THEN
                -- A partition of another role's, attached by a superuser: its later writes are
                -- queued, the rows already there are not; the DDL goes on.
                RAISE WARNING 'continuous job % did not queue the rows of %: %', j.id, rel, SQLERRM
                    USING ERRCODE = 'insufficient_privilege',
                          HINT = format('Grant %s SELECT on %s and make a once job on it for the rows already there.', owner::regrole, rel);
            END;
        END IF;
    END LOOP;
END $$;

-- `names` (columns a job names in `rel`) as they are after a DDL command: a name `rel` no longer
-- has becomes the one column the command renamed (`renamed`: new names) that `rel` has and
-- the job does not name yet, when exactly one name went and one such column came; otherwise
-- (a dropped column) NULL. ALTER TABLE ... RENAME COLUMN renames one column per command.
CREATE FUNCTION tributary._follow_names(rel regclass, names text[], renamed text[]) RETURNS text[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    WITH have AS (SELECT a.attname::text AS n FROM pg_attribute a WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped),
    missing AS (SELECT x FROM unnest(names) x WHERE x NOT IN (SELECT n FROM have)),
    came AS (SELECT DISTINCT r FROM unnest(renamed) r WHERE r IN (SELECT n FROM have) AND r <> ALL (names))
    SELECT array_agg(CASE WHEN x IN (SELECT n FROM have) THEN x
                          WHEN (SELECT count(*) FROM missing) = 1 AND (SELECT count(*) FROM came) = 1 THEN (SELECT r FROM came)
                     END ORDER BY o)
      FROM unnest(names) WITH ORDINALITY AS u(x, o)
$$;

-- Takes a job's triggers off every table (its queue stays).
CREATE FUNCTION tributary._job_drop_triggers(j tributary._jobs) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE r record;
BEGIN
    FOR r IN SELECT * FROM tributary._job_triggers(j.id) LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', r.tgname, r.rel);
    END LOOP;
END $$;

-- The event trigger tributary_job_partitions (ddl_command_end of CREATE TABLE, ALTER TABLE and
-- ALTER SCHEMA): keeps every job whose source or target the command changed in step with it,
-- so that a DBA's routine change never stops the table's writers.
-- - RENAME of the table, a column or the schema: the job follows (its names are updated and its
--   statements rebuilt from the catalog, tributary._job_build).
-- - DROP COLUMN of a column the job embeds or writes: the job cannot go on; its triggers are
--   taken off (writers go on), it is paused, and last_error says why (tributary.jobs). A
--   dropped excluded column is just no longer excluded.
-- - OWNER TO: the job acts as the new owner (tributary._job_sync_owner).
-- - A continuous job on a partitioned table whose tree gained a partition (CREATE TABLE ...
--   PARTITION OF, ATTACH PARTITION, at any depth) puts its triggers on it and queues its rows;
--   one whose tree lost one (DETACH PARTITION) takes its triggers off.
-- SECURITY DEFINER: it runs as the extension's owner whoever runs the DDL, and runs no code of a
-- user's except as the table's owner (tributary._run_as).
CREATE FUNCTION tributary._job_ddl() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    rels    oid[];
    nsps    oid[];
    renamed text[];
    j       tributary._jobs;
    nj      tributary._jobs;
    cols    text[];
    excl    text[];
    names   text[];
    after   text[];
    n_cols  integer;
    tgt_in  boolean;
    gone    text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tributary._jobs WHERE state <> 'cancelled') THEN
        RETURN;
    END IF;
    SELECT array_agg(DISTINCT d.objid) FILTER (WHERE d.classid = 'pg_class'::regclass),
           array_agg(DISTINCT d.objid) FILTER (WHERE d.classid = 'pg_namespace'::regclass),
           array_agg(DISTINCT a.attname::text) FILTER (WHERE a.attname IS NOT NULL)
      INTO rels, nsps, renamed
      FROM pg_event_trigger_ddl_commands() d
      LEFT JOIN pg_attribute a ON d.classid = 'pg_class'::regclass AND d.objsubid > 0
                              AND a.attrelid = d.objid AND a.attnum = d.objsubid AND NOT a.attisdropped;
    IF rels IS NULL AND nsps IS NULL THEN
        RETURN;
    END IF;
    -- Jobs whose source or target table is the table the command named, or in the schema it
    -- renamed; whose source is one of its partition ancestors (the tree gained or lost a table)
    -- or descendants (the source got or lost an ancestor, or a column renamed from above); or
    -- that have triggers on it.
    FOR j IN SELECT * FROM tributary._jobs x
              WHERE x.state <> 'cancelled'
                AND (x.source = ANY (rels) OR x.target_table = ANY (rels)
                     OR x.source IN (SELECT a.relid FROM unnest(rels) r(oid) CROSS JOIN LATERAL pg_partition_ancestors(r.oid) a)
                     OR x.source IN (SELECT a.relid FROM unnest(rels) r(oid) CROSS JOIN LATERAL pg_partition_tree(r.oid) a)
                     OR EXISTS (SELECT 1 FROM tributary._job_triggers(x.id) t WHERE t.rel = ANY (rels))
                     OR EXISTS (SELECT 1 FROM pg_class c WHERE c.oid IN (x.source, x.target_table) AND c.relnamespace = ANY (nsps))
                     OR x.chunk_source = ANY (rels)
                     OR (SELECT c.relnamespace FROM pg_class c WHERE c.oid = x.chunk_source) = ANY (nsps))
              ORDER BY x.id LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = j.source) THEN
            CONTINUE;
        END IF;
        -- A chunk job's trigger function follows its source (names, owner).
        IF j.chunk_source IS NOT NULL THEN
            PERFORM tributary._chunk_sync(j);
        END IF;
        -- Columns renamed or dropped: the names the job uses in its source (text columns,
        -- excluded columns, the target when it is the source's) and in its target table.
        cols := CASE WHEN j.columns = '{*}' THEN '{}' ELSE j.columns END;
        excl := coalesce((SELECT array_agg(x) FROM jsonb_array_elements_text(j.row_options->'exclude') x), '{}');
        tgt_in := j.target_table IS NULL;
        n_cols := cardinality(cols);
        names := cols || excl || CASE WHEN tgt_in THEN ARRAY[j.target::text] ELSE '{}' END;
        after := tributary._follow_names(j.source, names, coalesce(renamed, '{}'));
        IF after IS DISTINCT FROM names OR (NOT tgt_in AND NOT EXISTS (
               SELECT 1 FROM pg_attribute WHERE attrelid = j.target_table AND attname = j.target AND NOT attisdropped)) THEN
            gone := NULL;
            FOR i IN 1 .. n_cols LOOP
                IF after[i] IS NULL THEN gone := format('column "%s" of table %s', cols[i], j.source); END IF;
            END LOOP;
            IF tgt_in THEN
                IF after[cardinality(after)] IS NULL THEN gone := format('target column "%s" of table %s', j.target, j.source); END IF;
                j.target := coalesce(after[cardinality(after)], j.target);
            ELSIF EXISTS (SELECT 1 FROM pg_class WHERE oid = j.target_table) THEN
                j.target := coalesce((tributary._follow_names(j.target_table, ARRAY[j.target::text], coalesce(renamed, '{}')))[1], j.target);
                IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = j.target_table AND attname = j.target AND NOT attisdropped) THEN
                    gone := format('target column "%s" of table %s', j.target, j.target_table);
                END IF;
            END IF;
            IF gone IS NOT NULL THEN
                -- The writers go on; the job says why it stopped.
                PERFORM tributary._job_drop_triggers(j);
                UPDATE tributary._jobs SET state = CASE WHEN state = 'done' THEN state ELSE 'paused' END,
                       last_error = format('%s was dropped: the job cannot go on%s; drop it and create a new one', gone,
                                           CASE WHEN j.mode = 'continuous' THEN ' (its triggers were taken off: the table''s writes go on unqueued)' ELSE '' END),
                       last_error_at = now()
                 WHERE id = j.id;
                RAISE WARNING 'tributary job % stopped: % was dropped', j.id, gone
                    USING HINT = 'Drop the job with tributary_job_drop() and create a new one on the columns the table has now.';
                CONTINUE;
            END IF;
            IF n_cols > 0 THEN
                j.columns := after[1:n_cols];
            END IF;
            IF j.row_options ? 'exclude' THEN
                j.row_options := jsonb_set(j.row_options, '{exclude}',
                    coalesce((SELECT jsonb_agg(x) FROM unnest(after[n_cols + 1:n_cols + cardinality(excl)]) x WHERE x IS NOT NULL), '[]'));
            END IF;
            UPDATE tributary._jobs SET columns = j.columns, target = j.target, row_options = j.row_options WHERE id = j.id;
        END IF;
        -- The statements, under the names the tables have now. A table that cannot be built for
        -- (no primary key: while pg_restore adds constraints after the jobs' rows) keeps the
        -- statements it has.
        BEGIN
            nj := tributary._job_build(j);
        EXCEPTION WHEN OTHERS THEN
            nj := NULL;
        END;
        IF nj.id IS NOT NULL AND (nj.claim_sql, nj.claim_keys_sql, nj.select_sql, nj.write_sql, nj.requeue_sql, nj.enqueue_sql)
                IS DISTINCT FROM (j.claim_sql, j.claim_keys_sql, j.select_sql, j.write_sql, j.requeue_sql, j.enqueue_sql) THEN
            UPDATE tributary._jobs SET claim_sql = nj.claim_sql, claim_keys_sql = nj.claim_keys_sql, select_sql = nj.select_sql,
                   write_sql = nj.write_sql, requeue_sql = nj.requeue_sql, enqueue_sql = nj.enqueue_sql
             WHERE id = j.id;
        END IF;
        PERFORM tributary._job_sync_owner(j.id);
        -- Only a continuous job whose source has its trigger: while pg_restore rebuilds a
        -- database, its ALTER TABLEs (constraints) come after the jobs' rows and before their
        -- triggers, which the dump creates itself; a job stopped by a dropped column has none.
        IF j.mode = 'continuous' AND EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = j.source
                                               AND g.tgname = ('tributary_job_' || j.id || '_insert')::name) THEN
            SELECT * INTO j FROM tributary._jobs WHERE id = j.id;
            PERFORM tributary._job_sync_tables(j, true);
        END IF;
    END LOOP;
END $$;
CREATE EVENT TRIGGER tributary_job_partitions ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE', 'ALTER SCHEMA') EXECUTE FUNCTION tributary._job_ddl();

-- Drops what a job added to the database: its triggers (on every table of a partitioned
-- source's tree, and on partitions detached since) and queue.
CREATE FUNCTION tributary._job_cleanup(j tributary._jobs) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM tributary._job_drop_triggers(j);
    EXECUTE format('DROP TABLE IF EXISTS tributary.%I', '_queue_' || j.id);
END $$;

CREATE FUNCTION tributary._job_pause(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE j tributary._jobs;
BEGIN
    -- A sharded job: the operation on every part, on its shard (sql/shards.sql).
    IF EXISTS (SELECT 1 FROM tributary._sharded_jobs x WHERE x.id = (a->>'job')::bigint) THEN
        RETURN tributary._sharded_job_op(caller, 'pause', (a->>'job')::bigint);
    END IF;
    j := tributary._own_job(caller, (a->>'job')::bigint);
    IF j.state NOT IN ('pending', 'running', 'paused') THEN
        RAISE EXCEPTION 'job % is %, not pending or running', j.id, j.state USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE tributary._jobs SET state = 'paused' WHERE id = j.id;
    RETURN j.id;
END $$;

CREATE FUNCTION tributary._job_resume(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    j     tributary._jobs;
    owner oid;
    msg   text;
    code  text;
BEGIN
    -- A sharded job: the operation on every part, on its shard (sql/shards.sql).
    IF EXISTS (SELECT 1 FROM tributary._sharded_jobs x WHERE x.id = (a->>'job')::bigint) THEN
        RETURN tributary._sharded_job_op(caller, 'resume', (a->>'job')::bigint);
    END IF;
    j := tributary._own_job(caller, (a->>'job')::bigint);
    IF j.state = 'cancelled' THEN
        RAISE EXCEPTION 'job % is cancelled', j.id USING ERRCODE = 'object_not_in_prerequisite_state',
            HINT = 'A cancelled job has dropped its queue; create a new job.';
    END IF;
    -- The statements, rebuilt from the tables as they are now: a job stopped by a dropped
    -- column cannot resume (42703).
    BEGIN
        j := tributary._job_build(j);
    EXCEPTION WHEN undefined_column OR undefined_table OR invalid_table_definition THEN
        GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, code = RETURNED_SQLSTATE;
        RAISE EXCEPTION 'job % cannot resume: %', j.id, msg USING ERRCODE = code,
            HINT = 'Drop the job with tributary_job_drop() and create a new one on the table as it is now.';
    END;
    UPDATE tributary._jobs x SET claim_sql = j.claim_sql, claim_keys_sql = j.claim_keys_sql, select_sql = j.select_sql,
           write_sql = j.write_sql, requeue_sql = j.requeue_sql, enqueue_sql = j.enqueue_sql
     WHERE x.id = j.id;
    owner := tributary._job_sync_owner(j.id);
    -- Failed rows get a new chance now, whatever their attempts. Their keys become the owner's
    -- types again as the owner (domain checks are the owner's code).
    PERFORM tributary._run_as(owner, j.requeue_sql,
        (SELECT coalesce(jsonb_agg(key), '[]') FROM tributary._job_errors WHERE job_id = j.id AND status <> 'queued'));
    UPDATE tributary._job_errors SET status = 'queued', next_attempt_at = NULL WHERE job_id = j.id AND status <> 'queued';
    UPDATE tributary._jobs SET state = 'pending', finished_at = NULL WHERE id = j.id;
    -- A continuous job whose triggers were taken off gets them back, and the rows written
    -- meanwhile are queued (as the owner).
    IF j.mode = 'continuous' THEN
        PERFORM tributary._job_sync_tables(j, true);
    END IF;
    PERFORM tributary._wake_launcher();
    RETURN j.id;
END $$;

CREATE FUNCTION tributary._job_cancel(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE j tributary._jobs;
BEGIN
    -- A sharded job: the operation on every part, on its shard (sql/shards.sql).
    IF EXISTS (SELECT 1 FROM tributary._sharded_jobs x WHERE x.id = (a->>'job')::bigint) THEN
        RETURN tributary._sharded_job_op(caller, 'cancel', (a->>'job')::bigint);
    END IF;
    j := tributary._own_job(caller, (a->>'job')::bigint, false);
    PERFORM tributary._job_cleanup(j);
    UPDATE tributary._jobs SET state = 'cancelled', finished_at = now() WHERE id = j.id;
    RETURN j.id;
END $$;

CREATE FUNCTION tributary._job_drop(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE j tributary._jobs;
BEGIN
    -- A sharded job: the operation on every part, on its shard (sql/shards.sql).
    IF EXISTS (SELECT 1 FROM tributary._sharded_jobs x WHERE x.id = (a->>'job')::bigint) THEN
        RETURN tributary._sharded_job_op(caller, 'drop', (a->>'job')::bigint);
    END IF;
    j := tributary._own_job(caller, (a->>'job')::bigint, false);
    PERFORM tributary._job_cleanup(j);
    DELETE FROM tributary._jobs WHERE id = j.id;
    RETURN j.id;
END $$;

REVOKE ALL ON FUNCTION tributary._own_job(oid, bigint, boolean), tributary._job_create(oid, jsonb),
    tributary._job_pause(oid, jsonb), tributary._job_resume(oid, jsonb), tributary._job_cancel(oid, jsonb),
    tributary._job_drop(oid, jsonb) FROM PUBLIC;

-- The public job functions: SECURITY INVOKER, so that tributary._job_call sees who calls them
-- (a SECURITY DEFINER function of another role calling them acts as that role, as PostgreSQL's
-- own commands do).

-- tributary_job_create(source, columns [, target, model, mode, target_table, batch_size, workers,
-- name, exclude, parents, children, time_columns, prompt, template]) -> job id. See the README (Jobs).
-- prompt: the model's prompt to embed with (NULL: its default prompt); 42704 if it has none such.
-- template: whole rows' row template version (NULL: 2, the default), kept for the job's life;
-- 22023 if no such version.
CREATE FUNCTION tributary_job_create(
    source       regclass,
    columns      text[],
    target       name DEFAULT 'embedding',
    model        text DEFAULT NULL,
    mode         text DEFAULT 'once',
    target_table text DEFAULT NULL,
    batch_size   integer DEFAULT 256,
    workers      integer DEFAULT 1,
    name         text DEFAULT NULL,
    exclude      text[] DEFAULT NULL,
    parents      integer DEFAULT 0,
    children     integer DEFAULT 0,
        time_columns text[] DEFAULT NULL,
    prompt       text DEFAULT NULL,
    template     integer DEFAULT 2
) RETURNS bigint
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT tributary._job_call('create', jsonb_build_object(
        'source', source::oid, 'columns', columns, 'target', target, 'model', model, 'mode', mode,
        'target_table', target_table, 'batch_size', batch_size, 'workers', workers, 'name', name,
                'exclude', exclude, 'parents', parents, 'children', children, 'time_columns', time_columns,
        'prompt', prompt, 'template', template))
$$;

CREATE FUNCTION tributary_job_pause(job bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM tributary._job_call('pause', jsonb_build_object('job', job)); END $$;

CREATE FUNCTION tributary_job_resume(job bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM tributary._job_call('resume', jsonb_build_object('job', job)); END $$;

CREATE FUNCTION tributary_job_cancel(job bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM tributary._job_call('cancel', jsonb_build_object('job', job)); END $$;

CREATE FUNCTION tributary_job_drop(job bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM tributary._job_call('drop', jsonb_build_object('job', job)); END $$;

-- Worker side (called by the workers as the bootstrap superuser).

-- Failed rows whose back-off is over go back into the queue.
CREATE FUNCTION tributary._requeue_due(job bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE keys jsonb;
BEGIN
    WITH d AS (UPDATE tributary._job_errors SET status = 'queued'
                WHERE job_id = job AND status = 'waiting' AND next_attempt_at <= now() RETURNING key)
    SELECT jsonb_agg(key) INTO keys FROM d;
    IF keys IS NOT NULL THEN
        -- As the owner: the keys become the owner's types (domain checks are the owner's code).
        PERFORM tributary._run_as(tributary._job_sync_owner(job), j.requeue_sql, keys) FROM tributary._jobs j WHERE j.id = job;
    END IF;
END $$;

-- A once job with nothing queued and no row waiting for a retry is done.
CREATE FUNCTION tributary._finish_if_done(job bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE j tributary._jobs;
BEGIN
    SELECT * INTO j FROM tributary._jobs WHERE id = job;
    IF j.mode <> 'once' OR j.state NOT IN ('pending', 'running') THEN RETURN false; END IF;
    IF tributary._queued(j.queue) > 0
       OR EXISTS (SELECT 1 FROM tributary._job_errors WHERE job_id = job AND status IN ('waiting', 'queued')) THEN
        RETURN false;
    END IF;
    UPDATE tributary._jobs SET state = 'done', finished_at = now(), started_at = coalesce(started_at, now()) WHERE id = job;
    RETURN true;
END $$;

REVOKE ALL ON FUNCTION tributary._requeue_due(bigint), tributary._finish_if_done(bigint),
    tributary._job_cleanup(tributary._jobs), tributary._job_sync_tables(tributary._jobs, boolean),
    tributary._job_fill_sql(tributary._jobs, regclass), tributary._job_ddl(),
    tributary._job_sync_owner(bigint), tributary._job_drop_triggers(tributary._jobs),
    tributary._job_build(tributary._jobs) FROM PUBLIC;
