-- tributary_embed_column: fill a vector column for rows where it is NULL.
SET tributary.progress_interval = 0;
CREATE TABLE docs (id int PRIMARY KEY, title text, body text, embedding vector(384), half halfvec(384));
INSERT INTO docs VALUES
  (1, 'pgvector', 'Open-source vector similarity search for Postgres', NULL, NULL),
  (2, 'ImageMagick', 'Tool to resize, convert and edit images', NULL, NULL),
  (3, NULL, 'A time series database built on PostgreSQL', NULL, NULL),
  (4, 'only a title', NULL, NULL, NULL),
  (5, NULL, NULL, NULL, NULL),                         -- nothing to embed: stays NULL
  (6, 'already done', 'kept as is', ('[1,0,0' || repeat(',0', 381) || ']')::vector, NULL);

SELECT tributary_embed_column('docs', ARRAY['title', 'body'], 'embedding') AS embedded;
SELECT id, embedding IS NOT NULL AS has_embedding FROM docs ORDER BY id;
-- The text of a row is its columns joined by newlines, NULLs skipped.
SELECT id, (embedding <=> tributary_embed(concat_ws(E'\n', title, body))) < 1e-5 AS matches
FROM docs WHERE id BETWEEN 1 AND 4 ORDER BY id;
-- Row 6 was not touched.
SELECT embedding = ('[1,0,0' || repeat(',0', 381) || ']')::vector AS untouched FROM docs WHERE id = 6;
-- A second call finds nothing left to do.
SELECT tributary_embed_column('docs', ARRAY['title', 'body'], 'embedding') AS embedded_again;

-- halfvec targets, one row per batch, an explicit model: the same vectors at half precision.
SELECT tributary_embed_column('docs', ARRAY['body'], 'half', 'all-MiniLM-L6-v2', 1) AS embedded_half;
SELECT id, (half::vector <=> tributary_embed(body)) < 1e-3 AS matches FROM docs WHERE body IS NOT NULL ORDER BY id;

-- Search with an HNSW index.
CREATE INDEX ON docs USING hnsw (embedding vector_cosine_ops);
SELECT id, title FROM docs WHERE id <> 6 ORDER BY embedding <=> tributary_embed('shrink a picture') LIMIT 1;

-- Schema-qualified and quoted names.
CREATE SCHEMA "My Schema";
CREATE TABLE "My Schema"."Mixed Case" ("Text Col" text, "Vec" vector(384));
INSERT INTO "My Schema"."Mixed Case" VALUES ('quoted identifiers'), ('work too');
SELECT tributary_embed_column('"My Schema"."Mixed Case"', ARRAY['Text Col'], 'Vec') AS embedded;
SELECT count(*) FILTER (WHERE "Vec" IS NOT NULL) AS done FROM "My Schema"."Mixed Case";
