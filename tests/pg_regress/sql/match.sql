-- Matching rows: tributary_match across two tables (composite keys, other column names, NULLs,
-- typing errors, reordered names, phone formats), what it learned (tributary_match_explain) and
-- each pair's evidence, min_precision, within one table, tributary_dedup's clusters, labels,
-- row-level security, errors, and a cancel. The real model throughout.
SET tributary.progress_interval = 0;
CREATE SCHEMA em;
CREATE TABLE em.customer (id int PRIMARY KEY, name text, city text, phone text);
INSERT INTO em.customer VALUES
  (1, 'Margaret Thompson', 'Leeds', '0113 496 0321'),
  (2, 'Rajesh Kumar', 'Birmingham', '0121 555 0199'),
  (3, 'Siobhan O''Connell', 'Dublin', NULL),
  (4, 'Henrik Larsson', 'Malmo', '+46 40 123 456'),
  (5, 'Chen Wei', 'Manchester', '0161 555 0142'),
  (6, 'Fatima Al-Sayed', NULL, '020 7946 0018'),
  (7, 'Oliver Bennett', 'Bristol', '0117 496 0655'),
  (8, 'Lucia Fernandez', 'Valencia', '+34 96 123 4567');
-- The other system: a composite key, other column names, typing errors, some rows not there.
CREATE TABLE em.client (region text, client_no int, full_name text, town text, tel text,
                        PRIMARY KEY (region, client_no));
INSERT INTO em.client VALUES
  ('north', 10, 'Margret Thompson', 'Leeds', '01134960321'),
  ('north', 11, 'Kumar, Rajesh', 'Birmingham', '0121-555-0199'),
  ('west', 12, 'Siobhan OConnell', 'Dublin', '01 555 0100'),
  ('north', 13, 'Wei Chen', 'Manchester', NULL),
  ('south', 14, 'Fatima Al Sayed', 'London', '020 7946 0018'),
  ('south', 15, 'Oliver Benett', 'Bristol', '0117 4960655'),
  ('east', 16, 'Gustav Nilsson', 'Uppsala', '+46 18 471 0000'),
  ('east', 17, 'Amelia Clarke', 'Norwich', '01603 555 010');

-- Accepted pairs only (keys as text, a composite key as its row literal); Henrik and Lucia have
-- no partner, Gustav and Amelia neither: abstentions.
SELECT left_key, right_key, round(score::numeric, 2) > 0.5 AS confident
  FROM tributary_match('em.customer', 'em.client', '{name,city,phone}', '{full_name,town,tel}')
 ORDER BY left_key::int;
-- What it learned: per column how it compared and m, u over the agreement levels; the
-- estimated number of matches; the cut and the accepted pairs' expected precision and recall.
SELECT e->>'model' AS model, e->>'how' AS how, (e->>'accepted')::int AS accepted,
       round((e->>'estimated_matches')::numeric) AS estimated_matches,
       (e->>'expected_precision')::float8 BETWEEN 0.9 AND 1 AS precise,
       (e->>'expected_recall')::float8 BETWEEN 0.9 AND 1 AS complete,
       jsonb_array_length(e->'levels') AS levels
  FROM tributary_match_explain() e;
SELECT c->>'column' AS "column", c->>'right_column' AS right_column, c->>'compared_by' AS compared_by,
       jsonb_array_length(c->'m') AS levels, (c->>'agree_m')::float8 > (c->>'agree_u')::float8 AS telling
  FROM jsonb_array_elements(tributary_match_explain()->'columns') c;
-- Why a pair was accepted: each column's agreement level (missing: a NULL on either side) and
-- its weight, the column's term of the log odds of a match.
SELECT left_key, right_key,
       (SELECT string_agg(x.col || ' ' || coalesce(x.v->>'level', 'missing'), ', ' ORDER BY x.col)
          FROM jsonb_each(evidence) x(col, v)) AS levels,
       (SELECT bool_and((x.v->>'weight')::float8 > 0) FROM jsonb_each(evidence) x(col, v) WHERE x.v->>'level' = '4') AS equal_values_count_for
  FROM tributary_match('em.customer', 'em.client', '{name,city,phone}', '{full_name,town,tel}')
 ORDER BY left_key::int;
