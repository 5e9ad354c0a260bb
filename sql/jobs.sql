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
REVOKE ALL ON FUNCTION tributary._wake_launcher(), tributary._run_as(oid, text, jsonb) FROM PUBLIC;
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
    owner         regrole NOT NULL,              -- rows are read and written with this role's rights
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
    prompt        text                           -- the model's prompt the texts are embedded with, or NULL
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
       j.owner,
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
            THEN coalesce(s.waiting_for, 'a job worker to start') END AS waiting_for
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
WHERE pg_has_role(j.owner, 'USAGE');

CREATE VIEW tributary.job_errors WITH (security_barrier) AS
SELECT x.job_id, j.name AS job_name, x.key, x.sqlstate, x.message, x.detail, x.attempts, x.status,
       x.first_failed_at, x.last_failed_at, x.next_attempt_at
FROM tributary._job_errors x JOIN tributary._jobs j ON j.id = x.job_id
WHERE pg_has_role(j.owner, 'USAGE');
GRANT SELECT ON tributary.jobs, tributary.job_errors TO PUBLIC;

-- pgvector's vector or halfvec type, schema-qualified.
CREATE FUNCTION tributary._vector_type(typname text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT format_type(t.oid, NULL) FROM pg_type t
      JOIN pg_depend d ON d.classid = 'pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e'
      JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'vector'
     WHERE t.typname = _vector_type.typname
$$;

-- The caller's job, or 42704: a job of a role the caller is not a member of does not exist
-- for the caller (the same error as an unknown id: other users' job ids are not revealed).
-- lock: also lock the job's row (not before dropping a job's triggers and queue, which wait for
-- the batch in flight, whose commit updates that row).
CREATE FUNCTION tributary._own_job(caller oid, job bigint, lock boolean DEFAULT true) RETURNS tributary._jobs
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE j tributary._jobs;
BEGIN
    IF job IS NULL THEN
        RAISE EXCEPTION 'job must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF lock THEN
        SELECT * INTO j FROM tributary._jobs x WHERE x.id = job AND pg_has_role(caller, x.owner, 'USAGE') FOR UPDATE;
    ELSE
        SELECT * INTO j FROM tributary._jobs x WHERE x.id = job AND pg_has_role(caller, x.owner, 'USAGE');
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
    whole     boolean := columns = '{*}';
    m         tributary.models;
    pk        text[];           -- primary key columns, quoted
    pk_types  text[];
    src       text;     -- the source's name, schema-qualified
    tgt       regclass;
    tgt_name  text;
    tgt_type  text;
    vtype     text;     -- the target's type, schema-qualified (pgvector may live in any schema)
    c         text;
    id        bigint := nextval('tributary._jobs_id_seq');
    q         text := format('tributary.%I', '_queue_' || id);
    k_src     text;  k_new text;  k_old text;  k_kk text;  k_k text;  k_g text;  k_q text;  k_o text;
    text_expr text;
    differs   text;
    nonnull   text := 'true';   -- over the new rows n
    nonnull_t text := 'true';   -- over the source rows t
    excl      text[];
    arr       text;
    filter    text;
    guard     text;     -- what the row's text is made of, to check before writing that it did not change
    checked   text;     -- that check over the source row t and the batch's row u (continuous mode)
    skind     "char";   -- the source's relkind: r or p
    src_from  text;     -- the source in FROM: ONLY for an ordinary table (not its inheritance children)
    tgt_from  text;     -- the target table in FROM, DELETE and TRUNCATE: ONLY for an ordinary table
    n_kids    integer;
    ancestors text;
    jr        tributary._jobs;
BEGIN
    IF source IS NULL OR columns IS NULL OR target IS NULL THEN
        RAISE EXCEPTION 'source, columns and target must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT format('%I.%I', n.nspname, c.relname) INTO src FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = source;
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
    -- Only the table's owner makes jobs on it: a job adds triggers to it and writes every row.
    IF NOT pg_has_role(caller, (SELECT relowner FROM pg_class WHERE oid = source), 'USAGE') THEN
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

    -- The target: a column of source, or of a separate table keyed like source (made if missing).
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
            IF NOT has_schema_privilege(caller, (parse_ident(target_table))[1], 'CREATE') THEN
                RAISE EXCEPTION 'permission denied to create table % in its schema', target_table
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            EXECUTE format('CREATE TABLE %s (%s, %I %s(%s), PRIMARY KEY (%s))', target_table,
                (SELECT string_agg(p || ' ' || t, ', ') FROM unnest(pk, pk_types) AS x(p, t)),
                target, tributary._vector_type(CASE WHEN m.precision = 'fp16' THEN 'halfvec' ELSE 'vector' END), m.dimension,
                array_to_string(pk, ', '));
            tgt := to_regclass(target_table);
            EXECUTE format('ALTER TABLE %s OWNER TO %s', tgt, caller::regrole);
        ELSIF NOT pg_has_role(caller, (SELECT relowner FROM pg_class WHERE oid = tgt), 'USAGE') THEN
            RAISE EXCEPTION 'must be owner of table %', tgt USING ERRCODE = 'insufficient_privilege';
        ELSIF (SELECT relkind FROM pg_class WHERE oid = tgt) NOT IN ('r', 'p') THEN
            RAISE EXCEPTION '"%" is not a table', tgt USING ERRCODE = 'wrong_object_type',
                HINT = 'A target table is an ordinary or partitioned table.';
        ELSIF (SELECT relpersistence FROM pg_class WHERE oid = tgt) = 't' THEN
            RAISE EXCEPTION 'jobs cannot write to temporary table %', tgt USING ERRCODE = 'feature_not_supported';
        END IF;
    END IF;
    tgt_name := (SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tgt);
    tgt_from := CASE WHEN (SELECT relkind FROM pg_class WHERE oid = tgt) = 'r' THEN 'ONLY ' ELSE '' END || tgt_name;
    -- 42703, 42804, 22000 (sql/bootstrap.sql), as tributary_embed_column checks its target.
    tgt_type := tributary._target_column(tgt, target, m.name, m.dimension, relname => tgt_name);
    vtype := tributary._vector_type(tgt_type);
    -- 22023 when another model filled the target column (sql/columns.sql); else recorded.
        PERFORM tributary._bind_column(tgt, target, m.name, prompt, format('a job of %s', caller::regrole));
    IF tgt <> source AND NOT EXISTS (
        SELECT 1 FROM pg_index i WHERE i.indrelid = tgt AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
           AND (SELECT array_agg(quote_ident(a.attname) ORDER BY a.attname) FROM unnest(i.indkey) k(n)
                JOIN pg_attribute a ON a.attrelid = tgt AND a.attnum = k.n)
             = (SELECT array_agg(x ORDER BY x) FROM unnest(pk) x)) THEN
        RAISE EXCEPTION 'table % has no unique key on (%)', tgt_name, array_to_string(pk, ', ')
            USING ERRCODE = 'invalid_table_definition',
            HINT = 'A target table holds one embedding per source row: its primary key must be the source''s primary key columns.';
    END IF;

    -- Key expressions: t = source row, k = key record, kk = key from a jsonb, n/o = new/old rows.
    k_src := (SELECT string_agg('t.' || p, ', ') FROM unnest(pk) p);
    k_k   := (SELECT string_agg('k.' || p, ', ') FROM unnest(pk) p);
    k_kk  := (SELECT string_agg('kk.' || p, ', ') FROM unnest(pk) p);
    k_new := (SELECT string_agg('n.' || p, ', ') FROM unnest(pk) p);
    k_old := (SELECT string_agg('o.' || p, ', ') FROM unnest(pk) p);
    k_g   := (SELECT string_agg('g.' || p, ', ') FROM unnest(pk) p);
    k_q   := (SELECT string_agg('q.' || p, ', ') FROM unnest(pk) p);
    k_o   := array_to_string(pk, ', ');

    IF whole THEN
        text_expr := 'row_to_json(t.*)::text';   -- t.*: never a column named t
        -- Columns whose change does not change the row's text: the target and other embeddings.
        SELECT array_agg(a.attname::text) INTO excl FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
         WHERE a.attrelid = source AND a.attnum > 0 AND NOT a.attisdropped
           AND (t.typname IN ('vector', 'halfvec', 'sparsevec', 'bytea', 'tsvector') OR (tgt = source AND a.attname = target));
        excl := coalesce(excl, '{}') || coalesce(exclude, '{}');
        differs := format('(to_jsonb(o.*) - %L::text[]) IS DISTINCT FROM (to_jsonb(n.*) - %L::text[])', excl, excl);
        guard := format('(to_jsonb(t.*) - %L::text[])::text', excl);
    ELSE
        arr := (SELECT string_agg('t.' || quote_ident(x) || '::text', ', ') FROM unnest(columns) x);
        text_expr := format('CASE WHEN num_nonnulls(%s) > 0 THEN concat_ws(E''\n'', %s) END', arr, arr);
        -- As text: every type has one, not every type has "=".
        differs := format('ROW(%s) IS DISTINCT FROM ROW(%s)',
            (SELECT string_agg('o.' || quote_ident(x) || '::text', ', ') FROM unnest(columns) x),
            (SELECT string_agg('n.' || quote_ident(x) || '::text', ', ') FROM unnest(columns) x));
        nonnull := format('num_nonnulls(%s) > 0', (SELECT string_agg('n.' || quote_ident(x), ', ') FROM unnest(columns) x));
        nonnull_t := format('num_nonnulls(%s) > 0', arr);
        guard := text_expr;
    END IF;

    IF name IS NOT NULL AND EXISTS (SELECT 1 FROM tributary._jobs x WHERE x.owner = caller AND x.name = name) THEN
        RAISE EXCEPTION 'job "%" already exists', name USING ERRCODE = 'duplicate_object',
            HINT = 'Job names are unique per owner; pick another name, or drop the old job with tributary_job_drop().';
    END IF;

    -- The queue: source keys still to embed. No unique key: a trigger never waits for (or is
    -- skipped because of) a batch that holds the same key; a claim takes a key's duplicates once.
    EXECUTE format('CREATE TABLE %s (%s)', q, (SELECT string_agg(p || ' ' || t, ', ') FROM unnest(pk, pk_types) AS x(p, t)));
    EXECUTE format('CREATE INDEX ON %s (%s)', q, k_o);
    -- Every statement over the queue's rows (claims, requeues, the continuous trigger's inserts)
    -- runs as the owner: its key values are of the owner's types, whose domains' checks and
    -- casts are the owner's code.
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO %s', q, caller::regrole);
    -- No write between the fill and the triggers goes unseen.
    -- (A partitioned table's partitions are locked with it; an ordinary table's children are not
    -- the job's.)
    IF mode = 'continuous' THEN
        EXECUTE format('LOCK TABLE %s IN SHARE MODE', src_from);
    END IF;
    checked := CASE WHEN mode = 'continuous' THEN format('%s IS NOT DISTINCT FROM u.g', guard) ELSE 'true' END;

        INSERT INTO tributary._jobs (id, name, source, columns, target_table, target, target_type, model, prompt, batch_size,
        mode, workers, row_options, owner, queue, claim_sql, claim_keys_sql, select_sql, write_sql, requeue_sql)
    VALUES (id, coalesce(name, CASE WHEN EXISTS (SELECT 1 FROM tributary._jobs x WHERE x.owner = caller AND x.name = format('%s.%s', src, target))
                                THEN format('%s.%s (job %s)', src, target, id) ELSE format('%s.%s', src, target) END), source, columns, nullif(tgt, source), target, tgt_type,
                m.name, prompt, batch_size, mode, workers,
        CASE WHEN whole THEN jsonb_build_object('exclude', coalesce(exclude, '{}'), 'parents', parents,
             'children', children, 'time_columns', coalesce(time_columns, '{}')) END,
        caller, q::regclass,
        format('WITH c AS (DELETE FROM %s AS q USING (SELECT ctid AS tid FROM %s ORDER BY %s LIMIT $1 FOR UPDATE SKIP LOCKED) AS s '
               'WHERE q.ctid = s.tid RETURNING q.*) SELECT pg_catalog.jsonb_agg(DISTINCT pg_catalog.to_jsonb(c.*))::text FROM c', q, q, k_o),
        format('WITH c AS (DELETE FROM %s AS q USING pg_catalog.jsonb_populate_recordset(NULL::%s, $1::jsonb) AS kk WHERE (%s) = (%s) RETURNING q.*) '
               'SELECT pg_catalog.jsonb_agg(DISTINCT pg_catalog.to_jsonb(c.*))::text FROM c', q, q, k_q, k_kk),
        format('SELECT to_jsonb(k.*)::text, %s, %s FROM %s AS t JOIN jsonb_populate_recordset(NULL::%s, $1::jsonb) AS k ON (%s) = (%s) '
               'FOR KEY SHARE OF t', text_expr, guard, src_from, q, k_src, k_k),
        CASE WHEN tgt = source THEN
            format('UPDATE %s AS t SET %I = u.e FROM unnest($1::jsonb[], $2::%s[], $3::text[]) AS u(k, e, g) '
                   'CROSS JOIN LATERAL jsonb_populate_record(NULL::%s, u.k) AS kk WHERE (%s) = (%s) AND %s',
                   src_from, target, vtype, q, k_src, k_kk, checked)
        ELSE
            format('WITH u AS (SELECT kk.*, u.e FROM unnest($1::jsonb[], $2::%s[], $3::text[]) AS u(k, e, g) '
                   'CROSS JOIN LATERAL jsonb_populate_record(NULL::%s, u.k) AS kk '
                   'WHERE EXISTS (SELECT 1 FROM %s AS t WHERE (%s) = (%s) AND %s)), '
                   'd AS (DELETE FROM %s AS g USING u WHERE u.e IS NULL AND (%s) = (%s)) '
                   'INSERT INTO %s AS g (%s, %I) SELECT %s, u.e FROM u WHERE u.e IS NOT NULL '
                   'ON CONFLICT (%s) DO UPDATE SET %I = EXCLUDED.%I',
                   vtype, q, src_from, k_src, k_kk, checked, tgt_from, k_g, (SELECT string_agg('u.' || p, ', ') FROM unnest(pk) p),
                   tgt_name, k_o, target, (SELECT string_agg('u.' || p, ', ') FROM unnest(pk) p), k_o, target, target)
        END,
        format('INSERT INTO %s SELECT (jsonb_populate_record(NULL::%s, k)).* FROM jsonb_array_elements($1::jsonb) AS x(k) '
               'ON CONFLICT DO NOTHING', q, q));

    IF mode = 'continuous' THEN
        -- Statement-level triggers with transition tables: one INSERT into the queue per
        -- statement. They call tributary._job_trigger (C, owned by the extension's owner, so no
        -- job owner can alter it), which runs the statement below for TG_OP as the job's owner:
        -- whoever writes the source need not see the queue, and nothing runs with more rights
        -- than the owner's.
        UPDATE tributary._jobs SET enqueue_sql = jsonb_strip_nulls(jsonb_build_object(
            'INSERT', format('INSERT INTO %s SELECT %s FROM new_rows n WHERE %s', q, k_new, nonnull),
            'UPDATE', format('INSERT INTO %s SELECT %s FROM new_rows n LEFT JOIN old_rows o ON (%s) = (%s) WHERE (%s) IS NULL OR %s',
                             q, k_new, k_old, k_new, k_old, differs)
                      || CASE WHEN tgt <> source THEN
                             -- separate target table: keys that went away take their embedding along
                             format('; DELETE FROM %s g USING old_rows o WHERE (%s) = (%s) AND NOT EXISTS (SELECT 1 FROM new_rows n WHERE (%s) = (%s))',
                                    tgt_from, k_g, k_old, k_new, k_old) ELSE '' END,
            'DELETE', CASE WHEN tgt <> source THEN format('DELETE FROM %s g USING old_rows o WHERE (%s) = (%s)', tgt_from, k_g, k_old) END,
            -- A TRUNCATE fires the trigger of every table it empties: of one partition, only the
            -- embeddings of rows gone go.
            'TRUNCATE', CASE WHEN tgt <> source AND skind = 'r' THEN format('TRUNCATE %s', tgt_from)
                             WHEN tgt <> source THEN format('DELETE FROM %s g WHERE NOT EXISTS (SELECT 1 FROM %s t WHERE (%s) = (%s))',
                                                           tgt_from, src, k_src, k_g) END,
            -- The triggers on the source's ancestors (partitioned tables above a partition,
            -- inheritance parents), whose transition tables hold rows of other tables too: keys
            -- of rows now in the source are queued (of the ancestor's columns only the key's are
            -- used), and with a target table, embeddings of keys no longer in it go.
            'INSERT via', format('INSERT INTO %s SELECT DISTINCT %s FROM new_rows n WHERE EXISTS (SELECT 1 FROM %s t WHERE (%s) = (%s) AND %s)',
                                 q, k_new, src_from, k_src, k_new, nonnull_t),
            'UPDATE via', format('INSERT INTO %s SELECT DISTINCT %s FROM new_rows n WHERE EXISTS (SELECT 1 FROM %s t WHERE (%s) = (%s) AND %s)',
                                 q, k_new, src_from, k_src, k_new, nonnull_t)
                          || CASE WHEN tgt <> source THEN
                                 format('; DELETE FROM %s g USING old_rows o WHERE (%s) = (%s) AND NOT EXISTS (SELECT 1 FROM %s t WHERE (%s) = (%s))',
                                        tgt_from, k_g, k_old, src_from, k_src, k_old) ELSE '' END,
            'DELETE via', CASE WHEN tgt <> source THEN
                                 format('DELETE FROM %s g USING old_rows o WHERE (%s) = (%s) AND NOT EXISTS (SELECT 1 FROM %s t WHERE (%s) = (%s))',
                                        tgt_from, k_g, k_old, src_from, k_src, k_old) END))
         WHERE tributary._jobs.id = id;
    END IF;
    SELECT * INTO jr FROM tributary._jobs x WHERE x.id = id;
    -- Read as the owner: the owner's types, casts and policies run with the owner's rights.
    PERFORM tributary._run_as(caller, tributary._job_fill_sql(jr, source));
    IF mode = 'continuous' THEN
        -- On every table of a partitioned source's tree: a statement fires the statement-level
        -- triggers of the table it names only, and may name any partition. Partitions attached
        -- or created later get them from the event trigger tributary_job_partitions.
        PERFORM tributary._job_sync_tables(jr, false);
        -- Ancestors that get no trigger (tributary._job_watchers): their statements go unseen.
        SELECT string_agg(x.rel::regclass::text, ', ' ORDER BY x.depth) INTO ancestors
          FROM tributary._job_ancestors(source) x
         WHERE x.rel NOT IN (SELECT tributary._job_watchers(source, caller));
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

