-- Named queries behind the admin operations of Client/AsyncClient and the CLI.

-- name: job_cancel
-- Cancel a job in any unfinished state: it moves to jobs_done from wherever it waits. A
-- running attempt's host is told over NOTIFY, by id and lease alone, and flags the attempt
-- (its handler sees is_cancelled()) once it has read this cancel (job_cancelled_attempts);
-- that attempt's own outcome is then stale and dropped.
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
    -- include: into_done
    SELECT id, kind, queue, args, 'cancelled', priority, attempt, max_attempts, run_at,
           created_at, attempted_at, now(), run_lease,
           errors || jsonb_build_array(jsonb_build_object(
               'error', 'cancelled: ' || %(reason)s, 'attempt', attempt, 'at', now())),
           metadata, tags, progress, unique_key, callback_id, callback_result,
           deadline_seconds, parent_id
    FROM unfinished
    RETURNING id
)
SELECT id, (SELECT pg_notify('awa_fast_cancel', h.id || ':' || h.run_lease)
            FROM hot h WHERE h.state = 'running')
FROM cancelled;

-- name: job_retry
-- Run failed (or, given by id, cancelled or parked) jobs again, with their attempts reset:
-- by id when `id` is given, else every failed job of `kind` and `queue` (each NULL for
-- any).
-- A parked job (waiting_external, in jobs_hot) is revived as the Awa SDK's retry does.
-- Its callback, expressions, heartbeat and deadline are cleared, so a late answer to that
-- callback finds no job. Its errors and run lease stay: its next claim takes a new lease,
-- and the old one matches no row that is neither running nor parked. It leaves jobs_hot and
-- comes back through the same insert as a finished job, which wakes the claimers. Locked,
-- the row is re-checked as parked: a callback or a timeout rescue that took it first
-- leaves nothing to revive.
-- A job with a unique key takes it back as dlq_retry's entries do; one whose key a live job
-- holds stays where it is.
-- One row per job locked: the job as requeued (`holder` NULL), or, for one held off, only
-- `holder`, the id of the live job holding its key; a single row of NULLs when none was.
-- Every row also carries:
-- * `matched`: how many jobs the scan found (a job another retry or retention took
--   between the scan and the lock is found but not locked);
-- * `pruned_failed_count`: how many failed jobs retention has deleted from `queue` (every
--   queue when NULL), read in the scan's snapshot so that no failed job counts twice;
--   NULL by id and when `kind` is given (retention counts by queue only).
WITH scanned AS (
    SELECT CASE WHEN %(id)s::bigint IS NOT NULL THEN ARRAY[%(id)s::bigint]
                ELSE ARRAY(SELECT id FROM awa_fast.jobs_done
                           WHERE state = 'failed'
                             AND (%(kind)s::text IS NULL OR kind = %(kind)s)
                             AND (%(queue)s::text IS NULL OR queue = %(queue)s)) END AS ids
),
picked AS (
    SELECT id, unique_key FROM awa_fast.jobs_done
    WHERE id = ANY((SELECT ids FROM scanned)::bigint[])
      AND state IN ('failed', 'cancelled')
    ORDER BY id
    FOR UPDATE
),
parked AS (
    SELECT id, unique_key FROM awa_fast.jobs_hot
    WHERE %(id)s::bigint IS NOT NULL AND id = %(id)s AND state = 'waiting_external'
    FOR UPDATE
),
claimed AS (
    SELECT id, awa_fast.unique_claim_retake(
        unique_key, id, %(unique_states)s::awa_fast.job_state[]) AS holder
    FROM (SELECT * FROM picked UNION ALL SELECT * FROM parked) AS locked
),
finished AS (
    DELETE FROM awa_fast.jobs_done
    WHERE id IN (SELECT id FROM claimed WHERE holder = id)
    RETURNING id, kind, queue, args, priority, max_attempts, created_at, attempted_at,
              run_lease, errors, metadata, tags, progress, unique_key, callback_result,
              deadline_seconds, parent_id
),
unparked AS (
    DELETE FROM awa_fast.jobs_hot
    WHERE id IN (SELECT id FROM claimed WHERE holder = id) AND state = 'waiting_external'
    RETURNING id, kind, queue, args, priority, max_attempts, created_at, attempted_at,
              run_lease, errors, metadata, tags, progress, unique_key, callback_result,
              deadline_seconds, parent_id
),
requeued AS (
    -- The columns left out (callback id, timeout and expressions, heartbeat, deadline,
    -- host, finalized_at) start NULL, as on a job never claimed.
    INSERT INTO awa_fast.jobs_hot (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
        attempted_at, run_lease, errors, metadata, tags, progress, unique_key,
        callback_result, deadline_seconds, parent_id)
    SELECT id, kind, queue, args, 'available', priority, 0, max_attempts, now(), created_at,
           attempted_at, run_lease, errors, metadata, tags, progress, unique_key,
           callback_result, deadline_seconds, parent_id
    FROM (SELECT * FROM finished UNION ALL SELECT * FROM unparked) AS revived
    RETURNING *
),
summary AS (
    SELECT cardinality(ids) AS matched,
           CASE WHEN %(id)s::bigint IS NULL AND %(kind)s::text IS NULL THEN
               (SELECT COALESCE(sum(pruned), 0)::bigint FROM awa_fast.pruned_failed_counts
                WHERE %(queue)s::text IS NULL OR queue = %(queue)s) END AS pruned_failed_count
    FROM scanned
)
SELECT r.*, NULLIF(c.holder, c.id) AS holder, s.matched, s.pruned_failed_count
FROM summary s
LEFT JOIN claimed c ON true
LEFT JOIN requeued r ON r.id = c.id
ORDER BY c.id;