-- min_precision: the lowest cut whose accepted pairs have that expected precision; an
-- impossible one accepts nothing.
SELECT count(*) AS at_09 FROM tributary_match('em.customer', 'em.client', '{name,city,phone}', '{full_name,town,tel}', min_precision => 0.9);
SELECT tributary_match_explain()->>'how' AS how;
SELECT count(*) AS at_1 FROM tributary_match('em.customer', 'em.client', '{name,city,phone}', '{full_name,town,tel}', min_precision => 1);
-- The same, right to left.
SELECT left_key, right_key
  FROM tributary_match('em.client', 'em.customer', '{full_name,town,tel}', '{name,city,phone}')
 ORDER BY right_key::int;
-- A threshold given: above every score, nothing is accepted; at 0, with one_to_one every row of
-- the smaller side is in at most one pair.
SELECT count(*) AS above_every_score FROM tributary_match('em.customer', 'em.client', '{name,city,phone}', '{full_name,town,tel}', threshold => 1);
SELECT count(*) AS pairs, count(DISTINCT left_key) = count(*) AND count(DISTINCT right_key) = count(*) AS one_to_one
  FROM tributary_match('em.customer', 'em.client', '{name,city,phone}', '{full_name,town,tel}', threshold => 0);

-- One table with itself: duplicates, each unordered pair once, never a row with itself.
CREATE TABLE em.person (id int PRIMARY KEY, name text, born date, email text);
INSERT INTO em.person VALUES
  (1, 'Jonathan Smith', '1980-04-02', 'jon.smith@example.org'),
  (2, 'Jonathon Smith', '1980-04-02', 'jon.smith@example.org'),
  (3, 'Smith, Jonathan', '1980-04-02', NULL),
  (4, 'Aisha Okafor', '1975-11-30', 'aisha.okafor@example.net'),
  (5, 'Aisha Okafur', '1975-11-30', 'aisha.okafor@example.net'),
  (6, 'Pierre Dubois', '1991-07-14', 'pdubois@example.fr'),
  (7, 'Ingrid Johansson', '1968-02-09', 'ingrid.j@example.se'),
  (8, 'Tomasz Nowak', '1983-09-21', 'tnowak@example.pl'),
  (9, 'Emily Watson', '2001-12-05', 'emily.watson@example.co.uk'),
  (10, 'Kwame Mensah', '1959-06-17', 'kwame@example.gh');
SELECT left_key, right_key, left_key < right_key AS ordered
  FROM tributary_match('em.person', 'em.person', '{name,born,email}', one_to_one => false)
 ORDER BY left_key::int, right_key::int;
-- Clusters: the accepted pairs joined by average linkage, numbered by their smallest key.
SELECT cluster, key FROM tributary_dedup('em.person', '{name,born,email}') ORDER BY cluster, key::int;

-- Labels: the labelled pairs count in m or u with their class in every EM round, and a labelled
-- candidate pair is scored by its label.
CREATE TABLE em.labels (left_key text, right_key text, is_match bool);
INSERT INTO em.labels VALUES ('1', '(north,10)', true), ('2', '(north,11)', true), ('5', '(north,13)', true),
                             ('1', '(north,11)', false), ('4', '(east,16)', false), ('8', '(east,17)', false),
                             ('7', '(west,12)', false);
SELECT left_key, right_key, score BETWEEN 0 AND 1 AS probability
  FROM tributary_match('em.customer', 'em.client', '{name,city,phone}', '{full_name,town,tel}', labels => 'em.labels')
 ORDER BY left_key::int;

-- Row-level security: a role sees only the north region of the other system; its pairs are
-- among what it sees, and the rest are not even candidates.
CREATE ROLE em_reader;
GRANT USAGE ON SCHEMA em TO em_reader;
GRANT SELECT ON em.customer, em.client TO em_reader;
ALTER TABLE em.client ENABLE ROW LEVEL SECURITY;
CREATE POLICY north_only ON em.client FOR SELECT USING (region = 'north');
SET ROLE em_reader;
SELECT left_key, right_key
  FROM tributary_match('em.customer', 'em.client', '{name,city,phone}', '{full_name,town,tel}')
 ORDER BY left_key::int;
