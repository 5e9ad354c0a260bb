-- tributary 0.5.0 -> 0.6.0 (ALTER EXTENSION tributary UPDATE). Written from the 0.6.0 sources:
-- relational inference. New: tributary_match and tributary_dedup (sql/match.sql, with their native
-- helpers), tributary_predict_column; tributary_predict searches on past an index's candidates;
-- tributary_evaluate splits forward in time (split_column, split_at) and says which split it used
-- (a new last result column, so it is dropped and created again); row template 2 is the default of
-- tributary_row_text, tributary_embed(record) and tributary_embed_column (a new template argument:
-- dropped and created again; the library keeps 0.5.0's entry point, which uses template 1) and of
-- new jobs (tributary_job_create's new template argument); every existing job keeps template 1.
-- tests/integration/test_upgrade.py checks that an updated extension equals a fresh 0.6.0
-- install object by object (definitions, owners, privileges, comments, dumped configuration).
\echo Use "ALTER EXTENSION tributary UPDATE TO '0.6.0'" to load this file. \quit

-- Jobs keep the row template they were made with: every job made before 0.6.0 used version 1.
ALTER TABLE tributary._jobs ADD COLUMN template integer NOT NULL DEFAULT 1 CHECK (template >= 1);

-- Row template 2 by default.

CREATE OR REPLACE FUNCTION "tributary_row_text"(
	"row" record, /* Option < :: pgrx :: heap_tuple :: PgHeapTuple < '_, :: pgrx :: pgbox ::
AllocatedByRust > > */
	"include" TEXT[] DEFAULT NULL, /* :: std :: option :: Option < Vec < Option < String > > > */
	"exclude" TEXT[] DEFAULT NULL, /* :: std :: option :: Option < Vec < Option < String > > > */
	"parents" INT DEFAULT 0, /* Option < i32 > */
	"children" INT DEFAULT 0, /* Option < i32 > */
	"time_columns" TEXT[] DEFAULT NULL, /* :: std :: option :: Option < Vec < Option < String > > > */
	"as_of" timestamp with time zone DEFAULT NULL, /* Option < TimestampWithTimeZone > */
	"keys" bool DEFAULT false, /* Option < bool > */
	"max_tokens" INT DEFAULT NULL, /* Option < i32 > */
	"model" TEXT DEFAULT NULL, /* Option < & str > */
	"template" INT DEFAULT 2 /* Option < i32 > */
) RETURNS TEXT /* Option < String > */
STABLE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tributary_row_text_wrapper';

CREATE OR REPLACE FUNCTION "tributary_embed"(
	"row" record, /* Option < :: pgrx :: heap_tuple :: PgHeapTuple < '_, :: pgrx :: pgbox ::
AllocatedByRust > > */
	"model" TEXT DEFAULT NULL, /* Option < & str > */
	"include" TEXT[] DEFAULT NULL, /* :: std :: option :: Option < Vec < Option < String > > > */
	"exclude" TEXT[] DEFAULT NULL, /* :: std :: option :: Option < Vec < Option < String > > > */
	"parents" INT DEFAULT 0, /* Option < i32 > */
	"children" INT DEFAULT 0, /* Option < i32 > */
	"time_columns" TEXT[] DEFAULT NULL, /* :: std :: option :: Option < Vec < Option < String > > > */
	"as_of" timestamp with time zone DEFAULT NULL, /* Option < TimestampWithTimeZone > */
	"keys" bool DEFAULT false, /* Option < bool > */
	"template" INT DEFAULT 2 /* Option < i32 > */
) RETURNS vector /* Option < Vector > */
STABLE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tributary_embed_row_wrapper';

DROP FUNCTION tributary_embed_column(regclass, text[], name, text, integer, text[], integer, integer, text[], timestamp with time zone, text);

CREATE  FUNCTION "tributary_embed_column"(
	"tbl" regclass, /* Option < RegClass > */
	"columns" TEXT[], /* :: std :: option :: Option < Vec < Option < String > > > */
	"target" name, /* Option < Name > */
	"model" TEXT DEFAULT NULL, /* Option < & str > */
	"batch_size" INT DEFAULT 1024, /* Option < i32 > */
	"exclude" TEXT[] DEFAULT NULL, /* :: std :: option :: Option < Vec < Option < String > > > */
	"parents" INT DEFAULT 0, /* Option < i32 > */
	"children" INT DEFAULT 0, /* Option < i32 > */
	"time_columns" TEXT[] DEFAULT NULL, /* :: std :: option :: Option < Vec < Option < String > > > */
	"as_of" timestamp with time zone DEFAULT NULL, /* Option < pgrx :: datum :: TimestampWithTimeZone > */
	"prompt" TEXT DEFAULT NULL, /* Option < & str > */
	"template" INT DEFAULT 2 /* Option < i32 > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tributary_embed_column_0_6_wrapper';

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

DROP FUNCTION tributary_job_create(regclass, text[], name, text, text, text, integer, integer, text, text[], integer, integer, text[], text);

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

-- Prediction: never fails on an index, forward in time, a whole column.

CREATE OR REPLACE FUNCTION tributary_predict(
    tbl regclass, label name, embedding name, query vector, k integer DEFAULT 10, kind text DEFAULT 'auto',
    OUT prediction text, OUT confidence float8, OUT stddev float8, OUT neighbours integer, OUT evidence jsonb)
RETURNS record LANGUAGE plpgsql STABLE
SET jit = off SET hnsw.iterative_scan = relaxed_order SET ivfflat.iterative_scan = relaxed_order AS $$
DECLARE
    label_kind text;
    emb_type text;
    vec text := tributary._vector_schema();   -- pgvector's operators, whatever the search_path
    labels text[];
    weights float8[];
    exact text;          -- '' (the index's order) or ' + 0' (the exact search)
    available integer;
BEGIN
    IF tbl IS NULL OR label IS NULL OR embedding IS NULL OR k IS NULL OR kind IS NULL THEN
        RAISE EXCEPTION '% must not be NULL',
            CASE WHEN tbl IS NULL THEN 'tbl' WHEN label IS NULL THEN 'label' WHEN embedding IS NULL THEN 'embedding'
                 WHEN k IS NULL THEN 'k' ELSE 'kind' END
            USING ERRCODE = '22004';
    END IF;
    IF k < 1 OR k > 1000 THEN
        RAISE EXCEPTION 'k must be between 1 and 1000, not %', k USING ERRCODE = '22023',
            HINT = 'k is the number of neighbours; pgvector''s index scans return at most hnsw.ef_search (at most 1000) rows.';
    END IF;
    label_kind := tributary.label_kind(tbl, label, kind);
    emb_type := tributary.embedding_type(tbl, embedding);
    IF query IS NULL THEN
        RETURN;
    END IF;
    -- First the index's order (an index can serve it); when that gives fewer than k neighbours
    -- and more labelled rows exist (counted without reading the embeddings, at most k), the
    -- exact search: ordered by the distance + 0, which no index serves. The aggregates re-sort
    -- by distance (relaxed order).
    exact := '';
    LOOP
        EXECUTE format(
            'SELECT array_agg(n.l ORDER BY n.d), array_agg(greatest(1 - n.d, 1e-6) ORDER BY n.d),
                    jsonb_agg(jsonb_build_object(''key'', n.key, ''label'', n.l, ''distance'', n.d,
                                                 ''weight'', greatest(1 - n.d, 1e-6)) ORDER BY n.d)
               FROM (SELECT %s AS key, t.%I::text AS l, t.%I OPERATOR(%s.<=>) $1::%s AS d
                       FROM %s AS t
                      WHERE t.%I IS NOT NULL AND t.%I IS NOT NULL
                      ORDER BY (t.%I OPERATOR(%s.<=>) $1::%s)%s
                      LIMIT $2) n',
            tributary.row_key(tbl, 't'), label, embedding, vec, tributary._vector_type(emb_type), tbl, label, embedding,
            embedding, vec, tributary._vector_type(emb_type), exact)
          INTO labels, weights, evidence
          USING query, k;
        neighbours := coalesce(cardinality(labels), 0);
        EXIT WHEN neighbours >= k OR exact <> '';
        EXECUTE format('SELECT count(*) FROM (SELECT FROM %s AS t WHERE t.%I IS NOT NULL AND t.%I IS NOT NULL LIMIT $1) c',
                       tbl, label, embedding)
          INTO available USING k;
        EXIT WHEN available <= neighbours;
        exact := ' OPERATOR(pg_catalog.+) 0::pg_catalog.float8';
    END LOOP;
    IF neighbours = 0 THEN
        RAISE EXCEPTION 'no rows to predict from: relation "%" has no row with both "%" and "%"', tbl, label, embedding
            USING ERRCODE = '22023',
            DETAIL = format('0 rows of %s visible to the current user have %I IS NOT NULL AND %I IS NOT NULL.',
                            tbl, label, embedding),
            HINT = 'Fill the label column for some rows and their embeddings (tributary_embed_column); '
                   'row-level security and column privileges apply to the neighbours.';
    END IF;
    IF label_kind = 'category' THEN
        SELECT v.prediction, v.confidence INTO prediction, confidence FROM tributary.knn_vote(labels, weights) v;
    ELSE
        SELECT m.prediction::text, m.stddev INTO prediction, stddev FROM tributary.knn_mean(labels::float8[], weights) m;
    END IF;
END $$;

DROP FUNCTION tributary_evaluate(regclass, name, name, name, integer, double precision, text, integer);

CREATE FUNCTION tributary_evaluate(
    tbl regclass, label name, embedding name, group_by name DEFAULT NULL, k integer DEFAULT 10,
    test_fraction float8 DEFAULT 0.2, kind text DEFAULT 'auto', seed integer DEFAULT 0,
    split_column name DEFAULT NULL, split_at text DEFAULT NULL)
RETURNS TABLE (metric text, model float8, baseline float8, test_rows bigint, train_rows bigint, split text)
LANGUAGE plpgsql STABLE SET jit = off AS $$
DECLARE
    label_kind text;
    vec text := tributary._vector_schema();   -- pgvector's functions and operators
    group_expr text;
    held_out text;
    base text;
    n_test bigint;
    n_train bigint;
    n_groups bigint;
    n_null bigint;
    lowest text;
    highest text;
    split_type text;
    split_value text;    -- split_at cast to split_column's type, as an SQL expression
    split_text text;     -- that value, as text
    split_desc text;     -- the result's column split
    groups text;
BEGIN
    IF tbl IS NULL OR label IS NULL OR embedding IS NULL OR k IS NULL OR test_fraction IS NULL OR kind IS NULL
       OR seed IS NULL THEN
        RAISE EXCEPTION '% must not be NULL',
            CASE WHEN tbl IS NULL THEN 'tbl' WHEN label IS NULL THEN 'label' WHEN embedding IS NULL THEN 'embedding'
                 WHEN k IS NULL THEN 'k' WHEN test_fraction IS NULL THEN 'test_fraction' WHEN kind IS NULL THEN 'kind'
                 ELSE 'seed' END
            USING ERRCODE = '22004';
    END IF;
    IF k < 1 OR k > 1000 THEN
        RAISE EXCEPTION 'k must be between 1 and 1000, not %', k USING ERRCODE = '22023',
            HINT = 'k is the number of neighbours; pgvector''s index scans return at most hnsw.ef_search (at most 1000) rows.';
    END IF;
    IF test_fraction <= 0 OR test_fraction >= 1 THEN
        RAISE EXCEPTION 'test_fraction must be between 0 and 1, not %', test_fraction USING ERRCODE = '22023';
    END IF;
    IF (split_column IS NULL) <> (split_at IS NULL) THEN
        RAISE EXCEPTION 'split_column and split_at go together: % is NULL',
            CASE WHEN split_column IS NULL THEN 'split_column' ELSE 'split_at' END
            USING ERRCODE = '22023',
            HINT = 'Give both for a forward split (split_column < split_at trains, >= split_at tests), '
                   'or neither for the hashed split.';
    END IF;
    label_kind := tributary.label_kind(tbl, label, kind);
    PERFORM tributary.embedding_type(tbl, embedding);
    IF group_by IS NULL THEN
        group_expr := tributary.row_key(tbl, 't') || '::text';
    ELSIF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                       WHERE a.attrelid = tbl AND a.attname = group_by AND a.attnum > 0 AND NOT a.attisdropped) THEN
        RAISE EXCEPTION 'column "%" of relation "%" does not exist', group_by, tbl USING ERRCODE = '42703';
    ELSE
        group_expr := format('t.%I::text', group_by);
    END IF;
    IF split_column IS NOT NULL THEN
        SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) INTO split_type
          FROM pg_catalog.pg_attribute a
         WHERE a.attrelid = tbl AND a.attname = split_column AND a.attnum > 0 AND NOT a.attisdropped;
        IF split_type IS NULL THEN
            RAISE EXCEPTION 'column "%" of relation "%" does not exist', split_column, tbl USING ERRCODE = '42703';
        END IF;
        -- Cast once here, so that a bad split_at fails with the cast's own error before any scan.
        EXECUTE format('SELECT CAST($1 AS %s)::text', split_type) INTO split_text USING split_at;
        split_value := format('CAST(%L AS %s)', split_at, split_type);
        -- Rows with a NULL split_column are in neither side (the filter below leaves them out).
        held_out := format('t.%I >= %s', split_column, split_value);
        EXECUTE format(
            'SELECT count(*) FILTER (WHERE t.%1$I >= %2$s), count(*) FILTER (WHERE t.%1$I < %2$s),
                    count(*) FILTER (WHERE t.%1$I IS NULL), min(t.%1$I)::text, max(t.%1$I)::text
               FROM %3$s AS t WHERE t.%4$I IS NOT NULL AND t.%5$I IS NOT NULL',
            split_column, split_value, tbl, label, embedding)
          INTO n_test, n_train, n_null, lowest, highest;
        split_desc := format('forward: %1$s < %2$s trains, %1$s >= %2$s tests', quote_ident(split_column), split_text);
        IF n_test + n_train + n_null = 0 THEN
            RAISE EXCEPTION 'no rows to evaluate on: relation "%" has no row with both "%" and "%"', tbl, label, embedding
                USING ERRCODE = '22023',
                DETAIL = format('0 rows of %s visible to the current user have %I IS NOT NULL AND %I IS NOT NULL.',
                                tbl, label, embedding),
                HINT = 'Fill the label column for some rows and their embeddings (tributary_embed_column); '
                       'row-level security and column privileges apply.';
        END IF;
        IF n_test = 0 OR n_train = 0 THEN
            RAISE EXCEPTION 'the split leaves no % rows', CASE WHEN n_test = 0 THEN 'test' ELSE 'training' END
                USING ERRCODE = '22023',
                DETAIL = format('Of the %s labelled, embedded rows, %s have %I >= %s (test), %s have %I < %s (training) '
                                'and %s have %I NULL (left out); %I runs from %s to %s.',
                                n_test + n_train + n_null, n_test, split_column, split_text, n_train, split_column,
                                split_text, n_null, split_column, split_column,
                                coalesce(lowest, 'NULL'), coalesce(highest, 'NULL')),
                HINT = format('Choose a split_at above the smallest and at most the largest value of %I; '
                              'rows with a NULL %I are in neither side.', split_column, split_column);
        END IF;
        IF n_null > 0 THEN
            RAISE NOTICE 'tributary_evaluate: % labelled, embedded row% with NULL % left out of both sides',
                n_null, CASE WHEN n_null = 1 THEN '' ELSE 's' END, quote_ident(split_column);
        END IF;
    ELSE
    -- The split: a row is held out when the seeded hash of its group falls below test_fraction.
    held_out := format('(hashtext(coalesce(%s, '''') || ''/'' || %s) & 2147483647) %% 1000000 < %s * 1000000',
                       group_expr, seed, test_fraction);
    split_desc := format('hash: test_fraction %s, seed %s, by %s', test_fraction, seed,
                         CASE WHEN group_by IS NOT NULL THEN quote_ident(group_by)
                              WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = tbl AND i.indisprimary)
                              THEN 'primary key' ELSE 'ctid' END);
    -- Both sides must have rows; counted without reading the embeddings (IS NOT NULL does not
    -- detoast). A STABLE function's queries share the caller's snapshot, so the counts hold below.
    EXECUTE format(
        'SELECT count(*) FILTER (WHERE s.h), count(*) FILTER (WHERE NOT s.h), count(DISTINCT s.g)
           FROM (SELECT %s AS h, coalesce(%s, '''') AS g FROM %s AS t WHERE t.%I IS NOT NULL AND t.%I IS NOT NULL) s',
        held_out, group_expr, tbl, label, embedding)
      INTO n_test, n_train, n_groups;
    IF n_test = 0 OR n_train = 0 THEN
        groups := format('rows are split by %s, into %s group%s', coalesce(quote_ident(group_by), 'primary key'),
                         n_groups, CASE WHEN n_groups = 1 THEN '' ELSE 's' END);
        IF n_train + n_test = 0 THEN
            RAISE EXCEPTION 'no rows to evaluate on: relation "%" has no row with both "%" and "%"', tbl, label, embedding
                USING ERRCODE = '22023',
                DETAIL = format('0 rows of %s visible to the current user have %I IS NOT NULL AND %I IS NOT NULL.',
                                tbl, label, embedding),
                HINT = 'Fill the label column for some rows and their embeddings (tributary_embed_column); '
                       'row-level security and column privileges apply.';
        END IF;
        RAISE EXCEPTION 'the split leaves no % rows', CASE WHEN n_test = 0 THEN 'test' ELSE 'training' END
            USING ERRCODE = '22023',
            DETAIL = format('With test_fraction %s and seed %s, %s of the %s labelled, embedded rows are held out '
                            'for testing and %s kept for training; %s.',
                            test_fraction, seed, n_test, n_test + n_train, n_train, groups),
            HINT = CASE WHEN n_test = 0 THEN 'Raise test_fraction or try another seed; '
                        ELSE 'Lower test_fraction or try another seed; ' END
                   || 'both sides need at least one group, so a table (or group_by) with few groups needs more rows or groups.';
    END IF;
    END IF;
    -- labelled rows, split, each embedding detoasted once (subvector copies it in line, so the
    -- CTE's tuplestore holds the vector, not a TOAST pointer fetched again for every test row);
    -- every held-out row with its k nearest training rows' labels.
    base := format(
        'WITH labelled AS MATERIALIZED (
             SELECT t.%I::text AS l, %s.subvector(t.%I, 1, %s.vector_dims(t.%I)) AS e, %s AS held_out
               FROM %s AS t WHERE t.%I IS NOT NULL AND t.%I IS NOT NULL%s),
         train AS MATERIALIZED (SELECT l, e FROM labelled WHERE NOT held_out),
         test AS (SELECT l, e FROM labelled WHERE held_out),
         near AS (
             SELECT s.l AS truth, n.labels, n.weights
               FROM test s CROSS JOIN LATERAL (
                    SELECT array_agg(x.l) AS labels, array_agg(greatest(1 - x.d, 1e-6)) AS weights
                      FROM (SELECT r.l, r.e OPERATOR(%s.<=>) s.e AS d FROM train r ORDER BY 2 LIMIT %s) x) n),
         counts AS (SELECT (SELECT count(*) FROM test) AS test_rows, (SELECT count(*) FROM train) AS train_rows)',
        label, vec, embedding, vec, embedding, held_out, tbl, label, embedding,
        CASE WHEN split_column IS NOT NULL THEN format(' AND t.%I IS NOT NULL', split_column) ELSE '' END, vec, k);
    IF label_kind = 'category' THEN
        RETURN QUERY EXECUTE base || ',
         majority AS (SELECT l FROM train GROUP BY l ORDER BY count(*) DESC, l LIMIT 1),
         pred AS (SELECT near.truth, (tributary.knn_vote(near.labels, near.weights)).prediction AS model,
                         (SELECT l FROM majority) AS baseline FROM near),
         classes AS (SELECT truth AS c FROM pred UNION SELECT model FROM pred UNION SELECT baseline FROM pred),
         f1 AS (SELECT c.c,
                       2.0 * count(*) FILTER (WHERE p.truth = c.c AND p.model = c.c)
                         / nullif(count(*) FILTER (WHERE p.truth = c.c) + count(*) FILTER (WHERE p.model = c.c), 0) AS model,
                       2.0 * count(*) FILTER (WHERE p.truth = c.c AND p.baseline = c.c)
                         / nullif(count(*) FILTER (WHERE p.truth = c.c) + count(*) FILTER (WHERE p.baseline = c.c), 0) AS baseline,
                       bool_or(p.truth = c.c OR p.model = c.c) AS in_model,
                       bool_or(p.truth = c.c OR p.baseline = c.c) AS in_baseline
                  FROM classes c CROSS JOIN pred p WHERE c.c IS NOT NULL GROUP BY c.c)
         SELECT ''accuracy'', avg((p.model IS NOT DISTINCT FROM p.truth)::int)::float8,
                avg((p.baseline IS NOT DISTINCT FROM p.truth)::int)::float8, c.test_rows, c.train_rows, $1
           FROM pred p, counts c GROUP BY c.test_rows, c.train_rows
         UNION ALL
         SELECT ''macro_f1'', (SELECT avg(coalesce(f.model, 0)) FILTER (WHERE f.in_model) FROM f1 f)::float8,
                (SELECT avg(coalesce(f.baseline, 0)) FILTER (WHERE f.in_baseline) FROM f1 f)::float8, c.test_rows, c.train_rows, $1
           FROM counts c' USING split_desc;
    ELSE
        RETURN QUERY EXECUTE base || ',
         mean AS (SELECT avg(l::float8) AS m FROM train)
         SELECT ''mae'', avg(abs((tributary.knn_mean(near.labels::float8[], near.weights)).prediction - near.truth::float8)),
                avg(abs((SELECT m FROM mean) - near.truth::float8)), c.test_rows, c.train_rows, $1
           FROM near, counts c GROUP BY c.test_rows, c.train_rows' USING split_desc;
    END IF;
END $$;

CREATE FUNCTION tributary_predict_column(
    tbl regclass, label name, embedding name, target name, k integer DEFAULT 10, kind text DEFAULT 'auto',
    batch_size integer DEFAULT 1000)
RETURNS bigint LANGUAGE plpgsql VOLATILE
SET jit = off SET hnsw.iterative_scan = relaxed_order SET ivfflat.iterative_scan = relaxed_order AS $$
DECLARE
    label_kind text;
    emb_type text;
    vec text := tributary._vector_schema();   -- pgvector's operators, whatever the search_path
    target_type text;
    key_expr text;       -- jsonb key of a row aliased t
    match_s text;        -- the row s of the batch entry b.key
    match_t text;        -- the updated row t of the prediction p.key
    nearest text;        -- the k nearest labelled rows r of s, as labels and weights
    near_index text;     -- nearest by the index's order
    near_exact text;     -- nearest by the exact search, only where a.n < $3
    more boolean;
    setting text;
    vote text;
    update_sql text;
    total bigint;
    available integer;
    done bigint := 0;
    written bigint;
    keys jsonb[] := '{}';
    key jsonb;
    cur refcursor;
    interval_ms bigint;
    started timestamptz := clock_timestamp();
    last_report timestamptz := clock_timestamp();
BEGIN
    IF tbl IS NULL OR label IS NULL OR embedding IS NULL OR target IS NULL OR k IS NULL OR kind IS NULL
       OR batch_size IS NULL THEN
        RAISE EXCEPTION '% must not be NULL',
            CASE WHEN tbl IS NULL THEN 'tbl' WHEN label IS NULL THEN 'label' WHEN embedding IS NULL THEN 'embedding'
                 WHEN target IS NULL THEN 'target' WHEN k IS NULL THEN 'k' WHEN kind IS NULL THEN 'kind'
                 ELSE 'batch_size' END
            USING ERRCODE = '22004';
    END IF;
    IF k < 1 OR k > 1000 THEN
        RAISE EXCEPTION 'k must be between 1 and 1000, not %', k USING ERRCODE = '22023',
            HINT = 'k is the number of neighbours; pgvector''s index scans return at most hnsw.ef_search (at most 1000) rows.';
    END IF;
    IF batch_size < 1 THEN
        RAISE EXCEPTION 'batch_size must be at least 1, not %', batch_size USING ERRCODE = '22023';
    END IF;
    IF target = label THEN
        RAISE EXCEPTION 'target must not be the label column "%"', label USING ERRCODE = '22023',
            HINT = 'Predictions written into the label column would count as labels; write them to another column.';
    END IF;
    label_kind := tributary.label_kind(tbl, label, kind);
    emb_type := tributary.embedding_type(tbl, embedding);
    SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) INTO target_type
      FROM pg_catalog.pg_attribute a
     WHERE a.attrelid = tbl AND a.attname = target AND a.attnum > 0 AND NOT a.attisdropped;
    IF target_type IS NULL THEN
        RAISE EXCEPTION 'column "%" of relation "%" does not exist', target, tbl USING ERRCODE = '42703';
    END IF;
    -- Keys: the primary key's columns, compared as their own types; else (tableoid, ctid).
    SELECT 'jsonb_build_object(' || string_agg(format('%L, t.%I', a.attname, a.attname), ', ' ORDER BY k.ord) || ')',
           string_agg(format('s.%I = (b.key ->> %L)::%s', a.attname, a.attname,
                             pg_catalog.format_type(a.atttypid, a.atttypmod)), ' AND ' ORDER BY k.ord),
           string_agg(format('t.%I = (p.key ->> %L)::%s', a.attname, a.attname,
                             pg_catalog.format_type(a.atttypid, a.atttypmod)), ' AND ' ORDER BY k.ord)
      INTO key_expr, match_s, match_t
      FROM pg_catalog.pg_index i
     CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
      JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
     WHERE i.indrelid = tbl AND i.indisprimary;
    IF key_expr IS NULL THEN
        key_expr := 'jsonb_build_object(''tableoid'', t.tableoid, ''ctid'', t.ctid::text)';
        match_s := 's.tableoid = (b.key ->> ''tableoid'')::pg_catalog.oid AND s.ctid = (b.key ->> ''ctid'')::pg_catalog.tid';
        match_t := 't.tableoid = (p.key ->> ''tableoid'')::pg_catalog.oid AND t.ctid = (p.key ->> ''ctid'')::pg_catalog.tid';
    END IF;
    -- The rows to predict, and how many neighbours each must get: min(k, labelled rows).
    EXECUTE format('SELECT count(*) FROM %s AS t WHERE t.%I IS NULL AND t.%I IS NOT NULL', tbl, label, embedding)
      INTO total;
    IF total = 0 THEN
        RETURN 0;
    END IF;
    EXECUTE format('SELECT count(*) FROM (SELECT FROM %s AS t WHERE t.%I IS NOT NULL AND t.%I IS NOT NULL LIMIT $1) c',
                   tbl, label, embedding)
      INTO available USING k;
    IF available = 0 THEN
        RAISE EXCEPTION 'no rows to predict from: relation "%" has no row with both "%" and "%"', tbl, label, embedding
            USING ERRCODE = '22023',
            DETAIL = format('0 rows of %s visible to the current user have %I IS NOT NULL AND %I IS NOT NULL; '
                            '%s rows wait for a prediction.', tbl, label, embedding, total),
            HINT = 'Fill the label column for some rows and their embeddings (tributary_embed_column); '
                   'row-level security and column privileges apply to the neighbours.';
    END IF;
    -- As tributary_predict: the index's order first, then, for a row that got fewer than
    -- `available` neighbours, the exact search (the gate a.n < $3 skips it for the others).
    nearest :=
        '(SELECT array_agg(n.l ORDER BY n.d) AS labels, array_agg(greatest(1 - n.d, 1e-6) ORDER BY n.d) AS weights,
                 count(*) AS n
            FROM (SELECT r.%1$I::text AS l, r.%2$I OPERATOR(%3$s.<=>) s.%2$I AS d
                    FROM %4$s AS r
                   WHERE r.%1$I IS NOT NULL AND r.%2$I IS NOT NULL%5$s
                   ORDER BY (r.%2$I OPERATOR(%3$s.<=>) s.%2$I)%6$s
                   LIMIT $2) n)';
    near_index := format(nearest, label, embedding, vec, tbl, '', '');
    near_exact := format(nearest, label, embedding, vec, tbl, ' AND a.n < $3',
                         ' OPERATOR(pg_catalog.+) 0::pg_catalog.float8');
    vote := CASE WHEN label_kind = 'category' THEN '(tributary.knn_vote(%1$s.labels, %1$s.weights)).prediction'
                 ELSE '(tributary.knn_mean(%1$s.labels::float8[], %1$s.weights)).prediction::text' END;
    update_sql := format(
        'UPDATE %s AS t SET %I = CAST(p.prediction AS %s)
           FROM (SELECT b.key, CASE WHEN a.n < $3 THEN %s ELSE %s END AS prediction
                   FROM unnest($1::jsonb[]) AS b(key)
                   JOIN %s AS s ON %s
                  CROSS JOIN LATERAL %s AS a
                  CROSS JOIN LATERAL %s AS e) p
          WHERE %s',
        tbl, target, target_type, format(vote, 'e'), format(vote, 'a'), tbl, match_s,
        near_index, near_exact, match_t);
    -- tributary.progress_interval: ms, shown with a unit ('10s') once tributary's library has
    -- defined it, as typed (a placeholder) before; unset: its default, 10 s.
    setting := coalesce(nullif(current_setting('tributary.progress_interval', true), ''), '10000');
    interval_ms := CASE WHEN setting ~ '^\s*\d+\s*$' THEN setting::bigint
                        ELSE (extract(epoch FROM setting::interval) * 1000)::bigint END;
    OPEN cur NO SCROLL FOR EXECUTE
        format('SELECT %s FROM %s AS t WHERE t.%I IS NULL AND t.%I IS NOT NULL', key_expr, tbl, label, embedding);
    LOOP
        FETCH cur INTO key;
        more := FOUND;
        IF more THEN
            keys := keys || key;
        END IF;
        IF cardinality(keys) >= batch_size OR (NOT more AND cardinality(keys) > 0) THEN
            EXECUTE update_sql USING keys, k, available;
            GET DIAGNOSTICS written = ROW_COUNT;
            done := done + written;
            keys := '{}';
            IF interval_ms > 0 AND clock_timestamp() - last_report >= interval_ms * interval '1 ms' THEN
                last_report := clock_timestamp();
                RAISE NOTICE 'tributary_predict_column: % of % rows predicted (% rows/s)', done, total,
                    round(done / greatest(extract(epoch FROM clock_timestamp() - started), 1e-9));
            END IF;
        END IF;
        EXIT WHEN NOT more;
    END LOOP;
    CLOSE cur;
    RETURN done;
END $$;

-- Matching rows.

CREATE  FUNCTION "_logistic_fit"(
	"x" double precision[], /* Vec < Option < f64 > > */
	"y" bool[], /* Vec < Option < bool > > */
	"alpha" double precision /* f64 */
) RETURNS double precision[] /* Vec < f64 > */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_logistic_fit_wrapper';

CREATE  FUNCTION "_match_threshold"(
	"scores" double precision[], /* Vec < Option < f64 > > */
	"method" TEXT /* & str */
) RETURNS double precision /* Option < f64 > */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_match_threshold_wrapper';

CREATE  FUNCTION "_string_similarity"(
	"a" TEXT, /* & str */
	"b" TEXT /* & str */
) RETURNS double precision /* Option < f64 > */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_string_similarity_wrapper';

ALTER FUNCTION _string_similarity(text, text) SET SCHEMA tributary;

ALTER FUNCTION _match_threshold(double precision[], text) SET SCHEMA tributary;

ALTER FUNCTION _logistic_fit(double precision[], boolean[], double precision) SET SCHEMA tributary;

CREATE FUNCTION tributary._match_key(tbl regclass, alias text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    cols text[] := tributary._key_columns(tbl);
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

CREATE FUNCTION tributary._match_values(tbl regclass, cols text[], alias text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    c text;
    parts text[] := '{}';
BEGIN
    FOREACH c IN ARRAY cols LOOP
        IF c IS NULL THEN
            RAISE EXCEPTION 'an element of columns must not be NULL' USING ERRCODE = '22004';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                        WHERE a.attrelid = tbl AND a.attname = c AND a.attnum > 0 AND NOT a.attisdropped) THEN
            RAISE EXCEPTION 'column "%" of relation "%" does not exist', c, tbl USING ERRCODE = '42703';
        END IF;
        parts := parts || format('nullif(btrim(left(%I.%I::text, 2048)), %L)', alias, c, '');
    END LOOP;
    RETURN 'ARRAY[' || array_to_string(parts, ', ') || ']::text[]';
END $$;

CREATE FUNCTION tributary_match(
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
                                      WHERE z.e IS NOT NULL AND z.key <> x.key
                                      ORDER BY z.e OPERATOR(%s.<=>) x.e LIMIT %s) y
                WHERE x.e IS NOT NULL) p ON CONFLICT DO NOTHING';
    EXECUTE 'INSERT INTO pg_temp.tributary_match_c ' || format(near, pair_order, 'l', 'r', vec, k);
    IF NOT self THEN
        EXECUTE 'INSERT INTO pg_temp.tributary_match_c ' || format(near, 'b, a', 'r', 'l', vec, k);
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
                                     WHERE lv.x IN (SELECT x FROM rare) AND lv.key <> rv.key) p
             ON CONFLICT DO NOTHING', pair_order)
          USING i, k;
    END LOOP;
    PERFORM set_config('hnsw.ef_search', coalesce(old_ef, '40'), true);
    PERFORM set_config('hnsw.iterative_scan', coalesce(old_iter, 'off'), true);
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
                AND s.a <> s.b
              GROUP BY 1, 2
             ON CONFLICT DO NOTHING', pair_order, labels);
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

CREATE FUNCTION tributary._match_score() RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    INSERT INTO pg_temp.tributary_match_s
    SELECT f.lk, f.rk, f.kind, sum(w.w * f.es) / nullif(sum(w.w) FILTER (WHERE f.es IS NOT NULL), 0)
      FROM pg_temp.tributary_match_f f
      JOIN (SELECT x.i, CASE WHEN x.m > x.u THEN x.m * ln(x.m / x.u) ELSE 0 END AS w FROM pg_temp.tributary_match_w x) w ON w.i = f.i
     WHERE f.kind = 'c'
     GROUP BY f.lk, f.rk, f.kind;
END $$;

CREATE FUNCTION tributary._match_auto_threshold(self boolean) RETURNS float8
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    cut float8;
    cap float8;
BEGIN
    WITH ranked AS (
        SELECT e.score, row_number() OVER (PARTITION BY e.side, e.key ORDER BY e.score DESC, e.other) AS rnk
          FROM (SELECT 'l' AS side, s.lk AS key, s.rk AS other, s.score FROM pg_temp.tributary_match_s s
                UNION ALL
                SELECT CASE WHEN self THEN 'l' ELSE 'r' END, s.rk, s.lk, s.score FROM pg_temp.tributary_match_s s) e
         WHERE e.score IS NOT NULL)
    SELECT tributary._match_threshold(array_agg(r.score) FILTER (WHERE r.rnk <= 2), 'minimum_error'),
           percentile_cont(0.99) WITHIN GROUP (ORDER BY r.score) FILTER (WHERE r.rnk = 2)
      INTO cut, cap
      FROM ranked r;
    RETURN least(cut, cap);
END $$;

CREATE FUNCTION tributary._match_accepted(self boolean, thr float8, one_to_one boolean)
RETURNS TABLE (lk text, rk text, score float8)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH ends AS (SELECT s.lk AS node, s.rk AS other, s.lk, s.rk, s.score FROM pg_temp.tributary_match_s s
                  UNION ALL
                  SELECT s.rk, s.lk, s.lk, s.rk, s.score FROM pg_temp.tributary_match_s s),
         ranked AS (SELECT e.lk, e.rk, e.score,
                           row_number() OVER (PARTITION BY CASE WHEN self THEN true ELSE e.node = e.lk END, e.node
                                              ORDER BY e.score DESC, e.other) AS rnk
                      FROM ends e WHERE e.score IS NOT NULL)
    SELECT r.lk, r.rk, min(r.score)
      FROM ranked r
     WHERE r.score >= thr
     GROUP BY r.lk, r.rk
    HAVING NOT one_to_one OR max(r.rnk) = 1;
END $$;

CREATE FUNCTION tributary._match_drop(prefix text DEFAULT 'tributary_match_') RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    r regclass;
BEGIN
    FOR r IN SELECT c.oid FROM pg_catalog.pg_class c
              WHERE c.relnamespace = pg_catalog.pg_my_temp_schema() AND c.relkind IN ('r', 'v')
                AND c.relname IN (SELECT prefix || x FROM unnest(ARRAY['l', 'r', 'v', 'c', 'f', 's', 'w', 'e', 'n']) x)
              ORDER BY c.relkind DESC  -- the view over tributary_match_l first
    LOOP
        EXECUTE CASE WHEN (SELECT relkind FROM pg_catalog.pg_class WHERE oid = r) = 'v' THEN 'DROP VIEW ' ELSE 'DROP TABLE ' END || r;
    END LOOP;
END $$;

CREATE FUNCTION tributary._match_check_labels(labels regclass) RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    c text;
BEGIN
    FOREACH c IN ARRAY ARRAY['left_key', 'right_key', 'is_match'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                        WHERE a.attrelid = labels AND a.attname = c AND a.attnum > 0 AND NOT a.attisdropped) THEN
            RAISE EXCEPTION 'column "%" of relation "%" does not exist', c, labels USING ERRCODE = '42703',
                HINT = 'labels needs columns left_key text, right_key text, is_match bool.';
        END IF;
    END LOOP;
END $$;

CREATE FUNCTION tributary_dedup(
    tbl regclass, columns text[], k integer DEFAULT 10, threshold float8 DEFAULT NULL,
    labels regclass DEFAULT NULL, model text DEFAULT NULL)
RETURNS TABLE (cluster bigint, key text)
LANGUAGE plpgsql VOLATILE SET jit = off AS $$
#variable_conflict use_column
DECLARE
    changed bigint;
BEGIN
    IF tbl IS NULL THEN
        RAISE EXCEPTION 'tbl must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM tributary._match_drop('tributary_dedup_');
    CREATE TEMP TABLE tributary_dedup_e ON COMMIT DROP AS
    SELECT m.left_key AS a, m.right_key AS b
      FROM tributary_match(tbl, tbl, columns, k => k, threshold => threshold, one_to_one => false,
                           labels => labels, model => model) m;
    -- Connected components by label propagation: every node takes the smallest label among its
    -- neighbours until nothing changes (at most the longest path's length rounds).
    CREATE TEMP TABLE tributary_dedup_n ON COMMIT DROP AS
    SELECT x.k AS node, x.k AS comp FROM (SELECT a AS k FROM pg_temp.tributary_dedup_e UNION SELECT b FROM pg_temp.tributary_dedup_e) x;
    CREATE UNIQUE INDEX ON pg_temp.tributary_dedup_n (node);
    LOOP
        WITH m AS (SELECT e.a AS node, min(n.comp) AS comp FROM pg_temp.tributary_dedup_e e JOIN pg_temp.tributary_dedup_n n ON n.node = e.b GROUP BY e.a
                   UNION ALL
                   SELECT e.b, min(n.comp) FROM pg_temp.tributary_dedup_e e JOIN pg_temp.tributary_dedup_n n ON n.node = e.a GROUP BY e.b)
        UPDATE pg_temp.tributary_dedup_n n SET comp = m2.comp
          FROM (SELECT m.node, min(m.comp) AS comp FROM m GROUP BY m.node) m2
         WHERE n.node = m2.node AND m2.comp < n.comp;
        GET DIAGNOSTICS changed = ROW_COUNT;
        EXIT WHEN changed = 0;
    END LOOP;
    RETURN QUERY
    SELECT dense_rank() OVER (ORDER BY n.comp), n.node FROM pg_temp.tributary_dedup_n n ORDER BY n.comp, n.node;
    PERFORM tributary._match_drop('tributary_dedup_');
END $$;

-- Comments of the new and changed functions.

COMMENT ON FUNCTION tributary_embed_column(regclass, text[], name, text, integer, text[], integer, integer, text[], timestamp with time zone, text, integer) IS 'Fills the target vector/halfvec column for every row where it is NULL (columns, or ''{*}'' for whole rows), batch_size rows at a time, in the caller''s transaction; returns the rows written. Ordinary, partitioned and inheritance tables; 42809 for anything else. Records the model and prompt for the column (22023 if another filled it); counts truncated texts (tributary.truncation).';

COMMENT ON FUNCTION tributary_row_template_version() IS 'The row template version tributary_row_text(), tributary_embed(record), tributary_embed_column(..., ''{*}'') and new whole-row jobs use by default (2; 1 stays selectable).';

COMMENT ON FUNCTION tributary_evaluate(regclass, name, name, name, integer, double precision, text, integer, name, text) IS 'Held-out evaluation of tributary_predict on a table: accuracy and macro-F1 (categories) or MAE (numbers) next to the majority-class or mean baseline, split by a seeded hash of group_by or forward in time (split_column < split_at trains); the split used in the last column.';

COMMENT ON FUNCTION tributary_predict_column(regclass, name, name, name, integer, text, integer) IS 'Fills column target of the unlabelled, embedded rows of tbl with tributary_predict''s prediction from their k nearest labelled rows, in batches; returns the rows updated.';

COMMENT ON FUNCTION tributary_match(regclass, regclass, text[], text[], integer, double precision, boolean, regclass, text) IS 'The pairs of rows of two tables (or of one table with itself) that are the same thing: candidates from nearest neighbours, evidence per column, a threshold read off the data or learned from labels; returns the accepted pairs only.';

COMMENT ON FUNCTION tributary_dedup(regclass, text[], integer, double precision, regclass, text) IS 'Groups of duplicate rows of a table: the connected components of the pairs tributary_match accepts within it.';

COMMENT ON FUNCTION tributary._match_key(regclass, text) IS 'Internal (tributary_match): the text expression of a table''s primary key.';

COMMENT ON FUNCTION tributary._match_values(regclass, text[], text) IS 'Internal (tributary_match): the matched columns of a table as a text[] expression.';

COMMENT ON FUNCTION tributary._match_check_labels(regclass) IS 'Internal (tributary_match): checks that a labels table has left_key, right_key and is_match.';

COMMENT ON FUNCTION tributary._match_score() IS 'Internal (tributary_match): scores candidate pairs without labels, the weighted mean of the columns'' evidence.';

COMMENT ON FUNCTION tributary._match_auto_threshold(boolean) IS 'Internal (tributary_match): the minimum-error cut of every row''s best and second-best candidate scores.';

COMMENT ON FUNCTION tributary._match_accepted(boolean, double precision, boolean) IS 'Internal (tributary_match): the candidate pairs at or above a threshold, mutual best ones only when one to one.';

COMMENT ON FUNCTION tributary._match_drop(text) IS 'Internal (tributary_match, tributary_dedup): drops their temporary tables.';

COMMENT ON FUNCTION tributary._string_similarity(text, text) IS 'Internal (tributary_match): similarity of two short values in [0, 1] (normalised Damerau-Levenshtein); NULL when either has no letter or digit.';

COMMENT ON FUNCTION tributary._match_threshold(double precision[], text) IS 'Internal (tributary_match): a threshold between low and high scores without labels (minimum-error or Otsu).';

COMMENT ON FUNCTION tributary._logistic_fit(double precision[], boolean[], double precision) IS 'Internal (tributary_match): logistic regression weights [intercept, w...] learned from labelled feature rows.';

COMMENT ON FUNCTION tributary_job_create(regclass, text[], name, text, text, text, integer, integer, text, text[], integer, integer, text[], text, integer) IS 'prompt: the model''s prompt to embed with; template: whole rows'' row template version, kept for the job''s life. Creates a job: background workers embed every row of a table (once), or keep embedding new and changed rows (continuous), batch by batch, each batch its own transaction. Table owner only. Needs tributary in shared_preload_libraries.';