-- name: job_discard_failed
-- Delete the failed jobs of a kind (jobs_done_failed finds them among the completed).
DELETE FROM awa_fast.jobs_done
WHERE state = 'failed' AND kind = %(kind)s
RETURNING id;

-- name: job_delete_many
-- Delete the jobs of `ids` that are not running, wherever they wait or lie finished (a
-- running attempt is cancelled instead, so that its handler hears of it). A job claimed
-- meanwhile is running by the time its row is locked, and stays. Unique keys need no
-- care: a claim whose job is gone is taken over by the next insert (migration 0011).
WITH hot AS (
    DELETE FROM awa_fast.jobs_hot
    WHERE id = ANY(%(ids)s::bigint[]) AND state <> 'running'
    RETURNING id
),
deferred AS (
    DELETE FROM awa_fast.jobs_deferred WHERE id = ANY(%(ids)s::bigint[]) RETURNING id
),
done AS (
    DELETE FROM awa_fast.jobs_done WHERE id = ANY(%(ids)s::bigint[]) RETURNING id
)
SELECT id FROM hot UNION ALL SELECT id FROM deferred UNION ALL SELECT id FROM done;

-- name: job_select_by_unique_key
-- The oldest unfinished job holding a unique key (the Awa SDK cancels that one: a key's
-- states may leave out some, so two unfinished jobs can share it). No index: the two
-- tables hold only unfinished work, and this is an admin's call.
SELECT id FROM (
    SELECT id FROM awa_fast.jobs_hot WHERE unique_key = %(key)s
    UNION ALL
    SELECT id FROM awa_fast.jobs_deferred WHERE unique_key = %(key)s
) AS holders
ORDER BY id
LIMIT 1;

-- name: job_dump
-- A job wherever it is, the dead-letter queue included, in the jobs view's columns plus
-- the dead-letter ones (NULL elsewhere).
SELECT j.*, NULL::text AS dlq_reason, NULL::timestamptz AS dlq_at
FROM awa_fast.job_rows j WHERE j.id = %(id)s
UNION ALL
SELECT j.*, NULL, NULL FROM awa_fast.packed_jobs(ARRAY[%(id)s::bigint]) j
UNION ALL
SELECT (jsonb_populate_record(NULL::awa_fast.jobs, to_jsonb(d))).*, d.dlq_reason, d.dlq_at
FROM awa_fast.dlq d WHERE d.id = %(id)s;

