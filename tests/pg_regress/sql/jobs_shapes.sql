-- Jobs on partitioned tables (any depth, DEFAULT partitions) and on inheritance trees: what a job
-- queues and where its triggers go. No workers here (tests/integration/test_shapes_jobs.py runs
-- the jobs and checks the vectors).
SET client_min_messages = warning;
-- Job ids that do not depend on the tests before.
SELECT setval('tributary._jobs_id_seq', 1000) IS NOT NULL AS ids_from_1001;
-- The job's triggers: table and trigger, sorted.
CREATE FUNCTION job_triggers(job bigint) RETURNS TABLE (rel text, tgname name) LANGUAGE sql AS $$
  SELECT tgrelid::regclass::text, tgname FROM pg_trigger WHERE tgname LIKE 'tributary\_job\_' || job || '\_%' ORDER BY 1, 2
$$;

-- Three levels, a DEFAULT partition at two of them; the primary key holds both partition keys.
CREATE TABLE jt (id int, region text, year int, body text, e vector(384), PRIMARY KEY (id, region, year))
  PARTITION BY LIST (region);
CREATE TABLE jt_us PARTITION OF jt FOR VALUES IN ('us') PARTITION BY RANGE (year);
CREATE TABLE jt_us_old PARTITION OF jt_us FOR VALUES FROM (2000) TO (2010);
CREATE TABLE jt_us_other PARTITION OF jt_us DEFAULT;
CREATE TABLE jt_eu PARTITION OF jt FOR VALUES IN ('eu');
CREATE TABLE jt_other PARTITION OF jt DEFAULT;
INSERT INTO jt VALUES (1, 'us', 2005, 'old car'), (2, 'us', 1990, 'radio'), (3, 'eu', 2005, 'bakery'),
                      (4, 'asia', 2005, 'ramen'), (5, 'eu', 2006, NULL);

-- Once: every row with text, of every partition.
SELECT tributary_job_create('jt', '{body}', 'e') AS once_job \gset
SELECT * FROM tributary._queue_:once_job ORDER BY id;
SELECT count(*) AS triggers FROM job_triggers(:once_job);
SELECT tributary_job_drop(:once_job);

-- Continuous: triggers on every table of the tree, since a statement fires the statement-level
-- triggers of the table it names only.
SELECT tributary_job_create('jt', '{body}', 'e', mode => 'continuous') AS job \gset
SELECT * FROM job_triggers(:job);
TRUNCATE tributary._queue_:job;
INSERT INTO jt VALUES (6, 'us', 2001, 'through the root');
INSERT INTO jt_eu VALUES (7, 'eu', 2001, 'into a leaf');
INSERT INTO jt_us VALUES (8, 'us', 1980, 'into the middle, its default');
UPDATE jt SET region = 'eu', body = 'moved radio' WHERE id = 2;   -- moves across partitions: a new key
UPDATE jt_us_old SET body = 'new old car' WHERE id = 1;
UPDATE jt_eu SET year = year WHERE id = 3;                        -- text unchanged: not queued
DELETE FROM jt WHERE id = 4;
SELECT * FROM tributary._queue_:job ORDER BY id, region;

-- A partition created later, and one attached with rows, get the triggers (event trigger
-- tributary_job_partitions), and the attached one's rows are queued; a detached one loses them.
TRUNCATE tributary._queue_:job;
CREATE TABLE jt_us_new PARTITION OF jt_us FOR VALUES FROM (2010) TO (2030);
CREATE TABLE jt_jp (LIKE jt);
INSERT INTO jt_jp VALUES (9, 'jp', 2020, 'sushi'), (10, 'jp', 2021, NULL);
ALTER TABLE jt ATTACH PARTITION jt_jp FOR VALUES IN ('jp');
INSERT INTO jt_us_new VALUES (11, 'us', 2015, 'into the new partition');
ALTER TABLE jt DETACH PARTITION jt_other;
INSERT INTO jt_other VALUES (12, 'asia', 2005, 'detached: not queued');
SELECT * FROM job_triggers(:job) WHERE tgname LIKE '%insert';
SELECT * FROM tributary._queue_:job ORDER BY id, region;
-- Dropping the job takes every trigger, of the tree and of the detached partition.
SELECT tributary_job_drop(:job);
SELECT count(*) AS triggers_left FROM pg_trigger WHERE tgname LIKE 'tributary\_job\_%';

