-- Jobs: the SQL surface and its errors. This cluster does not preload tributary, so there are no
-- workers: creating a job warns, and the job waits (tests/integration/test_jobs.py runs them).
SET client_min_messages = warning;
CREATE TABLE job_docs (id int PRIMARY KEY, title text, body text, stars int, embedding vector(384));
INSERT INTO job_docs SELECT g, 'title ' || g, CASE WHEN g % 10 <> 0 THEN 'body ' || g END, 0 FROM generate_series(1, 50) g;
UPDATE job_docs SET title = NULL WHERE id = 10;   -- nothing to embed: never queued
UPDATE job_docs SET embedding = tributary_embed('done already') WHERE id = 50;  -- not queued either

SELECT tributary_job_create('job_docs', '{title,body}') AS job1 \gset
SELECT name, state, mode, columns, target_table, target, model, batch_size, workers, owner,
       rows_done, rows_queued, rows_failed, rows_total, rows_per_second, last_error
  FROM tributary.jobs WHERE id = :job1;
SELECT count(*) AS queued, min(id), max(id) FROM tributary._queue_1;

-- Continuous mode into a table of its own (created, keyed like the source): triggers queue
-- inserts and changes of the embedded column only, and take deleted rows' embeddings along.
SELECT tributary_job_create('job_docs', '{body}', mode => 'continuous', target_table => 'job_docs_emb',
                            batch_size => 64, workers => 2, name => 'bodies') AS job2 \gset
\d job_docs_emb
SELECT tgname FROM pg_trigger WHERE tgrelid = 'job_docs'::regclass ORDER BY 1;
TRUNCATE tributary._queue_2;
INSERT INTO job_docs VALUES (51, 'new', 'new body', 0);
UPDATE job_docs SET stars = 5 WHERE id BETWEEN 1 AND 5;           -- not embedded: not queued
UPDATE job_docs SET body = 'changed' WHERE id BETWEEN 6 AND 7;    -- queued
UPDATE job_docs SET body = body WHERE id = 8;                     -- unchanged: not queued
SELECT id FROM tributary._queue_2 ORDER BY id;
INSERT INTO job_docs_emb (id, embedding) VALUES (9, tributary_embed('x')), (11, tributary_embed('y'));
DELETE FROM job_docs WHERE id = 9;
SELECT id FROM job_docs_emb ORDER BY id;

-- Pause, resume, cancel, drop.
SELECT tributary_job_pause(:job1);
SELECT state FROM tributary.jobs WHERE id = :job1;
SELECT tributary_job_resume(:job1);
SELECT state FROM tributary.jobs WHERE id = :job1;
SELECT tributary_job_cancel(:job2);
SELECT name, state, rows_queued FROM tributary.jobs WHERE id = :job2;
SELECT count(*) AS triggers_left FROM pg_trigger WHERE tgrelid = 'job_docs'::regclass;
SELECT expect_error($$SELECT tributary_job_resume(2)$$);
SELECT expect_error($$SELECT tributary_job_pause(2)$$);
SELECT tributary_job_drop(:job2);
SELECT id, name FROM tributary.jobs ORDER BY id;

-- Bad input: an error with a SQLSTATE, and no job, queue or trigger left behind.
CREATE TABLE no_pk (body text, embedding vector(384));
CREATE TABLE small (id int PRIMARY KEY, body text, e vector(3), t text);
CREATE VIEW job_view AS SELECT * FROM job_docs;
SELECT expect_error($$SELECT tributary_job_create('no_pk', '{body}')$$);
SELECT expect_error($$SELECT tributary_job_create('job_docs', '{nope}')$$);
SELECT expect_error($$SELECT tributary_job_create('job_docs', '{}')$$);
SELECT expect_error($$SELECT tributary_job_create('job_docs', NULL)$$);
SELECT expect_error($$SELECT tributary_job_create('job_docs', '{body}', 'nope')$$);
SELECT expect_error($$SELECT tributary_job_create('small', '{body}', 'e')$$);
SELECT expect_error($$SELECT tributary_job_create('small', '{body}', 't')$$);
SELECT expect_error($$SELECT tributary_job_create('job_docs', '{body}', model => 'no-such-model')$$);
SELECT expect_error($$SELECT tributary_job_create('job_docs', '{body}', mode => 'sometimes')$$);
SELECT expect_error($$SELECT tributary_job_create('job_docs', '{body}', batch_size => 0)$$);
SELECT expect_error($$SELECT tributary_job_create('job_docs', '{body}', workers => 33)$$);
SELECT expect_error($$SELECT tributary_job_create('job_docs', '{body}', parents => 1)$$);
SELECT expect_error($$SELECT tributary_job_create('job_view', '{body}')$$);
SELECT expect_error($$SELECT tributary_job_create('job_docs', '{body}', target_table => 'small', target => 'e')$$);
SELECT expect_error($$SELECT tributary_job_pause(999)$$);
SELECT expect_error($$SELECT tributary_job_pause(NULL)$$);
CREATE TEMPORARY TABLE job_temp (id int PRIMARY KEY, body text, embedding vector(384));
SELECT expect_error($$SELECT tributary_job_create('job_temp', '{body}')$$);
SELECT expect_error($$SELECT tributary_job_create('job_docs', '{body}', target_table => 'x; DROP TABLE job_docs')$$);
SELECT count(*) AS jobs FROM tributary.jobs;
-- Names are unique per owner.
SELECT tributary_job_create('job_docs', '{body}', name => 'same') AS job_same \gset
SELECT expect_error($$SELECT tributary_job_create('job_docs', '{title}', name => 'same')$$);
SELECT tributary_job_drop(:job_same);

-- Only the table's owner makes a job on it; only the job's owner (or a member) controls it and
-- sees it: another role's job does not exist for a stranger (the same error as an unknown id), and the
-- internal job functions cannot be called directly.
CREATE ROLE job_stranger;
SET ROLE job_stranger;
SELECT expect_error($$SELECT tributary_job_create('job_docs', '{body}')$$);
SELECT expect_error($$SELECT tributary_job_pause(1)$$);
SELECT count(*) AS visible FROM tributary.jobs;
SELECT expect_error($$SELECT count(*) FROM tributary._jobs$$);
SELECT expect_error($$SELECT tributary._job_pause('10'::oid, '{"job": 1}')$$);
SELECT expect_error($$SELECT tributary._run_as('10'::oid, 'SELECT 1')$$);
SELECT expect_error($$SELECT tributary._job_call('nope', '{}')$$);
RESET ROLE;
DROP ROLE job_stranger;

-- Whole rows.
SELECT tributary_job_create('job_docs', '{*}', target_table => 'job_rows', exclude => '{stars}') AS job3 \gset
SELECT columns, rows_queued FROM tributary.jobs WHERE id = :job3;
SELECT tributary_job_drop(:job1);
SELECT tributary_job_drop(:job3);
SELECT count(*) AS jobs, (SELECT count(*) FROM pg_class WHERE relname LIKE '\_queue\_%') AS queues FROM tributary.jobs;
RESET client_min_messages;
