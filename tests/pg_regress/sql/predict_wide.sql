-- Prediction on a wide table, whose embeddings are stored out of line (TOAST): the same
-- predictions and metrics as on a narrow table holding the same rows in line, for vector and
-- halfvec; a split with no test or no training rows, and a table with nothing to learn from: 22023
-- with DETAIL and HINT; NULL arguments.
CREATE SCHEMA wide;
-- 24 short texts, three classes; grp puts two rows of a class in each of 12 groups.
CREATE TABLE wide.src AS
SELECT i AS id, c.label, (i - 1) / 2 AS grp,
       c.label || ' ' || (ARRAY['one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight'])[(i - 1) / 3 + 1] AS body
  FROM generate_series(1, 24) i
  CROSS JOIN LATERAL (SELECT (ARRAY['cat', 'apple', 'truck'])[(i - 1) % 3 + 1] AS label) c;
-- Wide: two vectors and a halfvec, 3.9 kB a row; toast_tuple_target = 128 moves all three out of
-- line (the labels and bodies are too short to move).
CREATE TABLE wide.item (id int PRIMARY KEY, label text, grp int, one int, body text,
                        e vector(384), h halfvec(384), e2 vector(384)) WITH (toast_tuple_target = 128);
INSERT INTO wide.item
SELECT id, label, grp, 1, body, tributary_embed(body), tributary_embed(body)::halfvec(384),
       tributary_embed('another text: ' || body)
  FROM wide.src;
-- Narrow: the same ids, labels, groups and vectors, in line (1.6 kB rows are never toasted).
CREATE TABLE wide.narrow (id int PRIMARY KEY, label text, grp int, e vector(384));
INSERT INTO wide.narrow SELECT id, label, grp, e FROM wide.item;
CREATE TABLE wide.narrow_h (id int PRIMARY KEY, label text, grp int, h halfvec(384));
INSERT INTO wide.narrow_h SELECT id, label, grp, h FROM wide.item;
CREATE FUNCTION wide.toasted(tbl regclass) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
  EXECUTE format('SELECT count(DISTINCT chunk_id) FROM %s',
                 (SELECT reltoastrelid::regclass FROM pg_class WHERE oid = tbl)) INTO n;
  RETURN n;
END $$;
-- Out of line: 3 values a row in wide.item's TOAST table (72), none in the narrow tables'; an
-- out-of-line value's pg_column_size is its data without the 4-byte header (1,540 and 772
-- bytes), an in-line one's has it (1,544 and 776).
SELECT wide.toasted('wide.item') AS item_toasted, wide.toasted('wide.narrow') AS narrow_toasted,
       wide.toasted('wide.narrow_h') AS narrow_h_toasted,
       (SELECT array_agg(DISTINCT pg_column_size(e)) || array_agg(DISTINCT pg_column_size(h))
               || array_agg(DISTINCT pg_column_size(e2)) FROM wide.item) AS item_sizes,
       (SELECT array_agg(DISTINCT pg_column_size(e)) FROM wide.narrow)
       || (SELECT array_agg(DISTINCT pg_column_size(h)) FROM wide.narrow_h) AS narrow_sizes;

-- Evaluation: the same metrics, wide and narrow, vector and halfvec, several splits, k and kinds.
CREATE FUNCTION wide.eval(tbl regclass, emb name, label name, group_by name, k int, seed int, kind text DEFAULT 'auto')
RETURNS SETOF record LANGUAGE sql AS $$
  SELECT metric, model, baseline, test_rows, train_rows
    FROM tributary_evaluate(tbl, label, emb, group_by => group_by, k => k, test_fraction => 0.3, seed => seed, kind => kind)
$$;
CREATE FUNCTION wide.shown(tbl regclass, emb name, label name, group_by name, k int, seed int, kind text DEFAULT 'auto')
RETURNS TABLE (metric text, model numeric, baseline numeric, test_rows bigint, train_rows bigint) LANGUAGE sql AS $$
  SELECT metric, round(model::numeric, 6), round(baseline::numeric, 6), test_rows, train_rows
    FROM wide.eval(tbl, emb, label, group_by, k, seed, kind)
         AS (metric text, model float8, baseline float8, test_rows bigint, train_rows bigint)