-- A separate target table, with a partitioned source: a TRUNCATE of one partition takes only
-- that partition's embeddings along. A partitioned target table is accepted too.
SELECT tributary_job_create('jt', '{body}', 'e', mode => 'continuous', target_table => 'jt_emb') AS job \gset
SELECT count(*) AS tables_with_triggers FROM (SELECT DISTINCT rel FROM job_triggers(:job)) x;
INSERT INTO jt_emb SELECT id, region, year, tributary_embed(body) FROM jt WHERE body IS NOT NULL;
TRUNCATE jt_jp;
SELECT id, region FROM jt_emb ORDER BY id, region;
SELECT tributary_job_drop(:job);
CREATE TABLE jt_pemb (id int, region text, year int, e vector(384), PRIMARY KEY (id, region, year)) PARTITION BY LIST (region);
CREATE TABLE jt_pemb_all PARTITION OF jt_pemb DEFAULT;
SELECT tributary_job_create('jt', '{body}', 'e', target_table => 'jt_pemb') AS job \gset
SELECT count(*) AS queued FROM tributary._queue_:job;
SELECT tributary_job_drop(:job);

-- A job on one partition covers that partition; statements naming its ancestors fire theirs
-- only, so the ancestors get "via" triggers, which queue the keys now in the partition.
SET client_min_messages = notice;
SELECT tributary_job_create('jt_us_old', '{body}', 'e', mode => 'continuous') AS job \gset
SET client_min_messages = warning;
SELECT * FROM job_triggers(:job);
TRUNCATE tributary._queue_:job;
INSERT INTO jt VALUES (13, 'us', 2002, 'through the root into jt_us_old'), (14, 'eu', 2002, 'elsewhere');
UPDATE jt_us SET body = 'changed through the middle' WHERE id = 1;
UPDATE jt SET year = 2003 WHERE id = 11;                          -- moved into jt_us_old
SELECT * FROM tributary._queue_:job ORDER BY id;
SELECT tributary_job_drop(:job);
SELECT count(*) AS triggers_left FROM pg_trigger WHERE tgname LIKE 'tributary\_job\_%';

-- Inheritance: a primary key is not unique across a parent and its children, so a job on the
-- parent covers the parent's own rows only (and says so); a job on a child covers the child's.
CREATE TABLE ji (id int PRIMARY KEY, body text, e vector(384));
CREATE TABLE ji_c1 (extra int) INHERITS (ji);
CREATE TABLE ji_c2 () INHERITS (ji);
ALTER TABLE ji_c1 ADD PRIMARY KEY (id);
CREATE TABLE ji_c3 (code text PRIMARY KEY) INHERITS (ji);   -- keyed by a column the parent lacks
INSERT INTO ji VALUES (1, 'parent one'), (2, 'parent two');
INSERT INTO ji_c1 VALUES (1, 'child one'), (2, 'child two'), (3, 'child three');
INSERT INTO ji_c2 VALUES (1, 'other child one');
SET client_min_messages = notice;
SELECT tributary_job_create('ji', '{body}', 'e', mode => 'continuous') AS job \gset
SELECT tributary_job_create('ji_c1', '{body}', 'e', mode => 'continuous') AS child_job \gset
-- The parent lacks ji_c3's key: writes through it go unseen, and the job says so.
SELECT tributary_job_create('ji_c3', '{body}', 'e', mode => 'continuous') AS c3_job \gset
SET client_min_messages = warning;
SELECT * FROM tributary._queue_:job ORDER BY id;
SELECT * FROM tributary._queue_:child_job ORDER BY id;
SELECT * FROM job_triggers(:job);
SELECT * FROM job_triggers(:child_job);
SELECT * FROM job_triggers(:c3_job);
TRUNCATE tributary._queue_:child_job;
UPDATE ji SET body = 'changed through the parent' WHERE id = 2;  -- rows 2 of ji and of ji_c1: queued once
SELECT * FROM tributary._queue_:child_job ORDER BY id;
SELECT tributary_job_drop(:job);
SELECT tributary_job_drop(:child_job);
SELECT tributary_job_drop(:c3_job);

-- Views are refused.
CREATE VIEW jt_view AS SELECT * FROM jt;
SELECT expect_error($$SELECT tributary_job_create('jt_view', '{body}', 'e')$$);

DROP TABLE jt, jt_other, jt_emb, jt_pemb, ji CASCADE;
DROP FUNCTION job_triggers(bigint);
RESET client_min_messages;
