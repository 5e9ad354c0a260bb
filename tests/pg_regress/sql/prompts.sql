-- Prompts, truncation you can see, and the model bound to a column (issue "Models people bring").
-- The default model's directory registered with e5-style prompts.
SELECT tributary_register_model('minilm-e5', 'all-MiniLM-L6-v2',
    prompts => '{"query": "query: ", "passage": "passage: "}');
SELECT model, layout, normalize, prompts, default_prompt FROM tributary_info('minilm-e5');
-- A prompt's text is put before the text: the same vector as writing it out.
SELECT tributary_embed('cheap flights to Lisbon', 'minilm-e5', prompt => 'query')
       <=> tributary_embed('query: cheap flights to Lisbon', 'minilm-e5') < 1e-6 AS same_as_written_out;
SELECT tributary_embed('cheap flights to Lisbon', 'minilm-e5', prompt => 'query')
       <=> tributary_embed('cheap flights to Lisbon', 'minilm-e5') > 0.01 AS differs_from_no_prompt;
-- The array form takes the prompt too (NULL stays NULL).
SELECT (tributary_embed(ARRAY['a red bicycle', NULL], 'minilm-e5', prompt => 'passage'))[1]
       <=> tributary_embed('passage: a red bicycle', 'minilm-e5') < 1e-6 AS array_same,
       (tributary_embed(ARRAY['a red bicycle', NULL], 'minilm-e5', prompt => 'passage'))[2] IS NULL AS null_stays;
-- Unknown prompts: 42704, with the model's prompts in the HINT.
SELECT expect_error($$SELECT tributary_embed('x', 'minilm-e5', prompt => 'document')$$);
SELECT expect_error($$SELECT tributary_embed('x', prompt => 'query')$$);
SELECT expect_error($$SELECT tributary_embed(ARRAY['x'], 'minilm-e5', prompt => 'Query')$$);
-- Prompts must be an object of strings: 22023.
SELECT expect_error($$SELECT tributary_register_model('bad', 'all-MiniLM-L6-v2', prompts => '["query: "]')$$);
SELECT expect_error($$SELECT tributary_register_model('bad', 'all-MiniLM-L6-v2', prompts => '{"query": 1}')$$);
SELECT count(*) AS registered_bad FROM tributary.models WHERE name = 'bad';

-- Truncation. 254 words + [CLS] [SEP] fill the 256-token window; with the prompt's tokens they do
-- not fit: the prompt counts in the window.
SELECT cardinality(tributary_tokenize(repeat('word ', 254))) AS tokens_without_prompt;
SET tributary.truncation = error;
SELECT vector_dims(tributary_embed(repeat('word ', 254), 'minilm-e5')) AS fits;
SELECT expect_error($$SELECT tributary_embed(repeat('word ', 254), 'minilm-e5', prompt => 'passage')$$);
SELECT expect_error($$SELECT tributary_embed(ARRAY['short', repeat('long ', 600)])$$);
-- A text remembered from an earlier call is checked too.
SET tributary.truncation = truncate;
SELECT vector_dims(tributary_embed(repeat('again ', 400))) AS truncated_quietly;
SET tributary.truncation = error;
SELECT expect_error($$SELECT tributary_embed(repeat('again ', 400))$$);
SET tributary.truncation = warning;
SELECT vector_dims(tributary_embed(repeat('again ', 400))) AS truncated_with_warning;
RESET tributary.truncation;
SHOW tributary.truncation;
SELECT expect_error($$SET tributary.truncation = chop$$);

-- tributary_embed_column counts truncated rows: one WARNING with the count; under error nothing is written.
CREATE TABLE manuals (id int PRIMARY KEY, body text, emb vector(384), emb2 vector(384));
INSERT INTO manuals SELECT g, CASE WHEN g % 4 = 0 THEN repeat('section ' || g || ' explains the options. ', 60) ELSE 'page ' || g END
FROM generate_series(1, 12) g;
SET tributary.truncation = error;
SELECT expect_error($$SELECT tributary_embed_column('manuals', '{body}', 'emb')$$);
SELECT count(emb) AS written_under_error FROM manuals;
SELECT count(*) AS recorded_under_error FROM tributary.column_models WHERE relid::text = 'manuals';
RESET tributary.truncation;
SELECT tributary_embed_column('manuals', '{body}', 'emb', model => 'minilm-e5', prompt => 'passage') AS written;

