-- tributary 0.4.0 -> 0.5.0 (ALTER EXTENSION tributary UPDATE). Written from the 0.5.0 sources:
-- jobs act as their source table's owner (recorded from the table, kept in step with it), follow
-- renames, stop cleanly on a dropped column; chunk jobs' objects belong to the source's owner and
-- depend on the extension; nobody holds DML on tributary.column_models. Changed bodies are
-- replaced, new objects created as sql/jobs.sql, sql/chunks.sql and sql/columns.sql create them;
-- then every job is brought in step (owner, queue privileges, statements rebuilt, so jobs made
-- under older versions run 0.5.0's statements) and every 0.4.0 chunk job converted.
-- tests/integration/test_upgrade.py checks that an updated extension equals a fresh 0.5.0
-- install object by object (definitions, owners, privileges, comments, dumped configuration).
\echo Use "ALTER EXTENSION tributary UPDATE TO '0.5.0'" to load this file. \quit

ALTER TABLE tributary._jobs ADD COLUMN chunk_source regclass, ADD COLUMN chunk_function regprocedure,
    ADD COLUMN chunk_tokens integer, ADD COLUMN chunk_overlap integer;

CREATE OR REPLACE FUNCTION tributary._job_owner(j tributary._jobs) RETURNS oid
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce((SELECT c.relowner FROM pg_class c WHERE c.oid = j.source), j.owner)
$$;

CREATE OR REPLACE FUNCTION tributary._job_sync_owner(job bigint) RETURNS oid
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

CREATE OR REPLACE FUNCTION tributary._own_job(caller oid, job bigint, lock boolean DEFAULT true) RETURNS tributary._jobs
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
        mode, workers, row_options, owner, queue, claim_sql, claim_keys_sql, select_sql, write_sql, requeue_sql)
    VALUES (id, coalesce(name, CASE WHEN EXISTS (SELECT 1 FROM tributary._jobs x WHERE x.owner = owner AND x.name = format('%s.%s', src, target))
                                THEN format('%s.%s (job %s)', src, target, id) ELSE format('%s.%s', src, target) END), source, columns, nullif(tgt, source), target, tgt_type,
        m.name, prompt, batch_size, mode, workers,
        CASE WHEN whole THEN jsonb_build_object('exclude', coalesce(exclude, '{}'), 'parents', parents,
             'children', children, 'time_columns', coalesce(time_columns, '{}')) END,
        owner, q::regclass, '', '', '', '', '');
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

