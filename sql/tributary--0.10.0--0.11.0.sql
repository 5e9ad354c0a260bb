-- tributary 0.10.0 -> 0.11.0: no value of a user's table goes through a cast a role made
-- (issue 46). A type's owner may CREATE CAST (her_type AS text / json / jsonb, or from text)
-- WITH FUNCTION her_fn; tributary now turns values into text through tributary._text (CAST for
-- built-in types, the output function for every other), rows and keys into JSON through
-- tributary._row_json, tributary._row_jsonb and tributary._jsonb (row_to_json / to_jsonb as
-- PostgreSQL writes them when no cast to json exists), and texts into values of non-built-in
-- types through tributary._from_text (the input function; tributary._text_as chooses). Jobs'
-- statements are rebuilt with them. Predictors keep to what each role may see (row-level
-- security), predict jobs are bound to their predictor's identity and table, history paths and
-- predict jobs' triggers follow the owner rule of child context, and the lows of the issue.
-- Generated from src/api/values.rs, sql/predict.sql, sql/jobs.sql, sql/match.sql,
-- sql/columns.sql, sql/learn.sql, sql/learn_jobs.sql and sql/comments.sql.

CREATE FUNCTION tributary._text(anyelement) RETURNS text
    LANGUAGE c STRICT STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'tributary_value_text';
CREATE FUNCTION tributary._row_json(anyelement) RETURNS json
    LANGUAGE c STRICT STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'tributary_row_json';
CREATE FUNCTION tributary._row_jsonb(anyelement) RETURNS jsonb
    LANGUAGE c STRICT STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'tributary_row_jsonb';
CREATE FUNCTION tributary._jsonb(anyelement) RETURNS jsonb
    LANGUAGE c STRICT STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'tributary_value_jsonb';
CREATE FUNCTION tributary._from_text(text, anyelement) RETURNS anyelement
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'tributary_from_text';

-- sql/predict.sql, sql/jobs.sql, sql/chunks.sql
-- from sql/predict.sql (new)
-- The base type of `typ`: itself, or for a domain (over a domain ...) the type under it.
CREATE OR REPLACE FUNCTION tributary._base_type(typ oid)
RETURNS oid LANGUAGE sql STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    WITH RECURSIVE d(oid, base) AS (
        SELECT t.oid, t.typbasetype FROM pg_catalog.pg_type t WHERE t.oid OPERATOR(pg_catalog.=) typ
        UNION ALL
        SELECT t.oid, t.typbasetype FROM d JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) d.base
         WHERE d.base OPERATOR(pg_catalog.<>) 0::pg_catalog.oid)
    SELECT d.oid FROM d WHERE d.base OPERATOR(pg_catalog.=) 0::pg_catalog.oid
$$;

-- from sql/predict.sql (new)
-- The SQL of `expr` (an expression of type text) as a value of type `typ` (typmod `typmod`):
-- CAST(expr AS type) when `typ` (through domains) is built in, whose casts from text are
-- PostgreSQL's own; otherwise tributary._from_text(expr, NULL::type), the type's input
-- function: a cast from text that a type's owner made never runs (src/pg/values.rs).
CREATE OR REPLACE FUNCTION tributary._text_as(expr text, typ oid, typmod integer)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN tributary._base_type(typ) OPERATOR(pg_catalog.<) 16384::pg_catalog.oid
                THEN pg_catalog.format('CAST(%s AS %s)', expr, pg_catalog.format_type(typ, typmod))
                ELSE pg_catalog.format('tributary._from_text(%s, NULL::%s)', expr, pg_catalog.format_type(typ, typmod)) END
$$;

-- from sql/predict.sql
-- A jsonb expression that identifies a row of `tbl` aliased `alias`: its primary key columns
-- ({"track_id": 1}); for a partitioned table over postgres_fdw shards, which has none, the
-- shards' primary key (tributary._shard_key_columns, sql/shards.sql); else {"ctid": "(0,1)"}.
CREATE OR REPLACE FUNCTION tributary.row_key(tbl regclass, alias text)
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

-- from sql/predict.sql
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

-- from sql/predict.sql
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

-- from sql/predict.sql
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