-- The column's model is recorded; another model or prompt is refused (22023), the same is fine.
SELECT relid, attname, model, prompt, filled_by FROM tributary.column_models WHERE relid::text = 'manuals';
UPDATE manuals SET emb = NULL WHERE id = 1;
SELECT expect_error($$SELECT tributary_embed_column('manuals', '{body}', 'emb')$$);
SELECT expect_error($$SELECT tributary_embed_column('manuals', '{body}', 'emb', model => 'minilm-e5', prompt => 'query')$$);
SELECT tributary_embed_column('manuals', '{body}', 'emb', model => 'minilm-e5', prompt => 'passage') AS refilled;
-- Queries by the column: its model, with the model's query prompt.
SELECT tributary_embed_for('manuals', 'emb', 'options of section 8')
       <=> tributary_embed('options of section 8', 'minilm-e5', prompt => 'query') < 1e-6 AS same_model_query_prompt;
SELECT id FROM manuals ORDER BY emb <=> tributary_embed_for('manuals', 'emb', 'page 7') LIMIT 1;
SELECT tributary_embed_for('manuals', 'emb', NULL) IS NULL AS null_in_null_out;
SELECT expect_error($$SELECT tributary_embed_for('manuals', 'emb2', 'x')$$);
SELECT expect_error($$SELECT tributary_embed_for('manuals', 'emb', 'x', prompt => 'nope')$$);

-- Roles: a reader cannot bind a column it may not UPDATE, nor forget one it does not own.
CREATE ROLE prompts_reader;
GRANT SELECT ON manuals TO prompts_reader;
SET ROLE prompts_reader;
SELECT expect_error($$SELECT tributary_embed_column('manuals', '{body}', 'emb2')$$);
SELECT expect_error($$SELECT tributary_forget_column('manuals', 'emb')$$);
-- No role holds DML on it, so none can lock it either.
SELECT expect_error($$DELETE FROM tributary.column_models$$);
SELECT expect_error($$LOCK TABLE tributary.column_models IN ACCESS EXCLUSIVE MODE$$);
SELECT expect_error($$INSERT INTO tributary.column_models VALUES ('manuals', 'emb2', 'x', NULL, 'me')$$);
SELECT expect_error($$SELECT tributary._bind_column('manuals', 'emb2', 'x', NULL, 'me')$$);
RESET ROLE;
SELECT count(*) AS records FROM tributary.column_models WHERE relid::text = 'manuals';
-- The owner forgets; another model may then fill the (emptied) column.
UPDATE manuals SET emb = NULL;
SELECT tributary_forget_column('manuals', 'emb') AS forgotten, tributary_forget_column('manuals', 'emb') AS again;
SELECT tributary_embed_column('manuals', '{body}', 'emb') AS refilled_other_model;
SELECT model, prompt FROM tributary.column_models WHERE relid::text = 'manuals' AND attname = 'emb';
-- Dropping the column or the table forgets it.
ALTER TABLE manuals DROP COLUMN emb;
SELECT count(*) AS after_drop_column FROM tributary.column_models WHERE relid::text = 'manuals';
SELECT tributary_embed_column('manuals', '{body}', 'emb2') AS filled;
-- A renamed column keeps its record (ALTER TABLE ... RENAME COLUMN).
ALTER TABLE manuals RENAME COLUMN emb2 TO emb_renamed;
SELECT attname, model FROM tributary.column_models WHERE relid::text = 'manuals';
DROP TABLE manuals;
-- Temporary tables are not recorded: they end with their session unseen by event triggers, and
-- a record left behind would bind a later table given the same OID.
CREATE TEMP TABLE temp_manuals (id int PRIMARY KEY, body text, emb vector(384));
INSERT INTO temp_manuals VALUES (1, 'a temporary row');
SELECT tributary_embed_column('temp_manuals', '{body}', 'emb') AS filled_temp;
SELECT count(*) AS temp_records FROM tributary.column_models WHERE relid = 'temp_manuals'::regclass;
DROP TABLE temp_manuals;
SELECT count(*) AS after_drop_table FROM tributary.column_models WHERE relid::text = 'manuals';
DROP ROLE prompts_reader;
SELECT tributary_drop_model('minilm-e5');
