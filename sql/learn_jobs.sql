-- Predictions kept current (issue 35): a predict job keeps column `target` of a predictor's table
-- filled with the predictor's predictions, as tributary_predict_column(predictor, target) would
-- fill it now, refreshed by the background workers (src/worker/predict.rs) when rows of the table
-- are inserted, updated (any column but `target`: the job's own writes do not wake it), deleted
-- or truncated, and when rows of the tables its history reads change: the tables its foreign
-- keys reference (parents: their numbers and their own foreign keys are features) and the link
-- tables (a foreign key to the table and another one; tributary._learn_spec in sql/learn.sql).
--
-- A statement-level trigger on each of those tables (tributary._predict_trigger, owned by the
-- extension's owner) adds one row to the append-only queue tributary._predict_dirty and wakes
-- the database's workers at commit. On the job's own table, when it has a one-column primary
-- key, the triggers read the statement's transition tables (tributary._predict_trigger_rows)
-- and queue the changed rows themselves: the refresh then predicts only the unlabelled rows
-- they reach (each changed row itself, and the rows sharing a history group with it that are
-- later in as_of: tributary._predict_rows_job), through indexes, so that a new row's prediction
-- is written a moment after its commit whatever the table's size. A statement of more than
-- tributary.predict_job_rows rows, a TRUNCATE, and any change of a parent table or of a link
-- table of a parent queue a refresh of every row; so do jobs made before 0.12.0 (their
-- triggers are statement-level). A change of a link table of the job's table queues the rows of
-- the table its changed rows reference (tributary._predict_trigger_links). A worker picks a job with queued rows, at most once per
-- tributary.job_poll_interval per job, and in one transaction takes the queued rows, runs
-- tributary_predict_column(predictor, target) as the table's owner (read from pg_class at each
-- refresh, like every job) and records the refresh: a crash before the commit leaves the queued
-- rows, and the refresh runs again. A refresh that fails is recorded (last_error) and retried
-- after the poll interval; after tributary.job_max_attempts failures in a row the job is
-- 'failed' (drop it and create it again once the cause is fixed, e.g. after retraining).
--
-- A job is bound to its predictor as it was when the job was made: its table (tbl) and its owner
-- (predictor_owner). A refresh that finds the predictor trained again on another table, or a
-- predictor of that name owned by another role (dropped and made again), writes nothing and
-- fails the job at once (last_error says which). The job's owner (the table's owner) must be
-- allowed to use the predictor (tributary._predictor_hidden), and the triggers go only on tables
-- the job's owner owns: a change to another role's parent or link table queues nothing (a
-- NOTICE at creation names them), so that role cannot make the job read its table at will.

CREATE TABLE tributary._predict_jobs (
    id            bigserial PRIMARY KEY,
    predictor     text NOT NULL,               -- tributary._predictors.name
    target        name NOT NULL,               -- the column written
    tbl           regclass NOT NULL,           -- the predictor's table (dumped by name)
    owner         regrole NOT NULL,            -- the table's owner at the last refresh: refreshes run as it
    state         text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'failed')),
    attempts      integer NOT NULL DEFAULT 0,  -- failed refreshes in a row
    runs          bigint NOT NULL DEFAULT 0,   -- committed refreshes
    rows_done     bigint NOT NULL DEFAULT 0,   -- rows written by committed refreshes
    last_run_at   timestamptz,                 -- start of the last refresh (committed or failed)
    last_error    text,
    last_error_at timestamptz,
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    predictor_owner regrole,                   -- the predictor's owner when the job was made (NULL: made before 0.11.0, unbound)
    UNIQUE (tbl, target)
);
-- One row per statement that may change a prediction; taken (deleted) by the refresh that covers it.
CREATE TABLE tributary._predict_dirty (
    id  bigserial PRIMARY KEY,
    job bigint NOT NULL REFERENCES tributary._predict_jobs ON DELETE CASCADE,
    at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    changed jsonb           -- the changed rows of the job's table (tributary._row_jsonb, old and new versions); NULL: refresh every row
);
CREATE INDEX ON tributary._predict_dirty (job);
REVOKE ALL ON tributary._predict_jobs, tributary._predict_dirty FROM PUBLIC;
-- Jobs are kept by pg_dump (their triggers are dumped with the tables); the queue is not (the
-- predictions it would refresh are dumped as they are).
SELECT pg_catalog.pg_extension_config_dump('tributary._predict_jobs', '');
SELECT pg_catalog.pg_extension_config_dump('tributary._predict_jobs_id_seq', '');

