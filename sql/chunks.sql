-- Chunk jobs: a long text column kept as chunks in a chunk table, one row per chunk (the source's
-- key, chunk_seq, chunk, start_char, end_char, embedding), in step with the source, and the
-- chunks embedded by a continuous job on the chunk table.
--
-- Everything a chunk job puts in the database belongs to the source's owner, whoever makes it,
-- and is made as that owner in a security-restricted operation (tributary._run_as), as
-- PostgreSQL's maintenance commands act on another role's table:
-- - The chunk table (an unqualified name: in the source's schema), with a foreign key to the
--   source (ON DELETE and ON UPDATE CASCADE: a deleted source row takes its chunks along, a
--   changed key moves them), filled at once from the source as its owner.
-- - A row trigger on the source (AFTER INSERT, and UPDATE OF the text column) that replaces a
--   row's chunks in the writer's transaction: tributary_chunk(), by the model's tokenizer. Its
--   function is SECURITY DEFINER owned by the source's owner, so that every role that may write
--   the source keeps its chunks (it runs with the rights of a trigger the table's owner wrote),
--   with a fixed search_path; it depends on the extension, so DROP EXTENSION takes it and its
--   trigger along and no writer is left calling a function that is gone.
-- - The job (tributary_job_create on the chunk table, continuous) embeds new chunks in
--   background workers; its progress, errors and truncation counts are in tributary.jobs. The
--   job's row records the chunking (tributary._jobs.chunk_source, chunk_function, chunk_tokens,
--   chunk_overlap), so renames are followed (the event trigger rewrites the function) and the job
--   is dropped by the objects themselves, never by name.

-- The CREATE OR REPLACE FUNCTION of chunk job `j`'s trigger function, under the names the
-- source, its text column (the trigger's UPDATE OF column), its key and the chunk table have now.
-- The chunk table's key columns are its primary key's, less chunk_seq, matched by position.
CREATE FUNCTION tributary._chunk_function_sql(j tributary._jobs) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    ext    text := (SELECT quote_ident(n.nspname) FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
                     WHERE e.extname = 'tributary');
    source regclass := j.chunk_source;
    fn     text;
    col    text;
    pk     text[] := tributary._key_columns(source);
    ck     text[];
    tgt    text;
    new_k  text;
    chunk_args text := format('%L, %s, %s', j.model, coalesce(j.chunk_tokens::text, 'NULL'), coalesce(j.chunk_overlap, 0));
BEGIN
    SELECT format('%I.%I', n.nspname, p.proname) INTO fn FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE p.oid = j.chunk_function;
    SELECT a.attname INTO col FROM pg_trigger t JOIN pg_attribute a ON a.attrelid = t.tgrelid AND a.attnum = t.tgattr[0]
     WHERE t.tgrelid = source AND t.tgfoid = j.chunk_function AND NOT t.tgisinternal;
    SELECT array_agg(x ORDER BY o) INTO ck FROM unnest(tributary._key_columns(j.source)) WITH ORDINALITY AS u(x, o) WHERE x <> 'chunk_seq';
    tgt := (SELECT format('%I.%I', n.nspname, r.relname) FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace WHERE r.oid = j.source);
    IF fn IS NULL OR col IS NULL OR pk IS NULL OR tgt IS NULL OR cardinality(ck) IS DISTINCT FROM cardinality(pk) THEN
        RETURN NULL;
    END IF;
    new_k := (SELECT string_agg('NEW.' || p, ', ') FROM unnest(pk) p);
    RETURN format($f$CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp AS $body$
        BEGIN
            DELETE FROM %s WHERE (%s) = (%s);
            INSERT INTO %s (%s, chunk_seq, chunk, start_char, end_char)
            SELECT %s, k.seq, k.chunk, k.start_char, k.end_char FROM %s.tributary_chunk(tributary._text(NEW.%I), %s) AS k;
            RETURN NULL;
        END $body$$f$,
        fn, tgt, array_to_string(ck, ', '), new_k, tgt, array_to_string(ck, ', '), new_k, ext, col, chunk_args);
END $fn$;

-- Keeps chunk job `j`'s trigger function in step with its source after DDL: rewritten under the
-- names the tables have now (as the source's owner), owned by the source's owner (and the chunk
-- table with it, which the function writes). A trigger gone (DROP COLUMN ... CASCADE of the text
-- column) is said in the job's last_error. Called by tributary._job_ddl.
CREATE FUNCTION tributary._chunk_sync(j tributary._jobs) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    owner  oid := (SELECT relowner FROM pg_class WHERE oid = j.chunk_source);
    fowner oid := (SELECT proowner FROM pg_proc WHERE oid = j.chunk_function);
    gone   text := format('the chunk trigger on %s was dropped: new and changed rows are no longer chunked; drop the chunk job and create a new one',
                          j.chunk_source);
    body   text;
BEGIN
    IF owner IS NULL OR fowner IS NULL THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = j.chunk_source AND tgfoid = j.chunk_function AND NOT tgisinternal) THEN
        UPDATE tributary._jobs SET last_error = gone, last_error_at = now() WHERE id = j.id AND last_error IS DISTINCT FROM gone;
        RETURN;
    END IF;
    IF fowner <> owner THEN
        EXECUTE format('ALTER FUNCTION %s OWNER TO %s', j.chunk_function, owner::regrole);
        IF (SELECT relowner FROM pg_class WHERE oid = j.source) <> owner THEN
            EXECUTE format('ALTER TABLE %s OWNER TO %s', j.source, owner::regrole);
        END IF;
    END IF;
    body := tributary._chunk_function_sql(j);
    IF body IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_proc WHERE oid = j.chunk_function
                                          AND prosrc = split_part(body, '$body$', 2)) THEN
        PERFORM tributary._run_as(owner, body);
        -- CREATE OR REPLACE drops the function's dependency on the extension: made again.
        EXECUTE format('ALTER FUNCTION %s DEPENDS ON EXTENSION tributary', j.chunk_function);
    END IF;
END $$;

-- tributary_chunk_job_create(source, text_column, chunk_table [, model, chunk_tokens,
-- overlap_tokens, prompt, name]) -> the embedding job's id. The caller must be the source's
-- owner or a member of that role (a superuser is); what it makes belongs to the source's owner.
-- Errors: 42501 not the source's owner; 42P07 the chunk table exists; 42703 no such column;
-- 42P16 the source has no primary key; 22023 bad chunk_tokens/overlap_tokens; 42704 unknown
-- model or prompt; 22004 a NULL argument.
CREATE FUNCTION tributary._chunk_job_create(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
    source         regclass := (a->>'source')::oid;
    text_column    name := a->>'text_column';
    chunk_table    text := a->>'chunk_table';
    model          text := a->>'model';
    chunk_tokens   integer := (a->>'chunk_tokens')::integer;
    overlap_tokens integer := (a->>'overlap_tokens')::integer;
    prompt         text := a->>'prompt';
    name           text := a->>'name';
    ext      text := (SELECT quote_ident(n.nspname) FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
                       WHERE e.extname = 'tributary');
    owner    oid;
    m        tributary.models;
    pk       text[];
    pk_def   text;
    src      text;
    tgt      regclass;
    tgt_name text;
    job      bigint;
    fn       text;
    fn_oid   regprocedure;
    chunk_args text;
    body     text;
    j        tributary._jobs;
BEGIN
    IF source IS NULL OR text_column IS NULL OR chunk_table IS NULL OR overlap_tokens IS NULL THEN
        RAISE EXCEPTION 'source, text_column, chunk_table and overlap_tokens must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT format('%I.%I', n.nspname, c.relname), c.relowner INTO src, owner
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = source;
    IF src IS NULL THEN
        RAISE EXCEPTION 'relation with OID % does not exist', source::oid USING ERRCODE = 'undefined_table';
    END IF;
    IF NOT pg_has_role(caller, owner, 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table %', src USING ERRCODE = 'insufficient_privilege',
            HINT = 'A chunk job puts a trigger on the source table: its owner makes it.';
    END IF;
    IF (SELECT relkind FROM pg_class WHERE oid = source) NOT IN ('r', 'p') THEN
        RAISE EXCEPTION '"%" is not a table', src USING ERRCODE = 'wrong_object_type';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = source AND attname = text_column AND attnum > 0 AND NOT attisdropped) THEN
        RAISE EXCEPTION 'column "%" of relation "%" does not exist', text_column, src USING ERRCODE = 'undefined_column';
    END IF;
    SELECT * INTO m FROM tributary.models x WHERE x.name = coalesce(model, current_setting('tributary.model'));
    IF NOT FOUND THEN
        RAISE EXCEPTION 'model "%" does not exist', coalesce(model, current_setting('tributary.model'))
            USING ERRCODE = 'undefined_object',
            HINT = 'Registered models are listed in tributary.models; see tributary_register_model().';
    END IF;
    -- 22023 for bad sizes, from the function the trigger uses (on a constant: no user's code).
    EXECUTE format('SELECT count(*) FROM %s.tributary_chunk(%L, %L, %s, %s)', ext, 'x', m.name,
                   coalesce(chunk_tokens::text, 'NULL'), coalesce(overlap_tokens, 0));
    SELECT array_agg(quote_ident(a.attname) ORDER BY k.ord),
           string_agg(format('%I %s NOT NULL', a.attname, format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY k.ord)
      INTO pk, pk_def
      FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, ord)
      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
     WHERE i.indrelid = source AND i.indisprimary;
    IF pk IS NULL THEN
        RAISE EXCEPTION 'table % has no primary key', src USING ERRCODE = 'invalid_table_definition',
            HINT = 'Chunks are kept by the source row''s primary key.';
    END IF;
    -- An unqualified name is in the source's schema (as a job's target_table).
    IF cardinality(parse_ident(chunk_table)) = 1 THEN
        chunk_table := format('%I.%I', (SELECT n.nspname FROM pg_namespace n JOIN pg_class r ON r.relnamespace = n.oid
                                         WHERE r.oid = source), (parse_ident(chunk_table))[1]);
    ELSE
        chunk_table := (SELECT string_agg(quote_ident(x), '.') FROM unnest(parse_ident(chunk_table)) x);
    END IF;
    IF to_regclass(chunk_table) IS NOT NULL THEN
        RAISE EXCEPTION 'relation "%" already exists', chunk_table USING ERRCODE = 'duplicate_table',
            HINT = 'A chunk job creates its chunk table; name a new one.';
    END IF;
    IF NOT has_schema_privilege(caller, (parse_ident(chunk_table))[1], 'CREATE') THEN
        RAISE EXCEPTION 'permission denied for schema %', (parse_ident(chunk_table))[1] USING ERRCODE = 'insufficient_privilege';
    END IF;
    chunk_args := format('%L, %s, %s', m.name, coalesce(chunk_tokens::text, 'NULL'), coalesce(overlap_tokens, 0));

    -- As the source's owner, security-restricted: no write to the source between the initial
    -- fill and the trigger; the chunk table is the owner's, and the fill reads the source with
    -- the owner's rights (its policies, types and casts are the owner's code).
    PERFORM tributary._run_as(owner, format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', src));
    PERFORM tributary._run_as(owner, format('CREATE TABLE %s (%s, chunk_seq integer NOT NULL, chunk text NOT NULL, start_char integer NOT NULL, '
                   'end_char integer NOT NULL, embedding %s, PRIMARY KEY (%s, chunk_seq), '
                   'FOREIGN KEY (%s) REFERENCES %s ON DELETE CASCADE ON UPDATE CASCADE)',
                   chunk_table, pk_def, tributary._vector_type('vector') || format('(%s)', m.dimension),
                   array_to_string(pk, ', '), array_to_string(pk, ', '), src));
    tgt := to_regclass(chunk_table);
    tgt_name := (SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tgt);
    PERFORM tributary._run_as(owner, format('INSERT INTO %s (%s, chunk_seq, chunk, start_char, end_char) '
                   'SELECT %s, k.seq, k.chunk, k.start_char, k.end_char FROM %s AS t, %s.tributary_chunk(tributary._text(t.%I), %s) AS k',
                   tgt_name, array_to_string(pk, ', '),
                   (SELECT string_agg('t.' || p, ', ') FROM unnest(pk) p), src, ext, text_column, chunk_args));

    job := tributary._job_create(caller, jsonb_build_object('source', tgt::oid, 'columns', ARRAY['chunk'], 'target', 'embedding',
        'model', m.name, 'mode', 'continuous', 'prompt', prompt, 'batch_size', 256, 'workers', 1,
        'name', coalesce(name, format('chunks of %s.%s', src, text_column))));

    -- The trigger function: NEW's chunks replace its old ones. Made by the owner (its own
    -- function) with an empty body, tied to the extension, put on the source with its trigger
    -- and recorded in the job; then its body is written from the catalog, as every later
    -- rename rewrites it (tributary._chunk_function_sql). The source is locked meanwhile.
    fn := format('%I.%I', (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tgt),
                 'tributary_chunks_' || job);
    PERFORM tributary._run_as(owner, format('CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER '
                   'SET search_path = pg_catalog, pg_temp AS $body$BEGIN RETURN NULL; END$body$', fn));
    fn_oid := to_regprocedure(fn || '()');
    PERFORM tributary._run_as(owner, format('REVOKE ALL ON FUNCTION %s() FROM PUBLIC', fn));
    PERFORM tributary._run_as(owner, format('COMMENT ON FUNCTION %s() IS %L', fn,
                   format('tributary chunk job %s: keeps %s in step with %s.%s', job, tgt_name, src, text_column)));
    PERFORM tributary._run_as(owner, format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OF %I ON %s FOR EACH ROW EXECUTE FUNCTION %s()',
                   'tributary_chunks_' || job, text_column, src, fn));
    UPDATE tributary._jobs SET chunk_source = source, chunk_function = fn_oid, chunk_tokens = chunk_tokens,
           chunk_overlap = coalesce(overlap_tokens, 0)
     WHERE id = job
    RETURNING * INTO j;
    body := tributary._chunk_function_sql(j);
    IF body IS NULL THEN
        RAISE EXCEPTION 'could not write the trigger function of chunk job %', job USING ERRCODE = 'internal_error';
    END IF;
    PERFORM tributary._run_as(owner, body);
    EXECUTE format('ALTER FUNCTION %s() DEPENDS ON EXTENSION tributary', fn);
    RETURN job;
