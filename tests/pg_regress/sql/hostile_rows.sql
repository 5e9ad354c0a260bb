-- Hostile rows: column names that collide with the aliases of generated SQL, json nested deeper
-- than 128 levels, roles changed inside a transaction, row-level security and column privileges,
-- foreign-key cycles, NULL arguments, domains, composites, arrays and 1,600 columns.
SET tributary.progress_interval = 0;
CREATE SCHEMA hostile;
CREATE ROLE hostile_reader;
GRANT USAGE ON SCHEMA hostile TO hostile_reader;

-- 1. Columns named like the generated queries' aliases (t, p, c): each row gets its own text.
CREATE TABLE hostile.mom (id int PRIMARY KEY, p text, name text);
CREATE TABLE hostile.t (id int PRIMARY KEY, t text, mom_id int REFERENCES hostile.mom);
CREATE TABLE hostile.kid (id int PRIMARY KEY, c text, t_id int REFERENCES hostile.t);
INSERT INTO hostile.mom VALUES (1, 'p one', 'Mom one'), (2, 'p two', 'Mom two');
INSERT INTO hostile.t VALUES (1, 't one', 1), (2, 't two', 2);
INSERT INTO hostile.kid VALUES (1, 'c one', 1), (2, 'c two', 2);
SELECT tributary_row_text(r, parents => 1, children => 5, template => 1) FROM hostile.t r ORDER BY id;
SELECT tributary_row_text(k, parents => 2, template => 1) FROM hostile.kid k ORDER BY id;
SELECT count(DISTINCT tributary_embed(r, parents => 1, children => 5, template => 1)::text) AS distinct_vectors FROM hostile.t r;

-- 2. json and jsonb nested deeper than 128 levels are kept (compact), in the row, a parent, a child.
CREATE TABLE hostile.deep (id int PRIMARY KEY, doc jsonb, raw json, mom_id int REFERENCES hostile.mom);
INSERT INTO hostile.deep VALUES
  (1, (repeat('[', 200) || '1' || repeat(']', 200))::jsonb, ('{"a" : ' || repeat('[', 150) || '"x y"' || repeat(']', 150) || ' }')::json, 1),
  (2, '{"b":  [1, {"c": null}]}', '{ "a" :  [1, 2] }', 2);
CREATE TABLE hostile.deepkid (id int PRIMARY KEY, deep_id int REFERENCES hostile.deep);
INSERT INTO hostile.deepkid VALUES (1, 1);
SELECT id, position(repeat('[', 200) || '1' || repeat(']', 200) IN x) > 0 AS doc_whole,
       position('raw: {"a":' || repeat('[', 150) || '"x y"' || repeat(']', 150) || '}' IN x) > 0 AS raw_whole, length(x)
FROM (SELECT id, tributary_row_text(d, max_tokens => 2000, template => 1) AS x FROM hostile.deep d) s ORDER BY id;
SELECT tributary_row_text(d, template => 1) FROM hostile.deep d WHERE id = 2;
SELECT position(repeat('[', 200) || '1' || repeat(']', 200) IN x) > 0 AS parent_doc_whole, length(x)
FROM (SELECT tributary_row_text(k, parents => 1, max_tokens => 2000, template => 1) AS x FROM hostile.deepkid k) s;
SELECT position('deep (1 of 1): doc: ' || repeat('[', 200) || '1' || repeat(']', 200) IN x) > 0 AS child_doc_whole
FROM (SELECT tributary_row_text(m, children => 1, max_tokens => 2000, template => 1) AS x FROM hostile.mom m WHERE id = 1) s;
SELECT tributary_row_text(ROW(1, (repeat('{"a":', 300) || '1' || repeat('}', 300))::json), max_tokens => 20, template => 1);

