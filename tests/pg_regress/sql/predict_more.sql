-- Prediction that never fails on an index, a forward-in-time split for tributary_evaluate, and
-- tributary_predict_column. Small literal vectors (vector(3)) keep the output stable; the real
-- model is used once, at the end.
SET tributary.progress_interval = 0;
CREATE SCHEMA pm;

-- 1. An HNSW index returns hnsw.ef_search candidates before the label filter: 300 unlabelled rows
-- next to the query, 4 labelled rows far from it.
CREATE TABLE pm.near (id int PRIMARY KEY, label text, e vector(3), guess text);
INSERT INTO pm.near SELECT i, NULL, ARRAY[1, i * 0.0001, 0]::vector(3) FROM generate_series(1, 300) i;
INSERT INTO pm.near VALUES (1001, 'b', '[0,1,0]'), (1002, 'b', '[-0.01,1,0.1]'), (1003, 'c', '[-0.1,0,1]'), (1004, 'b', '[0.1,1,0]');
CREATE INDEX ON pm.near USING hnsw (e vector_cosine_ops) WITH (m = 4, ef_construction = 8);
ANALYZE pm.near;
SET enable_seqscan = off;
SET hnsw.ef_search = 10;
-- The failure: the plain index scan finds no labelled row among its 10 candidates.
EXPLAIN (COSTS OFF) SELECT id FROM pm.near WHERE label IS NOT NULL AND e IS NOT NULL ORDER BY e <=> '[1,0,0]' LIMIT 3;
SELECT count(*) AS plain_index_scan_rows
  FROM (SELECT id FROM pm.near WHERE label IS NOT NULL AND e IS NOT NULL ORDER BY e <=> '[1,0,0]' LIMIT 3) x;
-- tributary_predict scans on (iterative index scan): the 3 nearest labelled rows.
SELECT prediction, round(confidence::numeric, 4) AS confidence, neighbours,
       jsonb_path_query_array(evidence, '$[*].key.id') AS ids
  FROM tributary_predict('pm.near', 'label', 'e', '[1,0,0]', k => 3);
-- ... and leaves the session's setting as it was.
SHOW hnsw.iterative_scan;
-- The iterative scan stops after hnsw.max_scan_tuples: no labelled row either...
SET hnsw.max_scan_tuples = 1;
SET hnsw.iterative_scan = relaxed_order;
SELECT count(*) AS iterative_scan_rows
  FROM (SELECT id FROM pm.near WHERE label IS NOT NULL AND e IS NOT NULL ORDER BY e <=> '[1,0,0]' LIMIT 3) x;
RESET hnsw.iterative_scan;
-- ... so the exact search: the same neighbours; k above the labelled rows gives all 4.
SELECT prediction, round(confidence::numeric, 4) AS confidence, neighbours,
       jsonb_path_query_array(evidence, '$[*].key.id') AS ids
  FROM tributary_predict('pm.near', 'label', 'e', '[1,0,0]', k => 3);
SELECT prediction, neighbours, jsonb_path_query_array(evidence, '$[*].key.id') AS ids
  FROM tributary_predict('pm.near', 'label', 'e', '[1,0,0]', k => 10);
-- A whole LATERAL query over the unlabelled rows: every row predicted, from 3 neighbours.
SELECT p.prediction, p.neighbours, count(*)
  FROM pm.near n CROSS JOIN LATERAL tributary_predict('pm.near', 'label', 'e', n.e, k => 3) p
 WHERE n.label IS NULL GROUP BY 1, 2;
-- The column, the same way (index, then exact).
SELECT tributary_predict_column('pm.near', 'label', 'e', 'guess', k => 3, batch_size => 64) AS predicted;
SELECT label, guess, count(*) FROM pm.near GROUP BY 1, 2 ORDER BY 1, 2;
RESET hnsw.max_scan_tuples;
RESET hnsw.ef_search;
RESET enable_seqscan;
-- 'no rows' only when no visible row has both label and embedding.
UPDATE pm.near SET label = NULL WHERE id > 1000;
SELECT expect_error($$SELECT * FROM tributary_predict('pm.near', 'label', 'e', '[1,0,0]')$$);
SELECT expect_error($$SELECT tributary_predict_column('pm.near', 'label', 'e', 'guess')$$);
UPDATE pm.near SET label = 'b', e = NULL WHERE id = 1001;
SELECT expect_error($$SELECT * FROM tributary_predict('pm.near', 'label', 'e', '[1,0,0]')$$);
UPDATE pm.near SET e = '[0,1,0]' WHERE id = 1001;
SELECT prediction, neighbours FROM tributary_predict('pm.near', 'label', 'e', '[1,0,0]');
-- Both functions set the iterative scans for the call only.
SELECT p.proname, p.proconfig FROM pg_proc p
 WHERE p.proname IN ('tributary_predict', 'tributary_predict_column', 'tributary_evaluate')
   AND p.pronargs > 3   -- the neighbour functions, not the predictor ones (tributary_train)
 ORDER BY 1;

