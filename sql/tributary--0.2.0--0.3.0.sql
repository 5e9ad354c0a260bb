-- tributary 0.2.0 -> 0.3.0 (ALTER EXTENSION tributary UPDATE). Written from the 0.3.0 sources:
-- changed tables are altered to what a fresh 0.3.0 install creates (new columns last, as there),
-- functions whose signature or result changed are dropped and created from the 0.3.0 text,
-- changed bodies replaced, new objects created as sql/columns.sql creates them.
-- tests/integration/test_upgrade.py checks that an updated extension equals a fresh 0.3.0
-- install object by object (definitions, owners, privileges, comments, dumped configuration).
\echo Use "ALTER EXTENSION tributary UPDATE TO '0.3.0'" to load this file. \quit

-- Models: standard exports (layout, normalisation, last-token pooling) and prompts.
ALTER TABLE tributary.models DROP CONSTRAINT models_pooling_check,
    ADD CONSTRAINT models_pooling_check CHECK (pooling IN ('mean', 'cls', 'lasttoken'));
ALTER TABLE tributary.models
    -- 'tributary': pooling and normalisation inside the graph (export_model.py);
    -- 'sentence-transformers': a standard export, pooled (and normalised) by tributary.
    ADD COLUMN layout         text NOT NULL DEFAULT 'tributary' CHECK (layout IN ('tributary', 'sentence-transformers')),
    ADD COLUMN normalize      boolean NOT NULL DEFAULT true,
    ADD COLUMN prompts        jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(prompts) = 'object'),  -- name -> text put before each input
    ADD COLUMN default_prompt text CHECK (default_prompt IS NULL OR prompts ? default_prompt);

-- Jobs: texts truncated to the window, counted.
ALTER TABLE tributary._jobs ADD COLUMN rows_truncated bigint NOT NULL DEFAULT 0,
    ADD COLUMN prompt text;