-- name: job_list
-- Newest first. Of the packs (migration 0016), only the `limit` matching ones with the
-- highest last ids are unpacked: a pack's last job is never claimed before its others, so
-- any packed job among the newest `limit` lies in one of them.
WITH packs AS (
    SELECT * FROM awa_fast.job_packs
    WHERE (%(state)s::text IS NULL OR %(state)s = 'available')
      AND (%(kind)s::text IS NULL OR kind = %(kind)s)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s)
    ORDER BY ids[cardinality(ids)] DESC
    LIMIT %(limit)s
)
SELECT * FROM (
    SELECT * FROM awa_fast.job_rows
    WHERE (%(state)s::text IS NULL OR state::text = %(state)s)
      AND (%(kind)s::text IS NULL OR kind = %(kind)s)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s)
    ORDER BY id DESC
    LIMIT %(limit)s
) r
UNION ALL
SELECT j.* FROM packs p, awa_fast.pack_jobs(p::awa_fast.job_packs) j
ORDER BY id DESC
LIMIT %(limit)s;

-- name: job_list_followups
-- The follow-ups of the job `id` (migration 0022), wherever each is, the dead-letter queue
-- included, oldest first: through each table's index of follow-ups.
SELECT * FROM (
    SELECT * FROM awa_fast.job_rows WHERE parent_id = %(id)s
    UNION ALL
    SELECT (jsonb_populate_record(NULL::awa_fast.job_rows, to_jsonb(d))).*
    FROM awa_fast.dlq d WHERE d.parent_id = %(id)s
) f
ORDER BY id
LIMIT %(limit)s;

-- name: queue_pause
INSERT INTO awa_fast.queue_meta (queue, paused, paused_at, paused_by, updated_at)
VALUES (%(queue)s, true, now(), %(paused_by)s, now())
ON CONFLICT (queue) DO UPDATE
SET paused = true, paused_at = now(), paused_by = %(paused_by)s, updated_at = now();

-- name: queue_resume
-- Packs wait in a paused queue as rows do: news on both channels (migration 0017).
WITH resumed AS (
    INSERT INTO awa_fast.queue_meta (queue, paused, updated_at)
    VALUES (%(queue)s, false, now())
    ON CONFLICT (queue) DO UPDATE
    SET paused = false, paused_at = NULL, paused_by = NULL, updated_at = now()
    RETURNING queue
)
SELECT pg_notify('awa_fast_jobs', queue), pg_notify('awa_fast_packs', queue) FROM resumed;

-- name: queue_drain
-- Cancel every job of a queue that waits: available or parked on a callback (jobs_hot),
-- scheduled or retryable (jobs_deferred). A running attempt is left alone: the delete is
-- guarded by state, so a job a claim took meanwhile is skipped once the claim commits.
WITH hot AS (
    DELETE FROM awa_fast.jobs_hot
    WHERE queue = %(queue)s AND state IN ('available', 'waiting_external')
    RETURNING *
),
deferred AS (
    DELETE FROM awa_fast.jobs_deferred WHERE queue = %(queue)s RETURNING *
),
waiting AS (
    SELECT * FROM hot UNION ALL SELECT * FROM deferred
)
-- include: into_done
SELECT id, kind, queue, args, 'cancelled', priority, attempt, max_attempts, run_at,
       created_at, attempted_at, now(), run_lease,
       errors || jsonb_build_array(jsonb_build_object(
           'error', 'cancelled: queue drained', 'attempt', attempt, 'at', now())),
       metadata, tags, progress, unique_key, callback_id, callback_result, deadline_seconds,
       parent_id
FROM waiting
RETURNING id;