-- 2. Forward in time: rows before 2010 train, from 2010 on are tested; a NULL year is in neither.
CREATE TABLE pm.ev (id int PRIMARY KEY, yr int, day date, label text, num float8, e vector(3));
INSERT INTO pm.ev VALUES
  (1, 2000, '2000-01-01', 'x', 1, '[1,0,0]'), (2, 2001, '2001-01-01', 'x', 2, '[1,0.1,0]'),
  (3, 2002, '2002-01-01', 'y', 10, '[0,1,0]'), (4, 2003, '2003-01-01', 'y', 11, '[0,1,0.1]'),
  (5, 2010, '2010-01-01', 'x', 1.5, '[1,0.05,0]'), (6, 2011, '2011-01-01', 'y', 10.5, '[0.1,1,0]'),
  (7, 2012, '2012-01-01', 'y', 12, '[1,0.2,0]'), (8, NULL, NULL, 'x', 3, '[1,0,0.1]'),
  (9, 2013, '2013-01-01', NULL, NULL, '[1,1,1]');
-- Tests 5 (x: nearest 2, x), 6 (y: nearest 3, y), 7 (y: nearest 2, x): accuracy 2/3; the
-- baseline, training's majority (x and y tie, the smaller wins: x), 1/3.
SELECT metric, round(model::numeric, 4) AS model, round(baseline::numeric, 4) AS baseline, test_rows, train_rows, split
  FROM tributary_evaluate('pm.ev', 'label', 'e', k => 1, split_column => 'yr', split_at => '2010');
SELECT metric, round(model::numeric, 4) AS model, round(baseline::numeric, 4) AS baseline, test_rows, train_rows, split
  FROM tributary_evaluate('pm.ev', 'num', 'e', k => 1, split_column => 'day', split_at => '2009-06-30');
-- The hashed split is still the default, and says so.
SELECT metric, test_rows, train_rows, split FROM tributary_evaluate('pm.ev', 'label', 'e', k => 1, test_fraction => 0.5);
SELECT DISTINCT split FROM tributary_evaluate('pm.ev', 'label', 'e', group_by => 'yr', k => 1, test_fraction => 0.5, seed => 1);
-- Errors: one of the two, an unknown column, a value of the wrong type, an empty side.
SELECT expect_error($$SELECT * FROM tributary_evaluate('pm.ev', 'label', 'e', split_column => 'yr')$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate('pm.ev', 'label', 'e', split_at => '2010')$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate('pm.ev', 'label', 'e', split_column => 'nope', split_at => '1')$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate('pm.ev', 'label', 'e', split_column => 'yr', split_at => 'soon')$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate('pm.ev', 'label', 'e', split_column => 'day', split_at => 'not a date')$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate('pm.ev', 'label', 'e', split_column => 'yr', split_at => '2020')$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate('pm.ev', 'label', 'e', split_column => 'yr', split_at => '1990')$$);

-- 3. tributary_predict_column: composite primary key, progress NOTICEs (a trigger makes every
-- batch take over 1 ms; the rate is masked).
CREATE TABLE pm.two (a int, b text, label text, e vector(3), guess text, PRIMARY KEY (a, b));
INSERT INTO pm.two VALUES (1, 'p', 'left', '[1,0,0]', NULL), (1, 'q', 'right', '[0,1,0]', NULL),
  (2, 'p', NULL, '[1,0.1,0]', 'stale'), (2, 'q', NULL, '[0.1,1,0]', NULL), (3, 'p', NULL, '[1,0.2,0]', NULL),
  (3, 'q', NULL, NULL, NULL), (4, 'p', NULL, '[0.2,1,0]', NULL);
CREATE FUNCTION pm.slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(0.002); RETURN NEW; END $$;
CREATE TRIGGER slow BEFORE UPDATE ON pm.two FOR EACH ROW EXECUTE FUNCTION pm.slow();
\setenv PGDATABASE :DBNAME
\! psql -X -q -c "SET tributary.progress_interval = 1" -c "SELECT tributary_predict_column('pm.two', 'label', 'e', 'guess', k => 1, batch_size => 2) AS predicted" 2>&1 | sed -E 's/\([0-9]+ rows\/s\)/(N rows\/s)/'
SELECT a, b, label, guess FROM pm.two ORDER BY a, b;
-- Progress off (0): no NOTICE.
SELECT tributary_predict_column('pm.two', 'label', 'e', 'guess', k => 1, batch_size => 2) AS predicted;
-- Numbers: the weighted mean, cast to the target's type; one that cannot hold it fails.
CREATE TABLE pm.num (id int PRIMARY KEY, v float8, e vector(3), guess numeric, whole int);
INSERT INTO pm.num VALUES (1, 1, '[1,0,0]', NULL, NULL), (2, 2, '[1,0,0]', NULL, NULL), (3, NULL, '[1,0,0]', NULL, NULL);
SELECT tributary_predict_column('pm.num', 'v', 'e', 'guess', k => 2) AS predicted;
SELECT id, guess FROM pm.num ORDER BY id;
SELECT expect_error($$SELECT tributary_predict_column('pm.num', 'v', 'e', 'whole', k => 2)$$);
-- A table without a primary key: rows by (tableoid, ctid).
CREATE TABLE pm.nokey (label text, e vector(3), guess text);
INSERT INTO pm.nokey VALUES ('left', '[1,0,0]', NULL), ('right', '[0,1,0]', NULL), (NULL, '[1,0.1,0]', NULL),
  (NULL, '[0.1,1,0]', NULL), (NULL, '[0.1,1,0]', NULL);
