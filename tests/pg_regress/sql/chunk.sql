-- tributary_chunk: a long text as chunks that fit the model's window, by its tokenizer.
-- A real long text: PostgreSQL's own description of itself, three paragraphs, repeated.
CREATE TABLE long_docs (id int PRIMARY KEY, body text);
INSERT INTO long_docs VALUES (1, repeat(
'PostgreSQL is a powerful, open source object-relational database system that uses and extends the SQL language combined with many features that safely store and scale the most complicated data workloads. The origins of PostgreSQL date back to 1986 as part of the POSTGRES project at the University of California at Berkeley.

PostgreSQL has earned a strong reputation for its proven architecture, reliability, data integrity, robust feature set, extensibility, and the dedication of the open source community behind the software to consistently deliver performant and innovative solutions.

Über 35 Jahre aktive Entwicklung: 日本語のユーザーも多い。Emoji too: 🐘🐘.

', 6));
-- Default size: the window less [CLS] and [SEP]; every chunk fits it, by the tokenizer.
SELECT count(*) AS chunks, max(cardinality(tributary_tokenize(chunk)) - 2) <= 254 AS fits,
       bool_and(cardinality(tributary_tokenize(chunk)) < 256) AS none_truncated
FROM long_docs, tributary_chunk(body);
-- Offsets are characters (not bytes), 0-based, end exclusive: substr gives the chunk back.
SELECT bool_and(substr(body, start_char + 1, end_char - start_char) = chunk) AS offsets_give_the_chunk,
       min(seq) AS first_seq, count(*) = max(seq) AS consecutive
FROM long_docs, tributary_chunk(body, chunk_tokens => 60, overlap_tokens => 20);
-- Smaller chunks end on sentence boundaries where one fits.
SELECT seq, start_char, end_char, right(chunk, 12) AS ends_with
FROM long_docs, tributary_chunk(body, chunk_tokens => 80) WHERE seq <= 4;
-- Overlap: each chunk starts before the previous one ends (words here, 100 a chunk, 20 shared).
SELECT seq, start_char, end_char FROM tributary_chunk(repeat('word ', 300), chunk_tokens => 100, overlap_tokens => 20);
-- NULL, empty and blank texts give no rows; a short text one chunk, itself.
SELECT count(*) AS from_null FROM tributary_chunk(NULL);
SELECT count(*) AS from_blank FROM tributary_chunk(E'  \n\n ');
SELECT * FROM tributary_chunk('A short text.');
-- Each chunk embeds without truncation.
SET tributary.truncation = error;
SELECT count(tributary_embed(chunk)) AS embedded FROM long_docs, tributary_chunk(body);
RESET tributary.truncation;
-- Bad sizes: 22023.
SELECT expect_error($$SELECT * FROM tributary_chunk('x', chunk_tokens => 0)$$);
SELECT expect_error($$SELECT * FROM tributary_chunk('x', chunk_tokens => 255)$$);
SELECT expect_error($$SELECT * FROM tributary_chunk('x', chunk_tokens => 50, overlap_tokens => 50)$$);
SELECT expect_error($$SELECT * FROM tributary_chunk('x', chunk_tokens => 50, overlap_tokens => -1)$$);
SELECT expect_error($$SELECT * FROM tributary_chunk('x', 'no-such-model')$$);

-- Chunk jobs: the chunk table is created and filled at once, and kept in step by a trigger in the
-- writer's transaction (the embedding job needs job workers: tests/integration/test_jobs.py).
SELECT tributary_chunk_job_create('long_docs', 'body', 'long_docs_chunks', chunk_tokens => 120) > 0 AS created;
SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull
FROM pg_attribute a WHERE a.attrelid = 'long_docs_chunks'::regclass AND a.attnum > 0 ORDER BY a.attnum;
SELECT count(*) AS chunks, count(embedding) AS embedded FROM long_docs_chunks;
SELECT mode, model, state IN ('pending', 'waiting') AS not_started FROM tributary.jobs WHERE source = 'long_docs_chunks'::regclass;
INSERT INTO long_docs VALUES (2, 'A new document. It has two sentences.');
UPDATE long_docs SET body = 'Rewritten: one chunk now.' WHERE id = 1;
SELECT id, chunk_seq, chunk FROM long_docs_chunks ORDER BY 1, 2;
DELETE FROM long_docs WHERE id = 2;
SELECT count(*) AS after_delete FROM long_docs_chunks WHERE id = 2;
-- Bad chunk jobs.
SELECT expect_error($$SELECT tributary_chunk_job_create('long_docs', 'body', 'long_docs_chunks')$$);
SELECT expect_error($$SELECT tributary_chunk_job_create('long_docs', 'nope', 'other_chunks')$$);
SELECT expect_error($$SELECT tributary_chunk_job_create('long_docs', 'body', 'other_chunks', chunk_tokens => 300)$$);
SELECT expect_error($$SELECT tributary_chunk_job_create('long_docs', 'body', 'other_chunks', prompt => 'query')$$);
CREATE TABLE no_key (body text);
SELECT expect_error($$SELECT tributary_chunk_job_create('no_key', 'body', 'other_chunks')$$);
CREATE ROLE chunk_writer;
GRANT SELECT, INSERT, UPDATE ON long_docs TO chunk_writer;
GRANT CREATE ON SCHEMA public TO chunk_writer;
SET ROLE chunk_writer;
SELECT expect_error($$SELECT tributary_chunk_job_create('long_docs', 'body', 'writer_chunks')$$);
-- The trigger keeps the chunks as its owner: a writer without rights on the chunk table still
-- writes the source.
INSERT INTO long_docs VALUES (3, 'Written by another role.');
SELECT expect_error($$SELECT * FROM long_docs_chunks$$);
RESET ROLE;
SELECT id, chunk_seq, chunk FROM long_docs_chunks WHERE id = 3;
-- Dropping the chunk job drops its trigger and function; the chunk table stays.
SELECT tributary_chunk_job_drop(id) FROM tributary.jobs WHERE source = 'long_docs_chunks'::regclass;
SELECT count(*) AS triggers_left FROM pg_trigger WHERE tgname LIKE 'tributary_chunks_%';
INSERT INTO long_docs VALUES (4, 'After the drop.');
SELECT count(*) AS chunks_of_4 FROM long_docs_chunks WHERE id = 4;
DROP TABLE long_docs_chunks, long_docs, no_key;
REVOKE CREATE ON SCHEMA public FROM chunk_writer;
DROP ROLE chunk_writer;
-- The golden tests after this one number their jobs from 1.
SELECT setval('tributary._jobs_id_seq', 1, false) AS job_ids_reset WHERE NOT EXISTS (SELECT 1 FROM tributary._jobs);