-- The statement that queues the rows of `rel` still to embed (rows whose target is NULL, or
-- missing from the target table, and that have some text): `rel` is the job's source (the whole
-- tree of a partitioned one; an ordinary table's own rows only) or a table of its tree. Run as
-- the job's owner.
CREATE FUNCTION tributary._job_fill_sql(j tributary._jobs, rel regclass) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    pk       text[];
    tgt_from text;
    filter   text;
    nonnull  text := 'true';
BEGIN
    SELECT array_agg(quote_ident(a.attname) ORDER BY k.ord) INTO pk
      FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
     WHERE i.indrelid = j.source AND i.indisprimary;
    IF j.target_table IS NULL THEN
        filter := format('t.%I IS NULL', j.target);
    ELSE
        tgt_from := (SELECT CASE WHEN c.relkind = 'r' THEN 'ONLY ' ELSE '' END || format('%I.%I', n.nspname, c.relname)
                       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = j.target_table);
        filter := format('NOT EXISTS (SELECT 1 FROM %s g WHERE (%s) = (%s))', tgt_from,
                         (SELECT string_agg('g.' || p, ', ') FROM unnest(pk) p), (SELECT string_agg('t.' || p, ', ') FROM unnest(pk) p));
    END IF;
    IF j.columns <> '{*}' THEN
        nonnull := format('num_nonnulls(%s) > 0', (SELECT string_agg('t.' || quote_ident(x) || '::text', ', ') FROM unnest(j.columns) x));
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
    r   record;
    rel regclass;