-- name: queue_stats
-- Per queue: its counts by state (awa_fast.queue_counts, migration 0025), its completions
-- in the current minute and the 59 before it (awa_fast.queue_minutes), and how long the
-- first job of each priority has been due: for a queue with available jobs, the row each
-- lane's next claim would take first (awa_fast.lane_head, migration 0027) and the first
-- pack in job_packs' claim index. Nothing here grows with the jobs a queue holds or held. A queue shows once it has a count here other than its
-- completed jobs, completions in the last hour, or a pause on record.
WITH counts AS (
    SELECT queue,
           sum(n) FILTER (WHERE state = 'available') AS available,
           sum(n) FILTER (WHERE state = 'running') AS running,
           sum(n) FILTER (WHERE state = 'waiting_external') AS waiting_external,
           sum(n) FILTER (WHERE state = 'scheduled') AS scheduled,
           sum(n) FILTER (WHERE state = 'retryable') AS retryable,
           sum(n) FILTER (WHERE state = 'failed') AS failed,
           sum(n) FILTER (WHERE state = 'cancelled') AS cancelled
    FROM awa_fast.queue_counts
    WHERE state NOT IN ('completed', 'dlq') AND n <> 0
    GROUP BY queue
),
recent AS (
    SELECT queue, sum(n) AS completed_last_hour
    FROM awa_fast.queue_minutes
    WHERE state = 'completed' AND minute > now() - interval '1 hour'
    GROUP BY queue
    HAVING sum(n) <> 0
),
stats AS (
    SELECT queue,
           COALESCE(available, 0)::bigint AS available,
           COALESCE(running, 0)::bigint AS running,
           COALESCE(scheduled, 0)::bigint AS scheduled,
           COALESCE(retryable, 0)::bigint AS retryable,
           COALESCE(waiting_external, 0)::bigint AS waiting_external,
           COALESCE(failed, 0)::bigint AS failed,
           COALESCE(cancelled, 0)::bigint AS cancelled,
           COALESCE(completed_last_hour, 0)::bigint AS completed_last_hour,
           COALESCE(m.paused, false) AS paused,
           m.paused_by
    FROM counts
    FULL JOIN recent USING (queue)
    FULL JOIN awa_fast.queue_meta m USING (queue)
)
SELECT s.queue,
       s.available + s.running + s.waiting_external + s.scheduled + s.retryable
           AS total_queued,
       s.available, s.running, s.scheduled, s.retryable, s.waiting_external, s.failed,
       s.cancelled, s.completed_last_hour,
       EXTRACT(EPOCH FROM now() - oldest.run_at)::float8 AS lag_seconds,
       s.paused, s.paused_by
FROM stats s
LEFT JOIN LATERAL (
    SELECT min(first.run_at) AS run_at
    FROM generate_series(1, 4) AS p(priority),
    LATERAL (
        SELECT awa_fast.lane_head(s.queue, p.priority::smallint) AS run_at
        WHERE s.available > 0
        UNION ALL
        SELECT (SELECT k.run_at FROM awa_fast.job_packs k
                WHERE k.queue = s.queue AND k.priority = p.priority
                ORDER BY k.run_at LIMIT 1)
        WHERE s.available > 0
    ) first
) oldest ON true
ORDER BY s.queue;

-- The dead-letter filters (each NULL for any): kind, queue, a tag the job carries, and a
-- cursor below (before_dlq_at, before_id) in list order; before_id alone is below that id,
-- before_dlq_at alone is before that time (ids start at 1).

-- name: dlq_list
SELECT * FROM awa_fast.dlq
WHERE (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(tag)s::text IS NULL OR tags @> ARRAY[%(tag)s::text])
  AND (%(before_id)s::bigint IS NULL OR %(before_dlq_at)s::timestamptz IS NOT NULL
       OR id < %(before_id)s)
  AND (%(before_dlq_at)s::timestamptz IS NULL
       OR (dlq_at, id) < (%(before_dlq_at)s, COALESCE(%(before_id)s, 0)))
ORDER BY dlq_at DESC, id DESC
LIMIT %(limit)s;

-- name: dlq_get
SELECT * FROM awa_fast.dlq WHERE id = %(id)s;

-- name: state_count
-- The jobs of one counted state (a job_state, or 'dlq' for the dead-letter queue) in
-- `queue` (NULL: in every queue), from the counters (migration 0025).
SELECT COALESCE(sum(n), 0)::bigint AS count FROM awa_fast.queue_counts
WHERE state = %(state)s AND (%(queue)s::text IS NULL OR queue = %(queue)s);