-- 3. The context follows the current role, also when it changes inside a transaction, and a
-- column privilege revoked in the transaction is seen at once. Row-level security hides rows.
CREATE TABLE hostile.owner (id int PRIMARY KEY, name text, secret text, tenant text);
CREATE TABLE hostile.item (id int PRIMARY KEY, title text, owner_id int REFERENCES hostile.owner);
CREATE TABLE hostile.note (id int PRIMARY KEY, item_id int REFERENCES hostile.item, body text, hidden text, tenant text);
INSERT INTO hostile.owner VALUES (1, 'Ann', 'ann secret', 'a'), (2, 'Bob', 'bob secret', 'b');
INSERT INTO hostile.item VALUES (1, 'Ann item', 1), (2, 'Bob item', 2);
INSERT INTO hostile.note VALUES (1, 1, 'note a1', 'hidden a1', 'a'), (2, 1, 'note b1', 'hidden b1', 'b'),
                                (3, 2, 'note a2', 'hidden a2', 'a');
GRANT SELECT ON hostile.item TO hostile_reader;
GRANT SELECT (id, name, tenant) ON hostile.owner TO hostile_reader;          -- not "secret"
GRANT SELECT (id, item_id, body, tenant) ON hostile.note TO hostile_reader;  -- not "hidden"
ALTER TABLE hostile.owner ENABLE ROW LEVEL SECURITY;
ALTER TABLE hostile.note ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_a ON hostile.owner FOR SELECT TO hostile_reader USING (tenant = 'a');
CREATE POLICY tenant_a ON hostile.note FOR SELECT TO hostile_reader USING (tenant = 'a');
BEGIN;
SELECT tributary_row_text(i, parents => 1, children => 5, template => 1) FROM hostile.item i WHERE id = 1;
SET LOCAL ROLE hostile_reader;
SELECT tributary_row_text(i, parents => 1, children => 5, template => 1) FROM hostile.item i ORDER BY id;
RESET ROLE;
SELECT tributary_row_text(i, parents => 1, children => 5, template => 1) FROM hostile.item i WHERE id = 1;
REVOKE SELECT (name) ON hostile.owner FROM hostile_reader;
SET LOCAL ROLE hostile_reader;
SELECT tributary_row_text(i, parents => 1, children => 5, template => 1) FROM hostile.item i WHERE id = 1;
ROLLBACK;
SET ROLE hostile_reader;
SELECT tributary_row_text(i, parents => 1, children => 5, template => 1) FROM hostile.item i ORDER BY id;
-- A row the reader makes up still gets only what the reader may see as its context.
SELECT tributary_row_text(ROW(9, 'made up', 2)::hostile.item, parents => 1, template => 1);
SELECT expect_error($$SELECT tributary_row_text(o, template => 1) FROM hostile.owner o$$);
RESET ROLE;

-- 4. A row is never in its own context: self-references (also through a unique key that is not
-- the primary key, and in a table without a primary key) and cycles end, each row shown once.
CREATE TABLE hostile.emp (id int PRIMARY KEY, name text, boss_id int REFERENCES hostile.emp);
INSERT INTO hostile.emp VALUES (1, 'Own boss', 1), (2, 'Nancy', 1), (3, 'Jane', 2);
SELECT tributary_row_text(e, parents => 5, children => 5, template => 1) FROM hostile.emp e ORDER BY id;
CREATE TABLE hostile.x (id int PRIMARY KEY, label text, y_id int);
CREATE TABLE hostile.y (id int PRIMARY KEY, label text, z_id int);
CREATE TABLE hostile.z (id int PRIMARY KEY, label text, x_id int REFERENCES hostile.x);
ALTER TABLE hostile.x ADD FOREIGN KEY (y_id) REFERENCES hostile.y;
ALTER TABLE hostile.y ADD FOREIGN KEY (z_id) REFERENCES hostile.z;
INSERT INTO hostile.x VALUES (1, 'x one', NULL);
INSERT INTO hostile.y VALUES (1, 'y one', NULL);
INSERT INTO hostile.z VALUES (1, 'z one', 1);
UPDATE hostile.y SET z_id = 1;
UPDATE hostile.x SET y_id = 1;
SELECT tributary_row_text(x, parents => 10, children => 10, template => 1) FROM hostile.x x;
SELECT tributary_row_text(z, parents => 10, children => 10, template => 1) FROM hostile.z z;
CREATE TABLE hostile.node (id int PRIMARY KEY, code text UNIQUE, parent_code text REFERENCES hostile.node (code), label text);
INSERT INTO hostile.node VALUES (1, 'A', NULL, 'node A'), (2, 'B', 'A', 'node B'), (3, 'C', 'C', 'node C');
UPDATE hostile.node SET parent_code = 'B' WHERE id = 1;
SELECT tributary_row_text(n, parents => 10, children => 10, template => 1) FROM hostile.node n ORDER BY id;
CREATE TABLE hostile.nopk (code text UNIQUE, up text REFERENCES hostile.nopk (code), label text);
INSERT INTO hostile.nopk VALUES ('A', NULL, 'nopk A'), ('B', 'A', 'nopk B'), ('C', 'C', 'nopk C');
UPDATE hostile.nopk SET up = 'B' WHERE code = 'A';
SELECT tributary_row_text(n, parents => 10, children => 10, template => 1) FROM hostile.nopk n ORDER BY code;

