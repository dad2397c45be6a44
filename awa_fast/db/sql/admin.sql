-- Named queries behind the admin operations of Client/AsyncClient and the CLI.

-- name: job_cancel
-- Cancel a job in any unfinished state. A running attempt's host is told over NOTIFY so
-- its handler sees is_cancelled(); that attempt's own outcome is then stale and dropped.
WITH hot AS (
    UPDATE awa_fast.jobs_hot
    SET state = 'cancelled', finalized_at = now(), heartbeat_at = NULL, deadline_at = NULL,
        errors = errors || jsonb_build_array(jsonb_build_object(
            'error', 'cancelled: ' || %(reason)s, 'attempt', attempt, 'at', now()))
    WHERE id = %(id)s AND state IN ('available', 'running', 'waiting_external')
    -- The subquery reads the statement's snapshot: the row as it was before this UPDATE.
    RETURNING id, (SELECT pg_notify('awa_fast_cancel', o.id || ':' || o.run_lease)
                   FROM awa_fast.jobs_hot o WHERE o.id = %(id)s AND o.state = 'running')
),
deferred AS (
    DELETE FROM awa_fast.jobs_deferred WHERE id = %(id)s RETURNING *
),
moved AS (
    INSERT INTO awa_fast.jobs_hot (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
        attempted_at, finalized_at, run_lease, errors, metadata, tags, progress, unique_key,
        deadline_seconds)
    SELECT id, kind, queue, args, 'cancelled', priority, attempt, max_attempts, run_at,
           created_at, attempted_at, now(), run_lease,
           errors || jsonb_build_array(jsonb_build_object(
               'error', 'cancelled: ' || %(reason)s, 'attempt', attempt, 'at', now())),
           metadata, tags, progress, unique_key, deadline_seconds
    FROM deferred
    RETURNING id
)
SELECT id FROM hot UNION ALL SELECT id FROM moved;

-- name: job_retry
-- Run a failed or cancelled job again, with its attempts reset.
UPDATE awa_fast.jobs_hot
SET state = 'available', attempt = 0, run_at = now(), finalized_at = NULL
WHERE id = %(id)s AND state IN ('failed', 'cancelled')
RETURNING id;

-- name: job_retry_failed
UPDATE awa_fast.jobs_hot
SET state = 'available', attempt = 0, run_at = now(), finalized_at = NULL
WHERE state = 'failed'
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
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
-- Resolve a job by its callback id: completed (with the callback's payload), failed (with
-- the error), or back to available for another attempt. The job may still be running: its
-- handler registered the id and has not returned yet. The callback decides then, and the
-- attempt's own outcome, guarded by state = 'running', finds no row and is dropped.
UPDATE awa_fast.jobs_hot
SET state = %(state)s::awa_fast.job_state,
    heartbeat_at = NULL,
    deadline_at = NULL,
    finalized_at = CASE WHEN %(state)s IN ('completed', 'failed') THEN now() END,
    run_at = CASE WHEN %(state)s = 'available' THEN now() ELSE run_at END,
    callback_result = %(payload)s::jsonb,
    callback_id = NULL,
    callback_timeout_at = NULL,
    errors = CASE WHEN %(error)s::text IS NULL THEN errors
                  ELSE errors || jsonb_build_array(jsonb_build_object(
                      'error', %(error)s::text, 'attempt', attempt, 'at', now())) END
WHERE callback_id = %(callback_id)s::uuid AND state IN ('waiting_external', 'running')
RETURNING id;
