-- Chunk jobs: a long text column kept as chunks in a chunk table, one row per chunk (the source's
-- key, chunk_seq, chunk, start_char, end_char, embedding), in step with the source, and the
-- chunks embedded by a continuous job on the chunk table.
--
-- - The chunk table is created owned by the caller (an unqualified name: in the source's schema), with a foreign key to the source (ON DELETE
--   and ON UPDATE CASCADE: a deleted source row takes its chunks along, a changed key moves them).
-- - A row trigger on the source (AFTER INSERT, and UPDATE OF the text column) replaces a row's
--   chunks in the writer's transaction: tributary_chunk(), by the model's tokenizer. The trigger
--   function is the caller's own (SECURITY DEFINER owned by the caller, who owns the source: the
--   rights of a trigger the table owner writes), with a fixed search_path.
-- - The job (tributary_job_create on the chunk table, continuous) embeds new chunks in
--   background workers; its progress, errors and truncation counts are in tributary.jobs.
-- Everything runs as the caller (SECURITY INVOKER): the caller needs to own the source and to
-- be allowed to create the chunk table.

-- tributary_chunk_job_create(source, text_column, chunk_table [, model, chunk_tokens,
-- overlap_tokens, prompt, name]) -> the embedding job's id.
-- Errors: 42501 not the source's owner; 42P07 the chunk table exists; 42703 no such column;
-- 42P16 the source has no primary key; 22023 bad chunk_tokens/overlap_tokens; 42704 unknown
-- model or prompt.
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
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
    ext      text := (SELECT quote_ident(n.nspname) FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
                       WHERE e.extname = 'tributary');
    m        tributary.models;
    pk       text[];
    pk_def   text;
    src      text := source::text;
    tgt      regclass;
    tgt_name text;
    job      bigint;
    fn       text;
    new_k    text;
    chunk_args text;
BEGIN
    IF source IS NULL OR text_column IS NULL OR chunk_table IS NULL OR overlap_tokens IS NULL THEN
        RAISE EXCEPTION 'source, text_column, chunk_table and overlap_tokens must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF NOT pg_has_role((SELECT relowner FROM pg_class WHERE oid = source), 'USAGE') THEN
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
    -- 22023 for bad sizes, from the function the trigger uses.
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
    chunk_args := format('%L, %s, %s', m.name, coalesce(chunk_tokens::text, 'NULL'), coalesce(overlap_tokens, 0));

    -- No write to the source between the initial fill and the trigger.
    EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', src);
    EXECUTE format('CREATE TABLE %s (%s, chunk_seq integer NOT NULL, chunk text NOT NULL, start_char integer NOT NULL, '
                   'end_char integer NOT NULL, embedding %s, PRIMARY KEY (%s, chunk_seq), '
                   'FOREIGN KEY (%s) REFERENCES %s ON DELETE CASCADE ON UPDATE CASCADE)',
                   chunk_table, pk_def, tributary._vector_type('vector') || format('(%s)', m.dimension),
                   array_to_string(pk, ', '), array_to_string(pk, ', '), src);
    tgt := to_regclass(chunk_table);
    tgt_name := (SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tgt);
    EXECUTE format('INSERT INTO %s (%s, chunk_seq, chunk, start_char, end_char) '
                   'SELECT %s, k.seq, k.chunk, k.start_char, k.end_char FROM %s AS t, %s.tributary_chunk(t.%I, %s) AS k',
                   tgt_name, array_to_string(pk, ', '),
                   (SELECT string_agg('t.' || p, ', ') FROM unnest(pk) p), src, ext, text_column, chunk_args);

    job := @extschema@.tributary_job_create(tgt, '{chunk}', 'embedding', model => m.name, mode => 'continuous',
                                prompt => prompt, name => coalesce(name, format('chunks of %s.%s', src, text_column)));

    -- The trigger: NEW's chunks replace its old ones.
    fn := format('%I.%I', (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tgt),
                 'tributary_chunks_' || job);
    new_k := (SELECT string_agg('NEW.' || p, ', ') FROM unnest(pk) p);
    EXECUTE format($f$CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp AS $body$
        BEGIN
            DELETE FROM %s WHERE (%s) = (%s);
            INSERT INTO %s (%s, chunk_seq, chunk, start_char, end_char)
            SELECT %s, k.seq, k.chunk, k.start_char, k.end_char FROM %s.tributary_chunk(NEW.%I, %s) AS k;
            RETURN NULL;
        END $body$$f$,
        fn, tgt_name, array_to_string(pk, ', '), new_k, tgt_name, array_to_string(pk, ', '), new_k, ext, text_column, chunk_args);
    EXECUTE format('REVOKE ALL ON FUNCTION %s() FROM PUBLIC', fn);
    EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OF %I ON %s FOR EACH ROW EXECUTE FUNCTION %s()',
                   'tributary_chunks_' || job, text_column, src, fn);
    EXECUTE format('COMMENT ON FUNCTION %s() IS %L', fn,
                   format('tributary chunk job %s: keeps %s in step with %s.%s', job, tgt_name, src, text_column));
    RETURN job;
END $fn$;

-- tributary_chunk_job_drop(job): drops a chunk job: its embedding job, and its trigger and
-- trigger function on the source (the chunk table is left, with its rows). Errors as
-- tributary_job_drop (42704 not your job).
CREATE FUNCTION tributary_chunk_job_drop(job bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t record;
BEGIN
    PERFORM @extschema@.tributary_job_drop(job);
    FOR t IN SELECT tg.tgrelid::regclass AS rel, tg.tgname, tg.tgfoid::regprocedure AS fn FROM pg_trigger tg
              WHERE tg.tgname = 'tributary_chunks_' || job LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.rel);
        EXECUTE format('DROP FUNCTION %s', t.fn);
    END LOOP;
END $$;
