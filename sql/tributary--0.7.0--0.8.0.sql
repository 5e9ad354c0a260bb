-- tributary 0.7.0 -> 0.8.0 (ALTER EXTENSION tributary UPDATE). Written from the 0.8.0 sources:
-- past one server (sql/shards.sql). tributary_job_create on a partitioned table whose partitions
-- are postgres_fdw foreign tables makes the job on each shard (through dblink, as the table's
-- owner) and records it here as one job with parts (tributary._sharded_jobs, tributary._job_parts);
-- tributary.jobs gains their rows and a last column, parts (dropped and created again), and the
-- new view tributary.job_parts shows each part; pause, resume, cancel and drop reach every part.
-- tributary_predict's evidence and tributary_match's keys use the shards' primary key on such a
-- table. tests/integration/test_upgrade.py checks that an updated extension equals a fresh 0.8.0
-- install object by object.
\echo Use "ALTER EXTENSION tributary UPDATE TO '0.8.0'" to load this file. \quit

CREATE  FUNCTION "_run_as_value"(
	"role" oid, /* pg_sys :: Oid */
	"sql" TEXT, /* & str */
	"arg" jsonb DEFAULT NULL /* Option < pgrx :: JsonB > */
) RETURNS jsonb /* Option < pgrx :: JsonB > */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_run_as_value_wrapper';
CREATE  FUNCTION "_job_parts_status"(
	"job" bigint /* i64 */
) RETURNS jsonb /* Option < pgrx :: JsonB > */
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_job_parts_status_wrapper';
ALTER FUNCTION _run_as_value(oid, text, jsonb) SET SCHEMA tributary;
ALTER FUNCTION _job_parts_status(bigint) SET SCHEMA tributary;
REVOKE ALL ON FUNCTION tributary._run_as_value(oid, text, jsonb) FROM PUBLIC;

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

DROP VIEW tributary.jobs;
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
-- for each part). state: unreachable when a shard cannot be reached, else failed when a part
-- failed, else done / cancelled / paused when every part is, waiting when a part waits, else
-- running.
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
GRANT SELECT ON tributary.jobs TO PUBLIC;

CREATE OR REPLACE FUNCTION tributary._job_create(caller oid, a jsonb) RETURNS bigint
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

CREATE OR REPLACE FUNCTION tributary._job_pause(caller oid, a jsonb) RETURNS bigint
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

CREATE OR REPLACE FUNCTION tributary._job_resume(caller oid, a jsonb) RETURNS bigint
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

CREATE OR REPLACE FUNCTION tributary._job_cancel(caller oid, a jsonb) RETURNS bigint
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

CREATE OR REPLACE FUNCTION tributary._job_drop(caller oid, a jsonb) RETURNS bigint
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

CREATE OR REPLACE FUNCTION tributary.row_key(tbl regclass, alias text)
RETURNS text LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce(
        (SELECT 'jsonb_build_object(' || string_agg(format('%L, %I.%I', a.attname, alias, a.attname), ', ' ORDER BY k.ord) || ')'
           FROM pg_catalog.pg_index i
          CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
           JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
          WHERE i.indrelid = tbl AND i.indisprimary),
        (SELECT 'jsonb_build_object(' || string_agg(format('%L, %I.%s', (parse_ident(c))[1], alias, c), ', ' ORDER BY o) || ')'
           FROM unnest(tributary._shard_key_columns(tbl)) WITH ORDINALITY AS u(c, o)),
        format('jsonb_build_object(''ctid'', %I.ctid::text)', alias));
END $$;

