-- tributary 0.9.0 -> 0.10.0: tributary_match's score is a match probability from a Fellegi-Sunter
-- model fitted by EM to the candidate pairs' evidence (tributary._match_em), with the one-to-one
-- structure inside the fit; accepted = probability 0.5 or more, or the cut for `min_precision`
-- (new argument of tributary_match and tributary_dedup); every accepted pair carries its evidence
-- per column (new result column `evidence`); tributary_match_explain() says what the last call
-- learned; short columns are compared by string similarity without embedding and find
-- candidates by blocking; tributary_dedup joins clusters by average linkage
-- (tributary._match_clusters). The percentile-capped threshold and the weighted mean are gone
-- (tributary._match_score, tributary._match_auto_threshold, tributary._match_threshold); labels
-- count in the same EM instead of a logistic regression (tributary._logistic_fit is gone).
-- Predictors (sql/learn.sql, sql/learn_jobs.sql): history paths of three hops
-- ("track_id.album_id.artist_id") and through a parent's link tables
-- ("track_id.playlist_track.playlist_id"); predict jobs wake on those tables too.
-- Generated from sql/match.sql, sql/learn.sql and sql/learn_jobs.sql.

DROP FUNCTION tributary_match(regclass, regclass, text[], text[], integer, double precision, boolean, regclass, text);
DROP FUNCTION tributary_dedup(regclass, text[], integer, double precision, regclass, text);
DROP FUNCTION tributary._match_score();
DROP FUNCTION tributary._match_auto_threshold(boolean);
DROP FUNCTION tributary._match_threshold(double precision[], text);
DROP FUNCTION tributary._logistic_fit(double precision[], boolean[], double precision);

CREATE  FUNCTION "_match_em"(
	"a" INT[], /* Vec < Option < i32 > > */
	"b" INT[], /* Vec < Option < i32 > > */
	"x" double precision[], /* Vec < Option < f64 > > */
	"ux" double precision[], /* Vec < Option < f64 > > */
	"lx" double precision[], /* Vec < Option < f64 > > */
	"ly" bool[], /* Vec < Option < bool > > */
	"rows_left" double precision, /* f64 */
	"rows_right" double precision, /* f64 */
	"same_table" bool, /* bool */
	"one_to_one" bool /* bool */
) RETURNS TABLE (
	"p" double precision[],  /* Vec < f64 > */
	"prior" double precision,  /* f64 */
	"partnered" double precision[],  /* Vec < f64 > */
	"m" double precision[],  /* Vec < f64 > */
	"u" double precision[],  /* Vec < f64 > */
	"bounds" double precision[],  /* Vec < f64 > */
	"iterations" INT,  /* i32 */
	"converged" bool  /* bool */
)
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_match_em_wrapper';

CREATE  FUNCTION "_match_cut"(
	"p" double precision[], /* Vec < Option < f64 > > */
	"min_precision" double precision /* f64 */
) RETURNS double precision /* Option < f64 > */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_match_cut_wrapper';

CREATE  FUNCTION "_match_clusters"(
	"a" INT[], /* Vec < Option < i32 > > */
	"b" INT[], /* Vec < Option < i32 > > */
	"p" double precision[], /* Vec < Option < f64 > > */
	"threshold" double precision /* f64 */
) RETURNS INT[] /* Vec < i32 > */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_match_clusters_wrapper';

CREATE  FUNCTION "_match_remember"(
	"explanation" jsonb /* pgrx :: JsonB */
) RETURNS void
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_match_remember_wrapper';

CREATE  FUNCTION "tributary_match_explain"() RETURNS jsonb /* Option < pgrx :: JsonB > */
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tributary_match_explain_wrapper';