-- 5. NULL arguments: 22004, never a syntax error or XX000; NULL row, NULL query: NULL out;
-- NULL include/exclude/time_columns/as_of/max_tokens/model/group_by: not given.
SELECT expect_error($$SELECT tributary_row_text(r, parents => NULL, template => 1) FROM hostile.t r$$);
SELECT expect_error($$SELECT tributary_row_text(r, children => NULL, template => 1) FROM hostile.t r$$);
SELECT expect_error($$SELECT tributary_row_text(r, keys => NULL, template => 1) FROM hostile.t r$$);
SELECT expect_error($$SELECT tributary_row_text(r, template => NULL) FROM hostile.t r$$);
SELECT expect_error($$SELECT tributary_row_text(r, include => ARRAY['t', NULL], template => 1) FROM hostile.t r$$);
SELECT expect_error($$SELECT tributary_row_text(r, exclude => '{NULL}', template => 1) FROM hostile.t r$$);
SELECT expect_error($$SELECT tributary_row_text(r, time_columns => '{NULL}', template => 1) FROM hostile.t r$$);
SELECT expect_error($$SELECT tributary_embed(r, parents => NULL, template => 1) FROM hostile.t r$$);
SELECT expect_error($$SELECT tributary_embed(r, include => '{NULL}', template => 1) FROM hostile.t r$$);
SELECT tributary_row_text(r, include => NULL, exclude => NULL, time_columns => NULL, as_of => NULL, max_tokens => NULL, model => NULL, template => 1)
FROM hostile.t r WHERE id = 1;
SELECT tributary_row_text(NULL::hostile.t, parents => NULL) IS NULL AS null_row,
       tributary_embed(NULL::hostile.t, keys => NULL, template => 1) IS NULL AS null_row_embed;
-- Prediction on a table whose columns are named like the generated SQL's aliases.
CREATE TABLE hostile.pred (t int PRIMARY KEY, l text, e vector(384), d int, key text, n text);
INSERT INTO hostile.pred
SELECT i, CASE WHEN i % 2 = 0 THEN 'even' ELSE 'odd' END, tributary_embed('number ' || i), i % 3, 'k', 'n'
FROM generate_series(1, 10) i;
SELECT prediction, neighbours, jsonb_path_query_array(evidence, '$[*].key') AS keys
FROM tributary_predict('hostile.pred', 'l', 'e', (SELECT e FROM hostile.pred WHERE t = 4), k => 1);
SELECT metric, test_rows + train_rows AS labelled
FROM tributary_evaluate('hostile.pred', 'l', 'e', group_by => 'd', test_fraction => 0.5, seed => 7);
SELECT * FROM tributary_predict('hostile.pred', 'l', 'e', NULL);
SELECT expect_error($$SELECT tributary_predict(NULL, 'l', 'e', tributary_embed('x'))$$);
SELECT expect_error($$SELECT tributary_predict('hostile.pred', NULL, 'e', tributary_embed('x'))$$);
SELECT expect_error($$SELECT tributary_predict('hostile.pred', 'l', NULL, tributary_embed('x'))$$);
SELECT expect_error($$SELECT tributary_predict('hostile.pred', 'l', 'e', tributary_embed('x'), k => NULL)$$);
SELECT expect_error($$SELECT tributary_predict('hostile.pred', 'l', 'e', tributary_embed('x'), kind => NULL)$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate('hostile.pred', 'l', 'e', seed => NULL)$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate(NULL, 'l', 'e')$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate('hostile.pred', NULL, 'e')$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate('hostile.pred', 'l', NULL)$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate('hostile.pred', 'l', 'e', k => NULL)$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate('hostile.pred', 'l', 'e', test_fraction => NULL)$$);
SELECT expect_error($$SELECT * FROM tributary_evaluate('hostile.pred', 'l', 'e', kind => NULL)$$);
SELECT metric, test_rows + train_rows AS labelled
FROM tributary_evaluate('hostile.pred', 'l', 'e', group_by => NULL, test_fraction => 0.5, seed => 7);