CREATE OR REPLACE FUNCTION tributary._job_build(j tributary._jobs) RETURNS tributary._jobs
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
        text_expr := 'row_to_json(t.*)::text';   -- t.*: never a column named t
        -- Columns whose change does not change the row's text: the target and other embeddings.
        SELECT array_agg(a.attname::text) INTO excl FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
         WHERE a.attrelid = j.source AND a.attnum > 0 AND NOT a.attisdropped
           AND (t.typname IN ('vector', 'halfvec', 'sparsevec', 'bytea', 'tsvector') OR (tgt = j.source AND a.attname = j.target));
        excl := coalesce(excl, '{}') || coalesce((SELECT array_agg(x) FROM jsonb_array_elements_text(j.row_options->'exclude') x), '{}');
        differs := format('(to_jsonb(o.*) - %L::text[]) IS DISTINCT FROM (to_jsonb(n.*) - %L::text[])', excl, excl);
        guard := format('(to_jsonb(t.*) - %L::text[])::text', excl);
    ELSE
        arr := (SELECT string_agg('t.' || quote_ident(x) || '::text', ', ') FROM unnest(j.columns) x);
        text_expr := format('CASE WHEN num_nonnulls(%s) > 0 THEN concat_ws(E''\n'', %s) END', arr, arr);
        -- As text: every type has one, not every type has "=".
        differs := format('ROW(%s) IS DISTINCT FROM ROW(%s)',
            (SELECT string_agg('o.' || quote_ident(x) || '::text', ', ') FROM unnest(j.columns) x),
            (SELECT string_agg('n.' || quote_ident(x) || '::text', ', ') FROM unnest(j.columns) x));
        nonnull := format('num_nonnulls(%s) > 0', (SELECT string_agg('n.' || quote_ident(x), ', ') FROM unnest(j.columns) x));
        nonnull_t := format('num_nonnulls(%s) > 0', arr);
        guard := text_expr;
    END IF;
    checked := CASE WHEN j.mode = 'continuous' THEN format('%s IS NOT DISTINCT FROM u.g', guard) ELSE 'true' END;

    j.claim_sql := format('WITH c AS (DELETE FROM %s AS q USING (SELECT ctid AS tid FROM %s ORDER BY %s LIMIT $1 FOR UPDATE SKIP LOCKED) AS s '
               'WHERE q.ctid = s.tid RETURNING q.*) SELECT pg_catalog.jsonb_agg(DISTINCT pg_catalog.to_jsonb(c.*))::text FROM c', j.queue, j.queue, q_cols);
    j.claim_keys_sql := format('WITH c AS (DELETE FROM %s AS q USING pg_catalog.jsonb_populate_recordset(NULL::%s, $1::jsonb) AS kk WHERE (%s) = (%s) RETURNING q.*) '
               'SELECT pg_catalog.jsonb_agg(DISTINCT pg_catalog.to_jsonb(c.*))::text FROM c', j.queue, j.queue, k_q, k_kk);
    j.select_sql := format('SELECT to_jsonb(k.*)::text, %s, %s FROM %s AS t JOIN jsonb_populate_recordset(NULL::%s, $1::jsonb) AS k ON (%s) = (%s) '
               'FOR KEY SHARE OF t', text_expr, guard, src_from, j.queue, k_src, k_k);
    j.write_sql := CASE WHEN tgt = j.source THEN
            format('UPDATE %s AS t SET %I = u.e FROM unnest($1::jsonb[], $2::%s[], $3::text[]) AS u(k, e, g) '
                   'CROSS JOIN LATERAL jsonb_populate_record(NULL::%s, u.k) AS kk WHERE (%s) = (%s) AND %s',
                   src_from, j.target, vtype, j.queue, k_src, k_kk, checked)
        ELSE
            format('WITH u AS (SELECT kk.*, u.e FROM unnest($1::jsonb[], $2::%s[], $3::text[]) AS u(k, e, g) '
                   'CROSS JOIN LATERAL jsonb_populate_record(NULL::%s, u.k) AS kk '
                   'WHERE EXISTS (SELECT 1 FROM %s AS t WHERE (%s) = (%s) AND %s)), '
                   'd AS (DELETE FROM %s AS g USING u WHERE u.e IS NULL AND (%s) = (%s)) '
                   'INSERT INTO %s AS g (%s, %I) SELECT %s, u.e FROM u WHERE u.e IS NOT NULL '
                   'ON CONFLICT (%s) DO UPDATE SET %I = EXCLUDED.%I',
                   vtype, j.queue, src_from, k_src, k_kk, checked, tgt_from, k_g, k_u,
                   tgt_name, t_cols, j.target, k_u, t_cols, j.target, j.target)
        END;
    j.requeue_sql := format('INSERT INTO %s SELECT (jsonb_populate_record(NULL::%s, k)).* FROM jsonb_array_elements($1::jsonb) AS x(k) '
               'ON CONFLICT DO NOTHING', j.queue, j.queue);

    IF j.mode = 'continuous' THEN
        -- Run by tributary._job_trigger as the owner over the transition tables new_rows and
        -- old_rows of the statement that fired it (the source's columns).
        j.enqueue_sql := jsonb_strip_nulls(jsonb_build_object(
            'INSERT', format('INSERT INTO %s SELECT %s FROM new_rows n WHERE %s', j.queue, k_new, nonnull),
            'UPDATE', format('INSERT INTO %s SELECT %s FROM new_rows n LEFT JOIN old_rows o ON (%s) = (%s) WHERE (%s) IS NULL OR %s',
                             j.queue, k_new, k_old, k_new, k_old, differs)
                      || CASE WHEN tgt <> j.source THEN
                             -- separate target table: keys that went away take their embedding along
                             format('; DELETE FROM %s g USING old_rows o WHERE (%s) = (%s) AND NOT EXISTS (SELECT 1 FROM new_rows n WHERE (%s) = (%s))',
                                    tgt_from, k_g, k_old, k_new, k_old) ELSE '' END,
            'DELETE', CASE WHEN tgt <> j.source THEN format('DELETE FROM %s g USING old_rows o WHERE (%s) = (%s)', tgt_from, k_g, k_old) END,
            -- A TRUNCATE fires the trigger of every table it empties: of one partition, only the
            -- embeddings of rows gone go.
            'TRUNCATE', CASE WHEN tgt <> j.source AND skind = 'r' THEN format('TRUNCATE %s', tgt_from)
                             WHEN tgt <> j.source THEN format('DELETE FROM %s g WHERE NOT EXISTS (SELECT 1 FROM %s t WHERE (%s) = (%s))',
                                                           tgt_from, src, k_src, k_g) END,
            -- The triggers on the source's ancestors (partitioned tables above a partition,
            -- inheritance parents), whose transition tables hold rows of other tables too: keys
            -- of rows now in the source are queued (of the ancestor's columns only the key's are
            -- used), and with a target table, embeddings of keys no longer in it go.
            'INSERT via', format('INSERT INTO %s SELECT DISTINCT %s FROM new_rows n WHERE EXISTS (SELECT 1 FROM %s t WHERE (%s) = (%s) AND %s)',
                                 j.queue, k_new, src_from, k_src, k_new, nonnull_t),
            'UPDATE via', format('INSERT INTO %s SELECT DISTINCT %s FROM new_rows n WHERE EXISTS (SELECT 1 FROM %s t WHERE (%s) = (%s) AND %s)',
                                 j.queue, k_new, src_from, k_src, k_new, nonnull_t)
                          || CASE WHEN tgt <> j.source THEN
                                 format('; DELETE FROM %s g USING old_rows o WHERE (%s) = (%s) AND NOT EXISTS (SELECT 1 FROM %s t WHERE (%s) = (%s))',
                                        tgt_from, k_g, k_old, src_from, k_src, k_old) ELSE '' END,
            'DELETE via', CASE WHEN tgt <> j.source THEN
                                 format('DELETE FROM %s g USING old_rows o WHERE (%s) = (%s) AND NOT EXISTS (SELECT 1 FROM %s t WHERE (%s) = (%s))',
                                        tgt_from, k_g, k_old, src_from, k_src, k_old) END));
    ELSE
        j.enqueue_sql := NULL;
    END IF;
    RETURN j;
