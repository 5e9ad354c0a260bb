-- tributary.jobs on a server without tributary in shared_preload_libraries: no worker can run a
-- job here, so a job is pending or, had it run before (a restart without tributary preloaded),
-- waiting; never running. waiting_for says why (tributary._job_service()).
SET client_min_messages = warning;
CREATE TABLE svc_docs (id int PRIMARY KEY, body text, embedding vector(384));
INSERT INTO svc_docs SELECT g, 'svc ' || g FROM generate_series(1, 5) g;
SELECT tributary_job_create('svc_docs', '{body}', name => 'svc') AS svc \gset
SELECT * FROM tributary._job_service();
SELECT state, worker_pids, waiting_for FROM tributary.jobs WHERE id = :svc;
UPDATE tributary._jobs SET state = 'running' WHERE id = :svc;
SELECT state, worker_pids, waiting_for FROM tributary.jobs WHERE id = :svc;
-- Paused (and every state but pending and running) shows as stored, waiting for nothing.
SELECT tributary_job_pause(:svc);
SELECT state, worker_pids, waiting_for FROM tributary.jobs WHERE id = :svc;
SELECT tributary_job_drop(:svc);
DROP TABLE svc_docs;