-- 6. Types, read as a non-superuser: domains (over bytea and vector: never in the text, also in
-- arrays; over timestamptz: UTC), composites, arrays, json; and a table of 1,600 columns.
CREATE DOMAIN hostile.short_text AS text CHECK (length(VALUE) < 20);
CREATE DOMAIN hostile.blob AS bytea;
CREATE DOMAIN hostile.blob2 AS hostile.blob;
CREATE DOMAIN hostile.emb AS vector(3);
CREATE DOMAIN hostile.moment AS timestamptz;
CREATE TYPE hostile.pair AS (a int, b text);
CREATE TABLE hostile.typed (id int PRIMARY KEY, title hostile.short_text, b hostile.blob2, e hostile.emb, es vector(3)[],
  bs hostile.blob[], at hostile.moment, ats timestamptz[], days date[], pair hostile.pair, pairs hostile.pair[],
  ints int[], grid int[][], words text[], js json, jb jsonb);
INSERT INTO hostile.typed VALUES (1, 'short', '\xdeadbeef', '[1,2,3]', ARRAY['[1,2,3]'::vector], ARRAY['\x00'::hostile.blob],
  '2024-03-01 02:00-08', ARRAY['2024-03-01 02:00-08'::timestamptz, NULL], ARRAY['2009-01-01'::date],
  ROW(1, 'x, "y"'), ARRAY[ROW(2, 'z')::hostile.pair], ARRAY[1, NULL, 3], '{{1,2},{3,4}}',
  ARRAY['a, b', 'c"d', NULL, ''], '{"k" :  [1, 2] , "s": "a\nb"}', '{"k": {"deeper": true}}');
DO $$ BEGIN
  EXECUTE 'CREATE TABLE hostile.wide (' || (SELECT string_agg(format('c%s int', i), ', ') FROM generate_series(1, 1600) i) || ')';
  EXECUTE 'INSERT INTO hostile.wide VALUES (' || (SELECT string_agg(i::text, ', ') FROM generate_series(1, 1600) i) || ')';
END $$;
GRANT SELECT ON hostile.typed, hostile.wide, hostile.deep, hostile.deepkid, hostile.mom TO hostile_reader;
SET ROLE hostile_reader;
SET TimeZone = 'America/New_York';
SELECT tributary_row_text(t, template => 1) FROM hostile.typed t;
RESET TimeZone;
-- 1,600 labels alone are more than 256 tokens: every value is cut to "…".
SELECT split_part(x, E'\n', 1) AS first, split_part(x, E'\n', 2) AS second, split_part(x, E'\n', 1601) AS last,
       array_length(string_to_array(x, E'\n'), 1) AS lines
FROM (SELECT tributary_row_text(w, template => 1) AS x FROM hostile.wide w) s;
SELECT split_part(x, E'\n', 2) AS second, split_part(x, E'\n', 1601) AS last, length(x)
FROM (SELECT tributary_row_text(w, max_tokens => 100000, template => 1) AS x FROM hostile.wide w) s;
SELECT vector_dims(tributary_embed(w, template => 1)) FROM hostile.wide w;
SELECT position(repeat('[', 200) || '1' || repeat(']', 200) IN x) > 0 AS parent_doc_whole
FROM (SELECT tributary_row_text(k, parents => 1, max_tokens => 2000, template => 1) AS x FROM hostile.deepkid k) s;
RESET ROLE;

SET client_min_messages = warning;
DROP SCHEMA hostile CASCADE;
DROP OWNED BY hostile_reader;
DROP ROLE hostile_reader;
RESET client_min_messages;