CREATE VIEW tributary.predict_jobs WITH (security_barrier) AS
SELECT j.id, j.predictor, j.target, j.tbl, j.owner, j.state, j.rows_done, j.runs, j.attempts,
       j.last_run_at, j.last_error, j.last_error_at, j.created_at,
       (SELECT pg_catalog.count(*) FROM tributary._predict_dirty d WHERE d.job OPERATOR(pg_catalog.=) j.id) AS pending
  FROM tributary._predict_jobs j
 WHERE pg_catalog.pg_has_role(CURRENT_USER,
           COALESCE((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) j.tbl::pg_catalog.oid), j.owner::pg_catalog.oid),
           'USAGE');
GRANT SELECT ON tributary.predict_jobs TO PUBLIC;

-- The statement-level trigger: queues a refresh of job TG_ARGV[0] (when it is active) and wakes
-- the workers at commit. SECURITY DEFINER (its owner is the extension's owner): whoever writes
-- the table needs no right on the queue. (client_min_messages: tributary_predict_job_create has
-- already warned when tributary is not in shared_preload_libraries.)
CREATE FUNCTION tributary._predict_trigger() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET client_min_messages = error AS $$
BEGIN
    INSERT INTO tributary._predict_dirty (job)
    SELECT j.id FROM tributary._predict_jobs j
     WHERE j.id OPERATOR(pg_catalog.=) CAST(TG_ARGV[0] AS pg_catalog.int8)
       AND j.state OPERATOR(pg_catalog.=) 'active';
    IF FOUND THEN
        PERFORM tributary._wake_launcher();
    END IF;
    RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION tributary._predict_trigger() FROM PUBLIC;

-- Queues `changed` (the rows of a job's table a statement changed, `n` of them; NULL when there
-- were more than tributary.predict_job_rows: a refresh of every row) for predict job `job` when
-- it is active, and wakes the workers at commit. Called by the row-level triggers below.
CREATE FUNCTION tributary._predict_queue(job bigint, n bigint, changed jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET client_min_messages = error AS $$
BEGIN
    IF n > 0 AND EXISTS (SELECT 1 FROM tributary._predict_jobs j WHERE j.id OPERATOR(pg_catalog.=) job
                            AND j.state OPERATOR(pg_catalog.=) 'active') THEN
        INSERT INTO tributary._predict_dirty (job, changed) VALUES (job, changed);
        PERFORM tributary._wake_launcher();
    END IF;
END $$;
REVOKE ALL ON FUNCTION tributary._predict_queue(bigint, bigint, jsonb) FROM PUBLIC;

-- tributary.predict_job_rows (10,000 where the library is not loaded).
CREATE FUNCTION tributary._predict_job_rows() RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(CAST(NULLIF(pg_catalog.current_setting('tributary.predict_job_rows', true), '') AS pg_catalog.int8), 10000)
$$;

-- The row-level view of a statement on the job's own table (a table with a one-column primary
-- key): AFTER INSERT / UPDATE / DELETE ... REFERENCING its transition tables (tributary_new,
-- tributary_old) FOR EACH STATEMENT, TG_ARGV = (job, primary key column, target). Queues the
-- changed rows (their new versions, the old versions of deleted and updated rows; an update
-- that changed target alone, such as the job's own writes, is no change), so that the refresh
-- predicts only the rows they reach; more than tributary.predict_job_rows rows in one statement
-- queue a refresh of every row. SECURITY DEFINER, as tributary._predict_trigger.
CREATE FUNCTION tributary._predict_trigger_rows() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET client_min_messages = error AS $$
DECLARE
    job bigint := CAST(TG_ARGV[0] AS pg_catalog.int8);
    lim bigint := tributary._predict_job_rows();
    changed jsonb;
    n bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT pg_catalog.count(*), pg_catalog.jsonb_agg(tributary._row_jsonb(r)) INTO n, changed
          FROM (SELECT * FROM tributary_new LIMIT lim + 1) r;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT pg_catalog.count(*), pg_catalog.jsonb_agg(tributary._row_jsonb(r)) INTO n, changed
          FROM (SELECT * FROM tributary_old LIMIT lim + 1) r;
    ELSE
        -- Both versions of each row whose columns other than target changed.
        WITH o AS (SELECT tributary._row_jsonb(r) AS v FROM tributary_old r),
             w AS (SELECT tributary._row_jsonb(r) AS v FROM tributary_new r),
             d AS (SELECT o.v AS ov, w.v AS nv FROM o FULL JOIN w ON (o.v OPERATOR(pg_catalog.->) TG_ARGV[1]) OPERATOR(pg_catalog.=) (w.v OPERATOR(pg_catalog.->) TG_ARGV[1])
                    WHERE (o.v OPERATOR(pg_catalog.-) TG_ARGV[2]) IS DISTINCT FROM (w.v OPERATOR(pg_catalog.-) TG_ARGV[2])
                    LIMIT lim + 1),
             e AS (SELECT d.ov AS v FROM d WHERE d.ov IS NOT NULL UNION ALL SELECT d.nv FROM d WHERE d.nv IS NOT NULL)
        SELECT (SELECT pg_catalog.count(*) FROM d), pg_catalog.jsonb_agg(e.v) INTO n, changed FROM e;
    END IF;
    PERFORM tributary._predict_queue(job, n, CASE WHEN n <= lim THEN changed END);
    RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION tributary._predict_trigger_rows() FROM PUBLIC;

-- The same for a link table of the job's table (a foreign key of one column to its one-column
-- primary key, and another foreign key): TG_ARGV = (job, the link table's column referencing the
-- job's table, the job's table, its primary key column). Queues the rows of the job's table that
-- the changed link rows reference, as they are now (their groups through the link table as
-- changed): the refresh predicts the rows those reach. (A removed link's other side is not
-- reached: the next refresh of every row brings its rows up to date.)
CREATE FUNCTION tributary._predict_trigger_links() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET client_min_messages = error AS $$
DECLARE
    job bigint := CAST(TG_ARGV[0] AS pg_catalog.int8);
    lim bigint := tributary._predict_job_rows();
    changed jsonb;
    n bigint;
BEGIN
    EXECUTE format('SELECT pg_catalog.count(*), pg_catalog.jsonb_agg(tributary._row_jsonb(t)) FROM (SELECT t FROM %s t WHERE t.%I = ANY (ARRAY(%s)) LIMIT %s) s(t)',
                   TG_ARGV[2], TG_ARGV[3],
                   CASE TG_OP WHEN 'INSERT' THEN format('SELECT DISTINCT l.%I FROM tributary_new l', TG_ARGV[1])
                              WHEN 'DELETE' THEN format('SELECT DISTINCT l.%I FROM tributary_old l', TG_ARGV[1])
                              ELSE format('SELECT l.%I FROM tributary_old l UNION SELECT l.%I FROM tributary_new l', TG_ARGV[1], TG_ARGV[1]) END,
                   lim + 1)
       INTO n, changed;
    PERFORM tributary._predict_queue(job, n, CASE WHEN n <= lim THEN changed END);
    RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION tributary._predict_trigger_links() FROM PUBLIC;

-- The tables whose rows a predictor over `tbl` reads besides tbl: the tables its foreign keys
-- reference and theirs, up to three hops (parents, grandparents, great-grandparents: their
-- numbers, text and keys are features), and the link tables of tbl and of its parents (a
-- foreign key to it and another foreign key), as tributary._learn_spec finds them. Ordinary and
-- partitioned tables only.
CREATE FUNCTION tributary._predict_related(tbl regclass) RETURNS SETOF regclass
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    WITH RECURSIVE up(rel, depth) AS (
        SELECT CAST(f.ref AS oid), 1 FROM tributary._learn_fkeys(tbl) f
        UNION
        SELECT CAST(f.ref AS oid), u.depth + 1 FROM up u CROSS JOIN LATERAL tributary._learn_fkeys(u.rel) f
         WHERE u.depth < 3
    )
    SELECT DISTINCT r.rel::regclass
      FROM (SELECT up.rel FROM up
            UNION
            SELECT c.conrelid FROM pg_constraint c
             WHERE c.contype = 'f' AND c.conrelid <> tbl
               AND (c.confrelid = tbl OR c.confrelid IN (SELECT up.rel FROM up WHERE up.depth = 1))
               AND NOT (SELECT k.relispartition FROM pg_class k WHERE k.oid = c.conrelid)
               AND EXISTS (SELECT 1 FROM pg_constraint o WHERE o.conrelid = c.conrelid
                              AND o.contype = 'f' AND o.conname <> c.conname)) r
      JOIN pg_class k ON k.oid = r.rel
     WHERE r.rel <> tbl AND k.relkind IN ('r', 'p')
$$;

-- The job functions: called only through tributary._job_call (src/worker/jobs_sql.rs) as the
-- extension's owner, `caller` being the role that called the public function (GetUserId()).

CREATE FUNCTION tributary._predict_job_create(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
    pred   text := a->>'predictor';
    target name := a->>'target';
    p      tributary._predictors;
    tbl_owner oid;
    kind   "char";
    cols   text;
    rel    regclass;
    job    bigint;
    why    text;
    others text[] := '{}';
    pk     name[];
    lcol   name;
BEGIN
    IF pred IS NULL OR target IS NULL THEN
        RAISE EXCEPTION 'predictor and target must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO p FROM tributary._predictors x WHERE x.name = pred;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'predictor "%" does not exist', tributary._learn_short(pred) USING ERRCODE = 'undefined_object',
            HINT = 'Predictors are listed in tributary.predictors; tributary_train makes one.';
    END IF;
    SELECT c.relowner, c.relkind INTO tbl_owner, kind FROM pg_class c WHERE c.oid = p.tbl;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the table of predictor "%" was dropped', tributary._learn_short(pred) USING ERRCODE = 'undefined_table';
    END IF;
    IF NOT pg_has_role(caller, tbl_owner, 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table %', p.tbl USING ERRCODE = 'insufficient_privilege',
            HINT = 'A predict job writes the table as its owner: its owner (or a member of the owning role) makes it.';
    END IF;
    -- The job uses the predictor as the table's owner: that role must be allowed to.
    IF NOT pg_has_role(tbl_owner, p.owner, 'USAGE') THEN
        why := tributary._predictor_hidden(tbl_owner, p.read_tables, p.read_columns);
        IF why IS NOT NULL THEN
            RAISE EXCEPTION 'permission denied for predictor "%"', tributary._learn_short(pred) USING ERRCODE = 'insufficient_privilege',
                DETAIL = why,
                HINT = 'A predict job uses the predictor as the table''s owner, who must own it (or be a member of its owner) or may see every row and column it was trained on.';
        END IF;
    END IF;
    IF target = p.label THEN
        RAISE EXCEPTION 'target must not be the label column "%"', target USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Predictions written to the label column would count as labels; write them to another column.';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute t WHERE t.attrelid = p.tbl AND t.attname = target
                      AND t.attnum > 0 AND NOT t.attisdropped) THEN
        RAISE EXCEPTION 'column "%" of relation "%" does not exist', target, p.tbl USING ERRCODE = 'undefined_column';
    END IF;
    IF EXISTS (SELECT 1 FROM tributary._predict_jobs j WHERE j.tbl = p.tbl AND j.target = target) THEN
        RAISE EXCEPTION 'a predict job already writes column "%" of %', target, p.tbl USING ERRCODE = 'duplicate_object',
            HINT = 'tributary.predict_jobs lists it; tributary_predict_job_drop drops it.';
    END IF;
    INSERT INTO tributary._predict_jobs (predictor, target, tbl, owner, predictor_owner)
    VALUES (pred, target, p.tbl, tbl_owner::regrole, p.owner) RETURNING id INTO job;

    -- On the table: every column but target (the job's own UPDATEs set target only).
    SELECT string_agg(quote_ident(t.attname), ', ' ORDER BY t.attnum) INTO cols
      FROM pg_attribute t
     WHERE t.attrelid = p.tbl AND t.attnum > 0 AND NOT t.attisdropped AND t.attgenerated = ''
       AND t.attname <> target;
    pk := (SELECT array_agg(pa.attname) FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) k(attnum)
             JOIN pg_attribute pa ON pa.attrelid = i.indrelid AND pa.attnum = k.attnum WHERE i.indrelid = p.tbl AND i.indisprimary);
    IF kind IN ('r', 'p') AND cardinality(pk) = 1 THEN
        -- The changed rows, through the transition tables: a refresh predicts only the rows they reach.
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON %s REFERENCING NEW TABLE AS tributary_new FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger_rows(%L, %L, %L)',
                       'tributary_predict_' || job || '_insert', p.tbl, job, pk[1], target);
        EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %s REFERENCING OLD TABLE AS tributary_old NEW TABLE AS tributary_new FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger_rows(%L, %L, %L)',
                       'tributary_predict_' || job || '_update', p.tbl, job, pk[1], target);
        EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON %s REFERENCING OLD TABLE AS tributary_old FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger_rows(%L, %L, %L)',
                       'tributary_predict_' || job || '_delete', p.tbl, job, pk[1], target);
        EXECUTE format('CREATE TRIGGER %I AFTER TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger(%L)',
                       'tributary_predict_' || job, p.tbl, job);
    ELSE
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OF %s OR DELETE%s ON %s FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger(%L)',
                       'tributary_predict_' || job, cols,
                       CASE WHEN kind IN ('r', 'p') THEN ' OR TRUNCATE' ELSE '' END, p.tbl, job);
    END IF;
    -- On the tables its history and features read that the table's owner owns: any change.
    -- Another role's table gets no trigger of this job (that role could otherwise start its
    -- refreshes at will, and a trigger on a table is its owner's to make).
    FOR rel IN SELECT r FROM tributary._predict_related(p.tbl) r LOOP
        IF (SELECT c.relowner FROM pg_class c WHERE c.oid = rel) <> tbl_owner THEN
            others := others || rel::text;
            CONTINUE;
        END IF;
        -- A link table of the table (row triggers possible): the rows of the table it references.
        lcol := CASE WHEN kind IN ('r', 'p') AND cardinality(pk) = 1 THEN
                    (SELECT f.cols[1] FROM tributary._learn_fkeys(rel) f
                      WHERE f.ref = p.tbl AND cardinality(f.cols) = 1 AND f.ref_cols = pk LIMIT 1) END;
        IF lcol IS NOT NULL AND (SELECT c.relkind FROM pg_class c WHERE c.oid = rel) IN ('r', 'p') THEN
            EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON %s REFERENCING NEW TABLE AS tributary_new FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger_links(%L, %L, %L, %L)',
                           'tributary_predict_' || job || '_insert', rel, job, lcol, p.tbl, pk[1]);
            EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %s REFERENCING OLD TABLE AS tributary_old NEW TABLE AS tributary_new FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger_links(%L, %L, %L, %L)',
                           'tributary_predict_' || job || '_update', rel, job, lcol, p.tbl, pk[1]);
            EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON %s REFERENCING OLD TABLE AS tributary_old FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger_links(%L, %L, %L, %L)',
                           'tributary_predict_' || job || '_delete', rel, job, lcol, p.tbl, pk[1]);
            EXECUTE format('CREATE TRIGGER %I AFTER TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger(%L)',
                           'tributary_predict_' || job, rel, job);
            CONTINUE;
        END IF;
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger(%L)',
                       'tributary_predict_' || job, rel, job);
    END LOOP;
    IF cardinality(others) > 0 THEN
        RAISE NOTICE 'predict job % does not watch %, owned by other roles than %', job, array_to_string(others, ', '), tbl_owner::regrole
            USING DETAIL = 'A change there refreshes the predictions only with the next change to a table the job watches.';
    END IF;
    -- The first refresh fills the rows there now.
    INSERT INTO tributary._predict_dirty (job) VALUES (job);
    PERFORM tributary._wake_launcher();
    RETURN job;
