-- statement_timeout (like Ctrl-C) stops tributary_embed_column between two batches, and the
-- table is left unchanged.
SET tributary.progress_interval = 0;
CREATE TABLE big (id int, body text, e vector(384));
INSERT INTO big SELECT g, repeat('long enough text to need many tokens number ' || g || ' ', 40) FROM generate_series(1, 5000) g;
SET statement_timeout = '1s';
SELECT tributary_embed_column('big', ARRAY['body'], 'e');
RESET statement_timeout;
SELECT count(*) FILTER (WHERE e IS NOT NULL) AS written FROM big;