BEGIN
    FOR r IN SELECT x.rel, x.tgname FROM tributary._job_triggers(j.id) x
              WHERE (CASE WHEN x.tgname LIKE '%\_via\_%' THEN x.rel NOT IN (SELECT tributary._job_watchers(j.source, j.owner))
                          ELSE x.rel NOT IN (SELECT tributary._job_tables(j.source)) END) LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', r.tgname, r.rel);
    END LOOP;
    -- The source's ancestors: statements naming them.
    FOR rel IN SELECT x FROM tributary._job_watchers(j.source, j.owner) x
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
                PERFORM tributary._run_as(j.owner, tributary._job_fill_sql(j, rel));
            EXCEPTION WHEN insufficient_privilege THEN
                -- A partition of another role's, attached by a superuser: its later writes are
                -- queued, the rows already there are not; the DDL goes on.
                RAISE WARNING 'continuous job % did not queue the rows of %: %', j.id, rel, SQLERRM
                    USING ERRCODE = 'insufficient_privilege',
                          HINT = format('Grant %s SELECT on %s and make a once job on it for the rows already there.', j.owner, rel);
            END;
        END IF;
    END LOOP;
END $$;

-- The event trigger tributary_job_partitions (ddl_command_end of CREATE TABLE and ALTER TABLE):
-- a continuous job on a partitioned table whose tree gained a partition (CREATE TABLE ...
-- PARTITION OF, ATTACH PARTITION, at any depth) puts its triggers on it and queues its rows; one
-- whose tree lost one (DETACH PARTITION) takes its triggers off. SECURITY DEFINER: it runs as the
-- extension's owner whoever runs the DDL, and only tributary._job_sync_tables, which runs no code
-- of a user's except as the job's owner (tributary._run_as).
CREATE FUNCTION tributary._job_ddl() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    rels oid[];
    j    tributary._jobs;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tributary._jobs WHERE mode = 'continuous' AND state <> 'cancelled') THEN
        RETURN;
    END IF;
    SELECT array_agg(DISTINCT d.objid) INTO rels FROM pg_event_trigger_ddl_commands() d
     WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0;
    IF rels IS NULL THEN
        RETURN;
    END IF;
    -- Jobs whose source is the table the command named, one of its partition ancestors (the
    -- tree gained or lost a table) or descendants (the source got or lost an ancestor), or that
    -- have triggers on it.
    FOR j IN SELECT * FROM tributary._jobs x
              WHERE x.mode = 'continuous' AND x.state <> 'cancelled'
                AND (x.source = ANY (rels)
                     OR x.source IN (SELECT a.relid FROM unnest(rels) r(oid) CROSS JOIN LATERAL pg_partition_ancestors(r.oid) a)
                     OR x.source IN (SELECT a.relid FROM unnest(rels) r(oid) CROSS JOIN LATERAL pg_partition_tree(r.oid) a)
                     OR EXISTS (SELECT 1 FROM tributary._job_triggers(x.id) t WHERE t.rel = ANY (rels)))
                -- Only a job whose source has its trigger: while pg_restore rebuilds a database,
                -- its ALTER TABLEs (constraints) come after the jobs' rows and before their
                -- triggers, which the dump creates itself.
                AND EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = x.source
                               AND g.tgname = ('tributary_job_' || x.id || '_insert')::name)
              ORDER BY x.id LOOP
        PERFORM tributary._job_sync_tables(j, true);
    END LOOP;