END $fn$;

CREATE FUNCTION tributary._predict_job_drop(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    job bigint := (a->>'job')::bigint;
    j   tributary._predict_jobs;
    t   record;
BEGIN
    IF job IS NULL THEN
        RAISE EXCEPTION 'job must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO j FROM tributary._predict_jobs x
     WHERE x.id = job
       AND pg_has_role(caller, coalesce((SELECT c.relowner FROM pg_class c WHERE c.oid = x.tbl), x.owner), 'USAGE')
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'predict job % does not exist', job USING ERRCODE = 'undefined_object',
            HINT = 'Your predict jobs are listed in tributary.predict_jobs.';
    END IF;
    FOR t IN SELECT g.tgrelid::regclass AS rel, g.tgname FROM pg_trigger g
              WHERE g.tgname IN ('tributary_predict_' || j.id, 'tributary_predict_' || j.id || '_insert',
                                 'tributary_predict_' || j.id || '_update', 'tributary_predict_' || j.id || '_delete')
                AND g.tgfoid IN ('tributary._predict_trigger()'::regprocedure, 'tributary._predict_trigger_rows()'::regprocedure,
                                 'tributary._predict_trigger_links()'::regprocedure) LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.rel);
    END LOOP;
    DELETE FROM tributary._predict_jobs WHERE id = j.id;
    RETURN j.id;
