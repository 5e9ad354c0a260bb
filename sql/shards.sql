-- Jobs past one server: a job on a partitioned table whose partitions are postgres_fdw foreign
-- tables (a coordinator's table over shards) is a job on each shard's table, made there and run
-- by the shard's own workers, where the rows live (README, "Past one server").
--
-- tributary_job_create on such a table (sql/jobs.sql hands it here) reaches each shard through
-- the partition's foreign server with dblink, as the job's owner (the coordinator table's owner),
-- so with that owner's user mapping: the same connection settings and remote role that
-- postgres_fdw uses for the partition. On the shard, tributary_job_create makes an ordinary job on
-- the shard's table (the foreign table's schema_name/table_name options, else its own names),
-- keyed by that table's primary key, acting as that table's owner (the shard's own rule). The
-- coordinator records one job (tributary._sharded_jobs) with one part per foreign partition
-- (tributary._job_parts). tributary.jobs and tributary.job_parts read each part's state from its
-- shard when they are read; a shard that cannot be reached shows as unreachable, with the error.
-- Pause, resume, cancel and drop go to every part.
--
-- Remote statements commit on the shard at once (dblink): a job made in a transaction that then
-- rolls back leaves its parts on the shards (drop them there). Nothing here runs a user's code:
-- the statements sent are built from the catalog with every value quoted, and run with the
-- owner's rights (tributary._run_as_value). Needs the dblink extension in this database.

-- Waits until the query sent on dblink connection conn (dblink in schema dbl, quoted) has its
-- next result ready: looks every 1 to 50 ms and sleeps in between with pg_sleep, so the caller's
-- statement_timeout and pg_cancel_backend end the wait (libpq's own wait checks neither). At
-- limit_ms (NULL: no limit) after started, 08006 naming server. For tributary._shard_query.
CREATE FUNCTION tributary._shard_wait(dbl text, conn text, started timestamptz, limit_ms bigint, server text)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    nap  double precision := 0.001;
    busy integer;
BEGIN
    LOOP
        EXECUTE format('SELECT %s.dblink_is_busy($1)', dbl) INTO busy USING conn;
        EXIT WHEN busy OPERATOR(pg_catalog.=) 0;
        IF clock_timestamp() >= started + make_interval(secs => limit_ms / 1000.0) THEN
            RAISE EXCEPTION 'shard % did not answer within % s', server, round(limit_ms / 1000.0, 1)
                USING ERRCODE = 'connection_failure',
                      DETAIL = 'The state of a part is read for at most 10 s; the query on the shard was cancelled.',
                      HINT = 'A lock held on the shard (on tributary._jobs, by a long transaction) or an overloaded shard delays it.';
        END IF;
        PERFORM pg_catalog.pg_sleep(nap);
        nap := least(nap * 2, 0.05);
    END LOOP;
END $$;

-- Runs a.sql on the foreign server a.server through dblink as the current role (its user
-- mapping), and returns the one jsonb column of its first row (NULL: no row). Run as a job's
-- owner by tributary._shard_call.
--
-- Every call is bounded. The connection is dblink's by server name: the server's and the user
-- mapping's options, dblink's own rules for non-superusers (a password, and used), no password in
-- tributary's hands; their connect_timeout, else 10 s (tributary._run_as_value sets libpq's
-- PGCONNECT_TIMEOUT, which libpq reads only for options that have none). The remote session
-- gets application_name 'tributary shard call' (seen in the shard's pg_stat_activity; a sharded
-- job cannot be made from it, tributary._sharded_job_create) and a statement_timeout: the
-- caller's remaining statement_timeout or a.timeout_ms, whichever is shorter, plus 1 s (the
-- caller's own timeout fires first), else the shard's own, and the caller's lock_timeout when
-- set (a lock wait on the shard ends with the shard's 55P03). Each result is waited for with
-- tributary._shard_wait (the caller's statement_timeout and pg_cancel_backend end it, and
-- a.timeout_ms from the start). On every way out the remote query is cancelled and the
-- connection closed.
--
-- Errors: 0A000 dblink is not installed; 08006 no answer within a.timeout_ms; 57014 the
-- caller's statement_timeout or cancel; dblink's (08001 no connection; the remote SQLSTATE of a
-- remote error).
CREATE FUNCTION tributary._shard_query(a jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    conn    constant text := 'tributary_shard_call';
    started constant timestamptz := clock_timestamp();
    srv     text := a->>'server';
    cap     bigint := (a->>'timeout_ms')::bigint;
    st      bigint := (SELECT s.setting::bigint FROM pg_settings s WHERE s.name OPERATOR(pg_catalog.=) 'statement_timeout');
    lt      bigint := (SELECT s.setting::bigint FROM pg_settings s WHERE s.name OPERATOR(pg_catalog.=) 'lock_timeout');
    remain  bigint;
    dbl     text;
    stale   boolean;
    r       jsonb;
BEGIN
    SELECT quote_ident(n.nspname) INTO dbl
      FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'dblink';
    IF dbl IS NULL THEN
        RAISE EXCEPTION 'jobs on foreign partitions need the dblink extension' USING ERRCODE = 'feature_not_supported',
            DETAIL = 'The job on each shard is made and managed through the partition''s foreign server with dblink.',
            HINT = 'CREATE EXTENSION dblink;';
    END IF;
    IF st > 0 THEN
        remain := greatest(st - (extract(epoch FROM started - statement_timestamp()) * 1000)::bigint, 1);
    END IF;
    -- A connection of this name left by a call interrupted in its clean-up is closed first.
    EXECUTE format('SELECT $1 OPERATOR(pg_catalog.=) ANY (%s.dblink_get_connections())', dbl) INTO stale USING conn;
    IF stale THEN
        EXECUTE format('SELECT %s.dblink_disconnect($1)', dbl) USING conn;
    END IF;
    BEGIN
        EXECUTE format('SELECT %s.dblink_connect($1, $2)', dbl) USING conn, srv;
        EXECUTE format('SELECT %s.dblink_send_query($1, $2)', dbl) USING conn,
            'SELECT pg_catalog.set_config(''application_name'', ''tributary shard call'', false), '
            || format('pg_catalog.set_config(''statement_timeout'', %s, false)',
                      coalesce(quote_literal(least(remain, cap) + 1000), 'pg_catalog.current_setting(''statement_timeout'')'))
            -- the caller's lock_timeout for the shard's lock waits (55P03 from the shard)
            || format(', pg_catalog.set_config(''lock_timeout'', %s, false)',
                      CASE WHEN lt > 0 THEN quote_literal(lt) ELSE 'pg_catalog.current_setting(''lock_timeout'')' END);
        -- (its row, then the end of its results)
        PERFORM tributary._shard_wait(dbl, conn, started, cap, srv);
        EXECUTE format('SELECT pg_catalog.count(*) FROM %s.dblink_get_result($1) AS t(a text, b text, c text)', dbl) USING conn;
        PERFORM tributary._shard_wait(dbl, conn, started, cap, srv);
        EXECUTE format('SELECT pg_catalog.count(*) FROM %s.dblink_get_result($1) AS t(a text, b text, c text)', dbl) USING conn;
        EXECUTE format('SELECT %s.dblink_send_query($1, $2)', dbl) USING conn, a->>'sql';
        PERFORM tributary._shard_wait(dbl, conn, started, cap, srv);
        EXECUTE format('SELECT t.x FROM %s.dblink_get_result($1) AS t(x jsonb) LIMIT 1', dbl) INTO r USING conn;
        EXECUTE format('SELECT %s.dblink_disconnect($1)', dbl) USING conn;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        -- (query_canceled, which OTHERS leaves out: statement_timeout, pg_cancel_backend)
        BEGIN
            EXECUTE format('SELECT %s.dblink_cancel_query($1)', dbl) USING conn;
        EXCEPTION WHEN OTHERS THEN
            NULL;   -- no connection, or nothing running
        END;
        BEGIN
            EXECUTE format('SELECT %s.dblink_disconnect($1)', dbl) USING conn;
        EXCEPTION WHEN OTHERS THEN
            NULL;
        END;
        RAISE;
    END;
    RETURN r;
END $$;

-- sql on a shard as owner (tributary._shard_query), the errors named by the shard: the remote
-- SQLSTATE kept, the message prefixed with the server and the coordinator's foreign table. With
-- raise false (reading a part's state, best-effort clean-up), an error comes back as {"error":
-- message, "sqlstate": code} instead, and a shard that has not answered in 10 s is one (08006).
-- The caller's statement_timeout and pg_cancel_backend end a call either way (57014).
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
                                   jsonb_build_object('server', srv, 'sql', sql)
                                   || CASE WHEN raise THEN '{}' ELSE '{"timeout_ms": 10000}' END::jsonb);
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
-- taken; the shard's own errors, named by the shard (tributary._shard_call). Refused (0A000) in a
-- session that a coordinator opened (tributary._shard_query's application_name): a shard's table
-- with foreign partitions again, or a foreign partition pointing back at the coordinator, would
-- make jobs on server after server, or on the same one again, without end.
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
    IF current_setting('application_name') OPERATOR(pg_catalog.=) 'tributary shard call' THEN
        RAISE EXCEPTION 'table % has foreign partitions: a job on it cannot be made from a coordinator', source
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'This session was opened by a coordinator (application_name "tributary shard call") to make '
                           || 'the job on one of its shards; the shard''s table must hold its rows, not have foreign '
                           || 'partitions again (a shard of a shard, or a foreign partition that points back at the coordinator).',
                  HINT = 'Point the coordinator''s foreign partitions at the shards'' own tables (options schema_name and table_name).';
    END IF;
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
        EXCEPTION WHEN OTHERS OR query_canceled THEN
            GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, code = RETURNED_SQLSTATE, det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
            -- The parts made already are dropped again (best effort: the error is the one to see;
            -- after statement_timeout or a cancel too, each drop waits 10 s at most).
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
-- A shard that cannot be reached, or has not answered in 10 s, gives state unreachable with the
-- error. What a shard answers is checked before the views cast it (it is another server's
-- word): a state of tributary's, counts that are bigints of 0 or more, a rate, times, last_error
-- of 10,000 characters at most and waiting_for of 1,000 (the shard sends no more than one past
-- these); anything else gives state invalid, its reason in last_error, and the views still work
-- for every other part and job.
CREATE FUNCTION tributary._job_parts_of(caller oid, job bigint) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    s     tributary._sharded_jobs;
    owner oid;
    p     tributary._job_parts;
    srv   name;
    r     jsonb;
    v     jsonb;
    bad   text;
    out   jsonb := '[]';
BEGIN
    SELECT * INTO s FROM tributary._sharded_jobs x WHERE x.id = job;
    IF NOT FOUND OR NOT pg_has_role(caller, tributary._sharded_owner(s), 'USAGE') THEN
        RETURN NULL;
    END IF;
    owner := tributary._sharded_owner(s);
    FOR p IN SELECT * FROM tributary._job_parts x WHERE x.job_id = job ORDER BY x.partition::text LOOP
        srv := (SELECT srvname FROM pg_foreign_server WHERE oid = p.server);
        r := tributary._shard_call(owner, p.server, p.partition, format(
            $q$SELECT pg_catalog.to_jsonb(j) FROM (
                 SELECT pg_catalog.left(state::pg_catalog.text, 21) AS state, rows_done, rows_truncated, rows_queued,
                        rows_failed, rows_per_second, pg_catalog.left(last_error::pg_catalog.text, 10001) AS last_error,
                        last_error_at, started_at, last_batch_at, finished_at,
                        pg_catalog.left(waiting_for::pg_catalog.text, 1001) AS waiting_for
                   FROM tributary.jobs WHERE id OPERATOR(pg_catalog.=) %s LIMIT 1) j$q$, p.remote_job), false);
        IF r IS NULL THEN
            r := jsonb_build_object('state', 'missing', 'last_error', format('job %s is gone from the shard', p.remote_job));
        ELSIF r ? 'error' THEN
            r := jsonb_build_object('state', 'unreachable', 'last_error', r->>'error', 'sqlstate', r->>'sqlstate',
                                    'last_error_at', now());
        ELSE
            bad := NULL;
            BEGIN
                -- (the casts the views make, here, where a failing one is caught)
                v := jsonb_build_object(
                    'state', r->>'state',
                    'rows_done', (r->>'rows_done')::bigint, 'rows_truncated', (r->>'rows_truncated')::bigint,
                    'rows_queued', (r->>'rows_queued')::bigint, 'rows_failed', (r->>'rows_failed')::bigint,
                    'rows_per_second', (r->>'rows_per_second')::numeric,
                    'last_error', r->>'last_error', 'last_error_at', (r->>'last_error_at')::timestamptz,
                    'started_at', (r->>'started_at')::timestamptz, 'last_batch_at', (r->>'last_batch_at')::timestamptz,
                    'finished_at', (r->>'finished_at')::timestamptz, 'waiting_for', r->>'waiting_for');
                IF jsonb_typeof(r) <> 'object' THEN
                    bad := format('a %s instead of an object', jsonb_typeof(r));
                ELSIF v->>'state' IS NULL OR NOT v->>'state' = ANY ('{pending,running,waiting,paused,done,failed,cancelled}') THEN
                    bad := format('state %s', coalesce(quote_literal(left(v->>'state', 20)), 'null'));
                ELSIF (v->>'rows_done')::bigint < 0 OR (v->>'rows_truncated')::bigint < 0
                      OR (v->>'rows_queued')::bigint < 0 OR (v->>'rows_failed')::bigint < 0 THEN
                    bad := 'a negative row count';
                ELSIF NOT (v->>'rows_per_second')::numeric BETWEEN 0 AND 1e12 THEN
                    bad := format('rows_per_second %s', v->>'rows_per_second');
                ELSIF length(v->>'last_error') > 10000 THEN
                    bad := 'a last_error longer than 10000 characters';
                ELSIF length(v->>'waiting_for') > 1000 THEN
                    bad := 'a waiting_for longer than 1000 characters';
                END IF;
            EXCEPTION WHEN OTHERS THEN
                bad := left(SQLERRM, 200);
            END;
            r := CASE WHEN bad IS NULL THEN v ELSE
                 jsonb_build_object('state', 'invalid', 'last_error_at', now(),
                                    'last_error', format('shard %s answered an invalid state for its job %s: %s', srv, p.remote_job, bad)) END;
        END IF;
        out := out || (jsonb_build_object('partition', p.partition::text, 'server', srv,
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
                                  WHERE i.indrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(%L) AND i.indisprimary$q$, l.remote_table),
                'timeout_ms', 10000))) WITH ORDINALITY AS u(x, o);
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