END $$;

CREATE OR REPLACE FUNCTION tributary._key_columns(rel regclass) RETURNS text[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT array_agg(quote_ident(a.attname) ORDER BY k.ord)
      FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
     WHERE i.indrelid = rel AND i.indisprimary
$$;

CREATE OR REPLACE FUNCTION tributary._job_fill_sql(j tributary._jobs, rel regclass) RETURNS text
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
        filter := format('NOT EXISTS (SELECT 1 FROM %s g WHERE (%s) = (%s))', tgt_from,
                         (SELECT string_agg('g.' || p, ', ') FROM unnest(tk) p), (SELECT string_agg('t.' || p, ', ') FROM unnest(pk) p));
    END IF;
    IF j.columns <> '{*}' THEN
        nonnull := format('num_nonnulls(%s) > 0', (SELECT string_agg('t.' || quote_ident(x) || '::text', ', ') FROM unnest(j.columns) x));
    END IF;
    RETURN (SELECT format('INSERT INTO %s SELECT %s FROM %s%I.%I t WHERE %s AND %s', j.queue,
                          (SELECT string_agg('t.' || p, ', ') FROM unnest(pk) p),
                          CASE WHEN c.relkind = 'r' THEN 'ONLY ' ELSE '' END, n.nspname, c.relname, filter, nonnull)
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = rel);
END $$;

CREATE OR REPLACE FUNCTION tributary._job_sync_tables(j tributary._jobs, fill boolean) RETURNS void
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

CREATE OR REPLACE FUNCTION tributary._follow_names(rel regclass, names text[], renamed text[]) RETURNS text[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    WITH have AS (SELECT a.attname::text AS n FROM pg_attribute a WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped),
    missing AS (SELECT x FROM unnest(names) x WHERE x NOT IN (SELECT n FROM have)),
    came AS (SELECT DISTINCT r FROM unnest(renamed) r WHERE r IN (SELECT n FROM have) AND r <> ALL (names))
    SELECT array_agg(CASE WHEN x IN (SELECT n FROM have) THEN x
                          WHEN (SELECT count(*) FROM missing) = 1 AND (SELECT count(*) FROM came) = 1 THEN (SELECT r FROM came)
                     END ORDER BY o)
      FROM unnest(names) WITH ORDINALITY AS u(x, o)
$$;

CREATE OR REPLACE FUNCTION tributary._job_drop_triggers(j tributary._jobs) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE r record;
BEGIN
    FOR r IN SELECT * FROM tributary._job_triggers(j.id) LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', r.tgname, r.rel);
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION tributary._job_ddl() RETURNS event_trigger
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

CREATE OR REPLACE FUNCTION tributary._job_cleanup(j tributary._jobs) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM tributary._job_drop_triggers(j);
    EXECUTE format('DROP TABLE IF EXISTS tributary.%I', '_queue_' || j.id);
END $$;

CREATE OR REPLACE FUNCTION tributary._job_resume(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    j     tributary._jobs := tributary._own_job(caller, (a->>'job')::bigint);
    owner oid;
    msg   text;
    code  text;
BEGIN
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

CREATE OR REPLACE FUNCTION tributary._requeue_due(job bigint) RETURNS void
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

CREATE OR REPLACE FUNCTION tributary._chunk_function_sql(j tributary._jobs) RETURNS text
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
            SELECT %s, k.seq, k.chunk, k.start_char, k.end_char FROM %s.tributary_chunk(NEW.%I, %s) AS k;
            RETURN NULL;
        END $body$$f$,
        fn, tgt, array_to_string(ck, ', '), new_k, tgt, array_to_string(ck, ', '), new_k, ext, col, chunk_args);
END $fn$;

CREATE OR REPLACE FUNCTION tributary._chunk_sync(j tributary._jobs) RETURNS void
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

CREATE OR REPLACE FUNCTION tributary._chunk_job_create(caller oid, a jsonb) RETURNS bigint
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
                   'SELECT %s, k.seq, k.chunk, k.start_char, k.end_char FROM %s AS t, %s.tributary_chunk(t.%I, %s) AS k',
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

CREATE OR REPLACE FUNCTION tributary._chunk_job_drop(caller oid, a jsonb) RETURNS bigint
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

CREATE OR REPLACE FUNCTION tributary_chunk_job_create(
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

CREATE OR REPLACE FUNCTION tributary_chunk_job_drop(job bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM tributary._job_call('chunk_drop', jsonb_build_object('job', job)); END $$;

CREATE OR REPLACE FUNCTION tributary._bind_column(rel regclass, col name, model text, prompt text, filled_by text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    b tributary.column_models;
BEGIN
    IF (SELECT relpersistence FROM pg_class WHERE oid = rel) = 't' THEN
        RETURN false;
    END IF;
    SELECT * INTO b FROM tributary.column_models c WHERE c.relid = rel AND c.attname = col;
    IF NOT FOUND THEN
        INSERT INTO tributary.column_models (relid, attname, model, prompt, filled_by)
        VALUES (rel, col, model, prompt, filled_by);
        RETURN true;
    END IF;
    IF b.model IS DISTINCT FROM model OR b.prompt IS DISTINCT FROM prompt THEN
        RAISE EXCEPTION 'column %.% holds embeddings of model "%"%, not of "%"%',
                rel, quote_ident(col), b.model,
                CASE WHEN b.prompt IS NULL THEN '' ELSE format(' (prompt "%s")', b.prompt) END,
                model,
                CASE WHEN prompt IS NULL THEN '' ELSE format(' (prompt "%s")', prompt) END
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('Filled by %s (tributary.column_models); vectors of different models or prompts in one column cannot be compared.',
                                  b.filled_by),
                  HINT = format('Use model => %L%s, or empty the column and call tributary_forget_column(%L, %L) first.',
                                b.model,
                                CASE WHEN b.prompt IS NULL THEN '' ELSE format(', prompt => %L', b.prompt) END,
                                rel::text, col);
    END IF;
    RETURN false;
END $$;

CREATE OR REPLACE FUNCTION tributary._forget_column(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    tbl regclass := (a->>'tbl')::oid;
    col name := a->>'col';
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = tbl) THEN
        RAISE EXCEPTION 'relation with OID % does not exist', tbl::oid USING ERRCODE = 'undefined_table';
    END IF;
    IF NOT pg_has_role(caller, (SELECT relowner FROM pg_class WHERE oid = tbl), 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table %', tbl USING ERRCODE = 'insufficient_privilege';
    END IF;
    DELETE FROM tributary.column_models c WHERE c.relid = tbl AND c.attname = col;
    RETURN CASE WHEN FOUND THEN 1 ELSE 0 END;
END $$;

CREATE OR REPLACE FUNCTION tributary_forget_column(tbl regclass, col name) RETURNS boolean
LANGUAGE sql STRICT VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT tributary._job_call('forget_column', jsonb_build_object('tbl', tbl::oid, 'col', col)) = 1
$$;

CREATE OR REPLACE FUNCTION tributary._column_models_rename() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE r record;
BEGIN
    FOR r IN SELECT t.relid, a.attname
               FROM pg_event_trigger_ddl_commands() d
               JOIN pg_attribute a ON a.attrelid = d.objid AND a.attnum = d.objsubid AND NOT a.attisdropped
               CROSS JOIN LATERAL (SELECT d.objid::regclass AS relid UNION SELECT p.relid FROM pg_partition_tree(d.objid) p) t
              WHERE d.classid = 'pg_class'::regclass AND d.objsubid > 0 LOOP
        UPDATE tributary.column_models c SET attname = r.attname
         WHERE c.relid = r.relid
           AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.relid AND a.attname = c.attname AND NOT a.attisdropped)
           AND NOT EXISTS (SELECT 1 FROM tributary.column_models x WHERE x.relid = r.relid AND x.attname = r.attname)
           AND (SELECT count(*) FROM tributary.column_models x WHERE x.relid = r.relid
                  AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = x.relid AND a.attname = x.attname AND NOT a.attisdropped)) = 1;
    END LOOP;
END $$;


CREATE OR REPLACE VIEW tributary.jobs WITH (security_barrier) AS
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
WHERE pg_has_role(tributary._job_owner(j), 'USAGE');

CREATE OR REPLACE VIEW tributary.job_errors WITH (security_barrier) AS
SELECT x.job_id, j.name AS job_name, x.key, x.sqlstate, x.message, x.detail, x.attempts, x.status,
       x.first_failed_at, x.last_failed_at, x.next_attempt_at
FROM tributary._job_errors x JOIN tributary._jobs j ON j.id = x.job_id
WHERE pg_has_role(tributary._job_owner(j), 'USAGE');


DROP EVENT TRIGGER tributary_job_partitions;
CREATE EVENT TRIGGER tributary_job_partitions ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE', 'ALTER SCHEMA') EXECUTE FUNCTION tributary._job_ddl();
CREATE EVENT TRIGGER tributary_column_models_rename ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE') EXECUTE FUNCTION tributary._column_models_rename();

-- Nobody but tributary's functions writes tributary.column_models.
DROP POLICY forget ON tributary.column_models;
REVOKE DELETE ON tributary.column_models FROM PUBLIC;

REVOKE ALL ON FUNCTION tributary._job_sync_owner(bigint), tributary._job_drop_triggers(tributary._jobs),
    tributary._job_build(tributary._jobs) FROM PUBLIC;
REVOKE ALL ON FUNCTION tributary._chunk_job_create(oid, jsonb), tributary._chunk_job_drop(oid, jsonb),
    tributary._chunk_sync(tributary._jobs), tributary._chunk_function_sql(tributary._jobs) FROM PUBLIC;
REVOKE ALL ON FUNCTION tributary._forget_column(oid, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION tributary._column_models_rename() FROM PUBLIC;

-- Comments, as sql/comments.sql sets them.
COMMENT ON SCHEMA tributary IS 'tributary: the model catalog, jobs, views and internal functions (the tributary_* functions live in the extension''s schema)';
COMMENT ON FUNCTION tributary_embed(text, text, text) IS 'Embedding of one text with a model (default: tributary.model) and one of its prompts (default: its default prompt): vector of the model''s dimension, unit L2 norm; NULL in, NULL out. Longer than the window: truncated, as tributary.truncation says. Errors: 42704 unknown model or prompt, 22001 truncation under tributary.truncation = error, 58P01 missing files, 38000 ONNX Runtime failure.';
COMMENT ON FUNCTION tributary_embed(text[], text, text) IS 'Embeddings of many texts in one batched call: vector[] in the same order, NULL elements stay NULL. At most tributary.max_texts_per_call texts (54000 beyond).';
COMMENT ON FUNCTION tributary_embed(record, text, text[], text[], integer, integer, text[], timestamp with time zone, boolean, integer) IS 'Embedding of a whole row with its foreign-key context, exactly the text tributary_row_text() gives for the same options; NULL in, NULL out.';
COMMENT ON FUNCTION tributary_embed_column(regclass, text[], name, text, integer, text[], integer, integer, text[], timestamp with time zone, text) IS 'Fills the target vector/halfvec column for every row where it is NULL (columns, or ''{*}'' for whole rows), batch_size rows at a time, in the caller''s transaction; returns the rows written. Ordinary, partitioned and inheritance tables; 42809 for anything else. Records the model and prompt for the column (22023 if another filled it); counts truncated texts (tributary.truncation).';
COMMENT ON FUNCTION tributary_row_text(record, text[], text[], integer, integer, text[], timestamp with time zone, boolean, integer, text, integer) IS 'The text a row becomes for embedding (row template version ''template''): its columns as "column: value" lines, with parents and children through foreign keys, cut to max_tokens tokens by fair shares.';
COMMENT ON FUNCTION tributary_row_template_version() IS 'The row template version tributary_row_text() uses by default (1).';
COMMENT ON FUNCTION tributary_tokenize(text, text) IS 'The token ids (integer[]) the model sees for a text: special tokens included, truncated to the model''s max length in tokens; NULL in, NULL out.';
COMMENT ON FUNCTION tributary_info(text) IS 'The model (default: tributary.model): dimension, max length in tokens, pooling, precision, the execution provider actually in use and why, the ONNX Runtime version and library, the layout (tributary or sentence-transformers), normalisation and prompts.';
COMMENT ON FUNCTION tributary_register_model(text, text, text, jsonb) IS 'Registers a model directory under a name (superuser only, 42501): tributary''s export (tributary.json) or a standard sentence-transformers/Optimum export (modules.json, 1_Pooling, onnx/model.onnx); prompts adds name -> text prompts. 0A000 for what tributary cannot run.';
COMMENT ON FUNCTION tributary_drop_model(text) IS 'Removes a registered model from tributary.models (superuser only, 42501); its files are left alone.';
COMMENT ON FUNCTION tributary_sessions() IS 'This backend''s ONNX Runtime sessions: execution provider and why, GPU slot, graph, output type, IoBinding, runs, rows, tokens, padded tokens, ms in ONNX Runtime.';
COMMENT ON TABLE tributary.models IS 'The model catalog: name, directory, dimension, max length, pooling, precision, layout, normalisation, prompts. Readable by everyone; written by tributary_register_model() and tributary_drop_model().';
COMMENT ON TABLE tributary.column_models IS 'Which model and prompt filled each embedding column (tributary_embed_column, jobs); tributary_embed_for() embeds queries with it. Readable by everyone.';
COMMENT ON FUNCTION tributary._bind_column(regclass, name, text, text, text) IS 'Internal: records the model and prompt filling a column, or 22023 when another filled it.';
COMMENT ON FUNCTION tributary_forget_column(regclass, name) IS 'Forgets which model filled a column (table owners only, 42501), so that another model may fill it.';
COMMENT ON FUNCTION tributary_embed_for(regclass, name, text, text) IS 'Query embedding of a text for a column, by the model recorded for it (prompt default: the model''s query prompt). 42704 when no model is recorded.';
COMMENT ON FUNCTION tributary._column_models_drop() IS 'Internal: forgets the columns of dropped tables and columns.';
COMMENT ON EVENT TRIGGER tributary_column_models_drop IS 'Forgets the models of dropped tables and columns (tributary.column_models).';
COMMENT ON VIEW tributary.sessions IS 'This backend''s ONNX Runtime sessions (tributary_sessions()).';
COMMENT ON VIEW tributary.gpu_sessions IS 'Cluster-wide: the backends that hold a GPU slot (at most tributary.max_gpu_sessions).';
COMMENT ON VIEW tributary.cpu_runs IS 'Cluster-wide: the backends holding (granted) or waiting for a CPU run slot (at most tributary.max_cpu_runs runs at once).';
COMMENT ON FUNCTION tributary_stat_activity() IS 'Cluster-wide: every backend and job worker that has run a model: its last model and provider, sessions, calls, rows, tokens, ms in ONNX Runtime, CPU slot waits, idle releases, private and shared memory. Needs shared_preload_libraries; pg_monitor only.';
COMMENT ON FUNCTION tributary_progress_embed_column() IS 'Cluster-wide: running tributary_embed_column calls, rows done of rows to embed. Needs shared_preload_libraries; pg_monitor only.';
COMMENT ON VIEW tributary.stat_activity IS 'Cluster-wide: what each backend and job worker does with tributary (tributary_stat_activity() with database, role and backend type). pg_monitor only.';
COMMENT ON VIEW tributary.progress_embed_column IS 'Cluster-wide: the progress of running tributary_embed_column calls, like pg_stat_progress_* views. pg_monitor only.';
COMMENT ON FUNCTION tributary_predict(regclass, name, name, vector, integer, text) IS 'Predicts column label for a query embedding from the k nearest rows of tbl that have it: similarity-weighted vote (categories, with confidence) or weighted mean and stddev (numbers), with the neighbours as evidence.';
COMMENT ON FUNCTION tributary_evaluate(regclass, name, name, name, integer, double precision, text, integer) IS 'Held-out evaluation of tributary_predict on a table: accuracy and macro-F1 (categories) or MAE (numbers) next to the majority-class or mean baseline, split by a seeded hash of group_by.';
COMMENT ON FUNCTION tributary.label_kind(regclass, name, text) IS 'Internal (tributary_predict): whether a label column is a category or a number.';
COMMENT ON FUNCTION tributary.embedding_type(regclass, name) IS 'Internal (tributary_predict): the vector type of an embedding column.';
COMMENT ON FUNCTION tributary.row_key(regclass, text) IS 'Internal (tributary_predict): the jsonb key expression of a table''s rows (primary key, else ctid).';
COMMENT ON FUNCTION tributary.knn_vote(text[], double precision[]) IS 'Internal (tributary_predict): similarity-weighted vote over neighbour labels.';
COMMENT ON FUNCTION tributary.knn_mean(double precision[], double precision[]) IS 'Internal (tributary_predict): similarity-weighted mean and standard deviation of neighbour values.';
COMMENT ON FUNCTION tributary._target_column(regclass, name, text, integer, text, text) IS 'Internal: checks a target column (vector or halfvec of the model''s dimension) and returns its type; 42703, 42804, 22000.';
COMMENT ON FUNCTION tributary_job_create(regclass, text[], name, text, text, text, integer, integer, text, text[], integer, integer, text[], text) IS 'prompt: the model''s prompt to embed with. Creates a job: background workers embed every row of a table (once), or keep embedding new and changed rows (continuous), batch by batch, each batch its own transaction. Table owner only. Needs tributary in shared_preload_libraries.';
COMMENT ON FUNCTION tributary_job_pause(bigint) IS 'Pauses a job of yours: workers stop after their current batch; tributary_job_resume() goes on.';
COMMENT ON FUNCTION tributary_job_resume(bigint) IS 'Resumes a paused or failed job of yours, giving its failed rows a new chance (55000 for a cancelled job).';
COMMENT ON FUNCTION tributary_job_cancel(bigint) IS 'Cancels a job of yours: no more batches; what was written stays.';
COMMENT ON FUNCTION tributary_job_drop(bigint) IS 'Drops a job of yours: its queue, its triggers and its row in tributary.jobs; embeddings already written stay.';
COMMENT ON FUNCTION tributary.workers() IS 'Job background workers and the launcher: pid, database, job, rows and batches; other roles'' workers are shown only to superusers and members of pg_read_all_stats.';
COMMENT ON VIEW tributary.jobs IS 'The jobs of the roles you are a member of: state (waiting: running but no worker can serve it now, see waiting_for), mode, rows done, queued and failed, rows per second and seconds left, the workers embedding it, the last error.';
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

-- Chunk jobs of 0.4.0 (a trigger and function named tributary_chunks_<job id>, made by their
-- creator): recorded in their job, owned by the source's owner and tied to the extension. (Their
-- function is rewritten by 0.5.0's code at the next DDL on the source: an extension script may
-- not replace a function that is not the extension's.)
DO $upgrade$
DECLARE
    r    record;
    args text;
BEGIN
    FOR r IN SELECT j.id, t.tgrelid AS source, p.oid AS function, p.prosrc
               FROM tributary._jobs j
               JOIN pg_trigger t ON t.tgname = ('tributary_chunks_' || j.id)::name AND NOT t.tgisinternal
               JOIN pg_proc p ON p.oid = t.tgfoid AND p.proname = ('tributary_chunks_' || j.id)::name
              WHERE j.chunk_source IS NULL AND (SELECT count(*) FROM pg_inherits i WHERE i.inhrelid = t.tgrelid
                                                  AND EXISTS (SELECT 1 FROM pg_trigger u WHERE u.tgrelid = i.inhparent AND u.tgname = t.tgname)) = 0 LOOP
        -- The sizes, from the call in its body: tributary_chunk(NEW.<column>, '<model>', <chunk_tokens>, <overlap>).
        args := substring(r.prosrc FROM 'tributary_chunk\(NEW\.[^,]+, ''[^'']*'', ([^)]*)\)');
        UPDATE tributary._jobs SET chunk_source = r.source, chunk_function = r.function,
               chunk_tokens = nullif(split_part(args, ', ', 1), 'NULL')::integer,
               chunk_overlap = coalesce(nullif(split_part(args, ', ', 2), '')::integer, 0)
         WHERE id = r.id;
        EXECUTE format('ALTER FUNCTION %s DEPENDS ON EXTENSION tributary', r.function::regprocedure);
        EXECUTE format('ALTER FUNCTION %s OWNER TO %s', r.function::regprocedure,
                       (SELECT relowner FROM pg_class WHERE oid = r.source)::regrole);
    END LOOP;
END $upgrade$;

-- Every job acts as its table's owner (its queue granted to it), with statements built by 0.5.0
-- (a job whose table lost a column it names keeps its statements and fails as before).
DO $upgrade$
DECLARE
    j tributary._jobs;
    b tributary._jobs;
BEGIN
    FOR j IN SELECT * FROM tributary._jobs WHERE state <> 'cancelled' ORDER BY id LOOP
        PERFORM tributary._job_sync_owner(j.id);
        BEGIN
            b := tributary._job_build(j);
            UPDATE tributary._jobs x SET claim_sql = b.claim_sql, claim_keys_sql = b.claim_keys_sql, select_sql = b.select_sql,
                   write_sql = b.write_sql, requeue_sql = b.requeue_sql, enqueue_sql = b.enqueue_sql
             WHERE x.id = j.id;
        EXCEPTION WHEN undefined_table OR undefined_column OR invalid_table_definition THEN
            NULL;
        END;
    END LOOP;
END $upgrade$;
