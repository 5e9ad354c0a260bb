-- Prediction from neighbours: a column of a row predicted from its k nearest embedded, labelled
-- rows (pgvector cosine distance, `<=>`), and an evaluation that holds rows out and compares with
-- the majority-class or mean baseline. Everything runs with the caller's privileges (SECURITY
-- INVOKER), so row-level security and column privileges apply to the neighbours too.
--
-- Weighting: each neighbour's weight is its cosine similarity, 1 - cosine distance, floored at
-- 1e-6 (distance-weighted k-NN; Dudani, "The distance-weighted k-nearest-neighbor rule", IEEE
-- Trans. SMC 6(4), 1976, with similarity as the weight).
--
-- Wide tables: a vector(384) is 1,544 bytes, so in a row with a second vector or some text it is
-- stored out of line (TOAST; pgvector's types default to STORAGE EXTERNAL). tributary_evaluate
-- reads each embedding once, in a MATERIALIZED CTE that detoasts it (subvector(e, 1, dims) builds
-- an in-line copy; a CTE's tuplestore otherwise keeps the TOAST pointer, and every training vector
-- was fetched again for every test row). tributary_predict reads each row's vector once per call
-- (the distance in the ORDER BY is the one in the select list).
--
-- JIT: both functions run with SET jit = off (restored on return; the caller's own queries keep
-- their setting). Their dynamic queries are planned on every call, so JIT would compile each plan
-- again, every call (hundreds of ms; the estimated cost of test x training rows, larger still on a
-- table without statistics, passes jit_above_cost even when the query runs in tens of ms), and it
-- cannot speed up what the time goes to: the distance functions (C, in pgvector) and the sorts.
-- See BENCHMARKS.md, "Prediction on a wide table".
--
-- No rows to learn from or to test on: both functions raise 22023 (invalid_parameter_value) with
-- a DETAIL that gives the counts and the split and a HINT, rather than returning NULLs.

-- 'category' or 'number' for column `label` of `tbl` when `kind` is 'auto': numbers are float,
-- numeric and integer columns that are not part of a primary or foreign key (an integer key such
-- as genre_id names a category). 42703 unknown column, 22023 bad kind.
CREATE FUNCTION tributary.label_kind(tbl regclass, label name, kind text)
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

-- The type of embedding column `embedding` of `tbl`: 'vector' or 'halfvec'. 42703 unknown
-- column, 42804 another type (the check of sql/bootstrap.sql, with prediction's hint).
CREATE FUNCTION tributary.embedding_type(tbl regclass, embedding name)
RETURNS text LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT tributary._target_column(tbl, embedding,
        hint => 'Neighbours are found by an embedding column; fill one with tributary_embed_column.')
$$;

-- The base type of `typ`: itself, or for a domain (over a domain ...) the type under it.
CREATE FUNCTION tributary._base_type(typ oid)
RETURNS oid LANGUAGE sql STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    WITH RECURSIVE d(oid, base) AS (
        SELECT t.oid, t.typbasetype FROM pg_catalog.pg_type t WHERE t.oid OPERATOR(pg_catalog.=) typ
        UNION ALL
        SELECT t.oid, t.typbasetype FROM d JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) d.base
         WHERE d.base OPERATOR(pg_catalog.<>) 0::pg_catalog.oid)
    SELECT d.oid FROM d WHERE d.base OPERATOR(pg_catalog.=) 0::pg_catalog.oid
$$;

-- The SQL of `expr` (an expression of type text) as a value of type `typ` (typmod `typmod`):
-- CAST(expr AS type) when `typ` (through domains) is built in, whose casts from text are
-- PostgreSQL's own; otherwise tributary._from_text(expr, NULL::type), the type's input
-- function: a cast from text that a type's owner made never runs (src/pg/values.rs).
CREATE FUNCTION tributary._text_as(expr text, typ oid, typmod integer)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN tributary._base_type(typ) OPERATOR(pg_catalog.<) 16384::pg_catalog.oid
                THEN pg_catalog.format('CAST(%s AS %s)', expr, pg_catalog.format_type(typ, typmod))
                ELSE pg_catalog.format('tributary._from_text(%s, NULL::%s)', expr, pg_catalog.format_type(typ, typmod)) END
$$;

-- A jsonb expression that identifies a row of `tbl` aliased `alias`: its primary key columns
-- ({"track_id": 1}); for a partitioned table over postgres_fdw shards, which has none, the
-- shards' primary key (tributary._shard_key_columns, sql/shards.sql); else {"ctid": "(0,1)"}.
CREATE FUNCTION tributary.row_key(tbl regclass, alias text)
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN coalesce(
        (SELECT 'jsonb_build_object(' || string_agg(format('%L, tributary._jsonb(%I.%I)', a.attname, alias, a.attname), ', ' ORDER BY k.ord) || ')'
           FROM pg_catalog.pg_index i
          CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
           JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
          WHERE i.indrelid = tbl AND i.indisprimary),
        (SELECT 'jsonb_build_object(' || string_agg(format('%L, tributary._jsonb(%I.%s)', (parse_ident(c))[1], alias, c), ', ' ORDER BY o) || ')'
           FROM unnest(tributary._shard_key_columns(tbl)) WITH ORDINALITY AS u(c, o)),
        format('jsonb_build_object(''ctid'', %I.ctid::text)', alias));
END $$;

-- Weighted vote: the label with the largest sum of weights (ties: the smallest label), and that
-- sum's share of all weights (0..1). NULL labels do not vote.
CREATE FUNCTION tributary.knn_vote(labels text[], weights float8[], OUT prediction text, OUT confidence float8)
RETURNS record LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT v.label, v.w / nullif(v.total, 0)
      FROM (SELECT u.label, sum(u.w) AS w, sum(sum(u.w)) OVER () AS total
              FROM unnest(labels, weights) AS u(label, w)
             WHERE u.label IS NOT NULL
             GROUP BY u.label) v
     ORDER BY v.w DESC, v.label
     LIMIT 1
$$;

-- Weighted mean of `vals` and the weighted standard deviation around it.
CREATE FUNCTION tributary.knn_mean(vals float8[], weights float8[], OUT prediction float8, OUT stddev float8)
RETURNS record LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT m.mean, sqrt(greatest(m.sq - m.mean * m.mean, 0))
      FROM (SELECT sum(u.v * u.w) / nullif(sum(u.w), 0) AS mean, sum(u.v * u.v * u.w) / nullif(sum(u.w), 0) AS sq
              FROM unnest(vals, weights) AS u(v, w)
             WHERE u.v IS NOT NULL) m
$$;


-- tributary_predict(tbl, label, embedding, query [, k, kind]): predicts column `label` for an
-- embedding `query` ([dim] f32, e.g. a row's own embedding or tributary_embed(row)) from the `k`
-- rows of `tbl` nearest to it by `embedding` (cosine distance) whose `label` is not NULL.
-- Categories: weighted vote, `confidence` = the winner's share of the weights (0..1).
-- Numbers: weighted mean (as text in `prediction`) and `stddev` around it.
-- `evidence`: the neighbours, nearest first: [{key, label, distance, weight}], key = primary key
-- columns (or ctid). An HNSW or IVFFlat index on `embedding` is used when there is one, with
-- pgvector 0.8's iterative index scans (hnsw.iterative_scan and ivfflat.iterative_scan =
-- relaxed_order, set for the call only): a plain index scan returns hnsw.ef_search candidates
-- before the `label IS NOT NULL` filter, so k unlabelled rows near the query left no neighbours.
-- Relaxed order is re-sorted by distance. When the scan still returns fewer than k neighbours
-- (it stops at hnsw.max_scan_tuples) and more labelled rows exist, the search is run again
-- exactly (every labelled row's distance, no index), so `neighbours` is always
-- min(k, labelled rows visible to the caller).
-- NULL query gives a row of NULLs (checked after the other arguments). Runs with jit = off (see
-- the top of this file). Errors: 22004 NULL tbl, label, embedding, k or kind; 22023 k outside
-- 1..1000 or bad kind, or no row of `tbl` (visible to the caller) has both `label` and
-- `embedding` (DETAIL: the table and columns; nothing to predict from); 42703 unknown column;
-- 42804 embedding column not vector/halfvec.
CREATE FUNCTION tributary_predict(
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
               FROM (SELECT %s AS key, tributary._text(t.%I) AS l, t.%I OPERATOR(%s.<=>) $1::%s AS d
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
-- Forward in time: with `split_column` and `split_at` (both or neither; 22023 with one), the rows
-- with split_column < split_at train and those with split_column >= split_at are tested
-- (split_at is cast to split_column's base type, through domains: CAST(split_at AS type)); rows with a NULL
-- split_column are in neither, and a NOTICE counts them. group_by, test_fraction and seed are
-- then not used (still checked). Errors: 42703 unknown split_column; the cast's own error for a
-- bad split_at (22P02 for a number, 22007 for a date...); 22023 a side with no rows (DETAIL: the
-- counts, the smallest and largest value; HINT).
-- `split`, the last column, says which split was used: 'hash: test_fraction 0.2, seed 0, by
-- primary key' (or by the group_by column, or by ctid without a primary key), or 'forward: year
-- < 2010 trains, year >= 2010 tests'.
-- The search is exact in every case (the held-out rows are compared with the training rows in a
-- CTE, which no index serves), so index recall and hnsw.ef_search do not matter here.
CREATE FUNCTION tributary_evaluate(
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
    split_value text;    -- split_at cast to split_column's (base) type, as an SQL expression
    split_expr text;     -- split_column as its base type, as an SQL expression
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
        group_expr := format('tributary._text(t.%I)', group_by);
    END IF;
    IF split_column IS NOT NULL THEN
        -- Compared as the column's base type (through domains): a domain's CHECK never runs on
        -- split_at, and a domain over an enum compares with the enum's operators.
        SELECT pg_catalog.format_type(b.oid, CASE WHEN b.oid OPERATOR(pg_catalog.=) a.atttypid THEN a.atttypmod END)
          INTO split_type
          FROM pg_catalog.pg_attribute a CROSS JOIN LATERAL (SELECT tributary._base_type(a.atttypid) AS oid) b
         WHERE a.attrelid = tbl AND a.attname = split_column AND a.attnum > 0 AND NOT a.attisdropped;
        IF split_type IS NULL THEN
            RAISE EXCEPTION 'column "%" of relation "%" does not exist', split_column, tbl USING ERRCODE = '42703';
        END IF;
        split_expr := format('CAST(t.%I AS %s)', split_column, split_type);
        -- Cast once here, so that a bad split_at fails with the cast's own error before any scan.
        -- A literal: CAST('...' AS type) reads it with the type's input function, never a cast
        -- from text a role made; back to text through tributary._text.
        EXECUTE format('SELECT tributary._text(CAST(%L AS %s))', split_at, split_type) INTO split_text;
        split_value := format('CAST(%L AS %s)', split_at, split_type);
        -- Rows with a NULL split_column are in neither side (the filter below leaves them out).
        held_out := format('%s >= %s', split_expr, split_value);
        EXECUTE format(
            'SELECT count(*) FILTER (WHERE %1$s >= %2$s), count(*) FILTER (WHERE %1$s < %2$s),
                    count(*) FILTER (WHERE %1$s IS NULL), tributary._text(min(%1$s)), tributary._text(max(%1$s))
               FROM %3$s AS t WHERE t.%4$I IS NOT NULL AND t.%5$I IS NOT NULL',
            split_expr, split_value, tbl, label, embedding)
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
             SELECT tributary._text(t.%I) AS l, %s.subvector(t.%I, 1, %s.vector_dims(t.%I)) AS e, %s AS held_out
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

-- tributary_predict_column(tbl, label, embedding, target [, k, kind, batch_size]): fills column
-- `target` of every row whose `label` IS NULL and whose `embedding` is not NULL (overwriting what
-- target held) with tributary_predict's prediction for the row's own embedding: the same k
-- nearest labelled rows (the same iterative index scan, and the exact search for a row that
-- gets fewer than k of them while more exist), the same vote or mean. Returns the rows updated.
-- The prediction (text) is cast to target's type, CAST(prediction AS type): a target that cannot
-- hold it fails with the cast's error (a number label's mean into an integer column, say: use a
-- numeric or float column). Set-based, `batch_size` rows a statement (one UPDATE ... FROM the
-- batch's predictions), the rows keyed by primary key, or by (tableoid, ctid) without one; a
-- NOTICE after a batch when tributary.progress_interval ms have passed since the last one (0:
-- none), as tributary_embed_column's. Neighbours are rows whose `label` is not NULL, so the
-- rows predicted in this call never become neighbours of later batches (target is another
-- column). One statement: a cancel or statement_timeout stops it between or inside batches and
-- nothing is written. The caller's privileges: SELECT on the columns read, UPDATE on target;
-- row-level security chooses both the neighbours and the rows updated (a row the caller's
-- UPDATE policies hide is not updated nor counted). Runs with jit = off (see the top of this
-- file). Errors: 22004 NULL argument; 22023 target = label (predictions would count as labels),
-- k outside 1..1000, batch_size < 1, bad kind, or rows to predict but no row with both label and
-- embedding; 42703 unknown column; 42804 embedding column not vector/halfvec; 42501 no UPDATE
-- privilege (PostgreSQL's).
CREATE FUNCTION tributary_predict_column(
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
    -- The prediction (text) as target's type: CAST for a built-in type, else the type's input
    -- function (tributary._text_as).
    SELECT tributary._text_as('p.prediction', a.atttypid, a.atttypmod) INTO target_type
      FROM pg_catalog.pg_attribute a
     WHERE a.attrelid = tbl AND a.attname = target AND a.attnum > 0 AND NOT a.attisdropped;
    IF target_type IS NULL THEN
        RAISE EXCEPTION 'column "%" of relation "%" does not exist', target, tbl USING ERRCODE = '42703';
    END IF;
    -- Keys: the primary key's columns, compared as their own types; else (tableoid, ctid).
    SELECT 'jsonb_build_object(' || string_agg(format('%L, tributary._jsonb(t.%I)', a.attname, a.attname), ', ' ORDER BY k.ord) || ')',
           string_agg(format('s.%I = %s', a.attname,
                             tributary._text_as(format('(b.key ->> %L)', a.attname), a.atttypid, a.atttypmod)), ' AND ' ORDER BY k.ord),
           string_agg(format('t.%I = %s', a.attname,
                             tributary._text_as(format('(p.key ->> %L)', a.attname), a.atttypid, a.atttypmod)), ' AND ' ORDER BY k.ord)
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
            FROM (SELECT tributary._text(r.%1$I) AS l, r.%2$I OPERATOR(%3$s.<=>) s.%2$I AS d
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
        'UPDATE %s AS t SET %I = %s
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
