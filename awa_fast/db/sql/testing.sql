-- Named queries of awa_fast.testing, the Awa SDK's test helpers.
--
-- AwaTestClient.work_one runs the first available job of one kind and queue, claimed by
-- the runner's claim function (as job_claim_batch claims), told which kind to take: a
-- claim takes a queue's jobs of every kind, and work_one leaves those of other kinds
-- untouched.

-- name: testing_job_claim
-- The first available job of `kind` in `queue` in claim order, claimed (no row: none is
-- available, or the queue is paused).
SELECT * FROM awa_fast.claim_jobs(
    %(queue)s, 1, %(host_id)s::bigint, %(deadline_s)s::float8, NULL, false, %(kind)s::text);

-- name: testing_tables_clear
-- AwaTestClient.clean: every row of awa-fast's tables (jobs wherever they live, the
-- dead-letter queue, queue pauses, unique keys, hosts, batch operations with their
-- snapshots, periodic schedules, descriptors), in one statement and so one transaction; the schema and
-- its version stay. The counters (migration 0025) stay too: these deletes take the jobs'
-- counts away with them.
WITH hot AS (DELETE FROM awa_fast.jobs_hot),
packs AS (DELETE FROM awa_fast.job_packs),
deferred AS (DELETE FROM awa_fast.jobs_deferred),
done AS (DELETE FROM awa_fast.jobs_done),
dlq AS (DELETE FROM awa_fast.dlq),
queues AS (DELETE FROM awa_fast.queue_meta),
unique_keys AS (DELETE FROM awa_fast.unique_claims),
hosts AS (DELETE FROM awa_fast.hosts),
batch_operations AS (DELETE FROM awa_fast.batch_operations),
descriptors AS (DELETE FROM awa_fast.descriptors)
DELETE FROM awa_fast.cron_jobs;
