-- tributary_embed_column on every shape of table. Rows are written back by (tableoid, ctid):
-- every table below is built so that ctids collide (the same number of rows in each partition
-- or child, inserted in the same order), and every row must get its own text's vector.
SET tributary.progress_interval = 0;

-- Each row of `tbl`: its table, and the cosine similarity of its vector to its own text's
-- (1.0000 when right; NULL when a row with text was left without a vector).
CREATE FUNCTION shape_rows(tbl regclass) RETURNS TABLE (id int, rel text, similarity numeric)
LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY EXECUTE format(
    'SELECT t.id, t.tableoid::regclass::text, round((1 - (t.e <=> tributary_embed(t.body)))::numeric, 4)
       FROM %s t ORDER BY t.id', tbl);
END $$;
-- Rows of `tbl` with text and no vector, and rows whose vector is not their text's.
CREATE FUNCTION shape_wrong(tbl regclass) RETURNS TABLE (left_null bigint, not_own bigint)
LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY EXECUTE format(
    'SELECT count(*) FILTER (WHERE t.e IS NULL AND t.body IS NOT NULL),
            count(*) FILTER (WHERE t.e IS NOT NULL AND (t.e <=> tributary_embed(t.body)) > 1e-4)
       FROM %s t', tbl);
END $$;

-- A list-partitioned table: rows 1 and 3 (pt_us) and 2 and 4 (pt_eu) share ctids (0,1) and (0,2).
CREATE TABLE pt (id int, region text, body text, e vector(384)) PARTITION BY LIST (region);
CREATE TABLE pt_us PARTITION OF pt FOR VALUES IN ('us');
CREATE TABLE pt_eu PARTITION OF pt FOR VALUES IN ('eu');
INSERT INTO pt VALUES (1, 'us', 'zebra'), (2, 'eu', 'apple'), (3, 'us', 'car engine'), (4, 'eu', 'banana bread');
SELECT ctid, tableoid::regclass, id FROM pt ORDER BY tableoid::regclass::text, ctid;
SELECT tributary_embed_column('pt', ARRAY['body'], 'e') AS embedded;
SELECT * FROM shape_rows('pt');
-- One row per batch: each batch's UPDATE finds its row among equal ctids.
UPDATE pt SET e = NULL;
SELECT tributary_embed_column('pt', ARRAY['body'], 'e', batch_size => 1) AS embedded;
SELECT * FROM shape_wrong('pt');

-- Three levels, with DEFAULT partitions at two of them; two rows in each of five leaves.
CREATE TABLE tree (id int, region text, year int, body text, e vector(384)) PARTITION BY LIST (region);
CREATE TABLE tree_us PARTITION OF tree FOR VALUES IN ('us') PARTITION BY RANGE (year);
CREATE TABLE tree_us_old PARTITION OF tree_us FOR VALUES FROM (2000) TO (2010);
CREATE TABLE tree_us_new PARTITION OF tree_us FOR VALUES FROM (2010) TO (2030);
CREATE TABLE tree_us_other PARTITION OF tree_us DEFAULT;
CREATE TABLE tree_eu PARTITION OF tree FOR VALUES IN ('eu');
CREATE TABLE tree_other PARTITION OF tree DEFAULT;
INSERT INTO tree VALUES
  (1, 'us', 2005, 'an old american car'), (2, 'us', 2020, 'a new electric truck'), (3, 'us', 1990, 'a vintage radio'),
  (4, 'eu', 2005, 'a french bakery'), (5, 'asia', 2005, 'a bowl of ramen'),
  (6, 'us', 2006, 'a rusty bicycle'), (7, 'us', 2021, 'a solar panel'), (8, 'us', 1991, 'a cassette tape'),
  (9, 'eu', 2006, 'a german sausage'), (10, 'asia', 2006, 'a pair of chopsticks');
SELECT tableoid::regclass::text AS rel, count(*), min(ctid), max(ctid) FROM tree GROUP BY 1 ORDER BY 1;
SELECT tributary_embed_column('tree', ARRAY['body'], 'e', batch_size => 3) AS embedded;
SELECT * FROM shape_rows('tree');
-- On a middle level only: its own subtree.
UPDATE tree SET e = NULL;
SELECT tributary_embed_column('tree_us', ARRAY['body'], 'e') AS embedded;
SELECT count(*) FILTER (WHERE e IS NULL) AS still_null FROM tree WHERE region <> 'us';
SELECT * FROM shape_wrong('tree_us');

-- A partition attached and one detached between two runs.
CREATE TABLE att (id int, part text, body text, e vector(384)) PARTITION BY LIST (part);
CREATE TABLE att_a PARTITION OF att FOR VALUES IN ('a');
CREATE TABLE att_b PARTITION OF att FOR VALUES IN ('b');
INSERT INTO att VALUES (1, 'a', 'first of a'), (2, 'b', 'first of b'), (3, 'a', 'second of a'), (4, 'b', 'second of b');
SELECT tributary_embed_column('att', ARRAY['body'], 'e') AS embedded;
CREATE TABLE att_c (id int, part text, body text, e vector(384));
INSERT INTO att_c VALUES (5, 'c', 'first of c'), (6, 'c', 'second of c');
ALTER TABLE att ATTACH PARTITION att_c FOR VALUES IN ('c');
ALTER TABLE att DETACH PARTITION att_b;
INSERT INTO att_b VALUES (7, 'b', 'third of b, detached');
INSERT INTO att VALUES (8, 'a', 'third of a');
-- att_c's two rows and att_a's new one; nothing of the detached att_b.
SELECT tributary_embed_column('att', ARRAY['body'], 'e') AS embedded;
SELECT * FROM shape_rows('att');
SELECT * FROM shape_rows('att_b');

-- Inheritance: a parent with two children (one with a column of its own), two rows each.
CREATE TABLE inh (id int, body text, e vector(384));
CREATE TABLE inh_c1 (extra int) INHERITS (inh);
CREATE TABLE inh_c2 () INHERITS (inh);
INSERT INTO inh VALUES (1, 'parent one'), (2, 'parent two');
INSERT INTO inh_c1 VALUES (11, 'first child one', NULL, 7), (12, 'first child two', NULL, 8);
INSERT INTO inh_c2 VALUES (21, 'second child one'), (22, 'second child two');
-- On a child: its rows only.
SELECT tributary_embed_column('inh_c1', ARRAY['body'], 'e') AS embedded;
SELECT * FROM shape_rows('inh');
-- On the parent: its rows and the children's still NULL.
SELECT tributary_embed_column('inh', ARRAY['body'], 'e') AS embedded;
SELECT * FROM shape_rows('inh');

-- Row-level security, called by a role that is not the owner: it may read rows 1-5 (not 6) and
-- update the even ones. Only those are written and counted; rows it may read but not update
-- stay NULL.
CREATE ROLE regress_tributary_shapes;
CREATE TABLE rls (id int, body text, e vector(384));
INSERT INTO rls SELECT g, 'protected row ' || g FROM generate_series(1, 6) g;
ALTER TABLE rls ENABLE ROW LEVEL SECURITY;
CREATE POLICY rls_read ON rls FOR SELECT USING (id <> 6);
CREATE POLICY rls_write ON rls FOR UPDATE USING (id % 2 = 0);
GRANT SELECT, UPDATE ON rls TO regress_tributary_shapes;
SET ROLE regress_tributary_shapes;
SELECT count(*) AS readable FROM rls;
SELECT tributary_embed_column('rls', ARRAY['body'], 'e', batch_size => 2) AS embedded;
RESET ROLE;
SELECT * FROM shape_rows('rls');
-- The owner (not subject to its own policies) writes the rest.
SELECT tributary_embed_column('rls', ARRAY['body'], 'e') AS embedded;
SELECT * FROM shape_wrong('rls');

-- Unlogged and temporary tables.
CREATE UNLOGGED TABLE unlogged_docs (id int PRIMARY KEY, body text, e vector(384));
INSERT INTO unlogged_docs VALUES (1, 'an unlogged row'), (2, 'another unlogged row'), (3, NULL);
SELECT tributary_embed_column('unlogged_docs', ARRAY['body'], 'e') AS embedded;
SELECT * FROM shape_rows('unlogged_docs');
CREATE TEMPORARY TABLE temp_docs (id int PRIMARY KEY, body text, e vector(384));
INSERT INTO temp_docs VALUES (1, 'a temporary row'), (2, 'another temporary row');
SELECT tributary_embed_column('temp_docs', ARRAY['body'], 'e') AS embedded;
SELECT * FROM shape_rows('temp_docs');

-- Views, materialized views and foreign tables are refused before any work: 42809 and a hint.
CREATE VIEW pt_view AS SELECT * FROM pt;
CREATE MATERIALIZED VIEW pt_matview AS SELECT id, body, NULL::vector(384) AS e FROM pt;
-- (A foreign-data wrapper without a handler, so no contrib module is needed: enough to define
-- a foreign table, which is refused before it would be read.)
CREATE FOREIGN DATA WRAPPER shapes_fdw;
CREATE SERVER shapes_files FOREIGN DATA WRAPPER shapes_fdw;
CREATE FOREIGN TABLE foreign_docs (id int, body text, e vector(384)) SERVER shapes_files;
SELECT expect_error($$SELECT tributary_embed_column('pt_view', ARRAY['body'], 'e')$$);
SELECT expect_error($$SELECT tributary_embed_column('pt_matview', ARRAY['body'], 'e')$$);
SELECT expect_error($$SELECT tributary_embed_column('foreign_docs', ARRAY['body'], 'e')$$);

SET client_min_messages = warning;
DROP TABLE pt, tree, att, att_b, inh CASCADE;
DROP TABLE rls, unlogged_docs, temp_docs;
DROP ROLE regress_tributary_shapes;
DROP FOREIGN DATA WRAPPER shapes_fdw CASCADE;
DROP FUNCTION shape_rows(regclass), shape_wrong(regclass);
RESET client_min_messages;
