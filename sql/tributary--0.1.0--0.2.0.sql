-- tributary 0.1.0 -> 0.2.0 (ALTER EXTENSION tributary UPDATE). Written from the 0.2.0 sources:
-- every function whose definition changed is replaced by its 0.2.0 text (sql/*.sql), new objects
-- are created as the 0.2.0 install creates them. tests/integration/test_upgrade.py checks that
-- an updated extension equals a fresh 0.2.0 install object by object (definitions, owners,
-- privileges, comments, dumped configuration) and that a running job goes on.
\echo Use "ALTER EXTENSION tributary UPDATE TO '0.2.0'" to load this file. \quit

-- Dump and restore: the jobs are dumped with the database (README, Dump and restore).
SELECT pg_catalog.pg_extension_config_dump('tributary._jobs', '');
SELECT pg_catalog.pg_extension_config_dump('tributary._jobs_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('tributary._job_errors', '');

-- What can serve a job now (src/worker/mod.rs), for the jobs view's state and waiting_for.
CREATE FUNCTION tributary._job_service() RETURNS TABLE (
	"workers_in_database" INT,
	"waiting_for" TEXT
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c
AS 'MODULE_PATHNAME', '_job_service_wrapper';

-- pgvector's schema, quoted, for OPERATOR(schema.<=>) and schema.subvector(...) in dynamic SQL
-- that must not depend on the caller's search_path (tributary_predict, tributary_evaluate).
CREATE OR REPLACE FUNCTION tributary._vector_schema() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT quote_ident(n.nspname) FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'vector'
$$;

-- tributary_predict(tbl, label, embedding, query [, k, kind]): predicts column `label` for an
-- embedding `query` ([dim] f32, e.g. a row's own embedding or tributary_embed(row)) from the `k`
-- rows of `tbl` nearest to it by `embedding` (cosine distance) whose `label` is not NULL.
-- Categories: weighted vote, `confidence` = the winner's share of the weights (0..1).
-- Numbers: weighted mean (as text in `prediction`) and `stddev` around it.
-- `evidence`: the neighbours, nearest first: [{key, label, distance, weight}], key = primary key
-- columns (or ctid). An HNSW index on `embedding` is used when there is one.
-- NULL query gives a row of NULLs (checked after the other arguments). Runs with jit = off (see
-- the top of this file). Errors: 22004 NULL tbl, label, embedding, k or kind; 22023 k outside
-- 1..1000 or bad kind, or no row of `tbl` (visible to the caller) has both `label` and
-- `embedding` (DETAIL: the table and columns; nothing to predict from); 42703 unknown column;
-- 42804 embedding column not vector/halfvec.
CREATE OR REPLACE FUNCTION tributary_predict(
    tbl regclass, label name, embedding name, query vector, k integer DEFAULT 10, kind text DEFAULT 'auto',
    OUT prediction text, OUT confidence float8, OUT stddev float8, OUT neighbours integer, OUT evidence jsonb)
RETURNS record LANGUAGE plpgsql STABLE SET jit = off AS $$
DECLARE
    label_kind text;
    emb_type text;
    vec text := tributary._vector_schema();   -- pgvector's operators, whatever the search_path
    labels text[];
    weights float8[];
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
    EXECUTE format(
        'SELECT array_agg(n.l ORDER BY n.d), array_agg(greatest(1 - n.d, 1e-6) ORDER BY n.d),
                jsonb_agg(jsonb_build_object(''key'', n.key, ''label'', n.l, ''distance'', n.d,
                                             ''weight'', greatest(1 - n.d, 1e-6)) ORDER BY n.d)
           FROM (SELECT %s AS key, t.%I::text AS l, t.%I OPERATOR(%s.<=>) $1::%s AS d
                   FROM %s AS t
                  WHERE t.%I IS NOT NULL AND t.%I IS NOT NULL
                  ORDER BY t.%I OPERATOR(%s.<=>) $1::%s
                  LIMIT $2) n',
        tributary.row_key(tbl, 't'), label, embedding, vec, tributary._vector_type(emb_type), tbl, label, embedding,
        embedding, vec, tributary._vector_type(emb_type))
      INTO labels, weights, evidence
      USING query, k;
    neighbours := coalesce(cardinality(labels), 0);
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

-- tributary_evaluate(tbl, label, embedding [, group_by, k, test_fraction, kind, seed]): holds out
-- about `test_fraction` of the labelled, embedded rows, predicts each held-out row's `label` from
-- its `k` nearest rows among the others (exact search, so the result does not depend on index
-- recall: O(test rows x training rows) distances), and reports, next to the baseline:
-- categories: accuracy and macro-F1 (mean of per-class F1 over classes in truth or prediction)
-- against always predicting the training set's majority class; numbers: mean absolute error
-- against predicting the training mean. Rows are split by `group_by` (a column: every group is
-- wholly in or out, so near-duplicates never cross; default the primary key), with a seeded hash:
-- the same seed gives the same split. NULL group_by is the default (the primary key); every other
-- argument must not be NULL, seed included (an explicit NULL seed is an error, not seed 0: leave
-- the argument out for the default). Each embedding is read (detoasted) once; runs with
-- jit = off (see the top of this file). Errors: as tributary_predict; 22004 NULL tbl, label,
-- embedding, k, test_fraction, kind or seed; 22023 test_fraction outside (0, 1), or a split that
-- leaves no test rows or no training rows (no labelled, embedded rows at all, or too few groups
-- for test_fraction: DETAIL gives the rows, groups, test_fraction and seed; HINT what to change);
-- 42703 unknown group_by column.
CREATE OR REPLACE FUNCTION tributary_evaluate(
    tbl regclass, label name, embedding name, group_by name DEFAULT NULL, k integer DEFAULT 10,
    test_fraction float8 DEFAULT 0.2, kind text DEFAULT 'auto', seed integer DEFAULT 0)
RETURNS TABLE (metric text, model float8, baseline float8, test_rows bigint, train_rows bigint)
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
    split text;
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
    -- The split: a row is held out when the seeded hash of its group falls below test_fraction.
    held_out := format('(hashtext(coalesce(%s, '''') || ''/'' || %s) & 2147483647) %% 1000000 < %s * 1000000',
                       group_expr, seed, test_fraction);
    -- Both sides must have rows; counted without reading the embeddings (IS NOT NULL does not
    -- detoast). A STABLE function's queries share the caller's snapshot, so the counts hold below.
    EXECUTE format(
        'SELECT count(*) FILTER (WHERE s.h), count(*) FILTER (WHERE NOT s.h), count(DISTINCT s.g)
           FROM (SELECT %s AS h, coalesce(%s, '''') AS g FROM %s AS t WHERE t.%I IS NOT NULL AND t.%I IS NOT NULL) s',
        held_out, group_expr, tbl, label, embedding)
      INTO n_test, n_train, n_groups;
    IF n_test = 0 OR n_train = 0 THEN
        split := format('rows are split by %s, into %s group%s', coalesce(quote_ident(group_by), 'primary key'),
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
                            test_fraction, seed, n_test, n_test + n_train, n_train, split),
            HINT = CASE WHEN n_test = 0 THEN 'Raise test_fraction or try another seed; '
                        ELSE 'Lower test_fraction or try another seed; ' END
                   || 'both sides need at least one group, so a table (or group_by) with few groups needs more rows or groups.';
    END IF;
    -- labelled rows, split, each embedding detoasted once (subvector copies it in line, so the
    -- CTE's tuplestore holds the vector, not a TOAST pointer fetched again for every test row);
    -- every held-out row with its k nearest training rows' labels.
    base := format(
        'WITH labelled AS MATERIALIZED (
             SELECT t.%I::text AS l, %s.subvector(t.%I, 1, %s.vector_dims(t.%I)) AS e, %s AS held_out
               FROM %s AS t WHERE t.%I IS NOT NULL AND t.%I IS NOT NULL),
         train AS MATERIALIZED (SELECT l, e FROM labelled WHERE NOT held_out),
         test AS (SELECT l, e FROM labelled WHERE held_out),
         near AS (
             SELECT s.l AS truth, n.labels, n.weights
               FROM test s CROSS JOIN LATERAL (
                    SELECT array_agg(x.l) AS labels, array_agg(greatest(1 - x.d, 1e-6)) AS weights
                      FROM (SELECT r.l, r.e OPERATOR(%s.<=>) s.e AS d FROM train r ORDER BY 2 LIMIT %s) x) n),
         counts AS (SELECT (SELECT count(*) FROM test) AS test_rows, (SELECT count(*) FROM train) AS train_rows)',
        label, vec, embedding, vec, embedding, held_out, tbl, label, embedding, vec, k);
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
                avg((p.baseline IS NOT DISTINCT FROM p.truth)::int)::float8, c.test_rows, c.train_rows
           FROM pred p, counts c GROUP BY c.test_rows, c.train_rows
         UNION ALL
         SELECT ''macro_f1'', (SELECT avg(coalesce(f.model, 0)) FILTER (WHERE f.in_model) FROM f1 f)::float8,
                (SELECT avg(coalesce(f.baseline, 0)) FILTER (WHERE f.in_baseline) FROM f1 f)::float8, c.test_rows, c.train_rows
           FROM counts c';
    ELSE
        RETURN QUERY EXECUTE base || ',
         mean AS (SELECT avg(l::float8) AS m FROM train)
         SELECT ''mae'', avg(abs((tributary.knn_mean(near.labels::float8[], near.weights)).prediction - near.truth::float8)),
                avg(abs((SELECT m FROM mean) - near.truth::float8)), c.test_rows, c.train_rows
           FROM near, counts c GROUP BY c.test_rows, c.train_rows';
    END IF;
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

    INSERT INTO tributary._jobs (id, name, source, columns, target_table, target, target_type, model, batch_size,
        mode, workers, row_options, owner, queue, claim_sql, claim_keys_sql, select_sql, write_sql, requeue_sql)
    VALUES (id, coalesce(name, CASE WHEN EXISTS (SELECT 1 FROM tributary._jobs x WHERE x.owner = caller AND x.name = format('%s.%s', src, target))
                                THEN format('%s.%s (job %s)', src, target, id) ELSE format('%s.%s', src, target) END), source, columns, nullif(tgt, source), target, tgt_type,
        m.name, batch_size, mode, workers,
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
CREATE OR REPLACE FUNCTION tributary._job_tables(source regclass) RETURNS SETOF regclass
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT source
    UNION
    SELECT p.relid FROM pg_partition_tree(source) p JOIN pg_class c ON c.oid = p.relid
     WHERE c.relkind IN ('r', 'p')
$$;

-- The partition and inheritance ancestors of `source`, nearest first.
CREATE OR REPLACE FUNCTION tributary._job_ancestors(source regclass) RETURNS TABLE (rel regclass, depth integer)
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
CREATE OR REPLACE FUNCTION tributary._job_watchers(source regclass, owner oid) RETURNS SETOF regclass
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
CREATE OR REPLACE FUNCTION tributary._job_triggers(job bigint) RETURNS TABLE (rel regclass, tgname name)
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
CREATE OR REPLACE FUNCTION tributary._job_fill_sql(j tributary._jobs, rel regclass) RETURNS text
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
CREATE OR REPLACE FUNCTION tributary._job_sync_tables(j tributary._jobs, fill boolean) RETURNS void
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
CREATE OR REPLACE FUNCTION tributary._job_ddl() RETURNS event_trigger
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

-- Drops what a job added to the database: its triggers (on every table of a partitioned
-- source's tree, and on partitions detached since) and queue.
CREATE OR REPLACE FUNCTION tributary._job_cleanup(j tributary._jobs) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE r record;
BEGIN
    FOR r IN SELECT * FROM tributary._job_triggers(j.id) LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', r.tgname, r.rel);
    END LOOP;
    EXECUTE format('DROP TABLE IF EXISTS tributary.%I', '_queue_' || j.id);
END $$;


-- Continuous jobs on partitioned tables follow partitions created, attached and detached.
CREATE EVENT TRIGGER tributary_job_partitions ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE') EXECUTE FUNCTION tributary._job_ddl();

REVOKE ALL ON FUNCTION tributary._job_sync_tables(tributary._jobs, boolean),
    tributary._job_fill_sql(tributary._jobs, regclass), tributary._job_ddl() FROM PUBLIC;

-- The jobs view: 'waiting' when no worker can serve a running job, worker_pids, waiting_for.
CREATE OR REPLACE VIEW tributary.jobs WITH (security_barrier) AS
WITH wk AS (SELECT pid, job FROM tributary.workers())
SELECT j.id, j.name,
       CASE WHEN j.state = 'running' AND s.workers_in_database = 0 THEN 'waiting' ELSE j.state END AS state,
       j.mode, j.source, j.columns,
       coalesce(j.target_table, j.source) AS target_table, j.target, j.model, j.batch_size, j.workers,
       j.owner,
       j.rows_done,
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

-- Restored jobs ask for a worker when their rows are loaded.
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

-- Comments on every object (sql/comments.sql, as it stands in 0.2.0).
COMMENT ON SCHEMA tributary IS 'tributary: the model catalog, jobs, views and internal functions (the tributary_* functions live in the extension''s schema)';

-- Embedding
COMMENT ON FUNCTION tributary_embed(text, text) IS 'Embedding of one text with a model (default: tributary.model): vector or halfvec of the model''s dimension, unit L2 norm; NULL in, NULL out. Errors: 42704 unknown model, 58P01 missing files, 38000 ONNX Runtime failure.';
COMMENT ON FUNCTION tributary_embed(text[], text) IS 'Embeddings of many texts in one batched call: vector[] in the same order, NULL elements stay NULL. At most tributary.max_texts_per_call texts (54000 beyond).';
COMMENT ON FUNCTION tributary_embed(record, text, text[], text[], integer, integer, text[], timestamp with time zone, boolean, integer) IS 'Embedding of a whole row with its foreign-key context, exactly the text tributary_row_text() gives for the same options; NULL in, NULL out.';
COMMENT ON FUNCTION tributary_embed_column(regclass, text[], name, text, integer, text[], integer, integer, text[], timestamp with time zone) IS 'Fills the target vector/halfvec column for every row where it is NULL (columns, or ''{*}'' for whole rows), batch_size rows at a time, in the caller''s transaction; returns the rows written. Ordinary, partitioned and inheritance tables; 42809 for anything else.';
COMMENT ON FUNCTION tributary_row_text(record, text[], text[], integer, integer, text[], timestamp with time zone, boolean, integer, text, integer) IS 'The text a row becomes for embedding (row template version ''template''): its columns as "column: value" lines, with parents and children through foreign keys, cut to max_tokens tokens by fair shares.';
COMMENT ON FUNCTION tributary_row_template_version() IS 'The row template version tributary_row_text() uses by default (1).';
COMMENT ON FUNCTION tributary_tokenize(text, text) IS 'The token ids (integer[]) the model sees for a text: special tokens included, truncated to the model''s max length in tokens; NULL in, NULL out.';

-- Models and sessions
COMMENT ON FUNCTION tributary_info(text) IS 'The model (default: tributary.model): dimension, max length in tokens, pooling, precision, the execution provider actually in use and why, the ONNX Runtime version and library.';
COMMENT ON FUNCTION tributary_register_model(text, text, text) IS 'Registers a prepared model directory (model.onnx, tokenizer.json, tributary.json) under a name (superuser only, 42501).';
COMMENT ON FUNCTION tributary_drop_model(text) IS 'Removes a registered model from tributary.models (superuser only, 42501); its files are left alone.';
COMMENT ON FUNCTION tributary_sessions() IS 'This backend''s ONNX Runtime sessions: execution provider and why, GPU slot, graph, output type, IoBinding, runs, rows, tokens, padded tokens, ms in ONNX Runtime.';
COMMENT ON TABLE tributary.models IS 'The model catalog: name, directory, dimension, max length, pooling, precision. Readable by everyone; written by tributary_register_model() and tributary_drop_model().';
COMMENT ON VIEW tributary.sessions IS 'This backend''s ONNX Runtime sessions (tributary_sessions()).';
COMMENT ON VIEW tributary.gpu_sessions IS 'Cluster-wide: the backends that hold a GPU slot (at most tributary.max_gpu_sessions).';

-- Prediction
COMMENT ON FUNCTION tributary_predict(regclass, name, name, vector, integer, text) IS 'Predicts column label for a query embedding from the k nearest rows of tbl that have it: similarity-weighted vote (categories, with confidence) or weighted mean and stddev (numbers), with the neighbours as evidence.';
COMMENT ON FUNCTION tributary_evaluate(regclass, name, name, name, integer, double precision, text, integer) IS 'Held-out evaluation of tributary_predict on a table: accuracy and macro-F1 (categories) or MAE (numbers) next to the majority-class or mean baseline, split by a seeded hash of group_by.';
COMMENT ON FUNCTION tributary.label_kind(regclass, name, text) IS 'Internal (tributary_predict): whether a label column is a category or a number.';
COMMENT ON FUNCTION tributary.embedding_type(regclass, name) IS 'Internal (tributary_predict): the vector type of an embedding column.';
COMMENT ON FUNCTION tributary.row_key(regclass, text) IS 'Internal (tributary_predict): the jsonb key expression of a table''s rows (primary key, else ctid).';
COMMENT ON FUNCTION tributary.knn_vote(text[], double precision[]) IS 'Internal (tributary_predict): similarity-weighted vote over neighbour labels.';
COMMENT ON FUNCTION tributary.knn_mean(double precision[], double precision[]) IS 'Internal (tributary_predict): similarity-weighted mean and standard deviation of neighbour values.';
COMMENT ON FUNCTION tributary._target_column(regclass, name, text, integer, text, text) IS 'Internal: checks a target column (vector or halfvec of the model''s dimension) and returns its type; 42703, 42804, 22000.';

-- Jobs
COMMENT ON FUNCTION tributary_job_create(regclass, text[], name, text, text, text, integer, integer, text, text[], integer, integer, text[]) IS 'Creates a job: background workers embed every row of a table (once), or keep embedding new and changed rows (continuous), batch by batch, each batch its own transaction. Table owner only. Needs tributary in shared_preload_libraries.';
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
COMMENT ON FUNCTION tributary._job_ddl() IS 'Internal: the event trigger function that keeps continuous jobs'' triggers on partitions created, attached or detached.';
COMMENT ON EVENT TRIGGER tributary_job_partitions IS 'Keeps continuous jobs on partitioned tables in step with CREATE TABLE ... PARTITION OF, ATTACH PARTITION and DETACH PARTITION.';
COMMENT ON FUNCTION tributary._vector_schema() IS 'Internal: pgvector''s schema, quoted, for operators and functions in dynamic SQL whatever the search_path.';
COMMENT ON FUNCTION tributary._job_service() IS 'Internal: whether a job worker can serve this database now (workers in it, or what a job waits for), for tributary.jobs.';
COMMENT ON FUNCTION tributary._jobs_added() IS 'Internal: the trigger on tributary._jobs that asks the launcher for a worker when jobs arrive other than through tributary_job_create (pg_restore).';