END $$;
CREATE EVENT TRIGGER tributary_job_partitions ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE') EXECUTE FUNCTION tributary._job_ddl();

-- Drops what a job added to the database: its triggers (on every table of a partitioned
-- source's tree, and on partitions detached since) and queue.
CREATE FUNCTION tributary._job_cleanup(j tributary._jobs) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE r record;
BEGIN
    FOR r IN SELECT * FROM tributary._job_triggers(j.id) LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', r.tgname, r.rel);
    END LOOP;
    EXECUTE format('DROP TABLE IF EXISTS tributary.%I', '_queue_' || j.id);
END $$;

CREATE FUNCTION tributary._job_pause(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE j tributary._jobs := tributary._own_job(caller, (a->>'job')::bigint);
BEGIN
    IF j.state NOT IN ('pending', 'running', 'paused') THEN
        RAISE EXCEPTION 'job % is %, not pending or running', j.id, j.state USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE tributary._jobs SET state = 'paused' WHERE id = j.id;
    RETURN j.id;
END $$;

CREATE FUNCTION tributary._job_resume(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE j tributary._jobs := tributary._own_job(caller, (a->>'job')::bigint);
BEGIN
    IF j.state = 'cancelled' THEN
        RAISE EXCEPTION 'job % is cancelled', j.id USING ERRCODE = 'object_not_in_prerequisite_state',
            HINT = 'A cancelled job has dropped its queue; create a new job.';
    END IF;
    -- Failed rows get a new chance now, whatever their attempts. Their keys become the owner's
    -- types again as the owner (domain checks are the owner's code).
    PERFORM tributary._run_as(j.owner, j.requeue_sql,
        (SELECT coalesce(jsonb_agg(key), '[]') FROM tributary._job_errors WHERE job_id = j.id AND status <> 'queued'));
    UPDATE tributary._job_errors SET status = 'queued', next_attempt_at = NULL WHERE job_id = j.id AND status <> 'queued';
    UPDATE tributary._jobs SET state = 'pending', finished_at = NULL WHERE id = j.id;
    PERFORM tributary._wake_launcher();
    RETURN j.id;
END $$;

CREATE FUNCTION tributary._job_cancel(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE j tributary._jobs := tributary._own_job(caller, (a->>'job')::bigint, false);
BEGIN
    PERFORM tributary._job_cleanup(j);
    UPDATE tributary._jobs SET state = 'cancelled', finished_at = now() WHERE id = j.id;
    RETURN j.id;
END $$;

CREATE FUNCTION tributary._job_drop(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE j tributary._jobs := tributary._own_job(caller, (a->>'job')::bigint, false);
BEGIN
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
-- name, exclude, parents, children, time_columns, prompt]) -> job id. See the README (Jobs).
-- prompt: the model's prompt to embed with (NULL: its default prompt); 42704 if it has none such.
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
    prompt       text DEFAULT NULL
) RETURNS bigint
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT tributary._job_call('create', jsonb_build_object(
        'source', source::oid, 'columns', columns, 'target', target, 'model', model, 'mode', mode,
        'target_table', target_table, 'batch_size', batch_size, 'workers', workers, 'name', name,
                'exclude', exclude, 'parents', parents, 'children', children, 'time_columns', time_columns,
        'prompt', prompt))
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
        PERFORM tributary._run_as(j.owner, j.requeue_sql, keys) FROM tributary._jobs j WHERE j.id = job;
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
    tributary._job_fill_sql(tributary._jobs, regclass), tributary._job_ddl() FROM PUBLIC;