-- Functions with a new argument (prompt, prompts) or result columns (tributary_info).
DROP FUNCTION tributary_embed(text, text);
DROP FUNCTION tributary_embed(text[], text);
DROP FUNCTION tributary_embed_column(regclass, text[], name, text, integer, text[], integer, integer, text[], timestamp with time zone);
DROP FUNCTION tributary_info(text);
DROP FUNCTION tributary_register_model(text, text, text);
DROP FUNCTION tributary_job_create(regclass, text[], name, text, text, text, integer, integer, text, text[], integer, integer, text[]);
CREATE  FUNCTION "tributary_chunk"(
	"text" TEXT, /* Option < & str > */
	"model" TEXT DEFAULT NULL, /* Option < & str > */
	"chunk_tokens" INT DEFAULT NULL, /* Option < i32 > */
	"overlap_tokens" INT DEFAULT 0 /* Option < i32 > */
) RETURNS TABLE (
	"seq" INT,  /* i32 */
	"chunk" TEXT,  /* String */
	"start_char" INT,  /* i32 */
	"end_char" INT  /* i32 */
)
STABLE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tributary_chunk_wrapper';
CREATE  FUNCTION "tributary_embed"(
	"text" TEXT, /* Option < & str > */
	"model" TEXT DEFAULT NULL, /* Option < & str > */
	"prompt" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS vector /* Option < Vector > */
STABLE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tributary_embed_text_0_3_wrapper';
CREATE  FUNCTION "tributary_embed"(
	"texts" TEXT[], /* :: std :: option :: Option < Array < & str > > */
	"model" TEXT DEFAULT NULL, /* Option < & str > */
	"prompt" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS vector[] /* :: std :: option :: Option < Vec < Option < Vector > > > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tributary_embed_array_0_3_wrapper';
CREATE  FUNCTION "tributary_embed_column"(
	"tbl" regclass, /* Option < PgRelation > */
	"columns" TEXT[], /* :: std :: option :: Option < Vec < String > > */
	"target" name, /* Option < Name > */
	"model" TEXT DEFAULT NULL, /* Option < & str > */
	"batch_size" INT DEFAULT 1024, /* Option < i32 > */
	"exclude" TEXT[] DEFAULT NULL, /* :: std :: option :: Option < Vec < String > > */
	"parents" INT DEFAULT 0, /* Option < i32 > */
	"children" INT DEFAULT 0, /* Option < i32 > */
	"time_columns" TEXT[] DEFAULT NULL, /* :: std :: option :: Option < Vec < String > > */
	"as_of" timestamp with time zone DEFAULT NULL, /* Option < pgrx :: datum :: TimestampWithTimeZone > */
	"prompt" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tributary_embed_column_0_3_wrapper';
CREATE  FUNCTION "tributary_info"(
	"model" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS TABLE (
	"model" TEXT,  /* String */
	"dimension" INT,  /* i32 */
	"max_length" INT,  /* i32 */
	"pooling" TEXT,  /* String */
	"precision" TEXT,  /* String */
	"execution_provider" TEXT,  /* String */
	"provider_note" TEXT,  /* String */
	"intra_op_threads" INT,  /* i32 */
	"ort_version" TEXT,  /* String */
	"ort_library" TEXT,  /* String */
	"model_file" TEXT,  /* String */
	"layout" TEXT,  /* String */
	"normalize" bool,  /* bool */
	"prompts" jsonb,  /* pgrx :: JsonB */
	"default_prompt" TEXT  /* Option < String > */
)
STABLE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tributary_info_0_3_wrapper';
CREATE  FUNCTION "tributary_register_model"(
	"name" TEXT, /* Option < & str > */
	"path" TEXT, /* Option < & str > */
	"precision" TEXT DEFAULT 'fp32', /* Option < & str > */
	"prompts" jsonb DEFAULT NULL /* Option < pgrx :: JsonB > */
) RETURNS void
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tributary_register_model_0_3_wrapper';

-- Which model filled each column (sql/columns.sql, whole).
CREATE TABLE tributary.column_models (
    relid       regclass NOT NULL,          -- the table (dumped and restored by name)
    attname     name NOT NULL,              -- the vector/halfvec column
    model       text NOT NULL,              -- tributary.models.name
    prompt      text,                       -- the prompt's name the texts were embedded with, or NULL
    filled_by   text NOT NULL,              -- 'tributary_embed_column' or 'job <id>'
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (relid, attname)
);
REVOKE ALL ON tributary.column_models FROM PUBLIC;
GRANT SELECT, DELETE ON tributary.column_models TO PUBLIC;
ALTER TABLE tributary.column_models ENABLE ROW LEVEL SECURITY;
CREATE POLICY read ON tributary.column_models FOR SELECT USING (true);
-- tributary_forget_column: a role forgets only the columns of tables it owns.
CREATE POLICY forget ON tributary.column_models FOR DELETE
    USING (pg_catalog.pg_has_role((SELECT r.relowner FROM pg_catalog.pg_class r WHERE r.oid = relid), 'USAGE'));
SELECT pg_catalog.pg_extension_config_dump('tributary.column_models', '');

-- Records that `model` (with `prompt`) fills column `col` of `rel`, or checks that it is the
-- model already recorded: 22023 when another model or prompt filled it. Returns whether a new
-- record was made.
CREATE FUNCTION tributary._bind_column(rel regclass, col name, model text, prompt text, filled_by text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    b tributary.column_models;
BEGIN
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
REVOKE ALL ON FUNCTION tributary._bind_column(regclass, name, text, text, text) FROM PUBLIC;

-- tributary_forget_column(tbl, col) -> boolean: forgets which model filled the column (after
-- emptying it, to fill it with another model). Table owners only (42501); false when nothing was
-- recorded; NULL in, NULL out. SECURITY INVOKER: the caller's DELETE on tributary.column_models is limited by a
-- row-level security policy to the tables it owns.
CREATE FUNCTION tributary_forget_column(tbl regclass, col name) RETURNS boolean
LANGUAGE plpgsql STRICT SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT pg_catalog.pg_has_role((SELECT relowner FROM pg_catalog.pg_class WHERE oid = tbl), 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table %', tbl USING ERRCODE = 'insufficient_privilege';
    END IF;
    DELETE FROM tributary.column_models c WHERE c.relid = tbl AND c.attname = col;
    RETURN FOUND;
END $$;

-- tributary_embed_for(tbl, col, text [, prompt]) -> vector: the query embedding of `text` for
-- column `col` of `tbl`, by the model recorded for that column. `prompt` defaults to the model's
-- prompt named 'query' when it has one (search queries against embedded documents), else to its
-- default prompt. A NULL table, column or text gives NULL. Errors: 42704 no model recorded for the column; those of
-- tributary_embed.
CREATE FUNCTION tributary_embed_for(tbl regclass, col name, text text, prompt text DEFAULT NULL)
RETURNS vector
LANGUAGE plpgsql STABLE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m text;
    p text := prompt;
BEGIN
    IF tbl IS NULL OR col IS NULL OR text IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT c.model INTO m FROM tributary.column_models c WHERE c.relid = tbl AND c.attname = col;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no model is recorded for column %.%', tbl, quote_ident(col)
            USING ERRCODE = 'undefined_object',
                  HINT = 'Fill the column with tributary_embed_column() or a job, which record the model; or name the model: tributary_embed(text, model => ...).';
    END IF;
    IF p IS NULL THEN
        SELECT CASE WHEN mm.prompts ? 'query' THEN 'query' END INTO p FROM tributary.models mm WHERE mm.name = m;
    END IF;
    RETURN @extschema@.tributary_embed(text, m, p);
END $$;

-- Records of dropped tables go with them (a dangling regclass could not be dumped and restored).
CREATE FUNCTION tributary._column_models_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM tributary.column_models c
     WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class r WHERE r.oid = c.relid)
        OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                        WHERE a.attrelid = c.relid AND a.attname = c.attname AND NOT a.attisdropped);
END $$;
CREATE EVENT TRIGGER tributary_column_models_drop ON sql_drop
    EXECUTE FUNCTION tributary._column_models_drop();

-- Jobs record their target's model; the jobs view shows rows_truncated.
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

DROP VIEW tributary.jobs;
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
GRANT SELECT ON tributary.jobs TO PUBLIC;

-- Chunk jobs (sql/chunks.sql, whole).
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

-- Comments of the new and re-created objects (sql/comments.sql).
COMMENT ON FUNCTION tributary_embed(text, text, text) IS 'Embedding of one text with a model (default: tributary.model) and one of its prompts (default: its default prompt): vector of the model''s dimension, unit L2 norm; NULL in, NULL out. Longer than the window: truncated, as tributary.truncation says. Errors: 42704 unknown model or prompt, 22001 truncation under tributary.truncation = error, 58P01 missing files, 38000 ONNX Runtime failure.';
COMMENT ON FUNCTION tributary_embed(text[], text, text) IS 'Embeddings of many texts in one batched call: vector[] in the same order, NULL elements stay NULL. At most tributary.max_texts_per_call texts (54000 beyond).';
COMMENT ON FUNCTION tributary_embed_column(regclass, text[], name, text, integer, text[], integer, integer, text[], timestamp with time zone, text) IS 'Fills the target vector/halfvec column for every row where it is NULL (columns, or ''{*}'' for whole rows), batch_size rows at a time, in the caller''s transaction; returns the rows written. Ordinary, partitioned and inheritance tables; 42809 for anything else. Records the model and prompt for the column (22023 if another filled it); counts truncated texts (tributary.truncation).';
COMMENT ON FUNCTION tributary_info(text) IS 'The model (default: tributary.model): dimension, max length in tokens, pooling, precision, the execution provider actually in use and why, the ONNX Runtime version and library, the layout (tributary or sentence-transformers), normalisation and prompts.';
COMMENT ON FUNCTION tributary_register_model(text, text, text, jsonb) IS 'Registers a model directory under a name (superuser only, 42501): tributary''s export (tributary.json) or a standard sentence-transformers/Optimum export (modules.json, 1_Pooling, onnx/model.onnx); prompts adds name -> text prompts. 0A000 for what tributary cannot run.';
COMMENT ON TABLE tributary.models IS 'The model catalog: name, directory, dimension, max length, pooling, precision, layout, normalisation, prompts. Readable by everyone; written by tributary_register_model() and tributary_drop_model().';
COMMENT ON TABLE tributary.column_models IS 'Which model and prompt filled each embedding column (tributary_embed_column, jobs); tributary_embed_for() embeds queries with it. Readable by everyone.';
COMMENT ON FUNCTION tributary._bind_column(regclass, name, text, text, text) IS 'Internal: records the model and prompt filling a column, or 22023 when another filled it.';
COMMENT ON FUNCTION tributary_forget_column(regclass, name) IS 'Forgets which model filled a column (table owners only, 42501), so that another model may fill it.';
COMMENT ON FUNCTION tributary_embed_for(regclass, name, text, text) IS 'Query embedding of a text for a column, by the model recorded for it (prompt default: the model''s query prompt). 42704 when no model is recorded.';
COMMENT ON FUNCTION tributary._column_models_drop() IS 'Internal: forgets the columns of dropped tables and columns.';
COMMENT ON EVENT TRIGGER tributary_column_models_drop IS 'Forgets the models of dropped tables and columns (tributary.column_models).';
COMMENT ON VIEW tributary.jobs IS 'The jobs of the roles you are a member of: state (waiting: running but no worker can serve it now, see waiting_for), mode, rows done, queued and failed, rows per second and seconds left, the workers embedding it, the last error.';
COMMENT ON FUNCTION tributary_job_create(regclass, text[], name, text, text, text, integer, integer, text, text[], integer, integer, text[], text) IS 'prompt: the model''s prompt to embed with. Creates a job: background workers embed every row of a table (once), or keep embedding new and changed rows (continuous), batch by batch, each batch its own transaction. Table owner only. Needs tributary in shared_preload_libraries.';
COMMENT ON FUNCTION tributary_chunk(text, text, integer, integer) IS 'A long text as chunks that fit the model''s window, by its tokenizer, with overlap, on paragraph and sentence boundaries where possible: seq, chunk, start_char, end_char (0-based, end exclusive). 22023 for a chunk size below 1 or over the window, or an overlap not smaller than it.';
COMMENT ON FUNCTION tributary_chunk_job_create(regclass, name, text, text, integer, integer, text, text) IS 'Creates a chunk table for a text column (one row per chunk, kept in step with the source by a trigger) and a continuous job that embeds the chunks; returns the job id.';
COMMENT ON FUNCTION tributary_chunk_job_drop(bigint) IS 'Drops a chunk job: its embedding job and its trigger on the source (the chunk table stays).';
