-- Named queries of awa_fast.testing, the Awa SDK's test helpers.
--
-- AwaTestClient.work_one runs the first available job of one kind and queue, and claims
-- it with the runner's own job_claim_batch, which takes a queue's jobs of every kind in
-- claim order. So that the claim takes that job, a transaction on another connection
-- holds the queue's available jobs of other kinds ahead of it while the claim runs.

-- name: testing_queue_lock
-- One work_one at a time holds jobs of a queue: the holds of two, for different kinds,
-- would each make the other's claim skip its job. (The two-key form: no awa-fast lock
-- of the one-key form can be taken for it.)
SELECT pg_advisory_xact_lock(1635213684, hashtext(%(queue)s));

-- name: testing_job_hold
-- Hold the available jobs of other kinds ahead of the first available job of `kind` in
-- `queue`: FOR KEY SHARE, which the claim's FOR UPDATE SKIP LOCKED skips and admin updates
-- do not wait for. Jobs behind it need no hold (the claim takes one job). No row: the
-- queue has no available job of the kind.
WITH target AS (
    SELECT id, priority, run_at FROM awa_fast.jobs_hot
    WHERE state = 'available' AND queue = %(queue)s AND kind = %(kind)s
    ORDER BY priority, run_at, id
    LIMIT 1
),
held AS (
    SELECT j.id FROM awa_fast.jobs_hot j, target t
    WHERE j.state = 'available' AND j.queue = %(queue)s AND j.kind <> %(kind)s
      AND (j.priority, j.run_at, j.id) < (t.priority, t.run_at, t.id)
    FOR KEY SHARE OF j SKIP LOCKED
)
SELECT t.id, (SELECT count(*) FROM held) AS held FROM target t;

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
