-- Named queries of sequential callbacks: a handler that waits for its callback's payload
-- (`await job.wait_for_callback(token)`) instead of returning WaitForCallback(token).
--
-- While its handler waits, the attempt's row is in waiting_external with its run_lease,
-- its callback id and its heartbeat: its host keeps heartbeating it (job_heartbeat_many),
-- so the stale and overdue sweeps, which look at running rows only, leave it alone, and
-- only the callback's timeout rescues it. A parked job (its handler returned
-- WaitForCallback) has no heartbeat: `heartbeat_at IS NULL` tells the two apart.
--
-- The deadline bounds the handler's own running time, not its waits (the callback timeout
-- bounds those): while a handler waits, its row's deadline_at is callback_timeout_at plus
-- the running time it had left, so that a resume gives that time back, counted from the
-- resume, and a callback heartbeat that moves the timeout moves the deadline with it.

-- name: job_wait_callback
-- A handler starts waiting on the callback its attempt registered. No row: the callback
-- answered first (resume_external, complete_external, ...) or the attempt lost its job;
-- job_poll_callbacks tells which.
UPDATE awa_fast.jobs_hot
SET state = 'waiting_external',
    deadline_at = callback_timeout_at + (deadline_at - now())
WHERE id = %(id)s AND run_lease = %(lease)s AND state = 'running'
  AND callback_id = %(callback_id)s::uuid
RETURNING id;

-- name: job_poll_callbacks
-- Where the waiting attempts of one worker process stand, one read for all of them. A
-- waiter's row still waiting_external on its callback: waiting; running with the same
-- run_lease and no callback id: resumed, with the payload in callback_result; anything
-- else: its attempt lost the job (resolved, timed out and rescued, cancelled). A resumed
-- waiter's deadline_at is its attempt's new deadline (the job's job.deadline).
SELECT id, run_lease, state::text AS state, callback_id::text AS callback_id,
       callback_result, errors -> -1 ->> 'error' AS last_error, deadline_at
FROM awa_fast.job_rows  -- a claimed job is never packed
WHERE id = ANY(%(ids)s::bigint[]);

-- name: job_park_callback
-- A waiting handler was cut short (shutdown, eviction): its job stays on its callback, as
-- if the handler had returned WaitForCallback, for the callback or its timeout to decide.
-- No row: the callback answered first. The state is compared as text, which keeps the
-- partial index of waiting rows (jobs_hot_waiting, for the timeout sweep) out of reach:
-- its generic plan read every parked row for this one; the row is reached by its key.
UPDATE awa_fast.jobs_hot
SET heartbeat_at = NULL, deadline_at = NULL
WHERE id = %(id)s AND run_lease = %(lease)s AND state::text = 'waiting_external'
  AND callback_id = %(callback_id)s::uuid
RETURNING id;

-- name: callback_resume
-- resume_external: the job on the callback runs on, the same attempt, with the payload in
-- callback_result; the callback is spent, its expressions with it. A handler that waits on
-- it (or, having registered it, is about to) carries on. A parked job (its handler
-- returned WaitForCallback: no heartbeat) has no handler left to carry on: it is running,
-- as the Awa SDK leaves it, with a heartbeat from now that nobody renews, so the leader's
-- stale sweep rescues it for another attempt, which finds the payload in callback_result.
-- A row the timeout sweep rescues at the same moment is locked by one of the two
-- statements first, and the other then finds it in another state: exactly one wins.
UPDATE awa_fast.jobs_hot
SET state = 'running',
    callback_id = NULL,
    callback_timeout_at = NULL,
    callback_rules = NULL,
    callback_result = %(payload)s::jsonb,
    heartbeat_at = COALESCE(heartbeat_at, now()),
    deadline_at = CASE WHEN state = 'waiting_external' AND heartbeat_at IS NOT NULL
                       THEN now() + (deadline_at - callback_timeout_at)
                       ELSE deadline_at END
WHERE callback_id = %(callback_id)s::uuid AND state IN ('waiting_external', 'running')
RETURNING *;

-- name: callback_heartbeat
-- heartbeat_callback: the external system is still at work; the callback times out
-- `timeout_s` from now (a waiting handler's deadline moves with it).
UPDATE awa_fast.jobs_hot
SET callback_timeout_at = now() + make_interval(secs => %(timeout_s)s),
    deadline_at = deadline_at + (now() + make_interval(secs => %(timeout_s)s)
                                 - callback_timeout_at)
WHERE callback_id = %(callback_id)s::uuid AND state = 'waiting_external'
RETURNING *;

-- name: callback_lock
-- resolve_callback, first of its two statements in one transaction: the job a callback
-- decides (its handler parked, waiting in wait_for_callback, or yet to return) and the
-- callback's CEL expressions, the row locked until callback_resolve acts on what they make
-- of the payload (or the transaction ends, the payload ignored). A second resolve of the
-- same callback waits here, then finds no row once the first has acted.
SELECT id, callback_rules FROM awa_fast.jobs_hot
WHERE callback_id = %(callback_id)s::uuid AND state IN ('waiting_external', 'running')
FOR UPDATE;