-- from sql/jobs.sql
-- A job's statements (claim_sql ... enqueue_sql), built from the catalog as it is now: the
-- names of the source, its target and their columns are read afresh, so a job rebuilt after
-- ALTER TABLE ... RENAME (of the table, a column or its schema) runs under the new names. Key
-- values travel as jsonb keyed by the queue's own column names (fixed when the job was made);
-- the source's primary key columns and the target table's key columns are matched to them by
-- position. Every identifier is quoted; nothing here runs a user's code.
-- Errors: 42P01 source gone; 42P16 no primary key; 42703 a text or target column missing.
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
        text_expr := 'tributary._row_json(t.*)::pg_catalog.text';   -- t.*: never a column named t
        -- Columns whose change does not change the row's text: the target and other embeddings.
        SELECT array_agg(a.attname::text) INTO excl FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
         WHERE a.attrelid = j.source AND a.attnum > 0 AND NOT a.attisdropped
           AND (t.typname IN ('vector', 'halfvec', 'sparsevec', 'bytea', 'tsvector') OR (tgt = j.source AND a.attname = j.target));
        excl := coalesce(excl, '{}') || coalesce((SELECT array_agg(x) FROM jsonb_array_elements_text(j.row_options->'exclude') x), '{}');
        differs := format('(tributary._row_jsonb(o.*) OPERATOR(pg_catalog.-) %L::pg_catalog.text[]) IS DISTINCT FROM (tributary._row_jsonb(n.*) OPERATOR(pg_catalog.-) %L::pg_catalog.text[])', excl, excl);
        guard := format('(tributary._row_jsonb(t.*) OPERATOR(pg_catalog.-) %L::pg_catalog.text[])::pg_catalog.text', excl);
    ELSE
        arr := (SELECT string_agg('tributary._text(t.' || quote_ident(x) || ')', ', ') FROM unnest(j.columns) x);
        text_expr := format('CASE WHEN pg_catalog.num_nonnulls(%s) OPERATOR(pg_catalog.>) 0 THEN pg_catalog.concat_ws(E''\n'', %s) END', arr, arr);
        -- As text: every type has one, not every type has "=".
        differs := format('ROW(%s) IS DISTINCT FROM ROW(%s)',
            (SELECT string_agg('tributary._text(o.' || quote_ident(x) || ')', ', ') FROM unnest(j.columns) x),
            (SELECT string_agg('tributary._text(n.' || quote_ident(x) || ')', ', ') FROM unnest(j.columns) x));
        nonnull := format('pg_catalog.num_nonnulls(%s) OPERATOR(pg_catalog.>) 0', (SELECT string_agg('n.' || quote_ident(x), ', ') FROM unnest(j.columns) x));
        nonnull_t := format('pg_catalog.num_nonnulls(%s) OPERATOR(pg_catalog.>) 0', arr);
        guard := text_expr;
    END IF;
    checked := CASE WHEN j.mode = 'continuous' THEN format('%s IS NOT DISTINCT FROM u.g', guard) ELSE 'true' END;

    j.claim_sql := format('WITH c AS (DELETE FROM %s AS q USING (SELECT ctid AS tid FROM %s ORDER BY %s LIMIT $1 FOR UPDATE SKIP LOCKED) AS s '
               'WHERE q.ctid OPERATOR(pg_catalog.=) s.tid RETURNING q.*) SELECT pg_catalog.jsonb_agg(DISTINCT tributary._row_jsonb(c.*))::text FROM c', j.queue, j.queue, q_cols);
    j.claim_keys_sql := format('WITH c AS (DELETE FROM %s AS q USING pg_catalog.jsonb_populate_recordset(NULL::%s, $1::pg_catalog.jsonb) AS kk WHERE (%s) OPERATOR(pg_catalog.=) (%s) RETURNING q.*) '
               'SELECT pg_catalog.jsonb_agg(DISTINCT tributary._row_jsonb(c.*))::text FROM c', j.queue, j.queue, k_q, k_kk);
    j.select_sql := format('SELECT tributary._row_jsonb(k.*)::pg_catalog.text, %s, %s FROM %s AS t JOIN pg_catalog.jsonb_populate_recordset(NULL::%s, $1::pg_catalog.jsonb) AS k ON (%s) OPERATOR(pg_catalog.=) (%s) '
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

-- from sql/jobs.sql
-- The statement that queues the rows of `rel` still to embed (rows whose target is NULL, or
-- missing from the target table, and that have some text): `rel` is the job's source (the whole
-- tree of a partitioned one; an ordinary table's own rows only) or a table of its tree. Run as
-- the job's owner.
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
        nonnull := format('pg_catalog.num_nonnulls(%s) OPERATOR(pg_catalog.>) 0', (SELECT string_agg('t.' || quote_ident(x), ', ') FROM unnest(j.columns) x));
    END IF;
    RETURN (SELECT format('INSERT INTO %s SELECT %s FROM %s%I.%I t WHERE %s AND %s', j.queue,
                          (SELECT string_agg('t.' || p, ', ') FROM unnest(pk) p),
                          CASE WHEN c.relkind = 'r' THEN 'ONLY ' ELSE '' END, n.nspname, c.relname, filter, nonnull)
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = rel);
END $$;

-- from sql/chunks.sql
-- The CREATE OR REPLACE FUNCTION of chunk job `j`'s trigger function, under the names the
-- source, its text column (the trigger's UPDATE OF column), its key and the chunk table have now.
-- The chunk table's key columns are its primary key's, less chunk_seq, matched by position.
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
            SELECT %s, k.seq, k.chunk, k.start_char, k.end_char FROM %s.tributary_chunk(tributary._text(NEW.%I), %s) AS k;
            RETURN NULL;
        END $body$$f$,
        fn, tgt, array_to_string(ck, ', '), new_k, tgt, array_to_string(ck, ', '), new_k, ext, col, chunk_args);
END $fn$;

-- from sql/chunks.sql
-- tributary_chunk_job_create(source, text_column, chunk_table [, model, chunk_tokens,
-- overlap_tokens, prompt, name]) -> the embedding job's id. The caller must be the source's
-- owner or a member of that role (a superuser is); what it makes belongs to the source's owner.
-- Errors: 42501 not the source's owner; 42P07 the chunk table exists; 42703 no such column;
-- 42P16 the source has no primary key; 22023 bad chunk_tokens/overlap_tokens; 42704 unknown
-- model or prompt; 22004 a NULL argument.
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


-- sql/match.sql, sql/columns.sql
-- Update fragment of helper C (matching, columns) for tributary 0.10.0 -> 0.11.0 (issue 46).

-- New functions first, then the changed ones in dependency order; every definition complete.

-- tributary_match_explain() under a name no other role can overload (tributary_dedup reads the
-- cut of its own call through it): the same C function, so the same explanation, shown only to
-- the roles that made it.
CREATE OR REPLACE FUNCTION tributary._match_explain() RETURNS jsonb
VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp
LANGUAGE c AS 'MODULE_PATHNAME', 'tributary_match_explain_wrapper';
COMMENT ON FUNCTION tributary._match_explain() IS 'Internal (tributary_dedup): tributary_match_explain() under a name no other role can shadow.';

-- A name the caller gave, for a message: its first 64 characters and "..." when longer (a
-- column name that names no column can be of any length). NULL in, NULL out.
CREATE OR REPLACE FUNCTION tributary._match_short(name text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN pg_catalog.length(name) OPERATOR(pg_catalog.>) 64
                THEN pg_catalog.left(name, 64) OPERATOR(pg_catalog.||) '...' ELSE name END
$$;
COMMENT ON FUNCTION tributary._match_short(text) IS 'Internal (tributary_match): a name for a message, cut to its first 64 characters.';

-- The text of a row's key: `tributary._text(t.id)` for a one-column primary key,
-- `tributary._text(ROW(t.a, t.b))` (`(1,x)`) for a composite one (the type's output function,
-- never a cast to text a role made: a value is `id::text` without one); for a partitioned table
-- over postgres_fdw shards, the shards' primary key (tributary._shard_key_columns). 42P10 when
-- `tbl` has no primary key.
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
        RETURN format('tributary._text(%I.%s)', alias, cols[1]);
    END IF;
    RETURN format('tributary._text(ROW(%s))', (SELECT string_agg(format('%I.%s', alias, c), ', ') FROM unnest(cols) c));
END $$;

-- `ARRAY[nullif(btrim(left(tributary._text(t.c1), 2048)), ''), ...]`: the matched columns of
-- `tbl` as text (the type's output function, never a cast a role made), each cut to its first
-- 2,048 characters (more than the model's window of 256 tokens holds, so the embeddings are the
-- same); a `vector` column whole (tributary._match_stored). 42703 an unknown column (its name
-- cut to 64 characters in the message), 22004 a NULL name.
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
            RAISE EXCEPTION 'column "%" of relation "%" does not exist', tributary._match_short(c), tbl
                USING ERRCODE = '42703';
        END IF;
        parts := parts || CASE WHEN tributary._match_stored(tbl, ARRAY[c]) = '{t}'
                               THEN format('tributary._text(%I.%I)', alias, c)
                               ELSE format('nullif(btrim(left(tributary._text(%I.%I), 2048)), %L)', alias, c, '') END;
    END LOOP;
    RETURN 'ARRAY[' || array_to_string(parts, ', ') || ']::text[]';
END $$;

-- 42703 when `labels` lacks left_key, right_key or is_match (or cannot be read); 42804 when
-- is_match is not boolean (or a domain over boolean).
CREATE OR REPLACE FUNCTION tributary._match_check_labels(labels regclass) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c text;
    typ oid;
    base oid;
BEGIN
    FOREACH c IN ARRAY ARRAY['left_key', 'right_key', 'is_match'] LOOP
        SELECT a.atttypid INTO typ FROM pg_catalog.pg_attribute a
         WHERE a.attrelid = labels AND a.attname = c AND a.attnum > 0 AND NOT a.attisdropped;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'column "%" of relation "%" does not exist', c, labels USING ERRCODE = '42703',
                HINT = 'labels needs columns left_key text, right_key text, is_match bool.';
        END IF;
    END LOOP;
    -- (typ: is_match's type; through domains to the base type)
    base := typ;
    WHILE (SELECT t.typtype FROM pg_catalog.pg_type t WHERE t.oid = base) = 'd' LOOP
        SELECT t.typbasetype INTO base FROM pg_catalog.pg_type t WHERE t.oid = base;
    END LOOP;
    IF base IS DISTINCT FROM 'pg_catalog.bool'::pg_catalog.regtype::pg_catalog.oid THEN
        RAISE EXCEPTION 'column "is_match" of relation "%" is of type %, not boolean', labels, pg_catalog.format_type(typ, NULL)
            USING ERRCODE = '42804',
                  DETAIL = 'is_match says whether the labelled pair is a match (true) or not (false); NULL leaves the pair out.',
                  HINT = 'labels needs columns left_key text, right_key text, is_match bool; a view over the table can convert it.';
    END IF;
END $$;

-- The work of tributary_match (its arguments, then `all_pairs`): every candidate pair with its
-- probability when `all_pairs` (tributary_dedup's clusters need the pairs it rejects too), else
-- the accepted ones only; `accepted` says which, `evidence` (accepted pairs only) each column's
-- similarity, agreement level and weight (its term of the log odds of a match).
CREATE OR REPLACE FUNCTION tributary._match_pairs(
    left_table regclass, right_table regclass, columns text[], right_columns text[],
    k integer, threshold float8, one_to_one boolean, labels regclass, model text, min_precision float8,
    all_pairs boolean)
RETURNS TABLE (left_key text, right_key text, score float8, accepted boolean, evidence jsonb)
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
    old_ef text := current_setting('hnsw.ef_search', true);
    old_iter text := current_setting('hnsw.iterative_scan', true);
    report boolean;
    near text;
    same text;
    fill_sql text;
    sum_sql text;
    sum_cols text;
    zero text;
    made oid[] := '{}';   -- the temporary tables and view this call made, to drop (never a caller's)
    pair_order text;
    i int;
    j int;
    t_off int;
    ei int;
    n_emb int;
    n_str int;
    stored boolean[];
    t0 timestamptz := clock_timestamp();   -- stage times for the NOTICE: embedding, candidates, evidence
    t_embed float8;
    t_cand float8;
    n_cand bigint;
    n_acc bigint;
    n_lab int;
    nlev int;
    fit_p float8[];
    fit_prior float8;
    fit_partnered float8[];
    fit_m float8[];
    fit_u float8[];
    fit_bounds float8[];
    fit_iter int;
    fit_conv boolean;
    est float8;
    acc_sum float8;
    exp_prec float8;
    exp_rec float8;
    col_info jsonb;
    explanation jsonb;
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
            HINT = 'Leave it NULL to accept the pairs whose probability of a match is 0.5 or more.';
    END IF;
    IF min_precision <= 0 OR min_precision > 1 THEN
        RAISE EXCEPTION 'min_precision must be above 0 and at most 1, not %', min_precision USING ERRCODE = '22023',
            HINT = 'It is the share of the accepted pairs that should be matches, as the model expects it: 0.99, say.';
    END IF;
    IF threshold IS NOT NULL AND min_precision IS NOT NULL THEN
        RAISE EXCEPTION 'threshold and min_precision cannot both be given' USING ERRCODE = '22023',
            HINT = 'threshold cuts the probabilities where you say; min_precision has the cut chosen for an expected precision.';
    END IF;
    self := left_table = right_table;

    -- 1. The rows of each side: key, values, the joined text, its embedding.
    PERFORM tributary._match_names_free('tributary_match_');
    -- (the dimension through pgvector's cast to real[]: no function of pgvector's schema is
    -- looked up by name)
    dims := pg_catalog.array_length(CAST(tributary._embed_text('dimension', model) AS pg_catalog.float4[]), 1);
    -- Defined now that the library is loaded: '0' turns progress NOTICEs off.
    report := current_setting('tributary.progress_interval') <> '0';
    EXECUTE format('CREATE TEMP TABLE tributary_match_l (key text PRIMARY KEY, v text[], e %s.vector(%s))
                    ON COMMIT DROP', vec, dims);
    made := made || 'pg_temp.tributary_match_l'::regclass::oid;
    -- A side's rows: key and values (the embedding comes in step 2).
    fill_sql := 'INSERT INTO pg_temp.tributary_match_%s (key, v)
             SELECT %s, %s FROM %s AS t';
    EXECUTE format(fill_sql, 'l', tributary._match_key(left_table, 't'), tributary._match_values(left_table, columns, 't'),
                   left_table);
    IF self THEN
        CREATE TEMP VIEW tributary_match_r AS SELECT * FROM pg_temp.tributary_match_l;
        made := made || 'pg_temp.tributary_match_r'::regclass::oid;
    ELSE
        CREATE TEMP TABLE tributary_match_r (LIKE pg_temp.tributary_match_l INCLUDING ALL) ON COMMIT DROP;
        made := made || 'pg_temp.tributary_match_r'::regclass::oid;
        EXECUTE format(fill_sql, 'r', tributary._match_key(right_table, 't'), tributary._match_values(right_table, rcols, 't'),
                       right_table);
    END IF;
    SELECT count(*) INTO n_left FROM pg_temp.tributary_match_l;
    SELECT count(*) INTO n_right FROM pg_temp.tributary_match_r;
    IF n_left = 0 OR n_right = 0 OR (self AND n_left < 2) THEN
        PERFORM tributary._match_remember(jsonb_build_object(
            'left_table', left_table::text, 'right_table', right_table::text,
            'rows', jsonb_build_array(n_left, n_right), 'candidate_pairs', 0, 'accepted', 0,
            'how', 'nothing to match'));
        PERFORM tributary._match_drop(made);
        RETURN;
    END IF;
    -- 2. Which columns are phrases (embedded: 3 words or more on average, mostly letters) and
    -- which are short (string similarity: 64 characters or fewer on average, or not phrases).
    SELECT array_agg(coalesce(p.words >= 3 AND p.letters >= 0.5, false) ORDER BY p.i),
           array_agg(coalesce(p.len <= 64 OR NOT (p.words >= 3 AND p.letters >= 0.5), true) ORDER BY p.i)
      INTO emb, str
      FROM (SELECT c.i, avg(array_length(regexp_split_to_array(x.v[c.i], '\s+'), 1)) AS words,
                   avg(length(x.v[c.i])) AS len, avg((x.v[c.i] ~ '[[:alpha:]]')::int) AS letters
              FROM generate_series(1, n) c(i)
              LEFT JOIN (SELECT v FROM pg_temp.tributary_match_l UNION ALL
                         SELECT v FROM pg_temp.tributary_match_r WHERE NOT self) x ON x.v[c.i] IS NOT NULL
             GROUP BY c.i) p;
    -- A vector column is an embedding the caller stored: a phrase column, compared by it only.
    stored := tributary._match_stored(left_table, columns);
    IF stored IS DISTINCT FROM tributary._match_stored(right_table, rcols) THEN
        RAISE EXCEPTION 'a matched column is a vector on one side only' USING ERRCODE = '42804',
            DETAIL = format('vector columns: %s of %s, %s of %s', left_table,
                            (SELECT string_agg(c, ', ') FROM unnest(columns, stored) x(c, s) WHERE s), right_table,
                            (SELECT string_agg(c, ', ') FROM unnest(rcols, tributary._match_stored(right_table, rcols)) x(c, s) WHERE s)),
            HINT = 'Pair a stored embedding with the other table''s embedding of the same column, by the same model.';
    END IF;
    FOR i IN 1 .. n LOOP
        IF stored[i] THEN
            emb[i] := true;
            str[i] := false;
        END IF;
    END LOOP;
    n_emb := coalesce(cardinality(array_positions(emb, true)), 0);
    -- Each phrase column's distinct values, embedded once.
    -- (a hash index on the value: a btree's entries stop at 2,704 bytes, less than a long value
    -- or a stored embedding's text)
    EXECUTE format('CREATE TEMP TABLE tributary_match_v (col int, val text, e %s.vector(%s)) ON COMMIT DROP', vec, dims);
    made := made || 'pg_temp.tributary_match_v'::regclass::oid;
    -- (a stored embedding is taken as it is: of another dimension than the model's, pgvector's
    -- 22000 says so)
    EXECUTE format(
        'INSERT INTO pg_temp.tributary_match_v (col, val, e)
         SELECT DISTINCT c.i, x.v[c.i], CASE WHEN $2[c.i] THEN x.v[c.i]::%s.vector END
           FROM generate_series(1, $3) c(i),
                LATERAL (SELECT v FROM pg_temp.tributary_match_l UNION ALL SELECT v FROM pg_temp.tributary_match_r WHERE NOT $4) x
          WHERE $1[c.i] AND x.v[c.i] IS NOT NULL', vec)
      USING emb, stored, n, self;
    CREATE INDEX ON pg_temp.tributary_match_v USING hash (val);
    ANALYZE pg_temp.tributary_match_v;
    IF n_emb > 0 THEN
        PERFORM tributary._embed_column('pg_temp.tributary_match_v', '{val}', 'e', model => model);
    END IF;
    -- The rows' embeddings, for the nearest-neighbour candidates: of the phrase columns only
    -- (short columns find candidates by blocking, step 3). One phrase column: its value's
    -- embedding; several: the sum of their values' embeddings (no second pass of the model over
    -- longer texts; the direction of their normalised sum); none: none.
    IF n_emb = 1 THEN
        ei := array_position(emb, true);
        UPDATE pg_temp.tributary_match_l l SET e = v.e FROM pg_temp.tributary_match_v v WHERE v.col = ei AND v.val = l.v[ei];
        IF NOT self THEN
            UPDATE pg_temp.tributary_match_r r SET e = v.e FROM pg_temp.tributary_match_v v WHERE v.col = ei AND v.val = r.v[ei];
        END IF;
    ELSIF n_emb > 1 THEN
        -- (the sum through pgvector's + operator, not its sum() and l2_normalize(): no function
        -- of pgvector's schema is called by name, where another role could add an overload that
        -- makes the call ambiguous, 42725; the length does not matter, only cosine distances
        -- read these embeddings)
        SELECT format('CASE WHEN pg_catalog.num_nonnulls(%s) OPERATOR(pg_catalog.>) 0 THEN %s END',
                      string_agg(format('s.e%s', c.p), ', ' ORDER BY c.p),
                      string_agg(format('coalesce(s.e%s, $1::%s.vector)', c.p, vec), format(' OPERATOR(%s.+) ', vec) ORDER BY c.p)),
               string_agg(format('(SELECT v.e FROM pg_temp.tributary_match_v v WHERE v.col = %s AND v.val = x.v[%s]) AS e%s',
                                 c.p, c.p, c.p), ', ' ORDER BY c.p)
          INTO sum_sql, sum_cols
          FROM unnest(array_positions(emb, true)) c(p);
        zero := '[' || array_to_string(array_fill(0, ARRAY[dims]), ',') || ']';
        EXECUTE format('UPDATE pg_temp.tributary_match_l x SET e = (SELECT %s FROM (SELECT %s) s)', sum_sql, sum_cols)
          USING zero;
        IF NOT self THEN
            EXECUTE format('UPDATE pg_temp.tributary_match_r x SET e = (SELECT %s FROM (SELECT %s) s)', sum_sql, sum_cols)
              USING zero;
        END IF;
    END IF;

    t_embed := extract(epoch FROM clock_timestamp() - t0);
    -- 3. Candidates: k nearest each way, and the unrelated pairs that calibrate the evidence.
    CREATE TEMP TABLE tributary_match_c (lk text, rk text, kind "char", PRIMARY KEY (lk, rk, kind)) ON COMMIT DROP;
    made := made || 'pg_temp.tributary_match_c'::regclass::oid;
    -- pgvector takes hnsw.ef_search up to 1000: k up to 500 gets 2k candidates, beyond that 1000
    -- (iterative scans go on past ef_search when the filter leaves fewer than k).
    PERFORM set_config('hnsw.ef_search', least(1000, greatest(40, 2 * k))::text, true);
    PERFORM set_config('hnsw.iterative_scan', 'relaxed_order', true);
    IF n_left > 2000 AND n_emb > 0 THEN
        EXECUTE format('CREATE INDEX ON pg_temp.tributary_match_l USING hnsw (e %s.vector_cosine_ops)', vec);
    END IF;
    IF n_right > 2000 AND n_emb > 0 AND NOT self THEN
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
    IF n_emb > 0 THEN
        EXECUTE 'INSERT INTO pg_temp.tributary_match_c ' || format(near, pair_order, 'l', 'r', same, vec, k);
    END IF;
    IF NOT self AND n_emb > 0 THEN
        EXECUTE 'INSERT INTO pg_temp.tributary_match_c ' || format(near, 'b, a', 'r', 'l', same, vec, k);
    END IF;
    -- And blocking on rare values: pairs that agree exactly (case aside) on a short column's
    -- value, or on the values of two short columns, that at most k rows of each side hold (an
    -- id, a date, a phone number; a surname with a postcode): at most rows x k pairs a key, and
    -- a pair whose values all have typing errors but two is still found.
    n_str := coalesce(cardinality(array_positions(str, true)), 0);
    FOR i IN 1 .. n LOOP
        CONTINUE WHEN NOT str[i];
        FOR j IN i .. n LOOP
            -- (two columns' values together only up to 12 short columns: 78 keys at most)
            CONTINUE WHEN NOT str[j] OR (j > i AND n_str > 12);
            EXECUTE format(
                'INSERT INTO pg_temp.tributary_match_c
                 WITH lv AS (SELECT key, lower(v[$1] || chr(31) || CASE WHEN $2 = $1 THEN '''' ELSE v[$2] END) AS x
                               FROM pg_temp.tributary_match_l WHERE v[$1] IS NOT NULL AND v[$2] IS NOT NULL),
                      rv AS (SELECT key, lower(v[$1] || chr(31) || CASE WHEN $2 = $1 THEN '''' ELSE v[$2] END) AS x
                               FROM pg_temp.tributary_match_r WHERE v[$1] IS NOT NULL AND v[$2] IS NOT NULL),
                      rare AS (SELECT x FROM lv GROUP BY x HAVING count(*) <= $3
                               INTERSECT SELECT x FROM rv GROUP BY x HAVING count(*) <= $3)
                 SELECT %s, ''c'' FROM (SELECT lv.key AS a, rv.key AS b FROM lv JOIN rv ON rv.x = lv.x
                                         WHERE lv.x IN (SELECT x FROM rare) AND (NOT $4 OR lv.key <> rv.key)) p
                 ON CONFLICT DO NOTHING', pair_order)
              USING i, j, k, self;
        END LOOP;
    END LOOP;
    -- Small tables: every pair is a candidate (at most 50,000 pairs), so none is missed.
    IF (CASE WHEN self THEN n_left * (n_left - 1) / 2 ELSE n_left * n_right END) <= 50000 THEN
        EXECUTE format(
            'INSERT INTO pg_temp.tributary_match_c
             SELECT %s, ''c'' FROM (SELECT l.key AS a, r.key AS b FROM pg_temp.tributary_match_l l, pg_temp.tributary_match_r r
                                     WHERE NOT $1 OR l.key < r.key) p
             ON CONFLICT DO NOTHING', pair_order)
          USING self;
    END IF;
    PERFORM set_config('hnsw.ef_search', coalesce(nullif(old_ef, ''), '40'), true);
    PERFORM set_config('hnsw.iterative_scan', coalesce(nullif(old_iter, ''), 'off'), true);
    -- Unrelated pairs, which give u (how often two rows that are not the same thing agree):
    -- about 10,000 pairs (every pair of small tables), rows of both sides in md5(key) order,
    -- row i of the left with rows i + n/2 + t n/T of the right for T offsets t: deterministic,
    -- spread over both sides, and almost never a true pair.
    t_off := least(n_right, greatest(1, ceil(10000.0 / n_left)))::int;
    INSERT INTO pg_temp.tributary_match_c
    SELECT l.key, r.key, 'u'
      FROM (SELECT key, row_number() OVER (ORDER BY md5(key)) - 1 AS i FROM pg_temp.tributary_match_l) l
     CROSS JOIN generate_series(0, t_off - 1) t(t)
      JOIN (SELECT key, row_number() OVER (ORDER BY md5(key)) - 1 AS i FROM pg_temp.tributary_match_r) r
        ON r.i = (l.i + n_right / 2 + t.t * n_right / t_off) % n_right
     WHERE l.i < ceil(10000.0 / t_off) AND l.key <> r.key
    ON CONFLICT DO NOTHING;
    IF labels IS NOT NULL THEN
        PERFORM tributary._match_check_labels(labels);
        EXECUTE format(
            'INSERT INTO pg_temp.tributary_match_c
             SELECT %s, CASE WHEN bool_or(s.is_match) THEN ''m'' ELSE ''n'' END
               FROM (SELECT tributary._text(x.left_key) AS a, tributary._text(x.right_key) AS b, x.is_match
                       FROM %s x WHERE x.is_match IS NOT NULL) s
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
    -- u: the mean raw similarity of unrelated pairs; evidence = the larger of the rescaled ones
    -- (a name with a typing error is far in embedding space and near by edit distance); a
    -- missing value stays missing (least and greatest skip NULLs: test for it first).
    WITH u AS (SELECT f.i, avg(f.es) AS ue, avg(f.ss) AS us FROM pg_temp.tributary_match_f f WHERE f.kind = 'u' GROUP BY f.i)
    UPDATE pg_temp.tributary_match_f f
       SET es = greatest(CASE WHEN f.es IS NOT NULL AND u.ue < 0.99 THEN greatest(0, least(1, (f.es - u.ue) / (1 - u.ue))) END,
                         CASE WHEN f.ss IS NOT NULL AND u.us < 0.99 THEN greatest(0, least(1, (f.ss - u.us) / (1 - u.us))) END)
      FROM u WHERE u.i = f.i;
    CREATE TEMP TABLE tributary_match_s (lk text, rk text, kind "char", score float8) ON COMMIT DROP;
    made := made || 'pg_temp.tributary_match_s'::regclass::oid;
    SELECT count(*) INTO n_cand FROM pg_temp.tributary_match_c c WHERE c.kind = 'c';
    SELECT count(*) INTO n_lab FROM pg_temp.tributary_match_c c WHERE c.kind IN ('m', 'n');
    IF labels IS NOT NULL AND n_lab = 0 THEN
        RAISE EXCEPTION 'no labelled pair of "%" names rows of both tables', labels USING ERRCODE = '22023',
            HINT = 'left_key and right_key hold primary key values as text (id::text, a composite key as (a,b)).';
    END IF;
    IF n_cand > 0 THEN
        -- 5. The match probability without labels: the two-class model fitted by EM
        -- (tributary._match_em) to every candidate pair's evidence, the rows numbered in one
        -- space (a row of one table is one number however many pairs it is in).
        CREATE TEMP TABLE tributary_match_n ON COMMIT DROP AS
        SELECT 'l'::text AS side, l.key, (row_number() OVER (ORDER BY l.key) - 1)::int AS i FROM pg_temp.tributary_match_l l
        UNION ALL
        SELECT 'r', r.key, (n_left + row_number() OVER (ORDER BY r.key) - 1)::int FROM pg_temp.tributary_match_r r WHERE NOT self;
        made := made || 'pg_temp.tributary_match_n'::regclass::oid;
        SELECT em.p, em.prior, em.partnered, em.m, em.u, em.bounds, em.iterations, em.converged
          INTO fit_p, fit_prior, fit_partnered, fit_m, fit_u, fit_bounds, fit_iter, fit_conv
          FROM (SELECT array_agg(nl.i ORDER BY c.lk, c.rk) AS a, array_agg(nr.i ORDER BY c.lk, c.rk) AS b
                  FROM pg_temp.tributary_match_c c
                  JOIN pg_temp.tributary_match_n nl ON nl.side = 'l' AND nl.key = c.lk
                  JOIN pg_temp.tributary_match_n nr ON nr.side = CASE WHEN self THEN 'l' ELSE 'r' END AND nr.key = c.rk
                 WHERE c.kind = 'c') p,
               (SELECT array_agg(f.es ORDER BY f.lk, f.rk, f.i) AS x FROM pg_temp.tributary_match_f f WHERE f.kind = 'c') x,
               (SELECT coalesce(array_agg(f.es ORDER BY f.lk, f.rk, f.i), '{}') AS ux FROM pg_temp.tributary_match_f f WHERE f.kind = 'u') ux,
               (SELECT coalesce(array_agg(f.es ORDER BY f.lk, f.rk, f.i), '{}') AS lx FROM pg_temp.tributary_match_f f WHERE f.kind IN ('m', 'n')) lx,
               (SELECT coalesce(array_agg(c.kind = 'm' ORDER BY c.lk, c.rk), '{}') AS ly FROM pg_temp.tributary_match_c c WHERE c.kind IN ('m', 'n')) ly,
               LATERAL tributary._match_em(p.a, p.b, x.x, ux.ux, lx.lx, ly.ly, n_left, n_right, self, one_to_one) em;
        nlev := cardinality(fit_bounds) + 1;
        INSERT INTO pg_temp.tributary_match_s
        SELECT q.lk, q.rk, 'c', fit_p[q.o]
          FROM (SELECT c.lk, c.rk, row_number() OVER (ORDER BY c.lk, c.rk) AS o FROM pg_temp.tributary_match_c c WHERE c.kind = 'c') q;
        -- A labelled pair among the candidates has its label's probability; one to one, a row
        -- with a labelled partner has no other.
        IF labels IS NOT NULL THEN
            IF one_to_one THEN
                UPDATE pg_temp.tributary_match_s s SET score = 0
                 WHERE s.lk IN (SELECT c.lk FROM pg_temp.tributary_match_c c WHERE c.kind = 'm')
                    OR s.rk IN (SELECT c.rk FROM pg_temp.tributary_match_c c WHERE c.kind = 'm');
            END IF;
            UPDATE pg_temp.tributary_match_s s SET score = (c.kind = 'm')::int
              FROM pg_temp.tributary_match_c c
             WHERE c.kind IN ('m', 'n') AND c.lk = s.lk AND c.rk = s.rk;
        END IF;
    END IF;

    -- 6. The cut: given, or the lowest whose accepted pairs have a mean probability (the
    -- model's expected precision) of min_precision or more, or probability 0.5.
    IF threshold IS NOT NULL THEN
        thr := threshold; how := 'given';
    ELSIF min_precision IS NOT NULL THEN
        SELECT tributary._match_cut(array_agg(a.score), min_precision) INTO thr
          FROM tributary._match_accepted(self, 0, one_to_one) a;
        how := format('the lowest cut with an expected precision of %s or more', min_precision);
        IF thr IS NULL THEN
            thr := 'Infinity'; how := format('no cut reaches an expected precision of %s', min_precision);
        END IF;
    ELSE
        thr := 0.5; how := 'probability of a match 0.5';
    END IF;
    CREATE TEMP TABLE tributary_match_a ON COMMIT DROP AS
    SELECT a.lk, a.rk FROM tributary._match_accepted(self, thr, one_to_one) a;
    made := made || 'pg_temp.tributary_match_a'::regclass::oid;
    SELECT count(*), coalesce(avg(s.score), 1), coalesce(sum(s.score), 0) INTO n_acc, exp_prec, acc_sum
      FROM pg_temp.tributary_match_s s JOIN pg_temp.tributary_match_a a ON a.lk = s.lk AND a.rk = s.rk;
    -- The expected number of matches among the candidates (one to one, a row's candidates'
    -- probabilities add up to 1 at most: the EM's shares, and a labelled partner leaves the
    -- others at 0).
    SELECT coalesce(sum(s.score), 0) INTO est FROM pg_temp.tributary_match_s s;
    exp_rec := CASE WHEN est > 0 THEN acc_sum / est ELSE 1 END;

    -- 7. What it learned and decided: for tributary_match_explain() and the NOTICE. Per column:
    -- how it was compared and m and u over the agreement levels.
    SELECT jsonb_agg(jsonb_build_object(
               'column', columns[c.i], 'right_column', rcols[c.i],
               'compared_by', CASE WHEN emb[c.i] AND str[c.i] THEN 'embedding and string similarity'
                                   WHEN emb[c.i] THEN 'embedding' ELSE 'string similarity' END)
             || CASE WHEN fit_m IS NOT NULL THEN jsonb_build_object(
                    'm', (SELECT jsonb_agg(fit_m[(c.i - 1) * nlev + l] ORDER BY l) FROM generate_series(1, nlev) l),
                    'u', (SELECT jsonb_agg(fit_u[(c.i - 1) * nlev + l] ORDER BY l) FROM generate_series(1, nlev) l),
                    'agree_m', round((fit_m[(c.i - 1) * nlev + nlev - 1] + fit_m[(c.i - 1) * nlev + nlev])::numeric, 4),
                    'agree_u', round((fit_u[(c.i - 1) * nlev + nlev - 1] + fit_u[(c.i - 1) * nlev + nlev])::numeric, 4))
                  ELSE '{}'::jsonb END
             ORDER BY c.i)
      INTO col_info
      FROM generate_series(1, n) c(i);
    explanation := jsonb_build_object(
        'left_table', left_table::text, 'right_table', right_table::text,
        'rows', jsonb_build_array(n_left, n_right), 'k', k, 'candidate_pairs', n_cand,
        'model', 'Fellegi-Sunter, m, u and prior fitted by EM' || CASE WHEN one_to_one THEN ', one to one' ELSE '' END
                 || CASE WHEN labels IS NOT NULL THEN format(', with %s labelled pairs', n_lab) ELSE '' END,
        'labelled_pairs', CASE WHEN labels IS NOT NULL THEN n_lab END,
        'levels', CASE WHEN fit_bounds IS NOT NULL THEN
                      (SELECT jsonb_agg(CASE WHEN l = 1 THEN '< ' || fit_bounds[1]
                                             WHEN l = nlev THEN '>= ' || fit_bounds[nlev - 1]
                                             ELSE fit_bounds[l - 1] || '-' || fit_bounds[l] END ORDER BY l)
                         FROM generate_series(1, nlev) l) END,
        'prior', fit_prior,
        'rows_with_a_partner', CASE WHEN fit_partnered IS NOT NULL AND one_to_one THEN
                                   jsonb_build_array(round(fit_partnered[1]::numeric, 4), round(fit_partnered[2]::numeric, 4)) END,
        'iterations', fit_iter, 'converged', fit_conv,
        'estimated_matches', round(est::numeric, 1),
        'threshold', CASE WHEN thr = 'Infinity' THEN NULL ELSE round(thr::numeric, 6) END, 'how', how,
        'accepted', n_acc, 'expected_precision', round(exp_prec::numeric, 4), 'expected_recall', round(exp_rec::numeric, 4),
        'columns', col_info,
        'seconds', jsonb_build_object('embedding', round(t_embed::numeric, 2), 'candidates', round(t_cand::numeric, 2),
                                      'evidence_and_fit', round((extract(epoch FROM clock_timestamp() - t0) - t_embed - t_cand)::numeric, 2)));
    PERFORM tributary._match_remember(explanation);
    IF report THEN
        RAISE NOTICE 'tributary_match: % x % rows, % candidate pairs (k = %); %; estimated matches %, threshold % (%), accepted %, expected precision %, expected recall %; per column P(agree | match) / P(agree | non-match): %; % s embedding, % s candidates, % s evidence and fit',
            n_left, n_right, n_cand, k, explanation->>'model', round(est::numeric, 1),
            coalesce(round(thr::numeric, 4)::text, 'none'), how, n_acc, round(exp_prec::numeric, 4), round(exp_rec::numeric, 4),
            coalesce((SELECT string_agg(format('%s %s / %s', e->>'column', e->>'agree_m', e->>'agree_u'), ', ')
                        FROM jsonb_array_elements(col_info) e WHERE e ? 'agree_m'), 'none'),
            explanation->'seconds'->>'embedding', explanation->'seconds'->>'candidates', explanation->'seconds'->>'evidence_and_fit';
    END IF;

    -- 8. The pairs: accepted ones with their evidence per column, and (all_pairs) the others.
    RETURN QUERY
    WITH ev AS (
        SELECT f.lk, f.rk,
               jsonb_object_agg(columns[f.i], jsonb_build_object(
                   'similarity', round(f.es::numeric, 4),
                   'level', CASE WHEN fit_bounds IS NOT NULL AND f.es IS NOT NULL THEN width_bucket(f.es, fit_bounds) END,
                   'weight', round((CASE WHEN f.es IS NULL THEN 0
                                         WHEN fit_m IS NOT NULL THEN
                                             ln(fit_m[(f.i - 1) * nlev + width_bucket(f.es, fit_bounds) + 1]
                                                / fit_u[(f.i - 1) * nlev + width_bucket(f.es, fit_bounds) + 1])
                                         ELSE 0 END)::numeric, 3))
                   ORDER BY f.i) AS evidence
          FROM pg_temp.tributary_match_f f
          JOIN pg_temp.tributary_match_a a ON a.lk = f.lk AND a.rk = f.rk
         WHERE f.kind = 'c'
         GROUP BY f.lk, f.rk)
    SELECT s.lk, s.rk, s.score, a.lk IS NOT NULL, ev.evidence
      FROM pg_temp.tributary_match_s s
      LEFT JOIN pg_temp.tributary_match_a a ON a.lk = s.lk AND a.rk = s.rk
      LEFT JOIN ev ON ev.lk = s.lk AND ev.rk = s.rk
     WHERE all_pairs OR a.lk IS NOT NULL;

    PERFORM tributary._match_drop(made);
END $$;

-- tributary_dedup(tbl, columns [, k, threshold, labels, model, min_precision]): groups of rows
-- of `tbl` that are the same thing, from every candidate pair of tributary_match(tbl, tbl,
-- columns, k => k, threshold => threshold, one_to_one => false, labels => labels, model => model,
-- min_precision => min_precision) and its probability: the accepted pairs, most probable first,
-- join their rows' groups unless the pairs compared between the two groups have a mean
-- probability under the cut (average linkage, tributary._match_clusters), so a group is not
-- joined through one strong link when the other pairs it would hold are unlikely; a row and two
-- copies of it still form one group. Returns `(cluster, key)` for every row in a group of two
-- or more: `cluster` numbers the groups 1, 2, ... in the order of their smallest key, `key` as
-- tributary_match writes it. tributary_match_explain() describes the call. Errors:
-- tributary_match's.
CREATE OR REPLACE FUNCTION tributary_dedup(
    tbl regclass, columns text[], k integer DEFAULT 10, threshold float8 DEFAULT NULL,
    labels regclass DEFAULT NULL, model text DEFAULT NULL, min_precision float8 DEFAULT NULL)
RETURNS TABLE (cluster bigint, key text)
LANGUAGE plpgsql VOLATILE SET jit = off SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    thr float8;
    made oid[] := '{}';   -- the temporary tables this call made, to drop (never a caller's)
BEGIN
    IF tbl IS NULL THEN
        RAISE EXCEPTION 'tbl must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM tributary._match_names_free('tributary_dedup_');
    CREATE TEMP TABLE tributary_dedup_e ON COMMIT DROP AS
    SELECT m.left_key AS a, m.right_key AS b, m.score AS p
      FROM tributary._match_pairs(tbl, tbl, columns, NULL, k, threshold, false, labels, model, min_precision, true) m
     WHERE m.score IS NOT NULL;
    made := made || 'pg_temp.tributary_dedup_e'::regclass::oid;
    thr := coalesce((tributary._match_explain()->>'threshold')::float8, 'Infinity');
    -- The rows of the pairs, numbered in key order (so a group's smallest number is its smallest key).
    CREATE TEMP TABLE tributary_dedup_n ON COMMIT DROP AS
    SELECT x.k AS node, (row_number() OVER (ORDER BY x.k) - 1)::int AS i
      FROM (SELECT e.a AS k FROM pg_temp.tributary_dedup_e e UNION SELECT e.b FROM pg_temp.tributary_dedup_e e) x;
    made := made || 'pg_temp.tributary_dedup_n'::regclass::oid;
    RETURN QUERY
    WITH g AS (
        SELECT tributary._match_clusters(array_agg(na.i ORDER BY e.a, e.b), array_agg(nb.i ORDER BY e.a, e.b),
                                         array_agg(e.p ORDER BY e.a, e.b), thr) AS c
          FROM pg_temp.tributary_dedup_e e
          JOIN pg_temp.tributary_dedup_n na ON na.node = e.a
          JOIN pg_temp.tributary_dedup_n nb ON nb.node = e.b),
         member AS (
        SELECT n.node, g.c[n.i + 1] AS comp, count(*) OVER (PARTITION BY g.c[n.i + 1]) AS size
          FROM pg_temp.tributary_dedup_n n, g)
    SELECT dense_rank() OVER (ORDER BY m.comp), m.node FROM member m WHERE m.size > 1 ORDER BY m.comp, m.node;
    PERFORM tributary._match_drop(made);
END $$;

-- tributary_embed_for(tbl, col, text [, prompt]) -> vector: the query embedding of `text` for
-- column `col` of `tbl`, by the model recorded for that column. `prompt` defaults to the model's
-- prompt named 'query' when it has one (search queries against embedded documents), else to its
-- default prompt. A NULL table, column or text gives NULL. Errors: 42704 no model recorded for the column; those of
-- tributary_embed.
CREATE OR REPLACE FUNCTION tributary_embed_for(tbl regclass, col name, text text, prompt text DEFAULT NULL)
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
    -- (tributary_embed's C function under a name in schema tributary, where no other role can
    -- add an overload that makes the call ambiguous: sql/match.sql)
    RETURN tributary._embed_text(text, m, p);
END $$;

-- sql/learn.sql, sql/learn_jobs.sql, src/api/learn.rs
-- Update fragment of helper B (predictors: sql/learn.sql, sql/learn_jobs.sql, src/api/learn.rs,
-- src/worker/predict.rs) for tributary 0.10.0 -> 0.11.0 (issue 46): values of a user's table to
-- text through tributary._text (src/api/values.rs must come first), predictors kept to what each
-- role may see (read_tables, read_columns, tributary._predictor_hidden, the view), the owner rule
-- for history paths (tributary._learn_trusted), predict jobs bound to their predictor
-- (predictor_owner; tributary._predict_column_job), the lows. Every definition complete, in
-- dependency order. Needs tributary._text_as (sql/predict.sql) before any call, not before
-- creation (plpgsql and the Rust resolve it when run).

-- The catalog: every table a predictor reads and the columns of each (NULL for predictors trained
-- before 0.11.0: their owner's alone until trained again).
ALTER TABLE tributary._predictors ADD COLUMN read_tables regclass[], ADD COLUMN read_columns jsonb;
-- Predict jobs: bound to the predictor's owner when made (existing jobs: their predictor's owner now).
ALTER TABLE tributary._predict_jobs ADD COLUMN predictor_owner regrole;
UPDATE tributary._predict_jobs j SET predictor_owner = p.owner
  FROM tributary._predictors p WHERE p.name OPERATOR(pg_catalog.=) j.predictor;

-- `s` cut to 64 characters (names echoed in messages: a 1 MB name makes no 1 MB error).
CREATE FUNCTION tributary._learn_short(s text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN length(s) <= 64 THEN s ELSE left(s, 64) || '...' END
$$;

-- The first ten of `items`, quoted and cut (tributary._learn_short), and how many more.
CREATE FUNCTION tributary._learn_list(items text[]) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT string_agg(quote_literal(tributary._learn_short(i)), ', ' ORDER BY o)
           || CASE WHEN cardinality(items) > 10 THEN format(' and %s more', cardinality(items) - 10) ELSE '' END
      FROM unnest(items) WITH ORDINALITY u(i, o) WHERE o <= 10
$$;

-- The type category of type `typ` seen through domains, and its name when that base type is
-- built in (OID below 16384; NULL for an enum, a composite, a range or any type a role made, so
-- that only PostgreSQL's own casts and operators turn a value into a number).
CREATE FUNCTION tributary._learn_type(typ oid, OUT category "char", OUT typname name)
RETURNS record LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    WITH RECURSIVE d(oid, depth) AS (
        SELECT typ, 0
        UNION ALL
        SELECT t.typbasetype, d.depth + 1 FROM d JOIN pg_type t ON t.oid = d.oid
         WHERE t.typtype = 'd' AND d.depth < 64)
    SELECT t.typcategory, CASE WHEN t.oid < 16384 THEN t.typname END
      FROM d JOIN pg_type t ON t.oid = d.oid ORDER BY d.depth DESC LIMIT 1
$$;

-- The type of column `col` of `rel` as format_type() writes it, and its type category and
-- built-in type name through domains (tributary._learn_type), or NULLs.
CREATE OR REPLACE FUNCTION tributary._learn_column_type(rel regclass, col name, OUT sql_type text, OUT category "char", OUT typname name)
RETURNS record LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT format_type(a.atttypid, a.atttypmod), b.category, b.typname
      FROM pg_attribute a CROSS JOIN LATERAL tributary._learn_type(a.atttypid) b
     WHERE a.attrelid = rel AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped
$$;

-- A float8 expression of value `v` (an expression of type category `category`, built-in type
-- `typname`): numbers as they are, booleans 0/1, dates as days since 1970-01-01, timestamps as
-- days (with fractions) since the epoch, an infinite date or timestamp NULL (missing); NULL for
-- other types.
CREATE OR REPLACE FUNCTION tributary._learn_number(v text, category "char", typname name) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN category = 'N' AND typname NOT IN ('oid', 'regclass', 'regproc', 'regtype', 'money')
            THEN format('CAST(%s AS pg_catalog.float8)', v)
        WHEN category = 'B' AND typname = 'bool' THEN format('CAST(CAST(%s AS pg_catalog.int4) AS pg_catalog.float8)', v)
        WHEN typname = 'date' THEN format('CASE WHEN pg_catalog.isfinite(%1$s) THEN CAST(%1$s OPERATOR(pg_catalog.-) CAST(''1970-01-01'' AS pg_catalog.date) AS pg_catalog.float8) END', v)
        WHEN typname IN ('timestamp', 'timestamptz')
            THEN format('CASE WHEN pg_catalog.isfinite(%1$s) THEN (pg_catalog.date_part(''epoch'', %1$s) OPERATOR(pg_catalog./) CAST(86400 AS pg_catalog.float8)) END', v)
    END
$$;

-- A text expression of the key columns `cols` of alias `alias` (one column: its text; several:
-- the row constructor's text), NULL when any of them is NULL; through tributary._text.
CREATE OR REPLACE FUNCTION tributary._learn_key_text(alias text, cols name[]) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN cardinality(cols) = 1 THEN format('tributary._text(%I.%I)', alias, cols[1])
           ELSE format('CASE WHEN pg_catalog.num_nulls(%s) = 0 THEN tributary._text(ROW(%s)) END',
                       (SELECT string_agg(format('%I.%I', alias, c), ', ' ORDER BY o) FROM unnest(cols) WITH ORDINALITY u(c, o)),
                       (SELECT string_agg(format('%I.%I', alias, c), ', ' ORDER BY o) FROM unnest(cols) WITH ORDINALITY u(c, o)))
           END
$$;

-- Whether a predictor over `tbl` may read table `other` without its path or column being named
-- (the owner rule of child context, README "Security"): `other` is owned by tbl's owner or by a
-- role the current role is a member of, superuser status not counting (is_member_of_role_nosuper).
-- Reading a table runs its owner's row-level security policies as the reader, and a role needs
-- only REFERENCES on a table to make a link table of it.
CREATE FUNCTION tributary._learn_trusted(tbl regclass, other regclass) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    WITH RECURSIVE m(r) AS (
        SELECT r.oid FROM pg_roles r WHERE r.rolname = CURRENT_USER
        UNION
        SELECT a.roleid FROM pg_auth_members a JOIN m ON a.member = m.r)
    SELECT coalesce((SELECT o.relowner = t.relowner OR o.relowner IN (SELECT m.r FROM m)
                       FROM pg_class o, pg_class t WHERE o.oid = other AND t.oid = tbl), false)
$$;

-- `reads` ([[table oid, column], ...]) with columns `cols` of `rel` added.
CREATE FUNCTION tributary._learn_reads(reads jsonb, rel regclass, cols name[]) RETURNS jsonb
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT reads || coalesce((SELECT jsonb_agg(jsonb_build_array(CAST(CAST(rel AS oid) AS int8), c)) FROM unnest(cols) c), '[]')
$$;

-- Whether row-level security applies to role `who` on table `rel`, as PostgreSQL decides it
-- (check_enable_rls): the table has row security enabled, and the role is neither a superuser
-- nor BYPASSRLS (not inherited), nor the table's owner or a role inheriting the owner's
-- privileges unless the table FORCEs row security. A policy that shows every row still applies.
CREATE FUNCTION tributary._learn_rls(who oid, rel oid) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.relrowsecurity
           AND NOT coalesce((SELECT r.rolsuper OR r.rolbypassrls FROM pg_roles r WHERE r.oid = who), false)
           AND (c.relforcerowsecurity OR NOT pg_has_role(who, c.relowner, 'USAGE'))
      FROM pg_class c WHERE c.oid = rel
$$;

-- Why role `who` may not use a predictor that reads `tables` (columns `cols`, [[column, ...],
-- ...] in the same order) as a role other than its owner, or NULL when it may: the first table
-- (in order) that is gone, whose schema it may not use, where row-level security applies to it
-- (tributary._learn_rls), or with a column it reads that is gone or that `who` may not SELECT.
-- NULL `tables` (a predictor trained before 0.11.0, whose tables are not recorded): never.
-- The rule of the view tributary.predictors, tributary_predict, tributary_predict_column and
-- predict jobs (src/service/learn/catalog.rs).
CREATE FUNCTION tributary._predictor_hidden(who oid, tables regclass[], cols jsonb) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN tables IS NULL THEN 'It was trained before tributary 0.11.0, which did not record the tables it reads.'
      ELSE (SELECT r.why FROM (
        SELECT u.i, CASE
            WHEN c.oid IS NULL THEN format('A table it reads (OID %s) does not exist any more.', CAST(u.t AS oid))
            WHEN NOT has_schema_privilege(who, c.relnamespace, 'USAGE')
                THEN format('Role %s may not use the schema of table %s.', quote_ident(pg_get_userbyid(who)), u.t)
            WHEN tributary._learn_rls(who, c.oid)
                THEN format('Row-level security applies to role %s on table %s: the predictor learnt from rows it may not see.', quote_ident(pg_get_userbyid(who)), u.t)
            ELSE (SELECT format('Role %s may not read column %s of table %s.', quote_ident(pg_get_userbyid(who)), quote_ident(tributary._learn_short(x.col)), u.t)
                    FROM jsonb_array_elements_text(coalesce(cols -> CAST(u.i - 1 AS int4), '[]')) x(col)
                    LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = x.col AND a.attnum > 0 AND NOT a.attisdropped
                   WHERE CASE WHEN a.attnum IS NULL THEN true ELSE NOT has_column_privilege(who, c.oid, a.attnum, 'SELECT') END
                   LIMIT 1)
          END AS why
          FROM unnest(tables) WITH ORDINALITY u(t, i) LEFT JOIN pg_class c ON c.oid = CAST(u.t AS oid)) r
       WHERE r.why IS NOT NULL ORDER BY r.i LIMIT 1)
    END
$$;

CREATE OR REPLACE VIEW tributary.predictors WITH (security_barrier) AS
SELECT p.name, p.owner, p.tbl, p.label, p.kind, p.embedding, p.as_of, p.options, p.features,
       p.algorithm, p.classes, p.metrics, p.training_rows, p.trained_at, p.data_digest,
       pg_catalog.octet_length(p.model) AS model_bytes
  FROM tributary._predictors p
 WHERE pg_catalog.pg_has_role(CURRENT_USER, p.owner::oid, 'USAGE')
    OR tributary._predictor_hidden((SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER),
                                   p.read_tables, p.read_columns) IS NULL;

DROP FUNCTION tributary._learn_spec(regclass, name, name, name, text[], text[]);

-- The plan of a predictor over column `label` of `tbl`: what tributary_train and the
-- prediction functions read, as jsonb (src/service/learn.rs reads it):
--   kind            'category' or 'number' (tributary.label_kind)
--   rows_sql        one row per row of the table: key (jsonb text), tableoid, ctid, as_of
--                   (float8), label (text or float8), text, embedding (float4[]), numbers
--                   (float8[]), categories (text[]), the group of each parent path (text[]), the
--                   referenced key of each link path (text[]); %SOURCE%, %TABLEOID% and %CTID%
--                   are replaced by the caller (the table; or one record)
--   numbers, categories  the names of the typed features in rows_sql's arrays
--   parents         the names of the parent, two- and three-hop paths, in the order of rows_sql's
--                   groups
--   links           [{name, ref, sql}]: sql gives (referenced key text, group text) pairs of one
--                   link path, ref = the index into rows_sql's referenced keys
--   as_of_sql       a statement that turns $1 (text) into the as_of float8, for split_at
--   signature       [[table, column, type], ...] of every column read
--   paths, columns  every history path and feature column found (chosen or not)
--   paths_used, columns_used  those chosen (what tributary_train stores as the predictor's
--                   history and columns, so that columns added later change nothing)
--   reads           [[table OID, [column, ...]], ...]: every column the chosen features read, tbl first
--   untrusted       the tables of other roles left out (tributary._learn_trusted), for a NOTICE
--   vouched         the chosen paths and columns that read a table tbl's owner does not own (read
--                   because the caller is a member of its owner, or named): tributary_train
--                   stores them as named, so that the predictor reads them for whoever may use it
-- Paths (README, "Models that learn"): a foreign key of tbl, named by its columns
-- ("album_id": rows with the same parent); through the parent's own foreign keys ("album_id.artist_id":
-- rows whose parents share a grandparent); through the grandparent's ("track_id.album_id.artist_id":
-- rows whose grandparents share a great-grandparent); a link table referencing tbl and another
-- table ("film_person.person_id": rows linked to the same person); a link table referencing a
-- parent and another table ("track_id.playlist_track.playlist_id": rows whose parents share a
-- playlist). Typed columns: tbl's own numbers,
-- booleans, dates and timestamps, and text columns of at most 64 values in a sample of 10,000
-- rows (categories); a column without a value in that sample is none (an empty target column); the numbers of each parent ("album_id.price"). Text: tbl's own text
-- columns, its parents' ("track_id.name") and its grandparents' ("track_id.album_id.title"),
-- chosen by `columns` too. Only columns the caller may read are found; named ones it may not read fail when read
-- (42501). A path or column that reads a table other than tbl is found only when that table is
-- trusted (tributary._learn_trusted: tbl's owner's, or of a role the caller is a member of) or
-- the path or column is in `named` (NULL: the names in history and columns, as tributary_train
-- gives them; a stored predictor passes the names its trainer gave). Errors: 42809 tbl not a
-- table; 42703 unknown label, as_of or embedding column; 42804 as_of not a number, date or
-- timestamp, a number label of a type that is not built in, embedding not vector/halfvec;
-- 22023 a history path or column named that does not exist (DETAIL lists those found).
CREATE FUNCTION tributary._learn_spec(
    tbl regclass, label name, embedding name, as_of name, history text[], columns text[],
    named text[] DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    vec text;
    kind text;
    rk "char" := (SELECT c.relkind FROM pg_class c WHERE c.oid = tbl);
    ty record;
    a record;
    fk record;
    fk2 record;
    fk3 record;
    lk record;
    key_expr text;
    as_of_expr text := 'CAST(NULL AS pg_catalog.float8)';
    as_of_sql text;
    texts text[] := '{}';
    nums text[] := '{}';
    num_names text[] := '{}';
    cats text[] := '{}';
    cat_names text[] := '{}';
    groups text[] := '{}';
    group_names text[] := '{}';
    refs text[] := '{}';
    ref_cols_seen text[] := '{}';
    links jsonb := '[]';
    found_paths text[] := '{}';
    found_cols text[] := '{}';
    used_cols text[] := '{}';
    used_paths text[] := '{}';
    sig jsonb := '[]';
    reads jsonb := '[]';
    untrusted text[] := '{}';
    vouched text[] := '{}';
    own oid := (SELECT c.relowner FROM pg_class c WHERE c.oid = tbl);
    names text[] := coalesce(named, ARRAY(SELECT h FROM unnest(coalesce(history, '{}') || coalesce(columns, '{}')) h WHERE h NOT LIKE '-%'));
    p_ok boolean;
    g_ok boolean;
    p_own boolean;
    g_own boolean;
    key_cols name[];
    pname text;
    path2 text;
    n bigint;
    num text;
    pn text[];
    pnn text[];
    ptx text[];
    emb_expr text := 'CAST(NULL AS pg_catalog.float4[])';
    ridx integer;
BEGIN
    -- A table (its rows are read with tableoid and ctid, and written back by them).
    IF rk IS NOT NULL AND rk NOT IN ('r', 'p', 'm', 'f') THEN
        RAISE EXCEPTION '"%" is not a table', tbl USING ERRCODE = '42809',
            DETAIL = format('It is %s.', CASE rk WHEN 'S' THEN 'a sequence' WHEN 'v' THEN 'a view' WHEN 'c' THEN 'a composite type'
                                              WHEN 'i' THEN 'an index' WHEN 'I' THEN 'an index' WHEN 't' THEN 'a TOAST table'
                                              ELSE format('a relation of kind %L', rk) END),
            HINT = 'A predictor learns from a table, a partitioned table, a materialized view or a foreign table.';
    END IF;
    vec := tributary._vector_schema();
    kind := tributary.label_kind(tbl, label, 'auto');
    -- The row's key (tributary.row_key); without a primary or shards' key its ctid, which a
    -- record passed to tributary_predict has none of (%CTID%: NULL there).
    key_expr := CASE WHEN EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = tbl AND i.indisprimary)
                       OR cardinality(tributary._shard_key_columns(tbl)) > 0 THEN tributary.row_key(tbl, 't')
                     ELSE 'pg_catalog.jsonb_build_object(''ctid'', CAST(%CTID% AS pg_catalog.text))' END;
    -- Columns in a primary or foreign key: never typed features (an id is no quantity).
    SELECT coalesce(array_agg(DISTINCT att.attname), '{}') INTO key_cols
      FROM pg_constraint c CROSS JOIN LATERAL unnest(c.conkey) k(n)
      JOIN pg_attribute att ON att.attrelid = c.conrelid AND att.attnum = k.n
     WHERE c.conrelid = tbl AND c.contype IN ('p', 'f', 'u');
    SELECT * INTO ty FROM tributary._learn_column_type(tbl, label);
    IF kind = 'number' AND ty.typname IS NULL THEN
        RAISE EXCEPTION 'label column "%" is of type %, not a built-in number type', label, ty.sql_type USING ERRCODE = '42804';
    END IF;
    sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, label, ty.sql_type));
    reads := tributary._learn_reads(reads, tbl, ARRAY[label]);
    -- The key columns (tributary.row_key: the primary key, else the shards' key).
    reads := tributary._learn_reads(reads, tbl, coalesce(
        (SELECT array_agg(pa.attname) FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) k(attnum)
           JOIN pg_attribute pa ON pa.attrelid = i.indrelid AND pa.attnum = k.attnum WHERE i.indrelid = tbl AND i.indisprimary),
        (SELECT array_agg((parse_ident(c))[1]) FROM unnest(tributary._shard_key_columns(tbl)) c)));

    IF as_of IS NOT NULL THEN
        SELECT * INTO ty FROM tributary._learn_column_type(tbl, as_of);
        IF ty.sql_type IS NULL THEN
            RAISE EXCEPTION 'column "%" of relation "%" does not exist', as_of, tbl USING ERRCODE = '42703';
        END IF;
        as_of_expr := tributary._learn_number(format('t.%I', as_of), ty.category, ty.typname);
        IF as_of_expr IS NULL OR ty.category = 'B' THEN
            RAISE EXCEPTION 'as_of column "%" is of type %, not a number, date or timestamp', as_of, ty.sql_type
                USING ERRCODE = '42804', HINT = 'as_of names the column that dates each row: an integer (a year), a date or a timestamp.';
        END IF;
        -- split_at read by the (built-in) base type's input, never a domain's CHECK.
        as_of_sql := format('SELECT %s FROM (SELECT CAST($1 AS pg_catalog.%I) AS %I) t', as_of_expr, ty.typname, as_of);
        sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, as_of, ty.sql_type));
        reads := tributary._learn_reads(reads, tbl, ARRAY[as_of]);
    END IF;

    IF embedding IS NOT NULL THEN
        PERFORM tributary.embedding_type(tbl, embedding);
        emb_expr := format('CAST(CAST(t.%I AS %s.vector) AS pg_catalog.float4[])', embedding, vec);
        sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, embedding, (tributary._learn_column_type(tbl, embedding)).sql_type));
        reads := tributary._learn_reads(reads, tbl, ARRAY[embedding]);
    END IF;

    -- Own columns.
    FOR a IN SELECT att.attname, b.category AS typcategory, b.typname, t.typname AS own_type, format_type(att.atttypid, att.atttypmod) AS sql_type
               FROM pg_attribute att JOIN pg_type t ON t.oid = att.atttypid
              CROSS JOIN LATERAL tributary._learn_type(att.atttypid) b
              WHERE att.attrelid = tbl AND att.attnum > 0 AND NOT att.attisdropped
                AND att.attname NOT IN (label, coalesce(embedding, ''), coalesce(as_of, ''))
                AND NOT att.attname = ANY (key_cols)
                AND has_column_privilege(tbl, att.attnum, 'SELECT')
              ORDER BY att.attnum LOOP
        num := tributary._learn_number(format('t.%I', a.attname), a.typcategory, a.typname);
        IF a.own_type IN ('vector', 'halfvec', 'sparsevec', 'bytea', 'tsvector', 'json', 'jsonb')
           OR (num IS NULL AND a.typcategory NOT IN ('S', 'E')) THEN
            CONTINUE;
        END IF;
        -- Values in a sample of 10,000 rows (distinct texts, NULL not counted): an empty column
        -- (a target made for the predictions, say) is no feature.
        EXECUTE format('SELECT count(d.v) FROM (SELECT DISTINCT tributary._text(s.v) AS v FROM (SELECT t.%I AS v FROM %s t LIMIT 10000) s) d',
                       a.attname, tbl) INTO n;
        IF n = 0 THEN
            CONTINUE;
        END IF;
        found_cols := found_cols || a.attname::text;
        IF NOT tributary._learn_chosen(a.attname, columns) THEN
            CONTINUE;
        END IF;
        used_cols := used_cols || a.attname::text;
        sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, a.attname, a.sql_type));
        reads := tributary._learn_reads(reads, tbl, ARRAY[a.attname]);
        IF num IS NOT NULL THEN
            nums := nums || ('ARRAY[' || num || ']');
            num_names := num_names || a.attname::text;
        ELSE
            texts := texts || format('tributary._text(t.%I)', a.attname);
            IF n <= 64 THEN
                cats := cats || format('tributary._text(t.%I)', a.attname);
                cat_names := cat_names || a.attname::text;
            END IF;
        END IF;
    END LOOP;

    -- Parents: the group of each foreign key, each parent's numbers, and two and three hops;
    -- each only where the caller may read the columns it joins on, and (but for the one-hop
    -- group, which reads tbl alone) through trusted tables or named.
    FOR fk IN SELECT * FROM tributary._learn_fkeys(tbl) LOOP
        IF NOT tributary._learn_readable(tbl, fk.cols) THEN
            CONTINUE;
        END IF;
        pname := array_to_string(fk.cols, ',');
        found_paths := found_paths || pname;
        IF tributary._learn_chosen(pname, history) THEN
            groups := groups || tributary._learn_key_text('t', fk.cols);
            group_names := group_names || pname;
            used_paths := used_paths || pname;
            reads := tributary._learn_reads(reads, tbl, fk.cols);
        END IF;
        IF NOT tributary._learn_readable(fk.ref, fk.ref_cols) THEN
            CONTINUE;
        END IF;
        p_ok := tributary._learn_trusted(tbl, fk.ref);
        p_own := (SELECT c.relowner FROM pg_class c WHERE c.oid = fk.ref) = own;
        -- The parent's numbers, as one float8[] subquery per parent.
        pn := '{}';
        pnn := '{}';
        ptx := '{}';
        FOR a IN SELECT att.attname, b.category AS typcategory, b.typname, t.typname AS own_type, format_type(att.atttypid, att.atttypmod) AS sql_type
                   FROM pg_attribute att JOIN pg_type t ON t.oid = att.atttypid
                  CROSS JOIN LATERAL tributary._learn_type(att.atttypid) b
                  WHERE att.attrelid = fk.ref AND att.attnum > 0 AND NOT att.attisdropped
                    AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conrelid = fk.ref
                                       AND c.contype IN ('p', 'f', 'u') AND att.attnum = ANY (c.conkey))
                    AND has_column_privilege(fk.ref, att.attnum, 'SELECT')
                  ORDER BY att.attnum LOOP
            num := tributary._learn_number(format('p.%I', a.attname), a.typcategory, a.typname);
            IF NOT (a.typcategory IN ('S', 'E') OR (num IS NOT NULL AND a.own_type NOT IN ('vector', 'halfvec'))) THEN
                CONTINUE;
            END IF;
            IF NOT (p_ok OR (pname || '.' || a.attname) = ANY (names)) THEN
                untrusted := untrusted || fk.ref::text;
                CONTINUE;
            END IF;
            found_cols := found_cols || (pname || '.' || a.attname);
            IF NOT tributary._learn_chosen(pname || '.' || a.attname, columns) THEN
                CONTINUE;
            END IF;
            used_cols := used_cols || (pname || '.' || a.attname);
            IF NOT p_own THEN
                vouched := vouched || (pname || '.' || a.attname);
            END IF;
            sig := sig || jsonb_build_array(jsonb_build_array(fk.ref::text, a.attname, a.sql_type));
            reads := tributary._learn_reads(tributary._learn_reads(reads, tbl, fk.cols), fk.ref, fk.ref_cols || a.attname);
            IF a.typcategory IN ('S', 'E') THEN
                -- The parent's text (an album's title, a track's composer) joins the row's text.
                ptx := ptx || format('tributary._text(p.%I)', a.attname);
            ELSE
                pn := pn || num;
                pnn := pnn || (pname || '.' || a.attname);
            END IF;
        END LOOP;
        IF cardinality(ptx) > 0 THEN
            texts := texts || format('(SELECT pg_catalog.concat_ws('' '', %s) FROM %s p WHERE (%s) = (%s))',
                array_to_string(ptx, ', '), fk.ref,
                (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)));
        END IF;
        IF cardinality(pn) > 0 THEN
            -- No parent row (a NULL foreign key): as many NULLs.
            nums := nums || format('COALESCE((SELECT ARRAY[%s] FROM %s p WHERE (%s) = (%s)), pg_catalog.array_fill(CAST(NULL AS pg_catalog.float8), ARRAY[%s]))',
                array_to_string(pn, ', '), fk.ref,
                (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)),
                cardinality(pn));
            num_names := num_names || pnn;
        END IF;
        FOR fk2 IN SELECT * FROM tributary._learn_fkeys(fk.ref) LOOP
            IF NOT tributary._learn_readable(fk.ref, fk2.cols) THEN
                CONTINUE;
            END IF;
            path2 := pname || '.' || array_to_string(fk2.cols, ',');
            g_ok := tributary._learn_trusted(tbl, fk2.ref);
            g_own := (SELECT c.relowner FROM pg_class c WHERE c.oid = fk2.ref) = own;
            IF NOT (p_ok OR path2 = ANY (names)) THEN
                untrusted := untrusted || fk.ref::text;
            ELSE
                found_paths := found_paths || path2;
                IF tributary._learn_chosen(path2, history) THEN
                    groups := groups || format('(SELECT %s FROM %s p WHERE (%s) = (%s))',
                        tributary._learn_key_text('p', fk2.cols), fk.ref,
                        (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                        (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)));
                    group_names := group_names || path2;
                    used_paths := used_paths || path2;
                    IF NOT p_own THEN
                        vouched := vouched || path2;
                    END IF;
                    reads := tributary._learn_reads(tributary._learn_reads(reads, tbl, fk.cols), fk.ref, fk.ref_cols || fk2.cols);
                END IF;
            END IF;
            -- Three hops: rows whose grandparents share a great-grandparent (a track's album's
            -- artist: "track_id.album_id.artist_id").
            FOR fk3 IN SELECT * FROM tributary._learn_fkeys(fk2.ref) LOOP
                -- Only a path the caller may read (the grandparent's key and foreign key columns).
                IF NOT tributary._learn_readable(fk2.ref, fk2.ref_cols || fk3.cols) THEN
                    CONTINUE;
                END IF;
                IF NOT ((p_ok AND g_ok) OR (path2 || '.' || array_to_string(fk3.cols, ',')) = ANY (names)) THEN
                    untrusted := untrusted || fk2.ref::text;
                    CONTINUE;
                END IF;
                found_paths := found_paths || (path2 || '.' || array_to_string(fk3.cols, ','));
                IF tributary._learn_chosen(path2 || '.' || array_to_string(fk3.cols, ','), history) THEN
                    groups := groups || format('(SELECT %s FROM %s p JOIN %s g ON (%s) = (%s) WHERE (%s) = (%s))',
                        tributary._learn_key_text('g', fk3.cols), fk.ref, fk2.ref,
                        (SELECT string_agg(format('g.%I', c), ', ' ORDER BY o) FROM unnest(fk2.ref_cols) WITH ORDINALITY u(c, o)),
                        (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk2.cols) WITH ORDINALITY u(c, o)),
                        (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                        (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)));
                    group_names := group_names || (path2 || '.' || array_to_string(fk3.cols, ','));
                    used_paths := used_paths || (path2 || '.' || array_to_string(fk3.cols, ','));
                    IF NOT (p_own AND g_own) THEN
                        vouched := vouched || (path2 || '.' || array_to_string(fk3.cols, ','));
                    END IF;
                    reads := tributary._learn_reads(tributary._learn_reads(tributary._learn_reads(reads, tbl, fk.cols),
                                 fk.ref, fk.ref_cols || fk2.cols), fk2.ref, fk2.ref_cols || fk3.cols);
                END IF;
            END LOOP;
            -- The grandparent's text (a track's album title) joins the row's text too.
            ptx := '{}';
            FOR a IN SELECT att.attname, format_type(att.atttypid, att.atttypmod) AS sql_type
                       FROM pg_attribute att CROSS JOIN LATERAL tributary._learn_type(att.atttypid) b
                      WHERE att.attrelid = fk2.ref AND att.attnum > 0 AND NOT att.attisdropped
                        AND tributary._learn_readable(fk2.ref, fk2.ref_cols)
                        AND b.category IN ('S', 'E')
                        AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conrelid = fk2.ref
                                           AND c.contype IN ('p', 'f', 'u') AND att.attnum = ANY (c.conkey))
                        AND has_column_privilege(fk2.ref, att.attnum, 'SELECT')
                      ORDER BY att.attnum LOOP
                IF NOT ((p_ok AND g_ok) OR (path2 || '.' || a.attname) = ANY (names)) THEN
                    untrusted := untrusted || fk2.ref::text;
                    CONTINUE;
                END IF;
                found_cols := found_cols || (path2 || '.' || a.attname);
                IF tributary._learn_chosen(path2 || '.' || a.attname, columns) THEN
                    ptx := ptx || format('tributary._text(g.%I)', a.attname);
                    used_cols := used_cols || (path2 || '.' || a.attname);
                    IF NOT (p_own AND g_own) THEN
                        vouched := vouched || (path2 || '.' || a.attname);
                    END IF;
                    sig := sig || jsonb_build_array(jsonb_build_array(fk2.ref::text, a.attname, a.sql_type));
                    reads := tributary._learn_reads(tributary._learn_reads(tributary._learn_reads(reads, tbl, fk.cols),
                                 fk.ref, fk.ref_cols || fk2.cols), fk2.ref, fk2.ref_cols || a.attname);
                END IF;
            END LOOP;
            IF cardinality(ptx) > 0 THEN
                texts := texts || format('(SELECT pg_catalog.concat_ws('' '', %s) FROM %s p JOIN %s g ON (%s) = (%s) WHERE (%s) = (%s))',
                    array_to_string(ptx, ', '), fk.ref, fk2.ref,
                    (SELECT string_agg(format('g.%I', c), ', ' ORDER BY o) FROM unnest(fk2.ref_cols) WITH ORDINALITY u(c, o)),
                    (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk2.cols) WITH ORDINALITY u(c, o)),
                    (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                    (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)));
            END IF;
        END LOOP;
    END LOOP;

    -- A parent's link tables: rows whose parents share a row of another table through a link
    -- table (a track's playlists: "track_id.playlist_track.playlist_id").
    FOR fk IN SELECT * FROM tributary._learn_fkeys(tbl) LOOP
        FOR lk IN SELECT c.conrelid::regclass AS child, l.cols, o.cols AS other_cols
                    FROM pg_constraint c
                    CROSS JOIN LATERAL tributary._learn_fkeys(c.conrelid) l
                    CROSS JOIN LATERAL tributary._learn_fkeys(c.conrelid) o
                   WHERE c.confrelid = fk.ref AND c.contype = 'f' AND c.conrelid <> tbl AND c.conrelid <> fk.ref
                     AND l.conname = c.conname
                     -- A partitioned link table once, not once more for each of its partitions.
                     AND NOT (SELECT k.relispartition FROM pg_class k WHERE k.oid = c.conrelid) AND o.conname <> c.conname AND l.ref_cols = fk.ref_cols
                     -- Only a link table the caller may read (both foreign keys' columns), from a
                     -- foreign key of the table it may read.
                     AND tributary._learn_readable(c.conrelid, l.cols || o.cols)
                     AND tributary._learn_readable(tbl, fk.cols)
                   ORDER BY c.conrelid::regclass::text, o.conname LOOP
            pname := format('%s.%s.%s', array_to_string(fk.cols, ','), (SELECT relname FROM pg_class WHERE oid = lk.child),
                            array_to_string(lk.other_cols, ','));
            IF NOT (tributary._learn_trusted(tbl, lk.child) OR pname = ANY (names)) THEN
                untrusted := untrusted || lk.child::text;
                CONTINUE;
            END IF;
            found_paths := found_paths || pname;
            IF NOT tributary._learn_chosen(pname, history) THEN
                CONTINUE;
            END IF;
            ridx := array_position(ref_cols_seen, array_to_string(fk.cols, ',') || '.');
            IF ridx IS NULL THEN
                refs := refs || tributary._learn_key_text('t', fk.cols);
                ref_cols_seen := ref_cols_seen || (array_to_string(fk.cols, ',') || '.');
                ridx := cardinality(refs);
            END IF;
            used_paths := used_paths || pname;
            IF (SELECT c.relowner FROM pg_class c WHERE c.oid = lk.child) <> own THEN
                vouched := vouched || pname;
            END IF;
            links := links || jsonb_build_object('name', pname, 'ref', ridx - 1,
                'sql', format('SELECT %s, %s FROM %s l', tributary._learn_key_text('l', lk.cols),
                              tributary._learn_key_text('l', lk.other_cols), lk.child));
            sig := sig || jsonb_build_array(jsonb_build_array(lk.child::text, array_to_string(lk.cols, ','), 'link'));
            reads := tributary._learn_reads(tributary._learn_reads(reads, tbl, fk.cols), lk.child, lk.cols || lk.other_cols);
        END LOOP;
    END LOOP;

    -- Link tables: a table with a foreign key to tbl and another foreign key.
    FOR lk IN SELECT c.conrelid::regclass AS child, l.cols, l.ref_cols, o.cols AS other_cols, o.ref AS other
                FROM pg_constraint c
                CROSS JOIN LATERAL tributary._learn_fkeys(c.conrelid) l
                CROSS JOIN LATERAL tributary._learn_fkeys(c.conrelid) o
               WHERE c.confrelid = tbl AND c.contype = 'f' AND c.conrelid <> tbl
                 AND l.conname = c.conname AND o.conname <> c.conname
                 AND NOT (SELECT k.relispartition FROM pg_class k WHERE k.oid = c.conrelid)
                 -- Only a link table the caller may read, joined on keys it may read.
                 AND tributary._learn_readable(c.conrelid, l.cols || o.cols)
                 AND tributary._learn_readable(tbl, l.ref_cols)
               ORDER BY c.conrelid::regclass::text, o.conname LOOP
        pname := format('%s.%s', (SELECT relname FROM pg_class WHERE oid = lk.child), array_to_string(lk.other_cols, ','));
        IF NOT (tributary._learn_trusted(tbl, lk.child) OR pname = ANY (names)) THEN
            untrusted := untrusted || lk.child::text;
            CONTINUE;
        END IF;
        found_paths := found_paths || pname;
        IF NOT tributary._learn_chosen(pname, history) THEN
            CONTINUE;
        END IF;
        ridx := array_position(ref_cols_seen, array_to_string(lk.ref_cols, ','));
        IF ridx IS NULL THEN
            refs := refs || tributary._learn_key_text('t', lk.ref_cols);
            ref_cols_seen := ref_cols_seen || array_to_string(lk.ref_cols, ',');
            ridx := cardinality(refs);
        END IF;
        used_paths := used_paths || pname;
        IF (SELECT c.relowner FROM pg_class c WHERE c.oid = lk.child) <> own THEN
            vouched := vouched || pname;
        END IF;
        links := links || jsonb_build_object('name', pname, 'ref', ridx - 1,
            'sql', format('SELECT %s, %s FROM %s l', tributary._learn_key_text('l', lk.cols),
                          tributary._learn_key_text('l', lk.other_cols), lk.child));
        sig := sig || jsonb_build_array(jsonb_build_array(lk.child::text, array_to_string(lk.cols, ','), 'link'));
        reads := tributary._learn_reads(tributary._learn_reads(reads, tbl, lk.ref_cols), lk.child, lk.cols || lk.other_cols);
    END LOOP;

    -- Names asked for that do not exist (cut: a name echoed in a message is at most 64 characters).
    pname := tributary._learn_list(ARRAY(SELECT h FROM unnest(history) h WHERE ltrim(h, '-') <> ALL (found_paths)));
    IF pname IS NOT NULL THEN
        RAISE EXCEPTION 'history path % of relation "%" does not exist', pname, tbl USING ERRCODE = '22023',
            DETAIL = format('The paths found: %s.', coalesce(nullif(array_to_string(found_paths, ', '), ''), 'none')),
            HINT = 'Paths are named by the foreign key columns they follow (see tributary_train''s documentation); a path through a table of another role is found only when named.';
    END IF;
    pname := tributary._learn_list(ARRAY(SELECT h FROM unnest(columns) h WHERE ltrim(h, '-') <> ALL (found_cols)));
    IF pname IS NOT NULL THEN
        RAISE EXCEPTION 'feature column % of relation "%" does not exist', pname, tbl USING ERRCODE = '22023',
            DETAIL = format('The typed columns found: %s.', coalesce(nullif(array_to_string(found_cols, ', '), ''), 'none')),
            HINT = 'Columns of numbers, dates, booleans and categories of up to 64 values that the caller may read are features.';
    END IF;

    RETURN jsonb_build_object(
        'kind', kind,
        'rows_sql', format('SELECT CAST(%s AS pg_catalog.text), %s, %s, %s, %s, %s, %s, %s, %s, %s, %s FROM %%SOURCE%% t',
            key_expr, '%TABLEOID%', '%CTID%', as_of_expr,
            CASE kind WHEN 'number' THEN format('CAST(t.%I AS pg_catalog.float8)', label)
                      ELSE format('tributary._text(t.%I)', label) END,
            CASE WHEN cardinality(texts) = 0 THEN 'CAST(NULL AS pg_catalog.text)'
                 ELSE format('pg_catalog.concat_ws('' '', %s)', array_to_string(texts, ', ')) END,
            emb_expr,
            CASE WHEN cardinality(nums) = 0 THEN 'CAST(NULL AS pg_catalog.float8[])'
                 ELSE format('CAST(%s AS pg_catalog.float8[])', array_to_string(nums, ' OPERATOR(pg_catalog.||) ')) END,
            CASE WHEN cardinality(cats) = 0 THEN 'CAST(NULL AS pg_catalog.text[])'
                 ELSE format('ARRAY[%s]', array_to_string(cats, ', ')) END,
            CASE WHEN cardinality(groups) = 0 THEN 'CAST(NULL AS pg_catalog.text[])'
                 ELSE format('ARRAY[%s]', array_to_string(groups, ', ')) END,
            CASE WHEN cardinality(refs) = 0 THEN 'CAST(NULL AS pg_catalog.text[])'
                 ELSE format('ARRAY[%s]', array_to_string(refs, ', ')) END),
        'numbers', to_jsonb(num_names),
        'categories', to_jsonb(cat_names),
        'parents', to_jsonb(group_names),
        'links', links,
        'as_of_sql', as_of_sql,
        'signature', sig,
        'paths', to_jsonb(found_paths),
        'columns', to_jsonb(found_cols),
        'columns_used', to_jsonb(used_cols),
        'paths_used', to_jsonb(used_paths),
        'reads', (SELECT coalesce(jsonb_agg(jsonb_build_array(r.t, r.cols) ORDER BY r.first), '[]')
                    FROM (SELECT CAST(e ->> 0 AS int8) AS t, jsonb_agg(DISTINCT e -> 1) AS cols, min(o) AS first
                            FROM jsonb_array_elements(reads) WITH ORDINALITY x(e, o) GROUP BY 1) r),
        'untrusted', to_jsonb(ARRAY(SELECT DISTINCT u FROM unnest(untrusted) u ORDER BY 1)),
        'vouched', to_jsonb(vouched));
END $$;

-- tributary_predict(predictor, row) passes the row itself (no to_jsonb, no jsonb_populate_record).
DROP FUNCTION tributary._predict_record(text, jsonb);
CREATE  FUNCTION "_predict_record"(
	"predictor" TEXT, /* Option < & str > */
	"row" anyelement /* Option < pgrx :: AnyElement > */
) RETURNS TABLE (
	"prediction" TEXT,  /* Option < String > */
	"confidence" double precision,  /* Option < f64 > */
	"evidence" jsonb  /* Option < pgrx :: JsonB > */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_predict_record_wrapper';
ALTER FUNCTION _predict_record(text, anyelement) SET SCHEMA tributary;

-- The predict jobs' refresh (src/worker/predict.rs), in schema tributary.
CREATE  FUNCTION "_predict_column_job"(
	"predictor" TEXT, /* Option < & str > */
	"target" name, /* Option < Name > */
	"tbl" oid, /* Option < pg_sys :: Oid > */
	"predictor_owner" oid /* Option < pg_sys :: Oid > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_predict_column_job_wrapper';
ALTER FUNCTION _predict_column_job(text, name, oid, oid) SET SCHEMA tributary;
COMMENT ON FUNCTION tributary._predict_column_job(text, name, oid, oid) IS 'Internal: tributary_predict_column for a predict job, refused unless the predictor still has the table and owner the job was made with.';

-- tributary_predict(predictor text, row [, ...]) → (prediction, confidence, evidence): one row's
-- prediction by a trained predictor (tributary_train), its features as of the row's own as_of.
-- `row` is a row of the predictor's table or of one of its partitions (a whole-row reference, or
-- ROW(...)::tbl for a row not in the table); anything else (an anonymous ROW(...), another
-- table's row) is 42804. The row goes to tributary._predict_record as it is (no text or JSON
-- round trip). See tributary._predict_record (src/api/learn.rs) for the evidence and errors.
-- NULL row gives NULLs.
CREATE OR REPLACE FUNCTION tributary_predict(predictor text, "row" anyelement,
    OUT prediction text, OUT confidence float8, OUT evidence jsonb)
RETURNS record LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT r.prediction, r.confidence, r.evidence
      FROM tributary._predict_record(predictor, "row") r
$$;

CREATE OR REPLACE FUNCTION tributary._predict_job_create(caller oid, a jsonb) RETURNS bigint
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
    EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OF %s OR DELETE%s ON %s FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger(%L)',
                   'tributary_predict_' || job, cols,
                   CASE WHEN kind IN ('r', 'p') THEN ' OR TRUNCATE' ELSE '' END, p.tbl, job);
    -- On the tables its history and features read that the table's owner owns: any change.
    -- Another role's table gets no trigger of this job (that role could otherwise start its
    -- refreshes at will, and a trigger on a table is its owner's to make).
    FOR rel IN SELECT r FROM tributary._predict_related(p.tbl) r LOOP
        IF (SELECT c.relowner FROM pg_class c WHERE c.oid = rel) <> tbl_owner THEN
            others := others || rel::text;
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

-- Comments of the new and changed objects.
COMMENT ON VIEW tributary.predictors IS 'Trained predictors visible to the current role (its owner, a member of the owner, or a role that may see every row and column it was trained on): options, features, metrics, no model.';
COMMENT ON FUNCTION tributary._learn_short(text) IS 'Internal: a name cut to 64 characters for a message.';
COMMENT ON FUNCTION tributary._learn_list(text[]) IS 'Internal: the first ten names of a list, quoted and cut, for a message.';
COMMENT ON FUNCTION tributary._learn_type(oid) IS 'Internal: a type''s category through domains, and its name when built in.';
COMMENT ON FUNCTION tributary._learn_column_type(regclass, name) IS 'Internal: a column''s format_type, type category and built-in type name.';
COMMENT ON FUNCTION tributary._learn_trusted(regclass, regclass) IS 'Internal: whether a predictor over a table may read another table unnamed (owned by the table''s owner or a role the caller is a member of).';
COMMENT ON FUNCTION tributary._learn_reads(jsonb, regclass, name[]) IS 'Internal: the columns a predictor reads, with more added.';
COMMENT ON FUNCTION tributary._learn_rls(oid, oid) IS 'Internal: whether row-level security applies to a role on a table.';
COMMENT ON FUNCTION tributary._predictor_hidden(oid, regclass[], jsonb) IS 'Internal: why a role other than its owner may not use a predictor reading these tables and columns, or NULL.';
COMMENT ON FUNCTION tributary._learn_spec(regclass, name, name, name, text[], text[], text[]) IS 'Internal: the features of a predictor: the rows query, history paths, typed columns and the columns read.';
COMMENT ON FUNCTION tributary._predict_record(text, anyelement) IS 'Internal: one row''s prediction by a predictor (behind tributary_predict(predictor, row)).';

-- sql/comments.sql
COMMENT ON FUNCTION tributary_match_explain() IS 'What this session''s last tributary_match or tributary_dedup learned and decided: per column m and u, estimated matches, the cut, expected precision and recall. Only to the role that made the call (NULL to any other, after SET ROLE or inside a SECURITY DEFINER function).';
COMMENT ON FUNCTION tributary._text(anyelement) IS 'Internal: a value as text, CAST(v AS text) for built-in types, the output function for any other type (a cast a role made never runs); NULL in, NULL out.';
COMMENT ON FUNCTION tributary._row_json(anyelement) IS 'Internal: row_to_json(row) without any cast to json a role made (values of other than built-in scalar types through their output functions).';
COMMENT ON FUNCTION tributary._row_jsonb(anyelement) IS 'Internal: to_jsonb(row) without any cast to json a role made.';
COMMENT ON FUNCTION tributary._jsonb(anyelement) IS 'Internal: to_jsonb(value) without any cast to json a role made.';
COMMENT ON FUNCTION tributary._from_text(text, anyelement) IS 'Internal: the value of the second argument''s type that a text stands for, through the type''s input function (never a cast from text a role made).';
COMMENT ON FUNCTION tributary._text_as(text, oid, integer) IS 'Internal: the SQL of a text expression as a value of a type: CAST for built-in types, tributary._from_text for others.';
COMMENT ON FUNCTION tributary._base_type(oid) IS 'Internal: the base type of a type (through domains).';

-- Every job's statements built by 0.11.0 (a job whose table lost a column it names keeps its
-- statements and fails as before).
DO $upgrade$
DECLARE
    j tributary._jobs;
    b tributary._jobs;
BEGIN
    FOR j IN SELECT * FROM tributary._jobs WHERE state <> 'cancelled' ORDER BY id LOOP
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

-- Every chunk job's trigger function written by 0.11.0 (its text through tributary._text).
DO $upgrade$
DECLARE
    j tributary._jobs;
BEGIN
    FOR j IN SELECT * FROM tributary._jobs WHERE chunk_function IS NOT NULL AND state <> 'cancelled' ORDER BY id LOOP
        PERFORM tributary._chunk_sync(j);
    END LOOP;
END $upgrade$;
