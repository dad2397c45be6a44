-- Named queries behind the admin operations of Client/AsyncClient and the CLI.

-- name: job_cancel
-- Cancel a job in any unfinished state: it moves to jobs_done from wherever it waits. A
-- running attempt's host is told over NOTIFY so its handler sees is_cancelled(); that
-- attempt's own outcome is then stale and dropped.
WITH hot AS (
    DELETE FROM awa_fast.jobs_hot WHERE id = %(id)s RETURNING *
),
deferred AS (
    DELETE FROM awa_fast.jobs_deferred WHERE id = %(id)s RETURNING *
),
unfinished AS (
    SELECT * FROM hot UNION ALL SELECT * FROM deferred
),
cancelled AS (
    INSERT INTO awa_fast.jobs_done (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
        attempted_at, finalized_at, run_lease, errors, metadata, tags, progress, unique_key,
        callback_id, callback_result, deadline_seconds)
    SELECT id, kind, queue, args, 'cancelled', priority, attempt, max_attempts, run_at,
           created_at, attempted_at, now(), run_lease,
           errors || jsonb_build_array(jsonb_build_object(
               'error', 'cancelled: ' || %(reason)s, 'attempt', attempt, 'at', now())),
           metadata, tags, progress, unique_key, callback_id, callback_result,
           deadline_seconds
    FROM unfinished
    RETURNING id
)
SELECT id, (SELECT pg_notify('awa_fast_cancel', h.id || ':' || h.run_lease)
            FROM hot h WHERE h.state = 'running')
FROM cancelled;

-- name: job_retry
-- Run failed (or, given by id, cancelled) jobs again, with their attempts reset: by id
-- when `id` is given, else every failed job of `kind` and `queue` (each NULL for any).
WITH revived AS (
    DELETE FROM awa_fast.jobs_done
    WHERE id = ANY(CASE WHEN %(id)s::bigint IS NOT NULL THEN ARRAY[%(id)s::bigint]
                        ELSE ARRAY(SELECT id FROM awa_fast.jobs_done
                                   WHERE state = 'failed'
                                     AND (%(kind)s::text IS NULL OR kind = %(kind)s)
                                     AND (%(queue)s::text IS NULL OR queue = %(queue)s)) END)
      AND state IN ('failed', 'cancelled')
    RETURNING *
)
INSERT INTO awa_fast.jobs_hot (
    id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
    attempted_at, run_lease, errors, metadata, tags, progress, unique_key, callback_result,
    deadline_seconds)
SELECT id, kind, queue, args, 'available', priority, 0, max_attempts, now(), created_at,
       attempted_at, run_lease, errors, metadata, tags, progress, unique_key, callback_result,
       deadline_seconds
FROM revived
RETURNING id;

-- name: job_list
SELECT * FROM awa_fast.jobs
WHERE (%(state)s::text IS NULL OR state::text = %(state)s)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: queue_pause
INSERT INTO awa_fast.queue_meta (queue, paused, paused_at, updated_at)
VALUES (%(queue)s, true, now(), now())
ON CONFLICT (queue) DO UPDATE SET paused = true, paused_at = now(), updated_at = now();

-- name: queue_resume
WITH resumed AS (
    INSERT INTO awa_fast.queue_meta (queue, paused, updated_at)
    VALUES (%(queue)s, false, now())
    ON CONFLICT (queue) DO UPDATE SET paused = false, paused_at = NULL, updated_at = now()
    RETURNING queue
)
SELECT pg_notify('awa_fast_jobs', queue) FROM resumed;

-- name: queue_stats
SELECT q.queue,
       count(j.id) FILTER (WHERE j.state = 'available') AS available,
       count(j.id) FILTER (WHERE j.state = 'running') AS running,
       count(j.id) FILTER (WHERE j.state = 'scheduled') AS scheduled,
       count(j.id) FILTER (WHERE j.state = 'retryable') AS retryable,
       count(j.id) FILTER (WHERE j.state = 'waiting_external') AS waiting_external,
       count(j.id) FILTER (WHERE j.state = 'completed') AS completed,
       count(j.id) FILTER (WHERE j.state = 'failed') AS failed,
       count(j.id) FILTER (WHERE j.state = 'cancelled') AS cancelled,
       COALESCE(bool_or(m.paused), false) AS paused,
       EXTRACT(EPOCH FROM now() - min(j.run_at) FILTER (WHERE j.state = 'available'))
           AS lag_seconds
