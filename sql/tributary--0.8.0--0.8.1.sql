-- tributary 0.8.0 -> 0.8.1: no other role's code runs inside tributary's calls (issue 34).
-- Every SQL function of the extension runs with search_path = pg_catalog, pg_temp and calls its
-- own and pgvector's functions by schema; the statements jobs run name their functions and
-- operators by schema (every job's statements are rebuilt below); tributary_match and
-- tributary_dedup drop only the temporary tables they made, and take k up to 1000; sharded
-- jobs' remote calls are bounded and their answers checked. The functions below are those of
-- sql/*.sql that changed, as they are there.

DROP FUNCTION tributary._match_drop(text);

-- sql/match.sql
CREATE FUNCTION tributary._embed_text("text" text, model text DEFAULT NULL, prompt text DEFAULT NULL) RETURNS vector
STABLE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp
LANGUAGE c AS 'MODULE_PATHNAME', 'tributary_embed_text_0_3_wrapper';
CREATE FUNCTION tributary._embed_column(
    tbl regclass, columns text[], target name, model text DEFAULT NULL, batch_size integer DEFAULT 1024,
    exclude text[] DEFAULT NULL, parents integer DEFAULT 0, children integer DEFAULT 0,
    time_columns text[] DEFAULT NULL, as_of timestamptz DEFAULT NULL, prompt text DEFAULT NULL,
    template integer DEFAULT 2) RETURNS bigint
VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp
LANGUAGE c AS 'MODULE_PATHNAME', 'tributary_embed_column_0_6_wrapper';


-- sql/bootstrap.sql
CREATE OR REPLACE FUNCTION tributary._target_column(
    rel regclass, col name, model text DEFAULT NULL, dim integer DEFAULT NULL, relname text DEFAULT NULL,
    hint text DEFAULT 'The target column must be of pgvector''s type vector(n) or halfvec(n).')
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    typ text;
    typmod integer;
BEGIN
    SELECT t.typname::text, a.atttypmod INTO typ, typmod
      FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
     WHERE a.attrelid = rel AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of relation "%" does not exist', col, coalesce(relname, rel::text)
            USING ERRCODE = 'undefined_column';
    END IF;
    IF typ NOT IN ('vector', 'halfvec') THEN
        RAISE EXCEPTION 'column "%" is of type %, not vector or halfvec', col, typ
            USING ERRCODE = 'datatype_mismatch', HINT = hint;
    END IF;
    IF dim IS NOT NULL AND typmod > 0 AND typmod <> dim THEN
        RAISE EXCEPTION 'expected % dimensions, not %', typmod, dim USING ERRCODE = 'data_exception',
            DETAIL = format('column "%s" is %s(%s) but model "%s" produces %s dimensions', col, typ, typmod, model, dim);
    END IF;
    RETURN typ;
END $$;

-- sql/predict.sql
CREATE OR REPLACE FUNCTION tributary.label_kind(tbl regclass, label name, kind text)
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    typ text;
    is_key boolean;
BEGIN
    IF kind IS NULL OR kind NOT IN ('auto', 'category', 'number') THEN
        RAISE EXCEPTION 'kind must be auto, category or number, not %', coalesce(quote_literal(kind), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    SELECT t.typname, EXISTS (
               SELECT 1 FROM pg_catalog.pg_constraint c
               WHERE c.conrelid = a.attrelid AND c.contype IN ('p', 'f') AND a.attnum = ANY (c.conkey))
      INTO typ, is_key
      FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
     WHERE a.attrelid = tbl AND a.attname = label AND a.attnum > 0 AND NOT a.attisdropped;
    IF typ IS NULL THEN
        RAISE EXCEPTION 'column "%" of relation "%" does not exist', label, tbl USING ERRCODE = '42703';
    END IF;
    IF kind <> 'auto' THEN
        RETURN kind;
    END IF;
    IF typ IN ('float4', 'float8', 'numeric') OR (typ IN ('int2', 'int4', 'int8') AND NOT is_key) THEN
        RETURN 'number';
    END IF;
    RETURN 'category';
END $$;

-- sql/predict.sql
CREATE OR REPLACE FUNCTION tributary.embedding_type(tbl regclass, embedding name)
RETURNS text LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT tributary._target_column(tbl, embedding,
        hint => 'Neighbours are found by an embedding column; fill one with tributary_embed_column.')
$$;

-- sql/predict.sql
CREATE OR REPLACE FUNCTION tributary.row_key(tbl regclass, alias text)
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
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

-- sql/predict.sql
CREATE OR REPLACE FUNCTION tributary.knn_vote(labels text[], weights float8[], OUT prediction text, OUT confidence float8)
RETURNS record LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT v.label, v.w / nullif(v.total, 0)
      FROM (SELECT u.label, sum(u.w) AS w, sum(sum(u.w)) OVER () AS total
              FROM unnest(labels, weights) AS u(label, w)
             WHERE u.label IS NOT NULL
             GROUP BY u.label) v
     ORDER BY v.w DESC, v.label
     LIMIT 1
$$;

-- sql/predict.sql
CREATE OR REPLACE FUNCTION tributary.knn_mean(vals float8[], weights float8[], OUT prediction float8, OUT stddev float8)
RETURNS record LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT m.mean, sqrt(greatest(m.sq - m.mean * m.mean, 0))
      FROM (SELECT sum(u.v * u.w) / nullif(sum(u.w), 0) AS mean, sum(u.v * u.v * u.w) / nullif(sum(u.w), 0) AS sq
              FROM unnest(vals, weights) AS u(v, w)
             WHERE u.v IS NOT NULL) m
$$;

-- sql/predict.sql
CREATE OR REPLACE FUNCTION tributary_predict(
    tbl regclass, label name, embedding name, query vector, k integer DEFAULT 10, kind text DEFAULT 'auto',
    OUT prediction text, OUT confidence float8, OUT stddev float8, OUT neighbours integer, OUT evidence jsonb)
RETURNS record LANGUAGE plpgsql STABLE
SET jit = off SET hnsw.iterative_scan = relaxed_order SET ivfflat.iterative_scan = relaxed_order SET search_path = pg_catalog, pg_temp AS $$
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

-- sql/predict.sql
CREATE OR REPLACE FUNCTION tributary_evaluate(
    tbl regclass, label name, embedding name, group_by name DEFAULT NULL, k integer DEFAULT 10,
    test_fraction float8 DEFAULT 0.2, kind text DEFAULT 'auto', seed integer DEFAULT 0,
    split_column name DEFAULT NULL, split_at text DEFAULT NULL)
RETURNS TABLE (metric text, model float8, baseline float8, test_rows bigint, train_rows bigint, split text)
LANGUAGE plpgsql STABLE SET jit = off SET search_path = pg_catalog, pg_temp AS $$
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

-- sql/predict.sql
CREATE OR REPLACE FUNCTION tributary_predict_column(
    tbl regclass, label name, embedding name, target name, k integer DEFAULT 10, kind text DEFAULT 'auto',
    batch_size integer DEFAULT 1000)
RETURNS bigint LANGUAGE plpgsql VOLATILE
SET jit = off SET hnsw.iterative_scan = relaxed_order SET ivfflat.iterative_scan = relaxed_order SET search_path = pg_catalog, pg_temp AS $$
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

-- sql/jobs.sql
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
-- for each part). state: unreachable when a shard cannot be reached, else invalid when a shard
-- answered an invalid state, else failed when a part failed, else done / cancelled / paused
-- when every part is, waiting when a part waits, else running.
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
                WHEN bool_or(p->>'state' = 'invalid') THEN 'invalid'
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

-- sql/jobs.sql
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
        text_expr := 'pg_catalog.row_to_json(t.*)::pg_catalog.text';   -- t.*: never a column named t
        -- Columns whose change does not change the row's text: the target and other embeddings.
        SELECT array_agg(a.attname::text) INTO excl FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
         WHERE a.attrelid = j.source AND a.attnum > 0 AND NOT a.attisdropped
           AND (t.typname IN ('vector', 'halfvec', 'sparsevec', 'bytea', 'tsvector') OR (tgt = j.source AND a.attname = j.target));
        excl := coalesce(excl, '{}') || coalesce((SELECT array_agg(x) FROM jsonb_array_elements_text(j.row_options->'exclude') x), '{}');
        differs := format('(pg_catalog.to_jsonb(o.*) OPERATOR(pg_catalog.-) %L::pg_catalog.text[]) IS DISTINCT FROM (pg_catalog.to_jsonb(n.*) OPERATOR(pg_catalog.-) %L::pg_catalog.text[])', excl, excl);
        guard := format('(pg_catalog.to_jsonb(t.*) OPERATOR(pg_catalog.-) %L::pg_catalog.text[])::pg_catalog.text', excl);
    ELSE
        arr := (SELECT string_agg('t.' || quote_ident(x) || '::pg_catalog.text', ', ') FROM unnest(j.columns) x);
        text_expr := format('CASE WHEN pg_catalog.num_nonnulls(%s) OPERATOR(pg_catalog.>) 0 THEN pg_catalog.concat_ws(E''\n'', %s) END', arr, arr);
        -- As text: every type has one, not every type has "=".
        differs := format('ROW(%s) IS DISTINCT FROM ROW(%s)',
            (SELECT string_agg('o.' || quote_ident(x) || '::pg_catalog.text', ', ') FROM unnest(j.columns) x),
            (SELECT string_agg('n.' || quote_ident(x) || '::pg_catalog.text', ', ') FROM unnest(j.columns) x));
        nonnull := format('pg_catalog.num_nonnulls(%s) OPERATOR(pg_catalog.>) 0', (SELECT string_agg('n.' || quote_ident(x), ', ') FROM unnest(j.columns) x));
        nonnull_t := format('pg_catalog.num_nonnulls(%s) OPERATOR(pg_catalog.>) 0', arr);
        guard := text_expr;
    END IF;
    checked := CASE WHEN j.mode = 'continuous' THEN format('%s IS NOT DISTINCT FROM u.g', guard) ELSE 'true' END;

    j.claim_sql := format('WITH c AS (DELETE FROM %s AS q USING (SELECT ctid AS tid FROM %s ORDER BY %s LIMIT $1 FOR UPDATE SKIP LOCKED) AS s '
               'WHERE q.ctid OPERATOR(pg_catalog.=) s.tid RETURNING q.*) SELECT pg_catalog.jsonb_agg(DISTINCT pg_catalog.to_jsonb(c.*))::text FROM c', j.queue, j.queue, q_cols);
    j.claim_keys_sql := format('WITH c AS (DELETE FROM %s AS q USING pg_catalog.jsonb_populate_recordset(NULL::%s, $1::pg_catalog.jsonb) AS kk WHERE (%s) OPERATOR(pg_catalog.=) (%s) RETURNING q.*) '
               'SELECT pg_catalog.jsonb_agg(DISTINCT pg_catalog.to_jsonb(c.*))::text FROM c', j.queue, j.queue, k_q, k_kk);
    j.select_sql := format('SELECT pg_catalog.to_jsonb(k.*)::pg_catalog.text, %s, %s FROM %s AS t JOIN pg_catalog.jsonb_populate_recordset(NULL::%s, $1::pg_catalog.jsonb) AS k ON (%s) OPERATOR(pg_catalog.=) (%s) '
               'FOR KEY SHARE OF t', text_expr, guard, src_from, j.queue, k_src, k_k);
    j.write_sql := CASE WHEN tgt = j.source THEN
            format('UPDATE %s AS t SET %I = u.e FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.jsonb[]), pg_catalog.unnest($2::%s[]), pg_catalog.unnest($3::pg_catalog.text[])) AS u(k, e, g) '
                   'CROSS JOIN LATERAL pg_catalog.jsonb_populate_record(NULL::%s, u.k) AS kk WHERE (%s) OPERATOR(pg_catalog.=) (%s) AND %s',
                   src_from, j.target, vtype, j.queue, k_src, k_kk, checked)
        ELSE
            format('WITH u AS (SELECT kk.*, u.e FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.jsonb[]), pg_catalog.unnest($2::%s[]), pg_catalog.unnest($3::pg_catalog.text[])) AS u(k, e, g) '
                   'CROSS JOIN LATERAL pg_catalog.jsonb_populate_record(NULL::%s, u.k) AS kk '
                   'WHERE EXISTS (SELECT 1 FROM %s AS t WHERE (%s) OPERATOR(pg_catalog.=) (%s) AND %s)), '
                   'd AS (DELETE FROM %s AS g USING u WHERE u.e IS NULL AND (%s) OPERATOR(pg_catalog.=) (%s)) '
                   'INSERT INTO %s AS g (%s, %I) SELECT %s, u.e FROM u WHERE u.e IS NOT NULL '
                   'ON CONFLICT (%s) DO UPDATE SET %I = EXCLUDED.%I',
                   vtype, j.queue, src_from, k_src, k_kk, checked, tgt_from, k_g, k_u,
                   tgt_name, t_cols, j.target, k_u, t_cols, j.target, j.target)
        END;
    j.requeue_sql := format('INSERT INTO %s SELECT (pg_catalog.jsonb_populate_record(NULL::%s, k)).* FROM pg_catalog.jsonb_array_elements($1::pg_catalog.jsonb) AS x(k) '
               'ON CONFLICT DO NOTHING', j.queue, j.queue);

    IF j.mode = 'continuous' THEN
        -- Run by tributary._job_trigger as the owner over the transition tables new_rows and
        -- old_rows of the statement that fired it (the source's columns).
        j.enqueue_sql := jsonb_strip_nulls(jsonb_build_object(
            'INSERT', format('INSERT INTO %s SELECT %s FROM new_rows n WHERE %s', j.queue, k_new, nonnull),
            'UPDATE', format('INSERT INTO %s SELECT %s FROM new_rows n LEFT JOIN old_rows o ON (%s) OPERATOR(pg_catalog.=) (%s) WHERE (%s) IS NULL OR %s',
                             j.queue, k_new, k_old, k_new, k_old, differs)
                      || CASE WHEN tgt <> j.source THEN
                             -- separate target table: keys that went away take their embedding along
                             format('; DELETE FROM %s g USING old_rows o WHERE (%s) OPERATOR(pg_catalog.=) (%s) AND NOT EXISTS (SELECT 1 FROM new_rows n WHERE (%s) OPERATOR(pg_catalog.=) (%s))',
                                    tgt_from, k_g, k_old, k_new, k_old) ELSE '' END,
            'DELETE', CASE WHEN tgt <> j.source THEN format('DELETE FROM %s g USING old_rows o WHERE (%s) OPERATOR(pg_catalog.=) (%s)', tgt_from, k_g, k_old) END,
            -- A TRUNCATE fires the trigger of every table it empties: of one partition, only the
            -- embeddings of rows gone go.
            'TRUNCATE', CASE WHEN tgt <> j.source AND skind = 'r' THEN format('TRUNCATE %s', tgt_from)
                             WHEN tgt <> j.source THEN format('DELETE FROM %s g WHERE NOT EXISTS (SELECT 1 FROM %s t WHERE (%s) OPERATOR(pg_catalog.=) (%s))',
                                                           tgt_from, src, k_src, k_g) END,
            -- The triggers on the source's ancestors (partitioned tables above a partition,
            -- inheritance parents), whose transition tables hold rows of other tables too: keys
            -- of rows now in the source are queued (of the ancestor's columns only the key's are
            -- used), and with a target table, embeddings of keys no longer in it go.
            'INSERT via', format('INSERT INTO %s SELECT DISTINCT %s FROM new_rows n WHERE EXISTS (SELECT 1 FROM %s t WHERE (%s) OPERATOR(pg_catalog.=) (%s) AND %s)',
                                 j.queue, k_new, src_from, k_src, k_new, nonnull_t),
            'UPDATE via', format('INSERT INTO %s SELECT DISTINCT %s FROM new_rows n WHERE EXISTS (SELECT 1 FROM %s t WHERE (%s) OPERATOR(pg_catalog.=) (%s) AND %s)',
                                 j.queue, k_new, src_from, k_src, k_new, nonnull_t)
                          || CASE WHEN tgt <> j.source THEN
                                 format('; DELETE FROM %s g USING old_rows o WHERE (%s) OPERATOR(pg_catalog.=) (%s) AND NOT EXISTS (SELECT 1 FROM %s t WHERE (%s) OPERATOR(pg_catalog.=) (%s))',
                                        tgt_from, k_g, k_old, src_from, k_src, k_old) ELSE '' END,
            'DELETE via', CASE WHEN tgt <> j.source THEN
                                 format('DELETE FROM %s g USING old_rows o WHERE (%s) OPERATOR(pg_catalog.=) (%s) AND NOT EXISTS (SELECT 1 FROM %s t WHERE (%s) OPERATOR(pg_catalog.=) (%s))',
                                        tgt_from, k_g, k_old, src_from, k_src, k_old) END));
    ELSE
        j.enqueue_sql := NULL;
    END IF;
    RETURN j;
END $$;

-- sql/jobs.sql
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
        filter := format('NOT EXISTS (SELECT 1 FROM %s g WHERE (%s) OPERATOR(pg_catalog.=) (%s))', tgt_from,
                         (SELECT string_agg('g.' || p, ', ') FROM unnest(tk) p), (SELECT string_agg('t.' || p, ', ') FROM unnest(pk) p));
    END IF;
    IF j.columns <> '{*}' THEN
        nonnull := format('pg_catalog.num_nonnulls(%s) OPERATOR(pg_catalog.>) 0', (SELECT string_agg('t.' || quote_ident(x) || '::pg_catalog.text', ', ') FROM unnest(j.columns) x));
    END IF;
    RETURN (SELECT format('INSERT INTO %s SELECT %s FROM %s%I.%I t WHERE %s AND %s', j.queue,
                          (SELECT string_agg('t.' || p, ', ') FROM unnest(pk) p),
                          CASE WHEN c.relkind = 'r' THEN 'ONLY ' ELSE '' END, n.nspname, c.relname, filter, nonnull)
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = rel);
END $$;

-- sql/shards.sql
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

-- sql/shards.sql
CREATE OR REPLACE FUNCTION tributary._shard_query(a jsonb) RETURNS jsonb
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

-- sql/shards.sql
CREATE OR REPLACE FUNCTION tributary._shard_call(owner oid, server oid, part regclass, sql text, raise boolean DEFAULT true)
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

-- sql/shards.sql
CREATE OR REPLACE FUNCTION tributary._sharded_job_create(caller oid, a jsonb, source regclass, owner oid) RETURNS bigint
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

-- sql/shards.sql
CREATE OR REPLACE FUNCTION tributary._job_parts_of(caller oid, job bigint) RETURNS jsonb
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

-- sql/shards.sql
CREATE OR REPLACE FUNCTION tributary._shard_key_columns(tbl regclass) RETURNS text[]
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

-- sql/match.sql
CREATE OR REPLACE FUNCTION tributary._match_key(tbl regclass, alias text) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
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

-- sql/match.sql
CREATE OR REPLACE FUNCTION tributary._match_values(tbl regclass, cols text[], alias text) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
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

-- sql/match.sql
CREATE OR REPLACE FUNCTION tributary_match(
    left_table regclass, right_table regclass, columns text[], right_columns text[] DEFAULT NULL,
    k integer DEFAULT 10, threshold float8 DEFAULT NULL, one_to_one boolean DEFAULT true,
    labels regclass DEFAULT NULL, model text DEFAULT NULL)
RETURNS TABLE (left_key text, right_key text, score float8)
LANGUAGE plpgsql VOLATILE SET jit = off SET search_path = pg_catalog, pg_temp AS $$
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
    made oid[] := '{}';   -- the temporary tables and view this call made, to drop (never a caller's)
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
    PERFORM tributary._match_names_free('tributary_match_');
    EXECUTE format('SELECT %s.vector_dims(tributary._embed_text($1, $2))', vec) INTO dims USING 'dimension', model;
    -- Defined now that the library is loaded: '0' turns progress NOTICEs off.
    report := current_setting('tributary.progress_interval') <> '0';
    EXECUTE format('CREATE TEMP TABLE tributary_match_l (key text PRIMARY KEY, v text[], txt text, e %s.vector(%s))
                    ON COMMIT DROP', vec, dims);
    made := made || 'pg_temp.tributary_match_l'::regclass::oid;
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
        made := made || 'pg_temp.tributary_match_r'::regclass::oid;
    ELSE
        CREATE TEMP TABLE tributary_match_r (LIKE pg_temp.tributary_match_l INCLUDING ALL) ON COMMIT DROP;
        made := made || 'pg_temp.tributary_match_r'::regclass::oid;
        EXECUTE format(fill_sql, 'r', tributary._match_key(right_table, 't'), right_table,
                       tributary._match_values(right_table, rcols, 't'))
          USING columns;
    END IF;
    SELECT count(*) INTO n_left FROM pg_temp.tributary_match_l;
    SELECT count(*) INTO n_right FROM pg_temp.tributary_match_r;
    IF n_left = 0 OR n_right = 0 OR (self AND n_left < 2) THEN
        PERFORM tributary._match_drop(made);
        RETURN;
    END IF;
    PERFORM tributary._embed_column('pg_temp.tributary_match_l', '{txt}', 'e', model => model);
    IF NOT self THEN
        PERFORM tributary._embed_column('pg_temp.tributary_match_r', '{txt}', 'e', model => model);
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
    made := made || 'pg_temp.tributary_match_v'::regclass::oid;
    INSERT INTO pg_temp.tributary_match_v (col, val)
    SELECT DISTINCT c.i, x.v[c.i]
      FROM generate_series(1, n) c(i),
           LATERAL (SELECT v FROM pg_temp.tributary_match_l UNION ALL SELECT v FROM pg_temp.tributary_match_r WHERE NOT self) x
     WHERE emb[c.i] AND x.v[c.i] IS NOT NULL;
    PERFORM tributary._embed_column('pg_temp.tributary_match_v', '{val}', 'e', model => model);

    t_embed := extract(epoch FROM clock_timestamp() - t0);
    -- 3. Candidates: k nearest each way, and the unrelated pairs that calibrate the evidence.
    CREATE TEMP TABLE tributary_match_c (lk text, rk text, kind "char", PRIMARY KEY (lk, rk, kind)) ON COMMIT DROP;
    made := made || 'pg_temp.tributary_match_c'::regclass::oid;
    -- pgvector takes hnsw.ef_search up to 1000: k up to 500 gets 2k candidates, beyond that 1000
    -- (iterative scans go on past ef_search when the filter leaves fewer than k).
    PERFORM set_config('hnsw.ef_search', least(1000, greatest(40, 2 * k))::text, true);
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
    made := made || 'pg_temp.tributary_match_f'::regclass::oid;
    -- u: the mean raw similarity of unrelated pairs; evidence = mean of the rescaled ones.
    WITH u AS (SELECT f.i, avg(f.es) AS ue, avg(f.ss) AS us FROM pg_temp.tributary_match_f f WHERE f.kind = 'u' GROUP BY f.i)
    UPDATE pg_temp.tributary_match_f f
       SET es = (SELECT avg(s) FROM (VALUES
                     (CASE WHEN u.ue < 0.99 THEN greatest(0, least(1, (f.es - u.ue) / (1 - u.ue))) END),
                     (CASE WHEN u.us < 0.99 THEN greatest(0, least(1, (f.ss - u.us) / (1 - u.us))) END)) x(s))
      FROM u WHERE u.i = f.i;
    CREATE TEMP TABLE tributary_match_s (lk text, rk text, kind "char", score float8) ON COMMIT DROP;
    made := made || 'pg_temp.tributary_match_s'::regclass::oid;
    IF labels IS NULL THEN
        -- u: how often unrelated pairs agree on a column (evidence 0.9 or more, at least 1/2,000);
        -- m: how often matches do, 1 until it is estimated below.
        CREATE TEMP TABLE tributary_match_w ON COMMIT DROP AS
        SELECT f.i, greatest(avg((coalesce(f.es, 0) >= 0.9)::int), 1.0 / 2000)::float8 AS u, 1.0::float8 AS m
          FROM pg_temp.tributary_match_f f WHERE f.kind = 'u' GROUP BY f.i;
        made := made || 'pg_temp.tributary_match_w'::regclass::oid;
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

    PERFORM tributary._match_drop(made);
END $$;

-- sql/match.sql
CREATE OR REPLACE FUNCTION tributary._match_score() RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO pg_temp.tributary_match_s
    SELECT f.lk, f.rk, f.kind, sum(w.w * f.es) / nullif(sum(w.w) FILTER (WHERE f.es IS NOT NULL), 0)
      FROM pg_temp.tributary_match_f f
      JOIN (SELECT x.i, CASE WHEN x.m > x.u THEN x.m * ln(x.m / x.u) ELSE 0 END AS w FROM pg_temp.tributary_match_w x) w ON w.i = f.i
     WHERE f.kind = 'c'
     GROUP BY f.lk, f.rk, f.kind;
END $$;

-- sql/match.sql
CREATE OR REPLACE FUNCTION tributary._match_auto_threshold(self boolean) RETURNS float8
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
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

-- sql/match.sql
CREATE OR REPLACE FUNCTION tributary._match_accepted(self boolean, thr float8, one_to_one boolean)
RETURNS TABLE (lk text, rk text, score float8)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
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

-- sql/match.sql
CREATE FUNCTION tributary._match_names_free(prefix text) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    taken text;
BEGIN
    SELECT string_agg(c.relname, ', ' ORDER BY c.relname) INTO taken
      FROM pg_catalog.pg_class c
     WHERE c.relnamespace = pg_catalog.pg_my_temp_schema()
       AND c.relname IN (SELECT prefix || x FROM unnest(ARRAY['l', 'r', 'v', 'c', 'f', 's', 'w', 'e', 'n']) x);
    IF taken IS NOT NULL THEN
        RAISE EXCEPTION 'temporary relation "%" already exists', split_part(taken, ', ', 1) USING ERRCODE = '42P07',
            DETAIL = format('%s keeps its work in temporary tables named %s*; this session has %s.',
                            rtrim(prefix, '_'), prefix, taken),
            HINT = 'Rename or drop those temporary tables; tributary never drops a table it did not make.';
    END IF;
END $$;

-- sql/match.sql
CREATE FUNCTION tributary._match_drop(rels oid[]) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT c.oid::regclass AS rel, c.relkind FROM pg_catalog.pg_class c
              WHERE c.oid = ANY (rels) AND c.relnamespace = pg_catalog.pg_my_temp_schema()
              ORDER BY c.relkind DESC  -- the view over tributary_match_l first
    LOOP
        EXECUTE CASE WHEN r.relkind = 'v' THEN 'DROP VIEW ' ELSE 'DROP TABLE ' END || r.rel;
    END LOOP;
END $$;

-- sql/match.sql
CREATE OR REPLACE FUNCTION tributary._match_check_labels(labels regclass) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
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

-- sql/match.sql
CREATE OR REPLACE FUNCTION tributary_dedup(
    tbl regclass, columns text[], k integer DEFAULT 10, threshold float8 DEFAULT NULL,
    labels regclass DEFAULT NULL, model text DEFAULT NULL)
RETURNS TABLE (cluster bigint, key text)
LANGUAGE plpgsql VOLATILE SET jit = off SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    changed bigint;
    made oid[] := '{}';   -- the temporary tables this call made, to drop (never a caller's)
BEGIN
    IF tbl IS NULL THEN
        RAISE EXCEPTION 'tbl must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM tributary._match_names_free('tributary_dedup_');
    CREATE TEMP TABLE tributary_dedup_e ON COMMIT DROP AS
    SELECT m.left_key AS a, m.right_key AS b
      FROM @extschema@.tributary_match(left_table => tbl, right_table => tbl, columns => columns, k => k,
                                       threshold => threshold, one_to_one => false, labels => labels, model => model) m;
    made := made || 'pg_temp.tributary_dedup_e'::regclass::oid;
    -- Connected components by label propagation: every node takes the smallest label among its
    -- neighbours until nothing changes (at most the longest path's length rounds).
    CREATE TEMP TABLE tributary_dedup_n ON COMMIT DROP AS
    SELECT x.k AS node, x.k AS comp FROM (SELECT a AS k FROM pg_temp.tributary_dedup_e UNION SELECT b FROM pg_temp.tributary_dedup_e) x;
    made := made || 'pg_temp.tributary_dedup_n'::regclass::oid;
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
    PERFORM tributary._match_drop(made);
END $$;


-- Every job's statements, rebuilt with the qualified names (as tributary._job_ddl does after a
-- rename); a job whose table is gone keeps its old ones (it fails as before).
DO $$
DECLARE
    j  tributary._jobs;
    nj tributary._jobs;
BEGIN
    FOR j IN SELECT * FROM tributary._jobs ORDER BY id LOOP
        BEGIN
            nj := tributary._job_build(j);
        EXCEPTION WHEN OTHERS THEN
            CONTINUE;
        END;
        UPDATE tributary._jobs SET claim_sql = nj.claim_sql, claim_keys_sql = nj.claim_keys_sql, select_sql = nj.select_sql,
               write_sql = nj.write_sql, requeue_sql = nj.requeue_sql, enqueue_sql = nj.enqueue_sql
         WHERE id = j.id;
    END LOOP;
END $$;

COMMENT ON FUNCTION tributary._match_drop(oid[]) IS 'Internal (tributary_match, tributary_dedup): drops the temporary tables a call made, by OID (never a caller''s).';
COMMENT ON FUNCTION tributary._embed_text(text, text, text) IS 'Internal (tributary_match): tributary_embed(text) under a name no other role can shadow.';
COMMENT ON FUNCTION tributary._embed_column(regclass, text[], name, text, integer, text[], integer, integer, text[], timestamp with time zone, text, integer) IS 'Internal (tributary_match): tributary_embed_column under a name no other role can shadow.';
COMMENT ON FUNCTION tributary._match_names_free(text) IS 'Internal (tributary_match, tributary_dedup): 42P07 when the session has a temporary table named as their work tables.';
COMMENT ON FUNCTION tributary._shard_wait(text, text, timestamp with time zone, bigint, text) IS 'Internal: waits for a dblink query''s result in pg_sleep steps, so statement_timeout and pg_cancel_backend end the wait; 08006 at its limit.';
