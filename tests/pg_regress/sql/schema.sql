-- Where the extension's objects live, and what \df+ / \dv+ say about them.
-- Every member of the extension has a comment (this lists those that have none: expect none).
SELECT pg_describe_object(d.classid, d.objid, 0) AS uncommented
FROM pg_depend d
WHERE d.refclassid = 'pg_extension'::regclass
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'tributary')
  AND d.deptype = 'e'
  AND obj_description(d.objid, d.classid::regclass::name) IS NULL
  -- (cargo pgrx test's build adds its #[pg_test] functions in schema tests)
  AND pg_describe_object(d.classid, d.objid, 0) !~ '^(schema tests$|function tests\.)'
  -- (PostgreSQL 18 also lists the row types of the extension's tables and views, and their
  -- array types, as members: they are described by their relations)
  AND NOT (d.classid = 'pg_type'::regclass
           AND EXISTS (SELECT 1 FROM pg_type t WHERE t.oid = d.objid AND (t.typrelid <> 0 OR t.typelem <> 0)))
ORDER BY 1;
-- The rule: tributary_* functions in the extension's schema, everything else in schema tributary.
SELECT n.nspname = e.extnamespace::regnamespace::name AS in_extension_schema, count(*)
FROM pg_depend d
JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'tributary'
WHERE d.deptype = 'e' AND n.nspname <> 'tests'
GROUP BY 1, p.proname LIKE 'tributary\_%'
HAVING (n.nspname = e.extnamespace::regnamespace::name) <> (p.proname LIKE 'tributary\_%')
ORDER BY 1;
SELECT proname FROM pg_proc
WHERE pronamespace = 'tributary'::regnamespace AND proname LIKE 'tributary\_%';

-- Installed into a schema of its own (and pgvector into another), used from a search_path that
-- has neither: everything works with qualified names.
\set regress_db :DBNAME
CREATE DATABASE tributary_schema_test;
\c tributary_schema_test
CREATE SCHEMA vec;
CREATE SCHEMA ml;
CREATE EXTENSION vector SCHEMA vec;
CREATE EXTENSION tributary SCHEMA ml;
SET search_path = public;
SELECT vec.vector_dims(ml.tributary_embed('hello'));
CREATE TABLE docs (id int PRIMARY KEY, body text, e vec.vector(384), h vec.halfvec(384));
INSERT INTO docs VALUES (1, 'zebra'), (2, 'apple'), (3, 'car engine'), (4, NULL);
SELECT ml.tributary_embed_column('docs', ARRAY['body'], 'e');
SELECT ml.tributary_embed_column('docs', '{*}', 'h');
SELECT id, round((1 - (e OPERATOR(vec.<=>) ml.tributary_embed(body)))::numeric, 4) AS cosine
FROM docs ORDER BY id;
SELECT count(*) FROM docs WHERE h IS NOT NULL;
SELECT length(ml.tributary_row_text(d)) > 0 FROM docs d WHERE id = 1;
SELECT cardinality(ml.tributary_tokenize('hello world')) AS tokens;
SELECT name FROM tributary.models ORDER BY 1;
SELECT model, dimension FROM ml.tributary_info();
ALTER TABLE docs ADD COLUMN label text;
UPDATE docs SET label = CASE WHEN id = 3 THEN 'machine' ELSE 'animal or food' END;
INSERT INTO docs (id, body, label)
SELECT 10 + i, b, l FROM unnest(ARRAY['diesel truck', 'lion', 'banana split', 'electric motor', 'tiger',
    'apple pie', 'gearbox', 'horse', 'bread'], ARRAY['machine', 'animal or food', 'animal or food', 'machine',
    'animal or food', 'animal or food', 'machine', 'animal or food', 'animal or food']) WITH ORDINALITY AS x(b, l, i);
SELECT ml.tributary_embed_column('docs', ARRAY['body'], 'e');
SELECT prediction FROM ml.tributary_predict('docs', 'label', 'e', ml.tributary_embed('a bus'), k => 3);
SELECT metric, test_rows > 0 AS tested FROM ml.tributary_evaluate('docs', 'label', 'e', test_fraction => 0.5) ORDER BY 1;
-- A table of the same name as a tributary object, in the caller's schema, changes nothing.
CREATE TABLE public.models (name text);
SELECT count(*) > 0 AS found FROM tributary.models;
\c :regress_db
DROP DATABASE tributary_schema_test;