ALTER FUNCTION _match_em(integer[], integer[], double precision[], double precision[], double precision[], boolean[], double precision, double precision, boolean, boolean) SET SCHEMA tributary;
ALTER FUNCTION _match_cut(double precision[], double precision) SET SCHEMA tributary;
ALTER FUNCTION _match_clusters(integer[], integer[], double precision[], double precision) SET SCHEMA tributary;
ALTER FUNCTION _match_remember(jsonb) SET SCHEMA tributary;

-- `ARRAY[nullif(btrim(left(t.c1::text, 2048)), ''), ...]`: the matched columns of `tbl` as text,
-- each cut to its first 2,048 characters (more than the model's window of 256 tokens holds, so
-- the embeddings are the same; a huge value is read only as far as that, for text columns stored
-- uncompressed); a `vector` column whole (tributary._match_stored). 42703 an unknown column,
-- 22004 a NULL name.
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
        parts := parts || CASE WHEN tributary._match_stored(tbl, ARRAY[c]) = '{t}'
                               THEN format('%I.%I::text', alias, c)
                               ELSE format('nullif(btrim(left(%I.%I::text, 2048)), %L)', alias, c, '') END;
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

-- tributary_match(left_table, right_table, columns [, right_columns, k, threshold, one_to_one,
-- labels, model, min_precision]): the pairs of rows, one of each table, that are the same thing
-- (the method: this file's header). Returns the accepted pairs only, `(left_key, right_key,
-- score, evidence)`: keys as the primary key's text (`id::text`, a composite key as its row
-- literal `(a,b)`), score the probability of a match in [0, 1], evidence per column
-- `{"similarity", "level", "weight"}` (level NULL: a value missing; weight: the column's term of
-- the log odds, ln(m / u) without labels). Every other candidate is an abstention.
-- `right_columns` NULL: the same names as `columns`; the two lists pair up by position.
-- `left_table = right_table`: duplicates within one table, each unordered pair once (left_key <
-- right_key), never a row with itself. `k`: candidates per row each way and the blocking limit
-- (1..1000). `threshold`: the cut on the probability (NULL: 0.5); `min_precision` in (0, 1]:
-- the lowest cut with at least that expected precision instead. `labels`: a table or view with
-- columns `left_key text, right_key text, is_match bool`. `model` NULL: the default model.
-- Cost: rows x k candidate pairs; embedding only the phrase columns' distinct values.
-- Errors: 22004 a NULL argument (but right_columns, threshold, labels, model, min_precision);
-- 22023 no columns, lists of different lengths, k outside 1..1000, threshold outside [0, 1],
-- min_precision outside (0, 1], both threshold and min_precision, labels with a single class;
-- 42703 an unknown column (also of labels); 42P10 a table without a primary key. An empty table
-- gives no rows.
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
    EXECUTE format('SELECT %s.vector_dims(tributary._embed_text($1, $2))', vec) INTO dims USING 'dimension', model;
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
    -- embedding; several: the normalised sum of their values' embeddings (no second pass of the
    -- model over longer texts); none: none.
    IF n_emb = 1 THEN
        ei := array_position(emb, true);
        UPDATE pg_temp.tributary_match_l l SET e = v.e FROM pg_temp.tributary_match_v v WHERE v.col = ei AND v.val = l.v[ei];
        IF NOT self THEN
            UPDATE pg_temp.tributary_match_r r SET e = v.e FROM pg_temp.tributary_match_v v WHERE v.col = ei AND v.val = r.v[ei];
        END IF;
    ELSIF n_emb > 1 THEN
        EXECUTE format(
            'UPDATE pg_temp.tributary_match_%2$s x
                SET e = (SELECT %1$s.l2_normalize(%1$s.sum(v.e))
                           FROM unnest($1) c(i) JOIN pg_temp.tributary_match_v v ON v.col = c.i AND v.val = x.v[c.i])',
            vec, 'l') USING array_positions(emb, true);
        IF NOT self THEN
            EXECUTE format(
                'UPDATE pg_temp.tributary_match_%2$s x
                    SET e = (SELECT %1$s.l2_normalize(%1$s.sum(v.e))
                               FROM unnest($1) c(i) JOIN pg_temp.tributary_match_v v ON v.col = c.i AND v.val = x.v[c.i])',
                vec, 'r') USING array_positions(emb, true);
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

-- 42P07 when this session has a temporary table or view named as tributary_match's (prefix
-- 'tributary_match_') or tributary_dedup's ('tributary_dedup_') work tables: they are the
-- caller's, and are neither used nor dropped.
CREATE OR REPLACE FUNCTION tributary._match_names_free(prefix text) RETURNS void
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
    thr := coalesce((@extschema@.tributary_match_explain()->>'threshold')::float8, 'Infinity');
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

COMMENT ON FUNCTION tributary_match(regclass, regclass, text[], text[], integer, double precision, boolean, regclass, text, double precision) IS 'The pairs of rows of two tables (or of one table with itself) that are the same thing: candidates from nearest neighbours and blocking, evidence per column, a match probability from a model fitted by EM (or learned from labels); returns the accepted pairs only, with their evidence.';
COMMENT ON FUNCTION tributary_dedup(regclass, text[], integer, double precision, regclass, text, double precision) IS 'Groups of duplicate rows of a table: the pairs tributary_match accepts within it, joined by average linkage over their probabilities.';
COMMENT ON FUNCTION tributary._match_pairs(regclass, regclass, text[], text[], integer, double precision, boolean, regclass, text, double precision, boolean) IS 'Internal (tributary_match, tributary_dedup): the candidate pairs, their probabilities, which are accepted and why.';
COMMENT ON FUNCTION tributary._match_em(integer[], integer[], double precision[], double precision[], double precision[], boolean[], double precision, double precision, boolean, boolean) IS 'Internal (tributary_match): the Fellegi-Sunter model of the pairs'' evidence fitted by EM; each pair''s match probability.';
COMMENT ON FUNCTION tributary._match_cut(double precision[], double precision) IS 'Internal (tributary_match): the lowest cut whose pairs have a mean probability of at least min_precision.';
COMMENT ON FUNCTION tributary._match_clusters(integer[], integer[], double precision[], double precision) IS 'Internal (tributary_dedup): groups of rows from scored pairs by average linkage.';
COMMENT ON FUNCTION tributary._match_remember(jsonb) IS 'Internal (tributary_match): keeps the last call''s explanation for tributary_match_explain().';
COMMENT ON FUNCTION tributary_match_explain() IS 'What this session''s last tributary_match or tributary_dedup learned and decided: per column m and u, estimated matches, the cut, expected precision and recall.';
COMMENT ON FUNCTION tributary._match_stored(regclass, text[]) IS 'Internal (tributary_match): which matched columns are pgvector vector columns (stored embeddings, used as they are).';

-- Predictors: three-hop paths and a parent's link tables (sql/learn.sql).
-- The plan of a predictor over column `label` of `tbl`: what tributary_train and the
-- prediction functions read, as jsonb (src/service/learn.rs reads it):
--   kind            'category' or 'number' (tributary.label_kind)
--   rows_sql        one row per row of the table: key (jsonb text), tableoid, ctid, as_of
--                   (float8), label (text or float8), text, embedding (float4[]), numbers
--                   (float8[]), categories (text[]), the group of each parent path (text[]), the
--                   referenced key of each link path (text[]); %SOURCE% and %CTID% are replaced
--                   by the caller (the table; or one record)
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
-- (42501). Errors: 42703 unknown label, as_of or embedding column; 42804 as_of not a number,
-- date or timestamp, embedding not vector/halfvec; 22023 a history path or column named that
-- does not exist (DETAIL lists those found).
-- The foreign keys of `rel` (as the referencing table), one row each: the constraint, the
-- referencing columns, the referenced table and columns, in key order. A foreign key to a
-- partitioned table is one row: not the copies PostgreSQL keeps for each referenced partition
-- (pg_constraint rows of the same table whose conparentid is that foreign key).
CREATE OR REPLACE FUNCTION tributary._learn_fkeys(rel regclass)
RETURNS TABLE (conname name, cols name[], ref regclass, ref_cols name[])
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.conname,
           (SELECT array_agg(a.attname ORDER BY k.o) FROM unnest(c.conkey) WITH ORDINALITY k(n, o)
              JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n),
           c.confrelid::regclass,
           (SELECT array_agg(a.attname ORDER BY k.o) FROM unnest(c.confkey) WITH ORDINALITY k(n, o)
              JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n)
      FROM pg_constraint c
     WHERE c.conrelid = rel AND c.contype = 'f'
       AND NOT EXISTS (SELECT 1 FROM pg_constraint p WHERE p.oid = c.conparentid AND p.conrelid = c.conrelid)
     ORDER BY c.conname
$$;

-- Whether the caller may read every one of `cols` of `rel` (a path or join is used only then:
-- training reads what it finds with the caller's rights, and an unreadable column is a 42501).
CREATE FUNCTION tributary._learn_readable(rel regclass, cols name[])
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT NOT EXISTS (SELECT 1 FROM pg_catalog.unnest(cols) c
                        WHERE NOT pg_catalog.has_column_privilege(rel, c, 'SELECT'))
$$;

CREATE OR REPLACE FUNCTION tributary._learn_spec(
    tbl regclass, label name, embedding name, as_of name, history text[], columns text[])
RETURNS jsonb LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    vec text := tributary._vector_schema();
    kind text := tributary.label_kind(tbl, label, 'auto');
    ty record;
    a record;
    fk record;
    fk2 record;
    fk3 record;
    lk record;
    key_expr text := tributary.row_key(tbl, 't');
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
    key_cols name[];
    pname text;
    n bigint;
    pn text[];
    pnn text[];
    ptx text[];
    emb_expr text := 'CAST(NULL AS pg_catalog.float4[])';
    ridx integer;
BEGIN
    -- Columns in a primary or foreign key: never typed features (an id is no quantity).
    SELECT coalesce(array_agg(DISTINCT att.attname), '{}') INTO key_cols
      FROM pg_constraint c CROSS JOIN LATERAL unnest(c.conkey) k(n)
      JOIN pg_attribute att ON att.attrelid = c.conrelid AND att.attnum = k.n
     WHERE c.conrelid = tbl AND c.contype IN ('p', 'f', 'u');
    sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, label, (tributary._learn_column_type(tbl, label)).sql_type));

    IF as_of IS NOT NULL THEN
        ty := tributary._learn_column_type(tbl, as_of);
        IF ty.sql_type IS NULL THEN
            RAISE EXCEPTION 'column "%" of relation "%" does not exist', as_of, tbl USING ERRCODE = '42703';
        END IF;
        as_of_expr := tributary._learn_number(format('t.%I', as_of), ty.category, ty.typname);
        IF as_of_expr IS NULL OR ty.category = 'B' THEN
            RAISE EXCEPTION 'as_of column "%" is of type %, not a number, date or timestamp', as_of, ty.sql_type
                USING ERRCODE = '42804', HINT = 'as_of names the column that dates each row: an integer (a year), a date or a timestamp.';
        END IF;
        as_of_sql := format('SELECT %s FROM (SELECT CAST($1 AS %s) AS %I) t', as_of_expr, ty.sql_type, as_of);
        sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, as_of, ty.sql_type));
    END IF;

    IF embedding IS NOT NULL THEN
        PERFORM tributary.embedding_type(tbl, embedding);
        emb_expr := format('CAST(CAST(t.%I AS %s.vector) AS pg_catalog.float4[])', embedding, vec);
        sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, embedding, (tributary._learn_column_type(tbl, embedding)).sql_type));
    END IF;

    -- Own columns.
    FOR a IN SELECT att.attname, t.typcategory, t.typname, format_type(att.atttypid, att.atttypmod) AS sql_type
               FROM pg_attribute att JOIN pg_type t ON t.oid = att.atttypid
              WHERE att.attrelid = tbl AND att.attnum > 0 AND NOT att.attisdropped
                AND att.attname NOT IN (label, coalesce(embedding, ''), coalesce(as_of, ''))
                AND NOT att.attname = ANY (key_cols)
                AND has_column_privilege(tbl, att.attnum, 'SELECT')
              ORDER BY att.attnum LOOP
        IF a.typname IN ('vector', 'halfvec', 'sparsevec', 'bytea', 'tsvector', 'json', 'jsonb') THEN
            CONTINUE;
        END IF;
        -- Values in a sample of 10,000 rows (distinct, NULL not counted): an empty column (a
        -- target made for the predictions, say) is no feature.
        EXECUTE format('SELECT count(d.v) FROM (SELECT DISTINCT s.v FROM (SELECT t.%I AS v FROM %s t LIMIT 10000) s) d',
                       a.attname, tbl) INTO n;
        IF n = 0 THEN
            CONTINUE;
        END IF;
        IF tributary._learn_number(format('t.%I', a.attname), a.typcategory, a.typname) IS NOT NULL THEN
            found_cols := found_cols || a.attname::text;
            IF tributary._learn_chosen(a.attname, columns) THEN
                nums := nums || ('ARRAY[' || tributary._learn_number(format('t.%I', a.attname), a.typcategory, a.typname) || ']');
                num_names := num_names || a.attname::text;
                used_cols := used_cols || a.attname::text;
                sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, a.attname, a.sql_type));
            END IF;
        ELSIF a.typcategory IN ('S', 'E') THEN
            found_cols := found_cols || a.attname::text;
            IF NOT tributary._learn_chosen(a.attname, columns) THEN
                CONTINUE;
            END IF;
            texts := texts || format('CAST(t.%I AS pg_catalog.text)', a.attname);
            used_cols := used_cols || a.attname::text;
            sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, a.attname, a.sql_type));
            IF n <= 64 THEN
                cats := cats || format('CAST(t.%I AS pg_catalog.text)', a.attname);
                cat_names := cat_names || a.attname::text;
            END IF;
        END IF;
    END LOOP;

    -- Parents: the group of each foreign key, each parent's numbers, and two and three hops;
    -- each only where the caller may read the columns it joins on.
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
        END IF;
        IF NOT tributary._learn_readable(fk.ref, fk.ref_cols) THEN
            CONTINUE;
        END IF;
        -- The parent's numbers, as one float8[] subquery per parent.
        pn := '{}';
        pnn := '{}';
        ptx := '{}';
        FOR a IN SELECT att.attname, t.typcategory, t.typname, format_type(att.atttypid, att.atttypmod) AS sql_type
                   FROM pg_attribute att JOIN pg_type t ON t.oid = att.atttypid
                  WHERE att.attrelid = fk.ref AND att.attnum > 0 AND NOT att.attisdropped
                    AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conrelid = fk.ref
                                       AND c.contype IN ('p', 'f', 'u') AND att.attnum = ANY (c.conkey))
                    AND has_column_privilege(fk.ref, att.attnum, 'SELECT')
                  ORDER BY att.attnum LOOP
            IF a.typcategory IN ('S', 'E') THEN
                -- The parent's text (an album's title, a track's composer) joins the row's text.
                found_cols := found_cols || (pname || '.' || a.attname);
                IF tributary._learn_chosen(pname || '.' || a.attname, columns) THEN
                    ptx := ptx || format('CAST(p.%I AS pg_catalog.text)', a.attname);
                    used_cols := used_cols || (pname || '.' || a.attname);
                    sig := sig || jsonb_build_array(jsonb_build_array(fk.ref::text, a.attname, a.sql_type));
                END IF;
                CONTINUE;
            END IF;
            IF tributary._learn_number(format('p.%I', a.attname), a.typcategory, a.typname) IS NULL
               OR a.typname IN ('vector', 'halfvec') THEN
                CONTINUE;
            END IF;
            found_cols := found_cols || (pname || '.' || a.attname);
            IF tributary._learn_chosen(pname || '.' || a.attname, columns) THEN
                pn := pn || tributary._learn_number(format('p.%I', a.attname), a.typcategory, a.typname);
                pnn := pnn || (pname || '.' || a.attname);
                used_cols := used_cols || (pname || '.' || a.attname);
                sig := sig || jsonb_build_array(jsonb_build_array(fk.ref::text, a.attname, a.sql_type));
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
            found_paths := found_paths || (pname || '.' || array_to_string(fk2.cols, ','));
            IF tributary._learn_chosen(pname || '.' || array_to_string(fk2.cols, ','), history) THEN
                groups := groups || format('(SELECT %s FROM %s p WHERE (%s) = (%s))',
                    tributary._learn_key_text('p', fk2.cols), fk.ref,
                    (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                    (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)));
                group_names := group_names || (pname || '.' || array_to_string(fk2.cols, ','));
                used_paths := used_paths || (pname || '.' || array_to_string(fk2.cols, ','));
            END IF;
            -- Three hops: rows whose grandparents share a great-grandparent (a track's album's
            -- artist: "track_id.album_id.artist_id").
            FOR fk3 IN SELECT * FROM tributary._learn_fkeys(fk2.ref) LOOP
                -- Only a path the caller may read (the grandparent's key and foreign key columns).
                IF NOT tributary._learn_readable(fk2.ref, fk2.ref_cols || fk3.cols) THEN
                    CONTINUE;
                END IF;
                found_paths := found_paths || (pname || '.' || array_to_string(fk2.cols, ',') || '.' || array_to_string(fk3.cols, ','));
                IF tributary._learn_chosen(pname || '.' || array_to_string(fk2.cols, ',') || '.' || array_to_string(fk3.cols, ','), history) THEN
                    groups := groups || format('(SELECT %s FROM %s p JOIN %s g ON (%s) = (%s) WHERE (%s) = (%s))',
                        tributary._learn_key_text('g', fk3.cols), fk.ref, fk2.ref,
                        (SELECT string_agg(format('g.%I', c), ', ' ORDER BY o) FROM unnest(fk2.ref_cols) WITH ORDINALITY u(c, o)),
                        (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk2.cols) WITH ORDINALITY u(c, o)),
                        (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                        (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)));
                    group_names := group_names || (pname || '.' || array_to_string(fk2.cols, ',') || '.' || array_to_string(fk3.cols, ','));
                    used_paths := used_paths || (pname || '.' || array_to_string(fk2.cols, ',') || '.' || array_to_string(fk3.cols, ','));
                END IF;
            END LOOP;
            -- The grandparent's text (a track's album title) joins the row's text too.
            ptx := '{}';
            FOR a IN SELECT att.attname, format_type(att.atttypid, att.atttypmod) AS sql_type
                       FROM pg_attribute att JOIN pg_type t ON t.oid = att.atttypid
                      WHERE att.attrelid = fk2.ref AND att.attnum > 0 AND NOT att.attisdropped
                        AND tributary._learn_readable(fk2.ref, fk2.ref_cols)
                        AND t.typcategory IN ('S', 'E')
                        AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conrelid = fk2.ref
                                           AND c.contype IN ('p', 'f', 'u') AND att.attnum = ANY (c.conkey))
                        AND has_column_privilege(fk2.ref, att.attnum, 'SELECT')
                      ORDER BY att.attnum LOOP
                found_cols := found_cols || (pname || '.' || array_to_string(fk2.cols, ',') || '.' || a.attname);
                IF tributary._learn_chosen(pname || '.' || array_to_string(fk2.cols, ',') || '.' || a.attname, columns) THEN
                    ptx := ptx || format('CAST(g.%I AS pg_catalog.text)', a.attname);
                    used_cols := used_cols || (pname || '.' || array_to_string(fk2.cols, ',') || '.' || a.attname);
                    sig := sig || jsonb_build_array(jsonb_build_array(fk2.ref::text, a.attname, a.sql_type));
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
            links := links || jsonb_build_object('name', pname, 'ref', ridx - 1,
                'sql', format('SELECT %s, %s FROM %s l', tributary._learn_key_text('l', lk.cols),
                              tributary._learn_key_text('l', lk.other_cols), lk.child));
            sig := sig || jsonb_build_array(jsonb_build_array(lk.child::text, array_to_string(lk.cols, ','), 'link'));
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
        links := links || jsonb_build_object('name', pname, 'ref', ridx - 1,
            'sql', format('SELECT %s, %s FROM %s l', tributary._learn_key_text('l', lk.cols),
                          tributary._learn_key_text('l', lk.other_cols), lk.child));
        sig := sig || jsonb_build_array(jsonb_build_array(lk.child::text, array_to_string(lk.cols, ','), 'link'));
    END LOOP;

    -- Names asked for that do not exist.
    SELECT string_agg(quote_literal(h), ', ') INTO pname FROM unnest(history) h
     WHERE ltrim(h, '-') <> ALL (found_paths);
    IF pname IS NOT NULL THEN
        RAISE EXCEPTION 'history path % of relation "%" does not exist', pname, tbl USING ERRCODE = '22023',
            DETAIL = format('The paths found: %s.', coalesce(nullif(array_to_string(found_paths, ', '), ''), 'none')),
            HINT = 'Paths are named by the foreign key columns they follow (see tributary_train''s documentation).';
    END IF;
    SELECT string_agg(quote_literal(h), ', ') INTO pname FROM unnest(columns) h
     WHERE ltrim(h, '-') <> ALL (found_cols);
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
                      ELSE format('CAST(t.%I AS pg_catalog.text)', label) END,
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
        'paths_used', to_jsonb(used_paths));
END $$;

COMMENT ON FUNCTION tributary._learn_readable(regclass, name[]) IS 'Internal: whether the caller may read every one of these columns of the relation.';

-- The tables whose rows a predictor over `tbl` reads besides tbl: the tables its foreign keys
-- reference and theirs, up to three hops (parents, grandparents, great-grandparents: their
-- numbers, text and keys are features), and the link tables of tbl and of its parents (a
-- foreign key to it and another foreign key), as tributary._learn_spec finds them. Ordinary and
-- partitioned tables only.
CREATE OR REPLACE FUNCTION tributary._predict_related(tbl regclass) RETURNS SETOF regclass
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    WITH RECURSIVE up(rel, depth) AS (
        SELECT CAST(f.ref AS oid), 1 FROM tributary._learn_fkeys(tbl) f
        UNION
        SELECT CAST(f.ref AS oid), u.depth + 1 FROM up u CROSS JOIN LATERAL tributary._learn_fkeys(u.rel) f
         WHERE u.depth < 3
    )
    SELECT DISTINCT r.rel::regclass
      FROM (SELECT up.rel FROM up
            UNION
            SELECT c.conrelid FROM pg_constraint c
             WHERE c.contype = 'f' AND c.conrelid <> tbl
               AND (c.confrelid = tbl OR c.confrelid IN (SELECT up.rel FROM up WHERE up.depth = 1))
               AND NOT (SELECT k.relispartition FROM pg_class k WHERE k.oid = c.conrelid)
               AND EXISTS (SELECT 1 FROM pg_constraint o WHERE o.conrelid = c.conrelid
                              AND o.contype = 'f' AND o.conname <> c.conname)) r
      JOIN pg_class k ON k.oid = r.rel
     WHERE r.rel <> tbl AND k.relkind IN ('r', 'p')
$$;