END $fn$;

-- tributary_chunk_job_drop(job): drops a chunk job: its embedding job, and its trigger and
-- trigger function on the source (found by their recorded OIDs; the chunk table is left, with
-- its rows). Errors as tributary_job_drop (42704 not your job); 22023 not a chunk job.
CREATE FUNCTION tributary._chunk_job_drop(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    j tributary._jobs := tributary._own_job(caller, (a->>'job')::bigint, false);
    t record;
BEGIN
    IF j.chunk_source IS NULL THEN
        RAISE EXCEPTION 'job % is not a chunk job', j.id USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Drop it with tributary_job_drop().';
    END IF;
    FOR t IN SELECT tg.tgrelid::regclass AS rel, tg.tgname FROM pg_trigger tg
              WHERE tg.tgrelid = j.chunk_source AND tg.tgfoid = j.chunk_function AND NOT tg.tgisinternal LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.rel);
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_proc WHERE oid = j.chunk_function) THEN
        EXECUTE format('DROP FUNCTION %s', j.chunk_function);
    END IF;
    PERFORM tributary._job_cleanup(j);
    DELETE FROM tributary._jobs WHERE id = j.id;
    RETURN j.id;
END $$;
REVOKE ALL ON FUNCTION tributary._chunk_job_create(oid, jsonb), tributary._chunk_job_drop(oid, jsonb),
    tributary._chunk_sync(tributary._jobs), tributary._chunk_function_sql(tributary._jobs) FROM PUBLIC;

CREATE FUNCTION tributary_chunk_job_create(
    source         regclass,
    text_column    name,
    chunk_table    text,
    model          text DEFAULT NULL,
    chunk_tokens   integer DEFAULT NULL,
    overlap_tokens integer DEFAULT 0,
    prompt         text DEFAULT NULL,
    name           text DEFAULT NULL
) RETURNS bigint
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT tributary._job_call('chunk_create', jsonb_build_object(
        'source', source::oid, 'text_column', text_column, 'chunk_table', chunk_table, 'model', model,
        'chunk_tokens', chunk_tokens, 'overlap_tokens', overlap_tokens, 'prompt', prompt, 'name', name))
$$;

CREATE FUNCTION tributary_chunk_job_drop(job bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM tributary._job_call('chunk_drop', jsonb_build_object('job', job)); END $$;