$$;
SELECT * FROM wide.shown('wide.item', 'e', 'label', 'grp', 3, 0);
SELECT * FROM wide.shown('wide.item', 'h', 'label', NULL, 5, 2);
SELECT * FROM wide.shown('wide.item', 'e2', 'grp', 'grp', 2, 1, 'number');
-- Every metric exactly equal (float8, not rounded): 2 columns x 4 seeds x 3 k x 2 kinds.
SELECT count(*) AS comparisons, count(*) FILTER (WHERE w IS DISTINCT FROM n) AS differing
  FROM (VALUES ('e', 'wide.narrow'), ('h', 'wide.narrow_h')) c(col, narrow),
       generate_series(0, 3) s(seed), (VALUES (1), (3), (7)) k(k), (VALUES ('label'), ('grp')) l(label)
  CROSS JOIN LATERAL (
      SELECT (SELECT array_agg(r::text ORDER BY r::text)
                FROM wide.eval('wide.item', c.col::name, l.label::name, 'grp', k.k, s.seed)
                     AS r(metric text, model float8, baseline float8, test_rows bigint, train_rows bigint)) AS w,
             (SELECT array_agg(r::text ORDER BY r::text)
                FROM wide.eval(c.narrow::regclass, c.col::name, l.label::name, 'grp', k.k, s.seed)
                     AS r(metric text, model float8, baseline float8, test_rows bigint, train_rows bigint)) AS n) x;

-- Prediction: the same neighbours, labels and weights, wide and narrow, vector and halfvec.
SELECT p.prediction, round(p.confidence::numeric, 4) AS confidence, p.neighbours,
       jsonb_path_query_array(p.evidence, '$[*].key.id') AS ids
  FROM tributary_predict('wide.item', 'label', 'e', tributary_embed('a small cat'), k => 4) p;
SELECT count(*) AS differing
  FROM wide.item i
  CROSS JOIN LATERAL (VALUES ('e', 'wide.narrow'), ('h', 'wide.narrow_h')) c(col, narrow)
 WHERE (SELECT row(p.prediction, p.confidence, p.neighbours, p.evidence)::text
          FROM tributary_predict('wide.item', 'label', c.col::name, i.e2, k => 5) p)
       IS DISTINCT FROM
       (SELECT row(p.prediction, p.confidence, p.neighbours, p.evidence)::text
          FROM tributary_predict(c.narrow::regclass, 'label', c.col::name, i.e2, k => 5) p);

-- Both functions run without JIT, whatever the session's setting.
SELECT p.proname, p.proconfig FROM pg_proc p
 WHERE p.proname IN ('tributary_predict', 'tributary_evaluate')
   AND p.pronargs > 3   -- the neighbour functions, not the predictor ones (tributary_train)
 ORDER BY 1;

-- No test rows, no training rows (one group: all in, or all out), nothing labelled: 22023.
SELECT expect_error($$SELECT * FROM tributary_evaluate('wide.item', 'label', 'e', group_by => 'one', seed => 1)$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate('wide.item', 'label', 'h', group_by => 'one', seed => 0)$$);
CREATE TABLE wide.unlabelled (id int PRIMARY KEY, label text, e vector(384));
INSERT INTO wide.unlabelled VALUES (1, NULL, tributary_embed('x')), (2, 'y', NULL);
SELECT expect_error($$SELECT * FROM tributary_evaluate('wide.unlabelled', 'label', 'e')$$);
SELECT expect_error($$SELECT * FROM tributary_predict('wide.unlabelled', 'label', 'e', tributary_embed('x'))$$);
-- Still checked first: a bad test_fraction, an unknown column.
SELECT expect_error($$SELECT * FROM tributary_evaluate('wide.unlabelled', 'label', 'e', test_fraction => 0)$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate('wide.unlabelled', 'label', 'e', group_by => 'nope')$$);

-- NULL arguments: a NULL query is a row of NULLs (even with nothing to predict from), a NULL
-- group_by the primary key; any other NULL is 22004.
SELECT * FROM tributary_predict('wide.unlabelled', 'label', 'e', NULL);
SELECT (SELECT array_agg(row(e.*)::text ORDER BY e.metric) FROM tributary_evaluate('wide.item', 'label', 'e', group_by => NULL, seed => 3) e)
     = (SELECT array_agg(row(e.*)::text ORDER BY e.metric) FROM tributary_evaluate('wide.item', 'label', 'e', seed => 3) e)
       AS null_group_by_is_the_key;
SELECT expect_error($$SELECT * FROM tributary_predict('wide.item', NULL, 'e', tributary_embed('x'))$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate('wide.item', 'label', 'e', test_fraction => NULL)$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate('wide.item', 'label', 'e', seed => NULL)$$);

SET client_min_messages = warning;
DROP SCHEMA wide CASCADE;
RESET client_min_messages;
