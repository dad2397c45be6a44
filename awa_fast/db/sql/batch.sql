-- Named queries of durable batch operations (awa_fast.batch_ops: the clients' side;
-- awa_fast.maintenance.batch_ops: the leader's). Which jobs an operation selects is defined
-- once, by awa_fast.batch_operation_targets (migration 0012).

-- name: batch_operation_preview
-- What an operation would touch now: the first `sample` matching jobs by id, each with the
-- number of all matching jobs (the window counts before the LIMIT). No row: none match.
SELECT t.*, count(*) OVER () AS total_matched
FROM awa_fast.batch_operation_targets(%(filter)s::jsonb) t
ORDER BY t.id
LIMIT %(sample)s;

-- name: batch_operation_insert
INSERT INTO awa_fast.batch_operations (id, op_kind, filter, spec, submitted_by)
VALUES (%(id)s, %(op_kind)s, %(filter)s::jsonb, %(spec)s::jsonb, %(submitted_by)s)
RETURNING *;

-- name: batch_operation_get
SELECT * FROM awa_fast.batch_operations WHERE id = %(id)s;

-- name: batch_operation_list
-- Newest first.
SELECT * FROM awa_fast.batch_operations
WHERE %(state)s::text IS NULL OR state = %(state)s
ORDER BY submitted_at DESC, id DESC
LIMIT %(limit)s;

-- name: batch_operation_cancel
-- Ask the leader to stop an unfinished operation: it finalizes it as cancelled at its next
-- step, between chunks (a chunk in progress holds the row, and this waits for it). Returns
-- the operation with `cancelled` true, or as it is (finished) with `cancelled` false; no
-- row: no such operation.
WITH cancelling AS (
    UPDATE awa_fast.batch_operations
    SET state = 'cancelling', updated_at = clock_timestamp()
    WHERE id = %(id)s AND state IN ('pending', 'running')
    RETURNING *
)
SELECT *, true AS cancelled FROM cancelling
UNION ALL
SELECT *, false FROM awa_fast.batch_operations
WHERE id = %(id)s AND NOT EXISTS (SELECT 1 FROM cancelling);

-- name: batch_operation_purge
-- Finished operations finalized before `before`, oldest first, at most `limit`.
DELETE FROM awa_fast.batch_operations
WHERE id IN (
    SELECT id FROM awa_fast.batch_operations
    WHERE state IN ('completed', 'cancelled', 'failed') AND finalized_at < %(before)s
    ORDER BY finalized_at
    LIMIT %(limit)s
)
RETURNING id;

-- name: batch_operation_due
-- Whether a step has anything to do: an unfinished operation (batch_operation_lock_next),
-- or a finished one past its retention (batch_operation_delete_expired).
SELECT EXISTS (
           SELECT 1 FROM awa_fast.batch_operations
           WHERE state IN ('pending', 'running', 'cancelling'))
    OR EXISTS (SELECT 1 FROM awa_fast.batch_operations WHERE retention_until < now());

-- name: batch_operation_lock_next
-- The leader's next operation, oldest first, locked for this step's transaction: one at a
-- time, so two operations over the same jobs apply in the order they were submitted.
SELECT * FROM awa_fast.batch_operations
WHERE state IN ('pending', 'running', 'cancelling')
ORDER BY submitted_at, id
LIMIT 1
FOR UPDATE;

-- name: batch_operation_start
-- Snapshot the jobs the filter matches now (jobs inserted later are not the operation's)
-- and start applying. A read of the queued rows and one insert per match; the jobs
-- themselves are neither locked nor written.
WITH matched AS (
    INSERT INTO awa_fast.batch_operation_items (operation_id, job_id)
    SELECT %(id)s, t.id FROM awa_fast.batch_operation_targets(%(filter)s::jsonb) t
    RETURNING job_id
)
UPDATE awa_fast.batch_operations
SET state = 'running',
    started_at = clock_timestamp(),
    runner_instance = %(runner_instance)s,
    total_matched = (SELECT count(*) FROM matched),
    cursor = jsonb_build_object(
        'after_job_id', 0, 'max_job_id', (SELECT COALESCE(max(job_id), 0) FROM matched)),
    updated_at = clock_timestamp()
WHERE id = %(id)s
RETURNING *;

-- name: batch_item_take
-- The next chunk of the snapshot, in job id order, removed from it (this step's
-- transaction puts them back if it fails).
DELETE FROM awa_fast.batch_operation_items
WHERE operation_id = %(id)s AND job_id IN (
    SELECT job_id FROM awa_fast.batch_operation_items
    WHERE operation_id = %(id)s
    ORDER BY job_id
    LIMIT %(limit)s
)
RETURNING job_id;

-- name: job_batch_apply_deferred
-- Set the priority and/or queue (NULL: unchanged) of the chunk's scheduled jobs. Guarded by
-- state: a job that left `scheduled` meanwhile is not touched; one already so is skipped
-- without a write. Runs before job_batch_apply_hot, in its own statement: a job promoted
-- to jobs_hot while this waits on its row is found there by the next statement's snapshot.
UPDATE awa_fast.jobs_deferred
SET priority = COALESCE(%(priority)s, priority), queue = COALESCE(%(queue)s, queue)
WHERE id = ANY(%(ids)s::bigint[]) AND state = 'scheduled'
  AND (priority, queue) IS DISTINCT FROM
      (COALESCE(%(priority)s, priority), COALESCE(%(queue)s, queue))
RETURNING id;

-- name: job_batch_apply_hot
-- The same for the chunk's available jobs. A claim that locked one first makes this wait
-- for it and then re-check `state = 'available'` on the claimed row: false, so a running
-- job's queue or priority never changes; a row this locks first, a claim waits for and
-- then skips, its version changed: the new one (a new ready_xid, migration 0027) lies in a
-- later window of its lane. Moved jobs wake their new queue's claimers, once per chunk
-- (Postgres folds identical notifications of a transaction).
WITH changed AS (
    UPDATE awa_fast.jobs_hot
    SET priority = COALESCE(%(priority)s, priority), queue = COALESCE(%(queue)s, queue)
    WHERE id = ANY(%(ids)s::bigint[]) AND state = 'available'
      AND (priority, queue) IS DISTINCT FROM
          (COALESCE(%(priority)s, priority), COALESCE(%(queue)s, queue))
    RETURNING id, queue
)
SELECT id, CASE WHEN %(queue)s::text IS NOT NULL THEN pg_notify('awa_fast_jobs', queue) END
FROM changed;

-- name: batch_operation_advance
-- Record a chunk: `processed` jobs changed, `skipped` ones no longer queued or already so.
UPDATE awa_fast.batch_operations
SET processed = processed + %(processed)s,
    skipped = skipped + %(skipped)s,
    cursor = jsonb_set(cursor, '{after_job_id}', to_jsonb(%(after_job_id)s::bigint)),
    updated_at = clock_timestamp()
WHERE id = %(id)s
RETURNING *;

-- name: batch_operation_finish
-- Finalize as `state` (completed, cancelled or failed, with `error` then), dropping what is
-- left of the snapshot; kept for inspection until `retention_s` from now.
WITH dropped AS (
    DELETE FROM awa_fast.batch_operation_items WHERE operation_id = %(id)s
)
UPDATE awa_fast.batch_operations
SET state = %(state)s,
    started_at = COALESCE(started_at, clock_timestamp()),
    runner_instance = COALESCE(runner_instance, %(runner_instance)s),
    finalized_at = clock_timestamp(),
    last_error = COALESCE(%(error)s, last_error),
    errored = errored + CASE WHEN %(error)s::text IS NULL THEN 0 ELSE 1 END,
    retention_until = clock_timestamp() + make_interval(secs => %(retention_s)s),
    updated_at = clock_timestamp()
WHERE id = %(id)s
RETURNING *;

-- name: batch_operation_delete_expired
-- Retention: finished operations past retention_until, in bounded batches.
DELETE FROM awa_fast.batch_operations
WHERE id IN (
    SELECT id FROM awa_fast.batch_operations
    WHERE retention_until < now()
    LIMIT %(limit)s
)
RETURNING id;
