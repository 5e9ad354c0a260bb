-- Bad input: a clear error with a SQLSTATE, before any work, and nothing written.
SET tributary.progress_interval = 0;
CREATE TABLE t (id int, body text, small vector(3), wrong_type text, e vector(384));
INSERT INTO t VALUES (1, 'hello', NULL, NULL, NULL), (2, 'world', NULL, NULL, NULL);

SELECT expect_error($$SELECT tributary_embed('x', 'no-such-model')$$);
SELECT expect_error($$SELECT tributary_embed(ARRAY['x'], 'no-such-model')$$);
SELECT expect_error($$SELECT tributary_embed_column('t', ARRAY['body'], 'e', 'no-such-model')$$);
SELECT expect_error($$SELECT tributary_embed_column('t', ARRAY['body'], 'small')$$);
SELECT expect_error($$SELECT tributary_embed_column('t', ARRAY['body'], 'wrong_type')$$);
SELECT expect_error($$SELECT tributary_embed_column('t', ARRAY['nope'], 'e')$$);
SELECT expect_error($$SELECT tributary_embed_column('t', ARRAY['body'], 'nope')$$);
SELECT expect_error($$SELECT tributary_embed_column('t', ARRAY[]::text[], 'e')$$);
SELECT expect_error($$SELECT tributary_embed_column('t', ARRAY['body'], 'e', NULL, 0)$$);
SELECT expect_error($$SELECT tributary_embed_column('t', NULL, 'e')$$);
SELECT expect_error($$SELECT tributary_embed_column('no_such_table', ARRAY['body'], 'e')$$);
SELECT count(*) FILTER (WHERE e IS NOT NULL OR small IS NOT NULL) AS written FROM t;

-- A model whose files are missing: 58P01, with a HINT naming the setting to fix.
INSERT INTO tributary.models (name, path, dimension, max_length, pooling) VALUES ('ghost', '/nonexistent/ghost', 384, 128, 'mean');
SELECT expect_error($$SELECT tributary_embed('x', 'ghost')$$);
SELECT expect_error($$SELECT tributary_register_model('ghost2', '/nonexistent/ghost')$$);
DELETE FROM tributary.models WHERE name = 'ghost';

-- Registering, dropping and naming files are superuser-only.
CREATE ROLE tributary_user;
GRANT SELECT, UPDATE ON t TO tributary_user;
SET ROLE tributary_user;
SELECT expect_error($$SELECT tributary_register_model('mine', '/tmp')$$);
SELECT expect_error($$SELECT tributary_drop_model('all-MiniLM-L6-v2')$$);
SELECT expect_error($$INSERT INTO tributary.models (name, path, dimension, max_length, pooling) VALUES ('x', '/tmp', 1, 1, 'mean')$$);
SELECT expect_error($$SET tributary.ort_library = '/tmp/evil.so'$$);
SELECT expect_error($$SET tributary.model_path = '/tmp'$$);
-- ... but an ordinary user can embed, and fill a column of a table they may update.
SELECT vector_dims(tributary_embed('allowed')) AS dims;
SELECT tributary_embed_column('t', ARRAY['body'], 'e') AS embedded;
RESET ROLE;
DROP OWNED BY tributary_user;
DROP ROLE tributary_user;
SELECT expect_error($$SELECT tributary_drop_model('no-such-model')$$);
SELECT expect_error($$SET tributary.execution_provider = 'tpu'$$);
SELECT expect_error($$SET tributary.max_batch_tokens = 10$$);

-- A failure after some batches were written rolls back every batch of the call.
CREATE TABLE aon (id int, body text, e vector(384));
INSERT INTO aon SELECT g, 'row ' || g FROM generate_series(1, 50) g;
CREATE FUNCTION aon_fail() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.id = 40 THEN RAISE EXCEPTION 'row 40 refused'; END IF; RETURN NEW; END $$;
CREATE TRIGGER aon_fail BEFORE UPDATE ON aon FOR EACH ROW EXECUTE FUNCTION aon_fail();
SELECT expect_error($$SELECT tributary_embed_column('aon', ARRAY['body'], 'e', NULL, 10)$$);
SELECT count(*) FILTER (WHERE e IS NOT NULL) AS written FROM aon;