-- name: dlq_depth_by_queue
SELECT queue, n AS depth FROM awa_fast.queue_counts
WHERE state = 'dlq' AND n <> 0
ORDER BY depth DESC, queue;

-- name: dlq_move_failed
-- Failed jobs (by id, or every one of `kind` and `queue`) into the dead-letter queue with a
-- reason. Guarded by state: a job retried meanwhile is no longer failed, and is left.
WITH moved AS (
    DELETE FROM awa_fast.jobs_done
    WHERE state = 'failed'
      AND (%(id)s::bigint IS NULL OR id = %(id)s)
      AND (%(kind)s::text IS NULL OR kind = %(kind)s)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s)
    RETURNING *
)
-- include: into_dlq
SELECT id, kind, queue, args, 'failed', priority, attempt, max_attempts, run_at, created_at,
       attempted_at, finalized_at, run_lease, errors, metadata, tags, progress, unique_key,
       deadline_seconds, parent_id, %(reason)s
FROM moved
RETURNING *;

-- name: dlq_retry
-- Back from the dead-letter queue with fresh attempts (by id, or every entry the filters
-- match): available now, or scheduled at a later `run_at`, optionally in another queue or
-- at another priority. The entries are locked first, so of two retries of one entry the
-- second finds it gone. A revived entry takes its unique key back as an insert does
-- (awa_fast.unique_claim_retake, migration 0011: a live job holding it meanwhile wins,
-- even one whose insert committed while this waited); one that cannot stays, returned
-- with the holder's id as `holder`.
WITH picked AS (
    SELECT id, unique_key FROM awa_fast.dlq
    WHERE (%(id)s::bigint IS NULL OR id = %(id)s)
      AND (%(kind)s::text IS NULL OR kind = %(kind)s)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s)
      AND (%(tag)s::text IS NULL OR tags @> ARRAY[%(tag)s::text])
    ORDER BY id
    FOR UPDATE
),
claimed AS (
    SELECT id, awa_fast.unique_claim_retake(
        unique_key, id, %(unique_states)s::awa_fast.job_state[]) AS holder
    FROM picked
),
held AS (
    SELECT id, holder FROM claimed WHERE holder <> id
),
revived AS (
    DELETE FROM awa_fast.dlq
    WHERE id IN (SELECT id FROM claimed WHERE holder = id)
    RETURNING *, COALESCE(%(run_at)s::timestamptz > now(), false) AS later
),
now_due AS (
    INSERT INTO awa_fast.jobs_hot (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
        run_lease, errors, metadata, tags, progress, unique_key, deadline_seconds, parent_id)
    SELECT id, kind, COALESCE(%(new_queue)s, queue), args, 'available',
           COALESCE(%(priority)s::smallint, priority), 0, max_attempts, now(), created_at,
           run_lease, errors, metadata, tags, progress, unique_key, deadline_seconds, parent_id
    FROM revived WHERE NOT later
    RETURNING id
),
scheduled AS (
    INSERT INTO awa_fast.jobs_deferred (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
        run_lease, errors, metadata, tags, progress, unique_key, deadline_seconds, parent_id)
    SELECT id, kind, COALESCE(%(new_queue)s, queue), args, 'scheduled',
           COALESCE(%(priority)s::smallint, priority), 0, max_attempts, %(run_at)s,
           created_at, run_lease, errors, metadata, tags, progress, unique_key,
           deadline_seconds, parent_id
    FROM revived WHERE later
    RETURNING id
)
SELECT id, NULL::bigint AS holder FROM now_due
UNION ALL
SELECT id, NULL FROM scheduled
UNION ALL
SELECT id, holder FROM held;

-- name: dlq_purge
DELETE FROM awa_fast.dlq
WHERE (%(id)s::bigint IS NULL OR id = %(id)s)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(tag)s::text IS NULL OR tags @> ARRAY[%(tag)s::text])
  AND (%(before_id)s::bigint IS NULL OR %(before_dlq_at)s::timestamptz IS NOT NULL
       OR id < %(before_id)s)
  AND (%(before_dlq_at)s::timestamptz IS NULL
       OR (dlq_at, id) < (%(before_dlq_at)s, COALESCE(%(before_id)s, 0)))