SELECT tributary_predict_column('pm.nokey', 'label', 'e', 'guess', k => 1, batch_size => 2) AS predicted;
SELECT label, guess, e FROM pm.nokey ORDER BY e::text, label;
-- Nothing to predict: 0.
DELETE FROM pm.nokey WHERE label IS NULL;
SELECT tributary_predict_column('pm.nokey', 'label', 'e', 'guess', k => 1) AS nothing_to_predict;
-- Errors: target = label, unknown target, NULL arguments, bad batch_size and k.
SELECT expect_error($$SELECT tributary_predict_column('pm.nokey', 'label', 'e', 'label')$$);
SELECT expect_error($$SELECT tributary_predict_column('pm.nokey', 'label', 'e', 'nope')$$);
SELECT expect_error($$SELECT tributary_predict_column('pm.nokey', 'label', 'e', NULL)$$);
SELECT expect_error($$SELECT tributary_predict_column(NULL, 'label', 'e', 'guess')$$);
SELECT expect_error($$SELECT tributary_predict_column('pm.nokey', 'label', 'e', 'guess', batch_size => NULL)$$);
SELECT expect_error($$SELECT tributary_predict_column('pm.nokey', 'label', 'e', 'guess', kind => NULL)$$);
SELECT expect_error($$SELECT tributary_predict_column('pm.nokey', 'label', 'e', 'guess', batch_size => 0)$$);
SELECT expect_error($$SELECT tributary_predict_column('pm.nokey', 'label', 'e', 'guess', k => 0)$$);

-- 4. Row-level security: a role that sees some rows predicts from those only and updates those only.
CREATE TABLE pm.secret (id int PRIMARY KEY, owner text, label text, e vector(3), guess text);
INSERT INTO pm.secret VALUES (1, 'other', 'hidden', '[1,0,0]', NULL), (2, 'me', 'visible', '[0,1,0]', NULL),
  (3, 'me', NULL, '[1,0.1,0]', NULL), (4, 'other', NULL, '[1,0.1,0]', NULL);
ALTER TABLE pm.secret ENABLE ROW LEVEL SECURITY;
CREATE POLICY mine ON pm.secret USING (owner = 'me');
CREATE ROLE pm_reader;
GRANT USAGE ON SCHEMA pm TO pm_reader;
GRANT SELECT, UPDATE (guess) ON pm.secret TO pm_reader;
SET ROLE pm_reader;
SELECT prediction, neighbours FROM tributary_predict('pm.secret', 'label', 'e', '[1,0,0]', k => 1);
SELECT tributary_predict_column('pm.secret', 'label', 'e', 'guess', k => 1) AS predicted;
SELECT expect_error($$SELECT tributary_predict_column('pm.secret', 'label', 'e', 'owner', k => 1)$$);
RESET ROLE;
SELECT id, owner, label, guess FROM pm.secret ORDER BY id;
SELECT prediction FROM tributary_predict('pm.secret', 'label', 'e', '[1,0,0]', k => 1);

-- 5. statement_timeout (and so a cancel) stops it, and nothing is written: one statement.
CREATE TABLE pm.big (id int PRIMARY KEY, label text, e vector(3), guess text);
INSERT INTO pm.big SELECT i, CASE WHEN i % 10 = 0 THEN 'l' || i % 7 END,
       ARRAY[sin(i), cos(i), sin(i * 0.5)]::vector(3), NULL FROM generate_series(1, 20000) i;
SET statement_timeout = '50ms';
\set VERBOSITY terse
SELECT tributary_predict_column('pm.big', 'label', 'e', 'guess', batch_size => 100);
\set VERBOSITY default
RESET statement_timeout;
SELECT count(guess) AS written FROM pm.big;

-- 6. With the real model.
CREATE TABLE pm.words (id int PRIMARY KEY, body text, label text, e vector(384), guess text);
INSERT INTO pm.words VALUES (1, 'a kitten purring on the sofa', 'animal', NULL, NULL),
  (2, 'a diesel truck on the motorway', 'vehicle', NULL, NULL), (3, 'a puppy chasing its tail', NULL, NULL, NULL),
  (4, 'a bus stuck in traffic', NULL, NULL, NULL);
UPDATE pm.words SET e = tributary_embed(body);
SELECT tributary_predict_column('pm.words', 'label', 'e', 'guess', k => 1) AS predicted;
SELECT id, body, guess FROM pm.words ORDER BY id;

SET client_min_messages = warning;
DROP SCHEMA pm CASCADE;
RESET client_min_messages;
DROP OWNED BY pm_reader;
DROP ROLE pm_reader;
