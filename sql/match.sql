-- Matching rows: the same thing in two tables (tributary_match) or twice in one (tributary_match
-- of a table with itself, tributary_dedup's clusters). Everything runs with the caller's
-- privileges (SECURITY INVOKER): row-level security and column privileges apply to both tables.
--
-- How (the README, "Matching rows", says it for users):
-- 1. Each row of each side becomes the text `column: value; ...` of the matched columns (the left
--    names on both sides, so the texts line up) and is embedded once; each column whose values
--    are phrases (1.5 words or more on average) has its distinct values embedded too.
-- 2. Candidates: for every row, its k nearest rows of the other side by the row embedding, both
--    ways (pgvector cosine distance, through an HNSW index built on the side when it has more
--    than 2,000 rows, with iterative scans): rows x k pairs, never rows x rows.
-- 3. Evidence per column, for every candidate pair: the cosine similarity of the two values'
--    embeddings (phrase columns) and a string similarity (tributary._string_similarity:
--    normalised Damerau-Levenshtein, for columns of short values: 64 characters or fewer on
--    average). A NULL on either side is missing evidence, not a mismatch. Each similarity is
--    rescaled so that what two unrelated rows typically score is 0 and equality is 1:
--    (s - u) / (1 - u), clamped to [0, 1], u its mean over 2,000 unrelated pairs (row i of one
--    side with row i + n/2 of the other, both in md5(key) order: deterministic, and almost never
--    a true pair). A column's evidence is the mean of its rescaled similarities.
-- 4. Score without labels: the mean of the columns' evidence weighted by how rarely unrelated
--    rows agree on that column and how often matches do: w = m ln(m / u) (0 when m <= u), u the
--    share of the unrelated pairs whose evidence is 0.9 or more (at least 1/2,000), m that share
--    among matches: agreeing on a state says little, on a birth date or an id much more, and a
--    column that matches often disagree on (a price, a note) weighs less (the agreement weight of
--    Fellegi and Sunter, "A theory for record linkage", JASA 64(328), 1969, weighted by how often
--    it applies). m is first 1 (so w = ln(1 / u)); then, as one step of Fellegi and Sunter's
--    estimation, it is read off the pairs those first scores accept (step 6), and every pair is
--    scored again. With labels: a logistic regression (tributary._logistic_fit, linfa-logistic)
--    over each column's evidence and whether it is present, learned from the labelled pairs; the
--    score is its probability of a match.
-- 5. Threshold: given, or with labels 0.5, or without labels read off the data: Kittler and
--    Illingworth's minimum-error cut (tributary._match_threshold) of the distribution of every
--    row's best and second-best candidate scores, capped at the 99th percentile of the
--    second-best ones (tributary._match_auto_threshold says why). The best of a row that has a
--    partner and the second-best of every row are the two classes that cut separates; the
--    second-best scores make the lower class exist even when every row has a partner.
-- 6. Accepted pairs: with one_to_one, pairs that are each other's best candidate (mutual best)
--    and score at or above the threshold; without, every candidate at or above it.
-- Work lives in temporary tables (the TEMP privilege on the database is needed; not on a hot
-- standby) dropped before the function returns; the embeddings go through
-- tributary_embed_column, so progress NOTICEs, Ctrl-C and statement_timeout work as there.

ALTER FUNCTION _string_similarity(text, text) SET SCHEMA tributary;
ALTER FUNCTION _match_threshold(double precision[], text) SET SCHEMA tributary;
ALTER FUNCTION _logistic_fit(double precision[], boolean[], double precision) SET SCHEMA tributary;

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

-- The text of a row's key: `t.id::text` for a one-column primary key, `ROW(t.a, t.b)::text`
-- (`(1,x)`) for a composite one; for a partitioned table over postgres_fdw shards, the shards'
-- primary key (tributary._shard_key_columns). 42P10 when `tbl` has no primary key.
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
        RETURN format('%I.%s::text', alias, cols[1]);
    END IF;
    RETURN format('ROW(%s)::text', (SELECT string_agg(format('%I.%s', alias, c), ', ') FROM unnest(cols) c));
END $$;

-- `ARRAY[nullif(btrim(left(t.c1::text, 2048)), ''), ...]`: the matched columns of `tbl` as text,
-- each cut to its first 2,048 characters (more than the model's window of 256 tokens holds, so
-- the embeddings are the same; a huge value is read only as far as that, for text columns stored
-- uncompressed). 42703 an unknown column, 22004 a NULL name.
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
            RAISE EXCEPTION 'column "%" of relation "%" does not exist', c, tbl USING ERRCODE = '42703';
        END IF;
        parts := parts || format('nullif(btrim(left(%I.%I::text, 2048)), %L)', alias, c, '');
    END LOOP;
    RETURN 'ARRAY[' || array_to_string(parts, ', ') || ']::text[]';
END $$;

-- tributary_match(left_table, right_table, columns [, right_columns, k, threshold, one_to_one,
-- labels, model]): the pairs of rows, one of each table, that are the same thing (the method:
-- this file's header). Returns the accepted pairs only, `(left_key, right_key, score)`: keys as
-- the primary key's text (`id::text`, a composite key as its row literal `(a,b)`), score in
-- [0, 1] (without labels the weighted evidence, with labels the probability of a match). Every
-- other candidate is an abstention. `right_columns` NULL: the same names as `columns`; the two
-- lists pair up by position. `left_table = right_table`: duplicates within one table, each
-- unordered pair once (left_key < right_key), never a row with itself. `k`: candidates per row
-- each way (1..1000). `threshold` NULL: read off the data without labels (or 0.5 with labels).
-- `labels`: a table or view with columns `left_key text, right_key text, is_match bool`. `model`
-- NULL: the default model. Cost: rows x k candidate pairs; the embedding of every row and of
-- each phrase column's distinct values dominates (BENCHMARKS.md, "Matching rows").
-- Errors: 22004 a NULL argument (but right_columns, threshold, labels, model); 22023 no
-- columns, lists of different lengths, k outside 1..1000, threshold outside [0, 1], labels with
-- a single class; 42703 an unknown column (also of labels); 42P10 a table without a primary key.
-- An empty table gives no rows.
CREATE FUNCTION tributary_match(
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

-- tributary_match's scores without labels, from its evidence (pg_temp.tributary_match_f) and
-- column weights (pg_temp.tributary_match_w: u, m): the weighted mean of the columns' evidence
-- that is present, each column weighing m ln(m / u) (its expected agreement weight over matches;
-- ln(1 / u) while m = 1), 0 when m <= u. Fills pg_temp.tributary_match_s.
CREATE FUNCTION tributary._match_score() RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO pg_temp.tributary_match_s
    SELECT f.lk, f.rk, f.kind, sum(w.w * f.es) / nullif(sum(w.w) FILTER (WHERE f.es IS NOT NULL), 0)
      FROM pg_temp.tributary_match_f f
      JOIN (SELECT x.i, CASE WHEN x.m > x.u THEN x.m * ln(x.m / x.u) ELSE 0 END AS w FROM pg_temp.tributary_match_w x) w ON w.i = f.i
     WHERE f.kind = 'c'
     GROUP BY f.lk, f.rk, f.kind;
END $$;

-- The threshold tributary_match reads off its scores (pg_temp.tributary_match_s) without labels:
-- the minimum-error cut of every row's best and second-best candidate scores, but never above
-- the 99th percentile of the second-best ones. A row's second-best candidate is its best
-- non-match when it has a partner, which is what the best candidate of a row without a partner
-- is, so at most about 1 in 100 rows without a partner has its best candidate above that cap
-- (and it must then also be mutual best, with one_to_one). The cap matters when the matches'
-- scores have a long lower tail, which a bell-shaped fit cuts inside of. In one table a row's
-- candidates are the pairs on either side of it. NULL with fewer than two distinct scores.
CREATE FUNCTION tributary._match_auto_threshold(self boolean) RETURNS float8
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
       AND c.relname IN (SELECT prefix || x FROM unnest(ARRAY['l', 'r', 'v', 'c', 'f', 's', 'w', 'e', 'n']) x);
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

-- 42703 when `labels` lacks left_key, right_key or is_match (or cannot be read).
CREATE FUNCTION tributary._match_check_labels(labels regclass) RETURNS void
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

-- tributary_dedup(tbl, columns [, k, threshold, labels, model]): groups of rows of `tbl` that are
-- the same thing: the connected components of the pairs tributary_match(tbl, tbl, columns, k =>
-- k, threshold => threshold, one_to_one => false, labels => labels, model => model) accepts
-- (so a row and two copies of it form one group). Returns `(cluster, key)` for every row in a
-- group of two or more: `cluster` numbers the groups 1, 2, ... in the order of their smallest
-- key, `key` as tributary_match writes it. Errors: tributary_match's.
CREATE FUNCTION tributary_dedup(
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