END $$;

REVOKE ALL ON FUNCTION tributary._predict_job_create(oid, jsonb), tributary._predict_job_drop(oid, jsonb),
    tributary._predict_related(regclass) FROM PUBLIC;

-- tributary_predict_job_create(predictor, target) -> job id: keeps column target of the
-- predictor's table filled by the background workers (see above). SECURITY INVOKER, so that
-- tributary._job_call sees who calls it. Errors: 22004 NULL; 42704 unknown predictor; 42501 the
-- caller is not (a member of) the table's owner, or the table's owner may not use the predictor
-- (tributary._predictor_hidden, DETAIL: why); 22023 target = the label column; 42703 unknown
-- target; 42710 a predict job writes that column already; 42P01 the table was dropped. A NOTICE
-- names the tables the job reads but does not watch (owned by other roles).
CREATE FUNCTION tributary_predict_job_create(predictor text, target name) RETURNS bigint
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT tributary._job_call('predict_create', jsonb_build_object('predictor', predictor, 'target', target))
$$;

-- tributary_predict_job_drop(job): drops a predict job and its triggers (the table's owner or a
-- member; 42704 otherwise). The predictions written stay.
CREATE FUNCTION tributary_predict_job_drop(job bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM tributary._job_call('predict_drop', jsonb_build_object('job', job)); END $$;

COMMENT ON TABLE tributary._predict_jobs IS 'Predict jobs (tributary_predict_job_create): a predictor''s column kept filled by the background workers; read through tributary.predict_jobs.';
COMMENT ON TABLE tributary._predict_dirty IS 'Internal: one row per statement that may change a predict job''s predictions, taken by the refresh that covers it.';
COMMENT ON VIEW tributary.predict_jobs IS 'Predict jobs of tables the current role owns (or is a member of the owner of): state, refreshes, rows written, the last error and the statements pending.';
COMMENT ON FUNCTION tributary._predict_trigger() IS 'Internal: the statement-level trigger of predict jobs (queues a refresh, wakes the workers at commit).';
COMMENT ON FUNCTION tributary._predict_queue(bigint, bigint, jsonb) IS 'Internal: queues a statement''s changed rows for a predict job and wakes the workers at commit.';
COMMENT ON FUNCTION tributary._predict_job_rows() IS 'Internal: the setting tributary.predict_job_rows, 10000 where the library is not loaded.';
COMMENT ON FUNCTION tributary._predict_trigger_rows() IS 'Internal: the row-level view of a statement on a predict job''s own table (queues the changed rows, wakes the workers at commit).';
COMMENT ON FUNCTION tributary._predict_trigger_links() IS 'Internal: the row-level view of a statement on a link table of a predict job''s table (queues the rows it references).';
COMMENT ON FUNCTION tributary._predict_related(regclass) IS 'Internal: the tables a predictor over a table reads besides it (referenced tables and link tables).';
COMMENT ON FUNCTION tributary._predict_job_create(oid, jsonb) IS 'Internal: tributary_predict_job_create, as the extension''s owner.';
COMMENT ON FUNCTION tributary._predict_job_drop(oid, jsonb) IS 'Internal: tributary_predict_job_drop, as the extension''s owner.';
COMMENT ON FUNCTION tributary_predict_job_create(text, name) IS 'Keeps a column filled with a trained predictor''s predictions, refreshed by the background workers as the table''s owner when rows of the table or of the tables its history reads change; returns the job id.';
COMMENT ON FUNCTION tributary_predict_job_drop(bigint) IS 'Drops a predict job and its triggers; the predictions written stay.';

COMMENT ON SEQUENCE tributary._predict_jobs_id_seq IS 'Internal: predict job ids.';
COMMENT ON SEQUENCE tributary._predict_dirty_id_seq IS 'Internal: the order of queued refreshes.';
