-- tributary_embed(text) and tributary_embed(text[]) with the default model.
SELECT model, dimension, max_length, pooling, precision, execution_provider, ort_version
FROM tributary_info();
SELECT name, path, dimension, max_length, pooling, precision FROM tributary.models ORDER BY name;

-- One text: 384 dimensions, unit L2 norm.
SELECT vector_dims(e) AS dims, round(vector_norm(e)::numeric, 5) AS norm
FROM (SELECT tributary_embed('PostgreSQL is a relational database') AS e) s;

-- NULL in, NULL out; the empty string is a real embedding ([CLS] [SEP]).
SELECT tributary_embed(NULL::text) IS NULL AS null_gives_null;
SELECT vector_dims(e) AS dims, round(vector_norm(e)::numeric, 5) AS norm FROM (SELECT tributary_embed('') AS e) s;

-- Naming the model explicitly gives the same vector as the default.
SELECT tributary_embed('same text') <=> tributary_embed('same text', 'all-MiniLM-L6-v2') < 1e-6 AS same;

-- Meaning: related texts are closer than unrelated ones.
SELECT (tributary_embed('a small cat') <=> tributary_embed('a little kitten'))
     < (tributary_embed('a small cat') <=> tributary_embed('quarterly tax report')) AS closer;

-- A batch keeps input order and matches one-at-a-time calls; NULL elements stay NULL.
WITH input(i, t) AS (
  VALUES (1, 'tool to resize photos'), (2, NULL), (3, 'time series database'),
         (4, ''), (5, 'Ünïcödé text, 東京, Привет, مرحبا 🚀'),
         (6, repeat('a much longer text that needs more tokens ', 20))
), batch AS (
  SELECT tributary_embed(array_agg(t ORDER BY i)) AS arr FROM input
)
SELECT i, t IS NULL AS is_null, arr[i] IS NULL AS out_null,
       CASE WHEN t IS NOT NULL THEN (arr[i] <=> tributary_embed(t)) < 1e-5 END AS matches_single
FROM input, batch ORDER BY i;
SELECT cardinality(tributary_embed(ARRAY[]::text[])) AS empty_batch;
SELECT tributary_embed(NULL::text[]) IS NULL AS null_array;

-- Truncation: a 1 MB text works, and equals any other text with the same first 256 tokens.
SELECT length(repeat('hello world ', 87382)) AS chars,
       (tributary_embed(repeat('hello world ', 87382)) <=> tributary_embed(repeat('hello world ', 300))) < 1e-6 AS truncated;

-- tributary_tokenize: the token ids the model sees, [CLS] and [SEP] included, truncated to 256.
SELECT tributary_tokenize('') AS empty, tributary_tokenize(NULL) IS NULL AS null_gives_null;
SELECT tributary_tokenize('PostgreSQL embeddings') AS ids;
SELECT cardinality(tributary_tokenize(repeat('word ', 100000))) AS truncated_to;
SELECT expect_error($$SELECT tributary_tokenize('x', 'no-such-model')$$);

-- The model runs once per distinct text. A search by sequential scan evaluates the stable
-- tributary_embed(text) once per table row (an index scan once per returned row); the backend's
-- memo answers all but the first. tributary_embed(text[]) is volatile, so planning
-- unnest(tributary_embed(...)) does not run the model a second time. Counted by the session.
CREATE TABLE memo_t AS SELECT i AS id, tributary_embed('row ' || i) AS e FROM generate_series(1, 40) i;
SELECT rows AS before FROM tributary.sessions WHERE model = 'all-MiniLM-L6-v2' \gset
SELECT count(*) FROM (SELECT id FROM memo_t ORDER BY e <=> tributary_embed('a query seen once') LIMIT 5) s;
SELECT count(*) FROM unnest(tributary_embed(ARRAY['x1', 'x2', 'x3']));
SELECT rows - :before AS model_rows FROM tributary.sessions WHERE model = 'all-MiniLM-L6-v2';
-- A setting that changes the session changes the memo's key: the new session runs the model.
SET tributary.io_binding = off;
SELECT (SELECT e FROM memo_t WHERE id = 1) <=> tributary_embed('row 1') < 1e-6 AS same_vector;
SELECT rows AS rows_run_by_new_session FROM tributary.sessions WHERE NOT io_binding;
RESET tributary.io_binding;
DROP TABLE memo_t;