CREATE OR REPLACE FUNCTION tributary._match_key(tbl regclass, alias text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    cols text[] := coalesce(tributary._key_columns(tbl), tributary._shard_key_columns(tbl));
BEGIN
    IF cols IS NULL THEN
        RAISE EXCEPTION 'relation "%" has no primary key', tbl USING ERRCODE = '42P10',
            DETAIL = 'Matched pairs are returned as primary key values.',
            HINT = format('Add one: ALTER TABLE %s ADD PRIMARY KEY (...).', tbl);
    END IF;
    IF cardinality(cols) = 1 THEN
        RETURN format('%I.%s::text', alias, cols[1]);
    END IF;
    RETURN format('ROW(%s)::text', (SELECT string_agg(format('%I.%s', alias, c), ', ') FROM unnest(cols) c));
END $$;

CREATE OR REPLACE FUNCTION tributary_match(
    left_table regclass, right_table regclass, columns text[], right_columns text[] DEFAULT NULL,
    k integer DEFAULT 10, threshold float8 DEFAULT NULL, one_to_one boolean DEFAULT true,
    labels regclass DEFAULT NULL, model text DEFAULT NULL)
RETURNS TABLE (left_key text, right_key text, score float8)
LANGUAGE plpgsql VOLATILE SET jit = off AS $$
#variable_conflict use_column
DECLARE
    vec text := tributary._vector_schema();
    self boolean;
    rcols text[];
    n int;
    dims int;
    n_left bigint;
    n_right bigint;
    emb bool[];
    str bool[];
    thr float8;
    how text;
    coef float8[];
    old_ef text := current_setting('hnsw.ef_search', true);
    old_iter text := current_setting('hnsw.iterative_scan', true);
    report boolean;
    near text;
    same text;
    fill_sql text;
    pair_order text;
    i int;
    t0 timestamptz := clock_timestamp();   -- stage times for the NOTICE: embedding, candidates, evidence
    t_embed float8;
    t_cand float8;
BEGIN
    IF left_table IS NULL OR right_table IS NULL OR columns IS NULL OR k IS NULL OR one_to_one IS NULL THEN
        RAISE EXCEPTION '% must not be NULL',
            CASE WHEN left_table IS NULL THEN 'left_table' WHEN right_table IS NULL THEN 'right_table'
                 WHEN columns IS NULL THEN 'columns' WHEN k IS NULL THEN 'k' ELSE 'one_to_one' END
            USING ERRCODE = '22004';
    END IF;
    rcols := coalesce(right_columns, columns);
    n := cardinality(columns);
    IF n = 0 OR array_ndims(columns) > 1 THEN
        RAISE EXCEPTION 'columns must name at least one column' USING ERRCODE = '22023';
    END IF;
    IF cardinality(rcols) <> n OR array_ndims(rcols) > 1 THEN
        RAISE EXCEPTION 'right_columns has % columns, columns has %', cardinality(rcols), n USING ERRCODE = '22023',
            HINT = 'The lists pair up by position: the right table''s column for each of columns, in the same order.';
    END IF;
    IF k < 1 OR k > 1000 THEN
        RAISE EXCEPTION 'k must be between 1 and 1000, not %', k USING ERRCODE = '22023',
            HINT = 'k is the number of candidates per row and direction; 10 is usually enough.';
    END IF;
    IF threshold < 0 OR threshold > 1 THEN
        RAISE EXCEPTION 'threshold must be between 0 and 1, not %', threshold USING ERRCODE = '22023',
            HINT = 'Leave it NULL to have it read off the data.';
    END IF;
    self := left_table = right_table;

    -- 1. The rows of each side: key, values, the joined text, its embedding.
    PERFORM tributary._match_drop();
    dims := vector_dims(tributary_embed('dimension', model));
    -- Defined now that the library is loaded: '0' turns progress NOTICEs off.
    report := current_setting('tributary.progress_interval') <> '0';
    EXECUTE format('CREATE TEMP TABLE tributary_match_l (key text PRIMARY KEY, v text[], txt text, e %s.vector(%s))
                    ON COMMIT DROP', vec, dims);
    -- A side's rows: key, values, and the text `name: value; ...` under the left names.
    fill_sql := 'INSERT INTO pg_temp.tributary_match_%s
             SELECT %s, x.v, (SELECT string_agg(c.name || '': '' || x.v[c.i], ''; '' ORDER BY c.i)
                                FROM unnest($1) WITH ORDINALITY AS c(name, i) WHERE x.v[c.i] IS NOT NULL)
               FROM %s AS t CROSS JOIN LATERAL (SELECT %s AS v) x';
    EXECUTE format(fill_sql, 'l', tributary._match_key(left_table, 't'), left_table,
                   tributary._match_values(left_table, columns, 't'))
      USING columns;
    IF self THEN
        CREATE TEMP VIEW tributary_match_r AS SELECT * FROM pg_temp.tributary_match_l;
    ELSE
        CREATE TEMP TABLE tributary_match_r (LIKE pg_temp.tributary_match_l INCLUDING ALL) ON COMMIT DROP;
        EXECUTE format(fill_sql, 'r', tributary._match_key(right_table, 't'), right_table,
                       tributary._match_values(right_table, rcols, 't'))
          USING columns;
    END IF;
    SELECT count(*) INTO n_left FROM pg_temp.tributary_match_l;
    SELECT count(*) INTO n_right FROM pg_temp.tributary_match_r;
    IF n_left = 0 OR n_right = 0 OR (self AND n_left < 2) THEN
        PERFORM tributary._match_drop();
        RETURN;
    END IF;
    PERFORM tributary_embed_column('pg_temp.tributary_match_l', '{txt}', 'e', model => model);
    IF NOT self THEN
        PERFORM tributary_embed_column('pg_temp.tributary_match_r', '{txt}', 'e', model => model);
    END IF;

    -- 2. Which columns are phrases (embedded) and which are short (string similarity).
    SELECT array_agg(coalesce(p.words >= 1.5 AND p.letters >= 0.5, false) ORDER BY p.i),
           array_agg(coalesce(p.len <= 64 OR NOT (p.words >= 1.5 AND p.letters >= 0.5), true) ORDER BY p.i)
      INTO emb, str
      FROM (SELECT c.i, avg(array_length(regexp_split_to_array(x.v[c.i], '\s+'), 1)) AS words,
                   avg(length(x.v[c.i])) AS len, avg((x.v[c.i] ~ '[[:alpha:]]')::int) AS letters
              FROM generate_series(1, n) c(i)
              LEFT JOIN (SELECT v FROM pg_temp.tributary_match_l UNION ALL
                         SELECT v FROM pg_temp.tributary_match_r WHERE NOT self) x ON x.v[c.i] IS NOT NULL
             GROUP BY c.i) p;
    EXECUTE format('CREATE TEMP TABLE tributary_match_v (col int, val text, e %s.vector(%s), PRIMARY KEY (col, val))
                    ON COMMIT DROP', vec, dims);
    INSERT INTO pg_temp.tributary_match_v (col, val)
    SELECT DISTINCT c.i, x.v[c.i]
      FROM generate_series(1, n) c(i),
           LATERAL (SELECT v FROM pg_temp.tributary_match_l UNION ALL SELECT v FROM pg_temp.tributary_match_r WHERE NOT self) x
     WHERE emb[c.i] AND x.v[c.i] IS NOT NULL;
    PERFORM tributary_embed_column('pg_temp.tributary_match_v', '{val}', 'e', model => model);

    t_embed := extract(epoch FROM clock_timestamp() - t0);
    -- 3. Candidates: k nearest each way, and the unrelated pairs that calibrate the evidence.
    CREATE TEMP TABLE tributary_match_c (lk text, rk text, kind "char", PRIMARY KEY (lk, rk, kind)) ON COMMIT DROP;
    PERFORM set_config('hnsw.ef_search', greatest(40, 2 * k)::text, true);
    PERFORM set_config('hnsw.iterative_scan', 'relaxed_order', true);
    IF n_left > 2000 THEN
        EXECUTE format('CREATE INDEX ON pg_temp.tributary_match_l USING hnsw (e %s.vector_cosine_ops)', vec);
    END IF;
    IF n_right > 2000 AND NOT self THEN
        EXECUTE format('CREATE INDEX ON pg_temp.tributary_match_r USING hnsw (e %s.vector_cosine_ops)', vec);
    END IF;
    ANALYZE pg_temp.tributary_match_l;
    IF NOT self THEN
        ANALYZE pg_temp.tributary_match_r;
    END IF;
    -- In one table a pair is stored once, smaller key first.
    pair_order := CASE WHEN self THEN 'least(a, b), greatest(a, b)' ELSE 'a, b' END;
    near := 'SELECT %s, ''c'' FROM (SELECT x.key AS a, y.key AS b FROM pg_temp.tributary_match_%s x
                 CROSS JOIN LATERAL (SELECT z.key FROM pg_temp.tributary_match_%s z
                                      WHERE z.e IS NOT NULL%s
                                      ORDER BY z.e OPERATOR(%s.<=>) x.e LIMIT %s) y
                WHERE x.e IS NOT NULL) p ON CONFLICT DO NOTHING';
    -- Never a row with itself; two tables' rows with equal keys are candidates like any others.
    same := CASE WHEN self THEN ' AND z.key <> x.key' ELSE '' END;
    EXECUTE 'INSERT INTO pg_temp.tributary_match_c ' || format(near, pair_order, 'l', 'r', same, vec, k);
    IF NOT self THEN
        EXECUTE 'INSERT INTO pg_temp.tributary_match_c ' || format(near, 'b, a', 'r', 'l', same, vec, k);
    END IF;
    -- And blocking on rare values: pairs that agree exactly (case and spaces aside) on a short
    -- column's value that at most k rows of each side hold (an id, a date, a phone number):
    -- at most rows x k pairs a column.
    FOR i IN 1 .. n LOOP
        CONTINUE WHEN NOT str[i];
        EXECUTE format(
            'INSERT INTO pg_temp.tributary_match_c
             WITH lv AS (SELECT key, lower(v[$1]) AS x FROM pg_temp.tributary_match_l WHERE v[$1] IS NOT NULL),
                  rv AS (SELECT key, lower(v[$1]) AS x FROM pg_temp.tributary_match_r WHERE v[$1] IS NOT NULL),
                  rare AS (SELECT x FROM lv GROUP BY x HAVING count(*) <= $2
                           INTERSECT SELECT x FROM rv GROUP BY x HAVING count(*) <= $2)
             SELECT %s, ''c'' FROM (SELECT lv.key AS a, rv.key AS b FROM lv JOIN rv ON rv.x = lv.x
                                     WHERE lv.x IN (SELECT x FROM rare) AND (NOT $3 OR lv.key <> rv.key)) p
             ON CONFLICT DO NOTHING', pair_order)
          USING i, k, self;
    END LOOP;
    PERFORM set_config('hnsw.ef_search', coalesce(nullif(old_ef, ''), '40'), true);
    PERFORM set_config('hnsw.iterative_scan', coalesce(nullif(old_iter, ''), 'off'), true);
    INSERT INTO pg_temp.tributary_match_c
    SELECT l.key, r.key, 'u'
      FROM (SELECT key, row_number() OVER (ORDER BY md5(key)) - 1 AS i FROM pg_temp.tributary_match_l) l
      JOIN (SELECT key, row_number() OVER (ORDER BY md5(key)) - 1 AS i, count(*) OVER () AS m FROM pg_temp.tributary_match_r) r
        ON r.i = (l.i + r.m / 2) % r.m
     WHERE l.i < 2000 AND l.key <> r.key
    ON CONFLICT DO NOTHING;
    IF labels IS NOT NULL THEN
        PERFORM tributary._match_check_labels(labels);
        EXECUTE format(
            'INSERT INTO pg_temp.tributary_match_c
             SELECT %s, CASE WHEN bool_or(s.is_match) THEN ''m'' ELSE ''n'' END
               FROM (SELECT x.left_key::text AS a, x.right_key::text AS b, x.is_match FROM %s x WHERE x.is_match IS NOT NULL) s
              WHERE s.a IN (SELECT key FROM pg_temp.tributary_match_l) AND s.b IN (SELECT key FROM pg_temp.tributary_match_r)
                AND (NOT $1 OR s.a <> s.b)
              GROUP BY 1, 2
             ON CONFLICT DO NOTHING', pair_order, labels) USING self;
    END IF;

    t_cand := extract(epoch FROM clock_timestamp() - t0) - t_embed;
    -- 4. Evidence per column: raw similarities, rescaled by the unrelated pairs, weighted.
    EXECUTE format(
        'CREATE TEMP TABLE tributary_match_f ON COMMIT DROP AS
         SELECT c.lk, c.rk, c.kind, i.i,
                CASE WHEN $1[i.i] AND l.v[i.i] IS NOT NULL AND r.v[i.i] IS NOT NULL THEN
                     CASE WHEN l.v[i.i] = r.v[i.i] THEN 1 ELSE 1 - (vl.e OPERATOR(%1$s.<=>) vr.e) END END AS es,
                CASE WHEN $2[i.i] THEN tributary._string_similarity(l.v[i.i], r.v[i.i]) END AS ss
           FROM pg_temp.tributary_match_c c
           JOIN pg_temp.tributary_match_l l ON l.key = c.lk
           JOIN pg_temp.tributary_match_r r ON r.key = c.rk
          CROSS JOIN generate_series(1, $3) i(i)
           LEFT JOIN pg_temp.tributary_match_v vl ON $1[i.i] AND vl.col = i.i AND vl.val = l.v[i.i]
           LEFT JOIN pg_temp.tributary_match_v vr ON $1[i.i] AND vr.col = i.i AND vr.val = r.v[i.i]', vec)
      USING emb, str, n;
    -- u: the mean raw similarity of unrelated pairs; evidence = mean of the rescaled ones.
    WITH u AS (SELECT f.i, avg(f.es) AS ue, avg(f.ss) AS us FROM pg_temp.tributary_match_f f WHERE f.kind = 'u' GROUP BY f.i)
    UPDATE pg_temp.tributary_match_f f
       SET es = (SELECT avg(s) FROM (VALUES
                     (CASE WHEN u.ue < 0.99 THEN greatest(0, least(1, (f.es - u.ue) / (1 - u.ue))) END),
                     (CASE WHEN u.us < 0.99 THEN greatest(0, least(1, (f.ss - u.us) / (1 - u.us))) END)) x(s))
      FROM u WHERE u.i = f.i;
    CREATE TEMP TABLE tributary_match_s (lk text, rk text, kind "char", score float8) ON COMMIT DROP;
    IF labels IS NULL THEN
        -- u: how often unrelated pairs agree on a column (evidence 0.9 or more, at least 1/2,000);
        -- m: how often matches do, 1 until it is estimated below.
        CREATE TEMP TABLE tributary_match_w ON COMMIT DROP AS
        SELECT f.i, greatest(avg((coalesce(f.es, 0) >= 0.9)::int), 1.0 / 2000)::float8 AS u, 1.0::float8 AS m
          FROM pg_temp.tributary_match_f f WHERE f.kind = 'u' GROUP BY f.i;
        PERFORM tributary._match_score();
        IF threshold IS NULL THEN
            -- One step of Fellegi and Sunter's estimation: m from the pairs the first scores
            -- accept (mutual best, above their own threshold), then the scores again. A column
            -- that matches often disagree on (a price, a free-text note) weighs less.
            thr := tributary._match_auto_threshold(self);
            UPDATE pg_temp.tributary_match_w w SET m = x.m
              FROM (SELECT f.i, avg((f.es >= 0.9)::int)::float8 AS m
                      FROM pg_temp.tributary_match_f f
                      JOIN tributary._match_accepted(self, coalesce(thr, 0.5), true) a ON a.lk = f.lk AND a.rk = f.rk
                     WHERE f.kind = 'c' AND f.es IS NOT NULL
                     GROUP BY f.i HAVING count(*) >= 20) x
             WHERE x.i = w.i;
            TRUNCATE pg_temp.tributary_match_s;
            PERFORM tributary._match_score();
        END IF;
    ELSE
        -- Features per pair: each column's evidence (0 when missing) and whether it is present.
        SELECT tributary._logistic_fit(array_agg(x ORDER BY p.lk, p.rk, p.j), y.ys, 1.0)
          INTO coef
          FROM (SELECT f.lk, f.rk, f.i * 2 + g.j AS j, CASE g.j WHEN 0 THEN coalesce(f.es, 0) ELSE (f.es IS NOT NULL)::int END AS x
                  FROM pg_temp.tributary_match_f f CROSS JOIN (VALUES (0), (1)) g(j) WHERE f.kind IN ('m', 'n')) p,
               (SELECT array_agg(c.kind = 'm' ORDER BY c.lk, c.rk) AS ys FROM pg_temp.tributary_match_c c WHERE c.kind IN ('m', 'n')) y
         GROUP BY y.ys;
        IF coef IS NULL THEN
            RAISE EXCEPTION 'no labelled pair of "%" names rows of both tables', labels USING ERRCODE = '22023',
                HINT = 'left_key and right_key hold primary key values as text (id::text, a composite key as (a,b)).';
        END IF;
        INSERT INTO pg_temp.tributary_match_s
        SELECT f.lk, f.rk, f.kind,
               1 / (1 + exp(-(coef[1] + sum(coef[f.i * 2] * coalesce(f.es, 0) + coef[f.i * 2 + 1] * (f.es IS NOT NULL)::int))))
          FROM pg_temp.tributary_match_f f
         WHERE f.kind = 'c'
         GROUP BY f.lk, f.rk, f.kind;
    END IF;

    -- 5. The threshold: given, 0.5 with labels, or read off the best and second-best scores.
    IF threshold IS NOT NULL THEN
        thr := threshold; how := 'given';
    ELSIF labels IS NOT NULL THEN
        thr := 0.5; how := 'probability 0.5 (labels)';
    ELSE
        thr := tributary._match_auto_threshold(self);
        thr := coalesce(thr, 0.5);
        how := 'minimum-error cut of the best and second-best candidate scores, capped at the second-best''s 99th percentile';
    END IF;
    IF report THEN
        RAISE NOTICE 'tributary_match: % x % rows, % candidate pairs (k = %), threshold % (%); % s embedding, % s candidates, % s evidence',
            n_left, n_right, (SELECT count(*) FROM pg_temp.tributary_match_s), k, round(thr::numeric, 4), how,
            round(t_embed::numeric, 1), round(t_cand::numeric, 1),
            round((extract(epoch FROM clock_timestamp() - t0) - t_embed - t_cand)::numeric, 1);
    END IF;

    -- 6. Accepted pairs.
    RETURN QUERY SELECT a.lk, a.rk, a.score FROM tributary._match_accepted(self, thr, one_to_one) a ORDER BY 1, 2;

    PERFORM tributary._match_drop();
END $$;

CREATE OR REPLACE FUNCTION tributary._match_accepted(self boolean, thr float8, one_to_one boolean)
RETURNS TABLE (lk text, rk text, score float8)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    -- (a row is told apart by its side too: two tables may share key values)
    WITH ends AS (SELECT 'l' AS side, s.lk AS node, s.rk AS other, s.lk, s.rk, s.score FROM pg_temp.tributary_match_s s
                  UNION ALL
                  SELECT 'r', s.rk, s.lk, s.lk, s.rk, s.score FROM pg_temp.tributary_match_s s),
         ranked AS (SELECT e.lk, e.rk, e.score,
                           row_number() OVER (PARTITION BY CASE WHEN self THEN 'l' ELSE e.side END, e.node
                                              ORDER BY e.score DESC, e.other) AS rnk
                      FROM ends e WHERE e.score IS NOT NULL)
    SELECT r.lk, r.rk, min(r.score)
      FROM ranked r
     WHERE r.score >= thr
     GROUP BY r.lk, r.rk
    HAVING NOT one_to_one OR max(r.rnk) = 1;
END $$;

-- Runs a.sql on the foreign server a.server through dblink as the current role (its user
-- mapping), and returns the one jsonb column of its first row (NULL: no row). Run as a job's
-- owner by tributary._shard_call. Errors: 0A000 dblink is not installed; dblink's (08001 no
-- connection; the remote SQLSTATE of a remote error).
CREATE FUNCTION tributary._shard_query(a jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    dbl text;
    r   jsonb;
BEGIN
    SELECT quote_ident(n.nspname) INTO dbl
      FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'dblink';
    IF dbl IS NULL THEN
        RAISE EXCEPTION 'jobs on foreign partitions need the dblink extension' USING ERRCODE = 'feature_not_supported',
            DETAIL = 'The job on each shard is made and managed through the partition''s foreign server with dblink.',
            HINT = 'CREATE EXTENSION dblink;';
    END IF;
    EXECUTE format('SELECT t.x FROM %s.dblink($1, $2) AS t(x jsonb)', dbl) INTO r USING a->>'server', a->>'sql';
    RETURN r;
END $$;

-- sql on a shard as owner (tributary._shard_query), the errors named by the shard: the remote
-- SQLSTATE kept, the message prefixed with the server and the coordinator's foreign table. With
-- raise false, an error comes back as {"error": message, "sqlstate": code} instead.
CREATE FUNCTION tributary._shard_call(owner oid, server oid, part regclass, sql text, raise boolean DEFAULT true)
RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    srv  name := (SELECT srvname FROM pg_foreign_server WHERE oid = server);
    msg  text;
    code text;
    det  text;
    hnt  text;
BEGIN
    IF srv IS NULL THEN
        msg := format('foreign server with OID %s does not exist', server);
        IF raise THEN
            RAISE EXCEPTION '%', msg USING ERRCODE = 'undefined_object';
        END IF;
        RETURN jsonb_build_object('error', msg, 'sqlstate', '42704');
    END IF;
    RETURN tributary._run_as_value(owner, 'SELECT tributary._shard_query($1)',
                                   jsonb_build_object('server', srv, 'sql', sql));
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, code = RETURNED_SQLSTATE, det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    IF NOT raise THEN
        RETURN jsonb_build_object('error', msg || CASE WHEN det <> '' THEN ': ' || det ELSE '' END, 'sqlstate', code);
    END IF;
    det := CASE WHEN det <> '' THEN det ELSE format('Through foreign server %s with the user mapping of %s.', srv, owner::regrole) END;
    IF hnt <> '' THEN
        RAISE EXCEPTION 'shard %, foreign table %: %', srv, part, msg USING ERRCODE = code, DETAIL = det, HINT = hnt;
    ELSIF code LIKE '08%' OR code = '28P01' OR code = '28000' THEN
        RAISE EXCEPTION 'shard %, foreign table %: %', srv, part, msg USING ERRCODE = code, DETAIL = det,
            HINT = format('The shard must be up and accept the user mapping of %s for server %s.', owner::regrole, srv);
    ELSE
        RAISE EXCEPTION 'shard %, foreign table %: %', srv, part, msg USING ERRCODE = code, DETAIL = det;
    END IF;
END $$;

-- The leaves of a partitioned table's tree with, for foreign tables, their server and the
-- shard's table they name (options schema_name and table_name, else the foreign table's own).
CREATE FUNCTION tributary._shard_leaves(source regclass)
RETURNS TABLE (part regclass, relkind "char", server oid, srvname name, fdw name, remote_table text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.oid::regclass, c.relkind, f.ftserver, s.srvname, w.fdwname,
           CASE WHEN f.ftrelid IS NOT NULL THEN
               format('%I.%I',
                      coalesce((SELECT substr(o, 13) FROM unnest(f.ftoptions) o WHERE o LIKE 'schema_name=%'), n.nspname),
                      coalesce((SELECT substr(o, 12) FROM unnest(f.ftoptions) o WHERE o LIKE 'table_name=%'), c.relname))
           END
      FROM pg_partition_tree(source) t
      JOIN pg_class c ON c.oid = t.relid
      JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_foreign_table f ON f.ftrelid = c.oid
      LEFT JOIN pg_foreign_server s ON s.oid = f.ftserver
      LEFT JOIN pg_foreign_data_wrapper w ON w.oid = s.srvfdw
     WHERE t.isleaf
     ORDER BY c.oid::regclass::text
$$;

-- tributary_job_create on a partitioned table with foreign partitions (from
-- tributary._job_create, which has checked the arguments and that caller is a member of owner).
-- Every shard is checked first (reachable, tributary 0.8.0 or later, the table exists), then the
-- job is made on each; if one fails, those made already are dropped again. Errors: 0A000 a
-- partition that is local or of another foreign data wrapper, or no dblink; 42710 the name is
-- taken; the shard's own errors, named by the shard (tributary._shard_call).
CREATE FUNCTION tributary._sharded_job_create(caller oid, a jsonb, source regclass, owner oid) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
    id       bigint := nextval('tributary._jobs_id_seq');
    jobname  text;
    args     jsonb := a - 'source';
    l        record;
    r        jsonb;
    schemas  jsonb := '{}';
    made     jsonb := '[]';
    call     text;
    msg      text;
    code     text;
    det      text;
    hnt      text;
BEGIN
    FOR l IN SELECT * FROM tributary._shard_leaves(source) LOOP
        IF l.relkind <> 'f' THEN
            RAISE EXCEPTION 'table % has both local and foreign partitions', source USING ERRCODE = 'feature_not_supported',
                DETAIL = format('Partition %s is local; a job on a table with foreign partitions is made on each shard.', l.part),
                HINT = 'Make a job on each local partition, and one on a table whose partitions are all foreign.';
        ELSIF l.fdw IS DISTINCT FROM 'postgres_fdw' THEN
            RAISE EXCEPTION 'partition % is a foreign table of %, not postgres_fdw', l.part, coalesce(l.fdw, '?')
                USING ERRCODE = 'feature_not_supported',
                      HINT = 'Jobs reach shards through postgres_fdw foreign servers.';
        END IF;
    END LOOP;
    jobname := coalesce(a->>'name', format('%s.%s', source, a->>'target'));
    IF EXISTS (SELECT 1 FROM tributary._sharded_jobs x WHERE x.owner = owner AND x.name = jobname)
       OR EXISTS (SELECT 1 FROM tributary._jobs x WHERE x.owner = owner AND x.name = jobname) THEN
        IF a->>'name' IS NOT NULL THEN
            RAISE EXCEPTION 'job "%" already exists', jobname USING ERRCODE = 'duplicate_object',
                HINT = 'Job names are unique per owner; pick another name, or drop the old job with tributary_job_drop().';
        END IF;
        jobname := format('%s (job %s)', jobname, id);
    END IF;
    args := jsonb_set(args, '{name}', to_jsonb(jobname));

    -- 1. Every shard answers, has tributary 0.8.0 or later and the table, before any job is made.
    FOR l IN SELECT * FROM tributary._shard_leaves(source) LOOP
        r := tributary._shard_call(owner, l.server, l.part, format(
            $q$SELECT pg_catalog.jsonb_build_object(
                 'schema', (SELECT pg_catalog.quote_ident(n.nspname) FROM pg_catalog.pg_extension e
                              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'tributary'),
                 'version', (SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'tributary'),
                 'table', pg_catalog.to_regclass(%L) IS NOT NULL)$q$, l.remote_table));
        IF r->>'schema' IS NULL THEN
            RAISE EXCEPTION 'shard %, foreign table %: tributary is not installed', l.srvname, l.part
                USING ERRCODE = 'undefined_object', HINT = 'CREATE EXTENSION tributary CASCADE; in that database on the shard.';
        END IF;
        IF string_to_array(r->>'version', '.')::int[] < '{0,8,0}' THEN
            RAISE EXCEPTION 'shard %, foreign table %: tributary % is too old for jobs made from a coordinator', l.srvname, l.part, r->>'version'
                USING ERRCODE = 'feature_not_supported', HINT = 'ALTER EXTENSION tributary UPDATE; on the shard.';
        END IF;
        IF NOT (r->>'table')::boolean THEN
            RAISE EXCEPTION 'shard %, foreign table %: table % does not exist there', l.srvname, l.part, l.remote_table
                USING ERRCODE = 'undefined_table',
                      HINT = 'The foreign table''s options schema_name and table_name name the shard''s table.';
        END IF;
        schemas := schemas || jsonb_build_object(l.part::oid::text, r->>'schema');
    END LOOP;

    -- 2. The job on each shard; the arguments as tributary_job_create got them (named, quoted).
    FOR l IN SELECT * FROM tributary._shard_leaves(source) LOOP
        call := format('source => %L::regclass', l.remote_table)
             || format(', columns => %L::text[]', (SELECT array_agg(x) FROM jsonb_array_elements_text(a->'columns') x))
             || format(', target => %L::name', a->>'target')
             || format(', mode => %L', a->>'mode')
             || format(', batch_size => %s, workers => %s', (a->>'batch_size')::integer, (a->>'workers')::integer)
             || format(', name => %L', format('%s [job %s of %s, %s]', jobname, id, current_database(), l.part))
             || coalesce(format(', model => %L', a->>'model'), '')
             || coalesce(format(', target_table => %L', a->>'target_table'), '')
             || coalesce(format(', exclude => %L::text[]', (SELECT array_agg(x) FROM jsonb_array_elements_text(
                    CASE WHEN jsonb_typeof(a->'exclude') = 'array' THEN a->'exclude' END) x)), '')
             || format(', parents => %s, children => %s', coalesce((a->>'parents')::integer, 0), coalesce((a->>'children')::integer, 0))
             || coalesce(format(', time_columns => %L::text[]', (SELECT array_agg(x) FROM jsonb_array_elements_text(
                    CASE WHEN jsonb_typeof(a->'time_columns') = 'array' THEN a->'time_columns' END) x)), '')
             || coalesce(format(', prompt => %L', a->>'prompt'), '')
             || format(', template => %s', coalesce((a->>'template')::integer, 2));
        BEGIN
            r := tributary._shard_call(owner, l.server, l.part, format('SELECT pg_catalog.to_jsonb(%s.tributary_job_create(%s))',
                                                                      schemas->>(l.part::oid::text), call));
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, code = RETURNED_SQLSTATE, det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
            -- The parts made already are dropped again (best effort: the error is the one to see).
            PERFORM tributary._shard_call(owner, (m->>'server')::oid, (m->>'part')::oid::regclass,
                        format('SELECT pg_catalog.to_jsonb(true) FROM (SELECT %s.tributary_job_drop(%s)) x', m->>'schema', m->>'job'), false)
               FROM jsonb_array_elements(made) m;
            RAISE EXCEPTION '%', msg USING ERRCODE = code, DETAIL = coalesce(nullif(det, ''), 'No job was made.'),
                HINT = coalesce(nullif(hnt, ''), 'The job was made on no shard.');
        END;
        made := made || jsonb_build_object('part', l.part::oid, 'server', l.server, 'schema', schemas->>(l.part::oid::text),
                                           'table', l.remote_table, 'job', (r #>> '{}')::bigint);
    END LOOP;

    INSERT INTO tributary._sharded_jobs (id, name, source, owner, mode, args)
    VALUES (id, jobname, source, owner, a->>'mode', args);
    INSERT INTO tributary._job_parts (job_id, partition, server, remote_schema, remote_table, remote_job)
    SELECT id, (m->>'part')::oid, (m->>'server')::oid, m->>'schema', m->>'table', (m->>'job')::bigint
      FROM jsonb_array_elements(made) m;
    RETURN id;
END $fn$;

-- Pause, resume, cancel or drop a sharded job: the same on every part, on its shard. A part
-- that is done or cancelled already is left alone by pause; one whose job is gone from its shard
-- counts as dropped. A shard that fails: the error names it, and DETAIL says which parts had the
-- operation already (remote operations commit on their shard at once). drop: a shard that cannot
-- be reached gets a WARNING that names the job left on it, and the job is dropped here anyway.
-- Errors: 42704 no such job of the caller's (as tributary._own_job).
CREATE FUNCTION tributary._sharded_job_op(caller oid, op text, job bigint) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    s     tributary._sharded_jobs;
    owner oid;
    p     tributary._job_parts;
    done  text[] := '{}';
    msg   text;
    code  text;
    det   text;
BEGIN
    SELECT * INTO s FROM tributary._sharded_jobs x WHERE x.id = job AND pg_has_role(caller, tributary._sharded_owner(x), 'USAGE') FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object',
            HINT = 'Your jobs are listed in tributary.jobs.';
    END IF;
    owner := tributary._sharded_owner(s);
    FOR p IN SELECT * FROM tributary._job_parts x WHERE x.job_id = job ORDER BY x.partition::text LOOP
        BEGIN
            PERFORM tributary._shard_call(owner, p.server, p.partition,
                format('SELECT pg_catalog.to_jsonb(true) FROM (SELECT %s.tributary_job_%s(%s)) x', p.remote_schema, op, p.remote_job));
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, code = RETURNED_SQLSTATE, det = PG_EXCEPTION_DETAIL;
            IF (code = '55000' AND op = 'pause') OR (code = '42704' AND op IN ('drop', 'cancel')) THEN
                NULL;   -- done or cancelled already / gone from the shard
            ELSIF op = 'drop' THEN
                RAISE WARNING 'job % of % is left on its shard: %', p.remote_job, p.partition, msg
                    USING DETAIL = det, HINT = format('Drop it there when the shard is back: SELECT tributary_job_drop(%s);', p.remote_job);
            ELSE
                RAISE EXCEPTION '%', msg USING ERRCODE = code, DETAIL = CASE WHEN cardinality(done) = 0
                    THEN format('No part was %s.', CASE op WHEN 'pause' THEN 'paused' WHEN 'resume' THEN 'resumed' ELSE 'cancelled' END)
                    ELSE format('Already %s: %s.', CASE op WHEN 'pause' THEN 'paused' WHEN 'resume' THEN 'resumed' ELSE 'cancelled' END,
                                array_to_string(done, ', ')) END,
                    HINT = format('Start the shard or fix its user mapping, then call tributary_job_%s(%s) again.', op, job);
            END IF;
        END;
        done := done || p.partition::text;
    END LOOP;
    IF op = 'drop' THEN
        DELETE FROM tributary._sharded_jobs WHERE id = job;
    END IF;
    RETURN job;
END $$;

-- The parts of a sharded job with their state read from the shards now (for
-- tributary._job_parts_status, src/worker/jobs_sql.rs, which passes the calling role): a JSON
-- array; NULL when caller is not a member of the job's owner or there is no such sharded job.
CREATE FUNCTION tributary._job_parts_of(caller oid, job bigint) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    s     tributary._sharded_jobs;
    owner oid;
    p     tributary._job_parts;
    r     jsonb;
    out   jsonb := '[]';
BEGIN
    SELECT * INTO s FROM tributary._sharded_jobs x WHERE x.id = job;
    IF NOT FOUND OR NOT pg_has_role(caller, tributary._sharded_owner(s), 'USAGE') THEN
        RETURN NULL;
    END IF;
    owner := tributary._sharded_owner(s);
    FOR p IN SELECT * FROM tributary._job_parts x WHERE x.job_id = job ORDER BY x.partition::text LOOP
        r := tributary._shard_call(owner, p.server, p.partition, format(
            $q$SELECT pg_catalog.to_jsonb(j) FROM (SELECT state, rows_done, rows_truncated, rows_queued, rows_failed,
                   rows_per_second, last_error, last_error_at, started_at, last_batch_at, finished_at, waiting_for
              FROM tributary.jobs WHERE id = %s) j$q$, p.remote_job), false);
        IF r IS NULL THEN
            r := jsonb_build_object('state', 'missing', 'last_error', format('job %s is gone from the shard', p.remote_job));
        ELSIF r ? 'error' THEN
            r := jsonb_build_object('state', 'unreachable', 'last_error', r->>'error', 'sqlstate', r->>'sqlstate',
                                    'last_error_at', now());
        END IF;
        out := out || (jsonb_build_object('partition', p.partition::text,
                                          'server', (SELECT srvname FROM pg_foreign_server WHERE oid = p.server),
                                          'remote_table', p.remote_table, 'remote_job', p.remote_job) || r);
    END LOOP;
    RETURN out;
END $$;

REVOKE ALL ON FUNCTION tributary._shard_call(oid, oid, regclass, text, boolean),
    tributary._sharded_job_create(oid, jsonb, regclass, oid), tributary._sharded_job_op(oid, text, bigint),
    tributary._job_parts_of(oid, bigint) FROM PUBLIC;

-- One row per part of the sharded jobs of the roles the current role is a member of, with the
-- state its shard reports now (read through the foreign server when this view is read).
CREATE VIEW tributary.job_parts WITH (security_barrier) AS
SELECT s.id AS job_id, s.name AS job_name,
       (p->>'partition')::regclass AS partition, (p->>'server')::name AS server,
       p->>'remote_table' AS remote_table, (p->>'remote_job')::bigint AS remote_job,
       p->>'state' AS state,
       (p->>'rows_done')::bigint AS rows_done, (p->>'rows_truncated')::bigint AS rows_truncated,
       (p->>'rows_queued')::bigint AS rows_queued, (p->>'rows_failed')::bigint AS rows_failed,
       (p->>'rows_per_second')::numeric AS rows_per_second,
       p->>'last_error' AS last_error, (p->>'last_error_at')::timestamptz AS last_error_at,
       (p->>'last_batch_at')::timestamptz AS last_batch_at, (p->>'finished_at')::timestamptz AS finished_at,
       p->>'waiting_for' AS waiting_for
FROM tributary._sharded_jobs s
CROSS JOIN LATERAL jsonb_array_elements(coalesce(tributary._job_parts_status(s.id), '[]')) p
WHERE pg_has_role(tributary._sharded_owner(s), 'USAGE');
GRANT SELECT ON tributary.job_parts TO PUBLIC;

-- The primary key of the shards' tables behind a partitioned table whose partitions are all
-- postgres_fdw foreign tables (which cannot have one of their own on the coordinator): the key
-- columns' names, quoted, when every shard's table has the same primary key and the coordinator's
-- table has those columns; else NULL. Read through dblink as the current role (its user
-- mappings). Rows are identified by it across shards (tributary_match's keys, tributary_predict's
-- evidence): it must be unique across shards, as a local partitioned table's key must include
-- the partition key. NULL also without dblink, or when a shard cannot be reached.
CREATE FUNCTION tributary._shard_key_columns(tbl regclass) RETURNS text[]
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    l    record;
    keys text[];
    k    text[];
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = tbl) IS DISTINCT FROM 'p'
       OR NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'dblink') THEN
        RETURN NULL;
    END IF;
    FOR l IN SELECT * FROM tributary._shard_leaves(tbl) LOOP
        IF l.relkind <> 'f' OR l.fdw IS DISTINCT FROM 'postgres_fdw' THEN
            RETURN NULL;
        END IF;
        BEGIN
            SELECT array_agg(x ORDER BY o) INTO k FROM jsonb_array_elements_text(tributary._shard_query(jsonb_build_object(
                'server', l.srvname,
                'sql', format($q$SELECT pg_catalog.jsonb_agg(a.attname ORDER BY k.ord)
                                   FROM pg_catalog.pg_index i
                                  CROSS JOIN LATERAL pg_catalog.unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                                   JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                                  WHERE i.indrelid = pg_catalog.to_regclass(%L) AND i.indisprimary$q$, l.remote_table)))) WITH ORDINALITY AS u(x, o);
        EXCEPTION WHEN OTHERS THEN
            RETURN NULL;
        END;
        IF k IS NULL OR (keys IS NOT NULL AND k <> keys) THEN
            RETURN NULL;
        END IF;
        keys := k;
    END LOOP;
    IF keys IS NULL OR EXISTS (SELECT 1 FROM unnest(keys) c WHERE NOT EXISTS (
            SELECT 1 FROM pg_attribute a WHERE a.attrelid = tbl AND a.attname = c AND a.attnum > 0 AND NOT a.attisdropped)) THEN
        RETURN NULL;
    END IF;
    RETURN ARRAY(SELECT quote_ident(c) FROM unnest(keys) c);
END $$;

-- Sharded jobs (sql/shards.sql)
COMMENT ON TABLE tributary._sharded_jobs IS 'Internal: one row per job made on a partitioned table whose partitions are postgres_fdw foreign tables (a job on each shard; see tributary.job_parts).';
COMMENT ON TABLE tributary._job_parts IS 'Internal: the parts of a sharded job: the coordinator''s foreign table, its server, the shard''s table and the job id there.';
COMMENT ON FUNCTION tributary._sharded_owner(tributary._sharded_jobs) IS 'Internal: the role a sharded job acts as, the owner of its table.';
COMMENT ON FUNCTION tributary._run_as_value(oid, text, jsonb) IS 'Internal: runs a statement that returns one jsonb value with a role''s rights (security-restricted), for the sharded jobs'' calls to their shards.';
COMMENT ON FUNCTION tributary._job_parts_status(bigint) IS 'Internal: the parts of a sharded job with the state each shard reports now, for tributary.jobs and tributary.job_parts (NULL unless the calling role is a member of the job''s owner).';
COMMENT ON FUNCTION tributary._job_parts_of(oid, bigint) IS 'Internal: tributary._job_parts_status() as the extension''s owner, for the calling role.';
COMMENT ON FUNCTION tributary._shard_query(jsonb) IS 'Internal: a statement on a foreign server through dblink as the current role (its user mapping); its one jsonb value.';
COMMENT ON FUNCTION tributary._shard_call(oid, oid, regclass, text, boolean) IS 'Internal: a statement on a shard as a job''s owner, its errors named by the shard.';
COMMENT ON FUNCTION tributary._shard_leaves(regclass) IS 'Internal: the leaf partitions of a table with, for foreign tables, their server, wrapper and the shard''s table.';
COMMENT ON FUNCTION tributary._sharded_job_create(oid, jsonb, regclass, oid) IS 'Internal: tributary_job_create() on a table with foreign partitions: the job on every shard, recorded here as one job with parts.';
COMMENT ON FUNCTION tributary._sharded_job_op(oid, text, bigint) IS 'Internal: pause, resume, cancel or drop of a sharded job, on every part.';
COMMENT ON VIEW tributary.job_parts IS 'The parts of your sharded jobs (jobs on a table whose partitions are postgres_fdw foreign tables): per partition, its server, the shard''s table and job id, and the state and counts the shard reports now (unreachable, with the error, when it cannot be reached).';
COMMENT ON FUNCTION tributary._shard_key_columns(regclass) IS 'Internal: the primary key columns of the shards'' tables behind a partitioned table over postgres_fdw shards, when they agree (through dblink as the current role); else NULL.';
COMMENT ON VIEW tributary.jobs IS 'The jobs of the roles you are a member of: state (waiting: running but no worker can serve it now, see waiting_for), mode, rows done, queued and failed, rows per second and seconds left, the workers embedding it, the last error; for a job on a table with foreign partitions, the sums of its parts on the shards (parts: each, as tributary.job_parts).';
COMMENT ON FUNCTION tributary.row_key(regclass, text) IS 'Internal (tributary_predict): the jsonb key expression of a table''s rows (primary key, else the shards'' primary key for a table over postgres_fdw shards, else ctid).';