RETURNING id;

-- name: callback_resolve
-- Resolve a job by its callback id: completed (with the callback's payload) or failed (with
-- the error), moving it to jobs_done, or back to available for another attempt. The job
-- may still be running: its handler registered the id and has not returned yet. The
-- callback decides then, and the attempt's own outcome, guarded by state = 'running',
-- finds no row and is dropped; a handler waiting on the callback (wait_for_callback) sees
-- its job gone and stops waiting. `error` is the error entry's object (its text under
-- 'error', and any detail, as the expression resolve_callback matched), stamped here with
-- the attempt and the time. Returns the job as it now is.
WITH resolved AS (
    DELETE FROM awa_fast.jobs_hot
    WHERE callback_id = %(callback_id)s::uuid AND state IN ('waiting_external', 'running')
    RETURNING *
),
resolved_with AS (
    SELECT r.*, %(payload)s::jsonb AS payload,
           CASE WHEN %(error)s::jsonb IS NULL THEN r.errors
                ELSE r.errors || jsonb_build_array(%(error)s::jsonb || jsonb_build_object(
                    'attempt', r.attempt, 'at', now())) END
               AS new_errors
    FROM resolved r
),
finished AS (
    INSERT INTO awa_fast.jobs_done (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
        attempted_at, finalized_at, run_lease, errors, metadata, tags, progress, unique_key,
        callback_result, deadline_seconds, parent_id)
    SELECT id, kind, queue, args, %(state)s::awa_fast.job_state, priority, attempt,
           max_attempts, run_at, created_at, attempted_at, now(), run_lease, new_errors,
           metadata, tags,
           -- none kept on completion, as in job_complete_many
           CASE WHEN %(state)s = 'completed' THEN NULL ELSE progress END,
           unique_key, payload, deadline_seconds, parent_id
    FROM resolved_with WHERE %(state)s IN ('completed', 'failed')
    RETURNING *
),
again AS (
    INSERT INTO awa_fast.jobs_hot (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
        attempted_at, run_lease, errors, metadata, tags, progress, unique_key,
        callback_result, deadline_seconds, parent_id)
    SELECT id, kind, queue, args, 'available', priority, attempt, max_attempts, now(),
           created_at, attempted_at, run_lease, new_errors, metadata, tags, progress,
           unique_key, payload, deadline_seconds, parent_id
    FROM resolved_with WHERE %(state)s = 'available'
    RETURNING *
)
SELECT * FROM finished UNION ALL SELECT * FROM again;

-- name: queue_available
-- Jobs waiting to be claimed in each of the given queues (a health check's view of them),
-- from the counters (migration 0025).
SELECT queue, n AS count FROM awa_fast.queue_counts
WHERE state = 'available' AND queue = ANY(%(queues)s::text[]);

-- name: storage_status
-- What the Awa SDK's storage report needs here: when the schema was installed (the one
-- engine has been active since) and the live backlog, every job not yet finished (from
-- the counters, migration 0025).
SELECT (SELECT applied_at FROM awa_fast.schema_version WHERE version = 1) AS installed_at,
       (SELECT COALESCE(sum(n), 0)::bigint FROM awa_fast.queue_counts
        WHERE state IN ('available', 'running', 'waiting_external', 'scheduled', 'retryable'))
           AS live_backlog;

-- name: job_unpack
-- Before acting on the job `id`: if a pack holds it unclaimed, the pack's jobs become
-- jobs_hot's available rows (migration 0016).
SELECT awa_fast.unpack_jobs(NULL, %(id)s);

-- name: queue_unpack
-- Before acting on the available jobs of `queue` (NULL: of every queue): its packs' jobs
-- become jobs_hot's available rows (migration 0016).
SELECT awa_fast.unpack_jobs(%(queue)s, NULL);

-- name: job_unpack_many
-- Before acting on the jobs of `ids`: the packs holding any of them unclaimed become
-- jobs_hot's available rows (migration 0016), as job_unpack does for one.
SELECT awa_fast.unpack_jobs(NULL, i) FROM unnest(%(ids)s::bigint[]) AS i;
