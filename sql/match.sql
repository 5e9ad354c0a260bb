-- Matching rows: the same thing in two tables (tributary_match) or twice in one (tributary_match
-- of a table with itself, tributary_dedup's clusters). Everything runs with the caller's
-- privileges (SECURITY INVOKER): row-level security and column privileges apply to both tables.
--
-- How (the README, "Matching rows", says it for users):
-- 1. Each row of each side: its key and the matched columns' values as text (each cut to its
--    first 2,048 characters: tributary._match_values).
-- 2. Columns of phrases (3 words or more on average, mostly letters: titles, descriptions) are
--    embedded, each distinct value once; a pgvector `vector` column named in `columns` is an
--    embedding the caller stored and is used as it is (never embedded again); every other column
--    (names, numbers, codes, dates, phones: short values) is compared by string similarity only,
--    without embedding.
-- 3. Candidates: for every row, its k nearest rows of the other side by the embedding of its
--    phrase columns (one phrase column: its value's embedding; several: the sum of their
--    values' embeddings, whose direction is all cosine distance sees), both ways (pgvector cosine distance, an HNSW index on a
--    side of more than 2,000 rows, iterative scans); and blocking: pairs that agree exactly on
--    the value of a short column, or of two, that at most k rows of each side hold; and every
--    pair when the tables are small (at most 50,000 pairs).
-- 4. Evidence per column, for every candidate pair: the cosine similarity of the values'
--    embeddings (phrase columns) and a string similarity (tributary._string_similarity:
--    normalised Damerau-Levenshtein, of the values or their sorted words), each rescaled so that
--    what unrelated pairs score on average is 0 and equality is 1 ((s - u) / (1 - u), clamped),
--    the larger of the two. A NULL on either side is missing evidence, not a mismatch. Unrelated
--    pairs: about 10,000 pairs of rows in md5(key) order, row i with rows i + n/2 + t n/T
--    (deterministic, almost never a true pair).
-- 5. Without labels, a match probability: a Fellegi-Sunter model (Fellegi and Sunter, "A theory
--    for record linkage", JASA 64(328), 1969) of the candidates' evidence, each column's
--    similarity in one of five agreement levels, u (the share of non-matches at each level) and
--    m (the share of matches) estimated by EM over the candidates (Winkler 1988), u with the
--    unrelated pairs' levels as its prior (those identical on every column left out: a small
--    table's duplicates), and the prior of a match estimated too, never under the share of the
--    pairs identical on every column whose values only their two rows hold: with
--    one_to_one, each row's chance of having a partner, and a pair's probability is its share
--    of its row's evidence (two candidates of one row share one match; tributary._match_em);
--    without, two rows' chance of matching. With labels: the same
--    model, the labelled pairs counted in m or u with their class in every round (Winkler's EM
--    with some classes known), and a labelled candidate pair scored by its label.
-- 6. The cut: `threshold` when given, else the lowest whose accepted pairs have a mean
--    probability (the model's expected precision) of `min_precision` or more, else probability
--    0.5. No cut is read off a histogram.
-- 7. Accepted pairs: with one_to_one, pairs that are each other's best candidate (mutual best)
--    at or above the cut; without, every candidate at or above it. Each with its evidence per
--    column (similarity, level, weight: its term of the log odds). What was learned (m, u, the
--    prior, the estimated number of matches, expected precision and recall) goes to the NOTICE
--    and to tributary_match_explain().
-- Work lives in temporary tables (the TEMP privilege on the database is needed; not on a hot
-- standby) dropped before the function returns; the embeddings go through
-- tributary_embed_column, so progress NOTICEs, Ctrl-C and statement_timeout work as there.

ALTER FUNCTION _string_similarity(text, text) SET SCHEMA tributary;
ALTER FUNCTION _match_em(integer[], integer[], double precision[], double precision[], double precision[], boolean[], double precision, double precision, boolean, boolean) SET SCHEMA tributary;
ALTER FUNCTION _match_cut(double precision[], double precision) SET SCHEMA tributary;
ALTER FUNCTION _match_clusters(integer[], integer[], double precision[], double precision) SET SCHEMA tributary;
ALTER FUNCTION _match_remember(jsonb) SET SCHEMA tributary;

-- tributary_match_explain() under a name no other role can overload (tributary_dedup reads the
-- cut of its own call through it): the same C function, so the same explanation, shown only to
-- the roles that made it.
CREATE FUNCTION tributary._match_explain() RETURNS jsonb
VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp
LANGUAGE c AS 'MODULE_PATHNAME', 'tributary_match_explain_wrapper';
COMMENT ON FUNCTION tributary._match_explain() IS 'Internal (tributary_dedup): tributary_match_explain() under a name no other role can shadow.';

-- tributary_match's own entry points to tributary_embed(text) and tributary_embed_column: the
-- same C functions under other names in schema tributary, where no other role may create a
-- function. The public ones live in the extension's schema, often public, where a role with
-- CREATE there could add an overload with the same parameter names that makes a call by name
-- ambiguous (42725); these cannot be shadowed. Arguments as tributary_embed(text, model,
-- prompt) and tributary_embed_column(...).
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

-- The text of a row's key: `tributary._text(t.id)` for a one-column primary key,
-- `tributary._text(ROW(t.a, t.b))` (`(1,x)`) for a composite one (the type's output function,
-- never a cast to text a role made: a value is `id::text` without one); for a partitioned table
-- over postgres_fdw shards, the shards' primary key (tributary._shard_key_columns). 42P10 when
-- `tbl` has no primary key.
CREATE FUNCTION tributary._match_key(tbl regclass, alias text) RETURNS text
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
CREATE FUNCTION tributary._match_values(tbl regclass, cols text[], alias text) RETURNS text
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

-- Which of `cols` of `tbl` are pgvector `vector` columns: embeddings the caller already stored,
-- used as those columns' embeddings (a phrase column, never embedded again). Unknown columns are
-- false (tributary._match_values reports them).
CREATE FUNCTION tributary._match_stored(tbl regclass, cols text[]) RETURNS boolean[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT array_agg(EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                               JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
                               JOIN pg_catalog.pg_extension e ON e.extname = 'vector' AND e.extnamespace = t.typnamespace
                              WHERE a.attrelid = tbl AND a.attname = c.name AND a.attnum > 0 AND NOT a.attisdropped
                                AND t.typname = 'vector') ORDER BY c.i)
      FROM unnest(cols) WITH ORDINALITY AS c(name, i)
$$;

-- A name the caller gave, for a message: its first 64 characters and "..." when longer (a
-- column name that names no column can be of any length). NULL in, NULL out.
CREATE FUNCTION tributary._match_short(name text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN pg_catalog.length(name) OPERATOR(pg_catalog.>) 64
                THEN pg_catalog.left(name, 64) OPERATOR(pg_catalog.||) '...' ELSE name END
$$;
COMMENT ON FUNCTION tributary._match_short(text) IS 'Internal (tributary_match): a name for a message, cut to its first 64 characters.';

-- tributary_match(left_table, right_table, columns [, right_columns, k, threshold, one_to_one,
-- labels, model, min_precision]): the pairs of rows, one of each table, that are the same thing
-- (the method: this file's header). Returns the accepted pairs only, `(left_key, right_key,
-- score, evidence)`: keys as the primary key's text (`id::text`, a composite key as its row
-- literal `(a,b)`), score the probability of a match in [0, 1], evidence per column
-- `{"similarity", "level", "weight"}` (level NULL: a value missing; weight: the column's term of
-- the log odds, ln(m / u)). Every other candidate is an abstention.
-- `right_columns` NULL: the same names as `columns`; the two lists pair up by position.
-- `left_table = right_table`: duplicates within one table, each unordered pair once (left_key <
-- right_key), never a row with itself. `k`: candidates per row each way and the blocking limit
-- (1..1000). `threshold`: the cut on the probability (NULL: 0.5); `min_precision` in (0, 1]:
-- the lowest cut with at least that expected precision instead. `labels`: a table or view with
-- columns `left_key, right_key` (primary key values as text: `id::text`, any type written as
-- its output function writes it) and `is_match bool`. `model` NULL: the default model.
-- Cost: rows x k candidate pairs; embedding only the phrase columns' distinct values.
-- Errors: 22004 a NULL argument (but right_columns, threshold, labels, model, min_precision);
-- 22023 no columns, lists of different lengths, k outside 1..1000, threshold outside [0, 1],
-- min_precision outside (0, 1], both threshold and min_precision, labels naming no pair of rows;
-- 42703 an unknown column (also of labels); 42804 a labels column is_match not boolean; 42P10 a
-- table without a primary key. An empty table gives no rows.
CREATE FUNCTION tributary_match(
    left_table regclass, right_table regclass, columns text[], right_columns text[] DEFAULT NULL,
    k integer DEFAULT 10, threshold float8 DEFAULT NULL, one_to_one boolean DEFAULT true,
    labels regclass DEFAULT NULL, model text DEFAULT NULL, min_precision float8 DEFAULT NULL)
RETURNS TABLE (left_key text, right_key text, score float8, evidence jsonb)
LANGUAGE plpgsql VOLATILE SET jit = off SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT p.left_key, p.right_key, p.score, p.evidence
      FROM tributary._match_pairs(left_table, right_table, columns, right_columns, k, threshold, one_to_one,
                                  labels, model, min_precision, false) p
     ORDER BY 1, 2;
END $$;

-- The work of tributary_match (its arguments, then `all_pairs`): every candidate pair with its
-- probability when `all_pairs` (tributary_dedup's clusters need the pairs it rejects too), else
-- the accepted ones only; `accepted` says which, `evidence` (accepted pairs only) each column's
-- similarity, agreement level and weight (its term of the log odds of a match).
CREATE FUNCTION tributary._match_pairs(
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
    col_info jsonb; cand_recall jsonb;
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

    -- How many of the rows that one column alone ranks first are among the candidates.
    cand_recall := tributary._match_recall(self, emb, str, columns, vec, 200);
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
        'candidate_recall', cand_recall,
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
        RAISE NOTICE 'tributary_match: % x % rows, % candidate pairs (k = %, candidate recall %); %; estimated matches %, threshold % (%), accepted %, expected precision %, expected recall %; per column P(agree | match) / P(agree | non-match): %; % s embedding, % s candidates, % s evidence and fit',
            n_left, n_right, n_cand, k, coalesce(cand_recall->>'recall', 'n/a'), explanation->>'model', round(est::numeric, 1),
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

-- The pairs of pg_temp.tributary_match_s scoring `thr` or more; with `one_to_one` only those that
-- are the best of both their rows (no other candidate of either row scores higher; ties: the
-- smaller other key). In one table a row's candidates are the pairs on either side of it.
CREATE FUNCTION tributary._match_accepted(self boolean, thr float8, one_to_one boolean)
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

-- Candidate recall, measured on every call (issue 48): for up to `sample` left rows (in md5(key)
-- order) and each compared column alone, the right rows that column ranks first: those holding
-- the nearest value by embedding (a phrase column), else those holding the same value, case
-- aside (a short column); never the row itself. Found when a candidate pair of the row holds one
-- of them. A row whose value is NULL, or that no other row has the same short value as, is not
-- counted for that column. Returns {sample_rows, recall, columns: [{column, rows, found,
-- recall}]}; recall NULL where nothing was counted. Cost: sample x the right side's distinct
-- values of each phrase column (an exact nearest-value scan), one index lookup per row otherwise.
CREATE FUNCTION tributary._match_recall(self boolean, emb boolean[], str boolean[], columns text[], vec text,
                                        sample integer) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    i int;
    found bigint;
    total bigint;
    per jsonb := '[]';
    all_found bigint := 0;
    all_total bigint := 0;
    -- a candidate of row s whose other row r holds `cond` (pairs of one table: either side)
    cand text := 'EXISTS (SELECT 1 FROM pg_temp.tributary_match_c c JOIN pg_temp.tributary_match_r r ON r.key = c.rk
                           WHERE c.lk = s.key AND c.kind = ''c'' AND %1$s)
                  OR ($2 AND EXISTS (SELECT 1 FROM pg_temp.tributary_match_c c JOIN pg_temp.tributary_match_r r ON r.key = c.lk
                                      WHERE c.rk = s.key AND c.kind = ''c'' AND %1$s))';
BEGIN
    IF self THEN
        CREATE INDEX ON pg_temp.tributary_match_c (rk);
    END IF;
    FOR i IN 1 .. cardinality(columns) LOOP
        IF emb[i] THEN
            EXECUTE format(
                'WITH s AS (SELECT l.key, l.v[$1] AS val FROM pg_temp.tributary_match_l l
                             WHERE l.v[$1] IS NOT NULL ORDER BY md5(l.key) LIMIT $3),
                      rv AS MATERIALIZED (
                          SELECT x.val, x.holders, x.holder, v.e
                            FROM (SELECT r.v[$1] AS val, count(*) AS holders, min(r.key) AS holder
                                    FROM pg_temp.tributary_match_r r WHERE r.v[$1] IS NOT NULL GROUP BY 1) x
                            JOIN pg_temp.tributary_match_v v ON v.col = $1 AND v.val = x.val
                           WHERE v.e IS NOT NULL)
                 SELECT count(*) FILTER (WHERE f.found), count(*)
                   FROM s
                   JOIN pg_temp.tributary_match_v sv ON sv.col = $1 AND sv.val = s.val AND sv.e IS NOT NULL
                  CROSS JOIN LATERAL (SELECT b.val FROM rv b
                                       WHERE NOT ($2 AND b.holders = 1 AND b.holder = s.key)
                                       ORDER BY b.e OPERATOR(%2$s.<=>) sv.e LIMIT 1) best
                  CROSS JOIN LATERAL (SELECT (%1$s) AS found) f',
                format(cand, 'r.v[$1] = best.val AND r.key <> s.key'), vec)
              INTO found, total USING i, self, sample;
        ELSIF str[i] THEN
            EXECUTE format(
                'WITH s AS (SELECT l.key, lower(l.v[$1]) AS val FROM pg_temp.tributary_match_l l
                             WHERE l.v[$1] IS NOT NULL ORDER BY md5(l.key) LIMIT $3),
                      rv AS MATERIALIZED (SELECT lower(r.v[$1]) AS val, count(*) AS holders, min(r.key) AS holder
                                            FROM pg_temp.tributary_match_r r WHERE r.v[$1] IS NOT NULL GROUP BY 1)
                 SELECT count(*) FILTER (WHERE f.found), count(*)
                   FROM s JOIN rv ON rv.val = s.val AND NOT ($2 AND rv.holders = 1 AND rv.holder = s.key)
                  CROSS JOIN LATERAL (SELECT (%s) AS found) f',
                format(cand, 'lower(r.v[$1]) = s.val AND r.key <> s.key'))
              INTO found, total USING i, self, sample;
        ELSE
            CONTINUE;
        END IF;
        all_found := all_found + found;
        all_total := all_total + total;
        per := per || jsonb_build_array(jsonb_build_object(
            'column', columns[i], 'rows', total, 'found', found,
            'recall', CASE WHEN total > 0 THEN round(found::numeric / total, 4) END));
    END LOOP;
    RETURN jsonb_build_object(
        'sample_rows', (SELECT count(*) FROM (SELECT 1 FROM pg_temp.tributary_match_l LIMIT sample) x),
        'recall', CASE WHEN all_total > 0 THEN round(all_found::numeric / all_total, 4) END,
        'columns', per);
END $$;
COMMENT ON FUNCTION tributary._match_recall(boolean, boolean[], boolean[], text[], text, integer) IS 'Internal (tributary_match): candidate recall, the share of the rows one column alone ranks first that are among the candidates, on a sample of rows.';

-- 42P07 when this session has a temporary table or view named as tributary_match's (prefix
-- 'tributary_match_') or tributary_dedup's ('tributary_dedup_') work tables: they are the
-- caller's, and are neither used nor dropped.
CREATE FUNCTION tributary._match_names_free(prefix text) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    taken text;
BEGIN
    SELECT string_agg(c.relname, ', ' ORDER BY c.relname) INTO taken
      FROM pg_catalog.pg_class c
     WHERE c.relnamespace = pg_catalog.pg_my_temp_schema()
       AND c.relname IN (SELECT prefix || x FROM unnest(ARRAY['l', 'r', 'v', 'c', 'f', 's', 'n', 'a', 'e']) x);
    IF taken IS NOT NULL THEN
        RAISE EXCEPTION 'temporary relation "%" already exists', split_part(taken, ', ', 1) USING ERRCODE = '42P07',
            DETAIL = format('%s keeps its work in temporary tables named %s*; this session has %s.',
                            rtrim(prefix, '_'), prefix, taken),
            HINT = 'Rename or drop those temporary tables; tributary never drops a table it did not make.';
    END IF;
END $$;

-- Drops the temporary tables and view of `rels` that still exist (those tributary_match or
-- tributary_dedup made in this call, by OID), views first.
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

-- 42703 when `labels` lacks left_key, right_key or is_match (or cannot be read); 42804 when
-- is_match is not boolean (or a domain over boolean).
CREATE FUNCTION tributary._match_check_labels(labels regclass) RETURNS void
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
CREATE FUNCTION tributary_dedup(
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