-- A column the role may not read: PostgreSQL's own 42501.
RESET ROLE;
REVOKE SELECT ON em.customer FROM em_reader;
GRANT SELECT (id, name) ON em.customer TO em_reader;
SET ROLE em_reader;
SELECT * FROM tributary_match('em.customer', 'em.client', '{name,city}', '{full_name,town}');
RESET ROLE;

-- Empty tables: no rows, no error.
CREATE TABLE em.nobody (id int PRIMARY KEY, name text);
SELECT count(*) AS no_pairs FROM tributary_match('em.nobody', 'em.customer', '{name}');
SELECT count(*) AS no_pairs FROM tributary_match('em.customer', 'em.nobody', '{name}');
SELECT tributary_match_explain()->>'how' AS how, tributary_match_explain()->'rows' AS "rows";
SELECT count(*) AS no_clusters FROM tributary_dedup('em.nobody', '{name}');

-- Errors.
CREATE TABLE em.nokey (name text);
SELECT * FROM tributary_match('em.nokey', 'em.customer', '{name}');
SELECT * FROM tributary_match('em.customer', 'em.client', '{name,city}', '{full_name}');
SELECT * FROM tributary_match('em.customer', 'em.client', '{name,nope}', '{full_name,town}');
SELECT * FROM tributary_match('em.customer', 'em.client', '{}');
SELECT * FROM tributary_match('em.customer', 'em.client', NULL);
SELECT * FROM tributary_match('em.customer', 'em.client', '{name}', '{full_name}', k => 0);
SELECT * FROM tributary_match('em.customer', 'em.client', '{name}', '{full_name}', threshold => 1.5);
SELECT * FROM tributary_match('em.customer', 'em.client', '{name}', '{full_name}', min_precision => 0);
SELECT * FROM tributary_match('em.customer', 'em.client', '{name}', '{full_name}', threshold => 0.5, min_precision => 0.9);
CREATE TABLE em.badlabels (left_key text, right_key text);
SELECT * FROM tributary_match('em.customer', 'em.client', '{name}', '{full_name}', labels => 'em.badlabels');
-- is_match of another type than boolean: 42804 naming the column and its type.
CREATE TABLE em.textlabels (left_key text, right_key text, is_match text);
SELECT * FROM tributary_match('em.customer', 'em.client', '{name}', '{full_name}', labels => 'em.textlabels');
-- A name that names no column is cut to 64 characters in the message, however long it is.
SELECT * FROM tributary_match('em.customer', 'em.client', ARRAY[repeat('x', 100000)], '{full_name}');
CREATE TABLE em.onesided (left_key text, right_key text, is_match bool);
INSERT INTO em.onesided VALUES ('1', '(north,10)', true);
-- Labels of one class are evidence too (no error): the labelled pair is a match; the names
-- identical but for word order and punctuation (Kumar, Chen Wei, Fatima) put a floor under the
-- prior (issue 48), so the other true pairs are found with them, and no false one.
SELECT left_key, right_key, round(score::numeric, 2) AS score, evidence
  FROM tributary_match('em.customer', 'em.client', '{name}', '{full_name}', labels => 'em.onesided');

-- Ctrl-C and statement_timeout stop it (here while it embeds 3,000 rows); nothing is left behind.
CREATE TABLE em.many AS SELECT i AS id, 'customer number ' || i || ' of the many' AS name FROM generate_series(1, 3000) i;
ALTER TABLE em.many ADD PRIMARY KEY (id);
SET statement_timeout = '200ms';
\set VERBOSITY terse
SELECT count(*) FROM tributary_match('em.many', 'em.many', '{name}');
\set VERBOSITY default
RESET statement_timeout;
SELECT count(*) AS temp_tables_left FROM pg_class WHERE relname LIKE 'tributary_match%' AND relpersistence = 't';
-- and the next call in the same session works.
SELECT count(*) > 0 AS works_after_cancel
  FROM tributary_match('em.customer', 'em.client', '{name,city,phone}', '{full_name,town,tel}');

DROP SCHEMA em CASCADE;
DROP ROLE em_reader;