FROM (SELECT queue FROM awa_fast.jobs UNION SELECT queue FROM awa_fast.queue_meta) q
LEFT JOIN awa_fast.jobs j ON j.queue = q.queue
LEFT JOIN awa_fast.queue_meta m ON m.queue = q.queue
GROUP BY q.queue
ORDER BY q.queue;

-- name: dlq_list
SELECT * FROM awa_fast.dlq
WHERE (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY dlq_at DESC, id DESC
LIMIT %(limit)s;

-- name: dlq_retry
-- Back from the dead-letter queue into the claimable table, with fresh attempts.
WITH revived AS (
    DELETE FROM awa_fast.dlq WHERE id = %(id)s RETURNING *
)
INSERT INTO awa_fast.jobs_hot (
    id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
    run_lease, errors, metadata, tags, progress, unique_key, deadline_seconds)
SELECT id, kind, queue, args, 'available', priority, 0, max_attempts, now(), created_at,
       run_lease, errors, metadata, tags, progress, unique_key, deadline_seconds
FROM revived
RETURNING id;

-- name: dlq_purge
DELETE FROM awa_fast.dlq
WHERE (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
RETURNING id;

-- name: callback_resolve
-- Resolve a job by its callback id: completed (with the callback's payload) or failed (with
-- the error), moving it to jobs_done, or back to available for another attempt. The job
-- may still be running: its handler registered the id and has not returned yet. The
-- callback decides then, and the attempt's own outcome, guarded by state = 'running',
-- finds no row and is dropped; a handler waiting on the callback (wait_for_callback) sees
-- its job gone and stops waiting. Returns the job as it now is.
WITH resolved AS (
    DELETE FROM awa_fast.jobs_hot
    WHERE callback_id = %(callback_id)s::uuid AND state IN ('waiting_external', 'running')
    RETURNING *
),
resolved_with AS (
    SELECT r.*, %(payload)s::jsonb AS payload,
           CASE WHEN %(error)s::text IS NULL THEN r.errors
                ELSE r.errors || jsonb_build_array(jsonb_build_object(
                    'error', %(error)s::text, 'attempt', r.attempt, 'at', now())) END
               AS new_errors
    FROM resolved r
),
finished AS (
    INSERT INTO awa_fast.jobs_done (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
        attempted_at, finalized_at, run_lease, errors, metadata, tags, progress, unique_key,
        callback_result, deadline_seconds)
    SELECT id, kind, queue, args, %(state)s::awa_fast.job_state, priority, attempt,
           max_attempts, run_at, created_at, attempted_at, now(), run_lease, new_errors,
           metadata, tags, progress, unique_key, payload, deadline_seconds
    FROM resolved_with WHERE %(state)s IN ('completed', 'failed')
    RETURNING *
),
again AS (
    INSERT INTO awa_fast.jobs_hot (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
        attempted_at, run_lease, errors, metadata, tags, progress, unique_key,
        callback_result, deadline_seconds)
    SELECT id, kind, queue, args, 'available', priority, attempt, max_attempts, now(),
           created_at, attempted_at, run_lease, new_errors, metadata, tags, progress,
           unique_key, payload, deadline_seconds
    FROM resolved_with WHERE %(state)s = 'available'
    RETURNING *
)
SELECT * FROM finished UNION ALL SELECT * FROM again;

-- name: queue_available
-- Jobs waiting to be claimed in each of the given queues (a health check's view of them).
SELECT queue, count(*) FROM awa_fast.jobs_hot
WHERE state = 'available' AND queue = ANY(%(queues)s::text[])
GROUP BY queue;
