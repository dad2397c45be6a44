-- Named queries on the job tables. One binding (awa_fast.db.queries) loads this file;
-- tests/db/test_queries.py prepares every query against a migrated database.
-- Every statement that finishes an attempt matches (id, run_lease, state = 'running'):
-- zero rows means the attempt is stale and its outcome is dropped.

-- fragment: into_done
-- A finished job's row into jobs_done, every column a statement that finishes jobs names.
INSERT INTO awa_fast.jobs_done (
    id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
    attempted_at, finalized_at, run_lease, errors, metadata, tags, progress, unique_key,
    callback_id, callback_result, deadline_seconds, parent_id)

-- fragment: into_dlq
-- A failed job's row into the dead-letter queue.
INSERT INTO awa_fast.dlq (
    id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
    attempted_at, finalized_at, run_lease, errors, metadata, tags, progress, unique_key,
    deadline_seconds, parent_id, dlq_reason)

-- fragment: claim_columns
-- A started attempt's row as the executor reads it (claims return it, standby_collect
-- selects it). Empty metadata and errors (most jobs' first attempt) come back as NULL:
-- nothing to load here, send to a worker or parse there. deadline_at is the handler's
-- job.deadline: set at the start from now() and the job's own deadline_seconds, neither
-- of which the row carries back, so the claimer could not recompute it exactly.
j.id, j.run_lease, j.kind, j.queue, j.args, j.attempt, j.max_attempts,
j.priority, j.tags, NULLIF(j.metadata, '{}') AS metadata,
NULLIF(j.errors, '[]') AS errors, j.progress, j.run_at, j.created_at,
j.deadline_at

-- name: job_claim_rows
-- job_claim_batch for a queue that holds no packs, as far as the runner has heard
-- (awa_fast.runtime.claim.packwatch): jobs_hot's available rows alone, in claim order. Its plan
-- runs none of the pack scan (benches/RESULTS.md, "Design measurements").
SELECT * FROM awa_fast.claim_jobs(%(queue)s, %(limit)s::integer, %(host_id)s::bigint,
                                  %(deadline_s)s::float8, NULL, false);

-- name: job_claim_batch
-- Take up to `limit` available jobs of one queue in priority/run_at/id order, from
-- jobs_hot's available rows and from packs (migration 0016) alike, by window claims
-- (awa_fast.claim_jobs, migration 0027): a claim reads the queue's rows made available
-- since the claims before it, never the index entries those claims left behind, merges
-- them with packs in claim order, a pack counting as its unclaimed jobs at its first
-- one's place, and takes up to `limit`. Rows become running by an UPDATE; a pack's taken
-- jobs are written as running rows, and the pack advances past them (or is deleted once
-- all are taken).
SELECT * FROM awa_fast.claim_jobs(%(queue)s, %(limit)s::integer, %(host_id)s::bigint,
                                  %(deadline_s)s::float8, NULL, true);

-- name: job_claim_aged
-- job_claim_batch with the Awa SDK's priority aging (priority_aging_interval_ms): a job
-- that has waited `aging_s` since its run_at is claimed as if its priority were one higher,
-- and one higher again after each further interval, up to 1, so older jobs of a lower
-- priority go ahead of newer ones of a higher. The stored priority does not change. The
-- jobs come back in aged order: workers start held jobs in the order they are handed them.
SELECT * FROM awa_fast.claim_jobs(%(queue)s, %(limit)s::integer, %(host_id)s::bigint,
                                  %(deadline_s)s::float8, %(aging_s)s::float8, true);

-- name: standby_collect
-- This host's standby claims (migration 0018), each with its queue and id: those still
-- waiting, with NULL for the job; and the spent ones, each with its job's row as claims
-- return rows, or NULL for a job that no longer runs on that attempt (cancelled or
-- rescued before this read). Rows and claims are read in one snapshot: a claim naming a
-- job is committed with that job's start. A read only: the runner starts the jobs, then
-- deletes the spent claims (standby_forget), so that nothing it waits for writes, whatever
-- this read prunes of jobs_hot. Each job is looked up by its id (a lateral read, LIMIT 1
-- so that the planner cannot make it a join): as a join, the plan read jobs_hot's primary
-- key whole, every dead entry with it, and while a transaction held the horizon a collect
-- went from 0.1 to 2.8 ms in 40 s at 500 jobs/s.
SELECT m.queue AS standby_queue, m.job_id IS NULL AS waiting, m.id AS claim,
-- include: claim_columns
FROM awa_fast.standby_claims m
LEFT JOIN LATERAL (
    SELECT * FROM awa_fast.jobs_hot r
    WHERE r.id = m.job_id AND r.run_lease = m.run_lease AND r.state = 'running'
      AND r.host_id = %(host_id)s
    LIMIT 1
) j ON true
WHERE m.host_id = %(host_id)s
ORDER BY j.priority, j.run_at, j.id;

-- name: standby_forget
-- Spent standby claims, deleted once their jobs have started (standby_collect). Only
-- standby_claims is written (UNLOGGED): nothing to flush.
DELETE FROM awa_fast.standby_claims WHERE id = ANY(%(ids)s::bigint[]);

-- name: job_cancelled_attempts
-- Which of these attempts (ids, and a map of id -> lease) an admin cancel ended
-- (job_cancel). Anyone may NOTIFY awa_fast_cancel: a runner flags only what this confirms.
SELECT d.id, d.run_lease FROM awa_fast.jobs_done d
WHERE d.id = ANY(%(ids)s::bigint[]) AND d.state = 'cancelled'
  AND d.run_lease = (%(leases)s::jsonb ->> d.id::text)::bigint;

-- name: standby_offer
-- A standby claim for each queue named, with the queue's deadline on this host.
INSERT INTO awa_fast.standby_claims (queue, host_id, deadline_s)
SELECT o.queue, %(host_id)s, o.deadline_s
FROM unnest(%(queues)s::text[], %(deadlines)s::float8[]) AS o(queue, deadline_s);

-- name: standby_withdraw
-- This host's waiting standby claims, deleted as it stops; one an inserting transaction
-- holds is skipped (its job, if that transaction commits, is collected after this).
DELETE FROM awa_fast.standby_claims
WHERE id IN (
    SELECT id FROM awa_fast.standby_claims
    WHERE host_id = %(host_id)s AND job_id IS NULL
    FOR UPDATE SKIP LOCKED
);

-- name: job_complete_many
-- The hot path: every plain completion of a batch in one statement, moving each row from
-- jobs_hot to jobs_done. A completed job keeps no progress: progress is a checkpoint for a
-- retry to resume from (the Awa SDK's), and no retry follows. Like every statement on a batch of attempts, it reaches the rows
-- by the primary key alone (`id = ANY`, which visits and locks them in id order) and looks
-- each attempt's lease up in a jsonb map of id -> lease: there is no join for the generic
-- plan to turn inside out. Joined to unnest(ids, leases), the plan puts all of jobs_hot
-- outside the batch when the statistics were taken on an empty table, as they often are
-- between bursts (benches/RESULTS.md, "Design measurements"). A map holds one lease per
-- id: a batch with two attempts of one job runs one statement each.
WITH finished AS (
    DELETE FROM awa_fast.jobs_hot j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state = 'running'
      AND j.run_lease = (%(leases)s::jsonb ->> j.id::text)::bigint
    RETURNING j.*
)
-- include: into_done
SELECT id, kind, queue, args, 'completed', priority, attempt, max_attempts, run_at,
       created_at, attempted_at, now(), run_lease, errors, metadata, tags, NULL,
       unique_key, callback_id, callback_result, deadline_seconds, parent_id
FROM finished
RETURNING id;

-- name: job_transition_many
-- Every other outcome, mixed in one batch, its rows reached as job_complete_many reaches
-- them. Each attempt's outcome is an object in the `outcomes` map: id -> {state, dead,
-- delay, and error, progress, metadata, callback_id when set}.
-- Rows that can still run here (waiting_external, and available for a claim given back
-- unstarted) are updated in place, so a callback answered meanwhile follows the update.
-- The others move: finished ones (completed, failed, cancelled) to jobs_done, those due
-- later (retryable, scheduled) to jobs_deferred, dead ones to the dlq. Snooze and a
-- given-back claim return their attempt.
-- The rows that stay are locked before those that move, each in id order. Another
-- statement over some of the same rows (a heartbeat, a rescue) may still deadlock with
-- this one; the committer then finalizes each job directly, and a heartbeat or rescue runs
-- again at its next interval.
WITH stay AS (
    UPDATE awa_fast.jobs_hot j
    SET (state, attempt, heartbeat_at, deadline_at, errors, progress, metadata, callback_id,
         callback_timeout_at) = (
        SELECT (o ->> 'state')::awa_fast.job_state,
               CASE WHEN o ->> 'state' = 'available' THEN j.attempt - 1 ELSE j.attempt END,
               NULL::timestamptz, NULL::timestamptz,
               CASE WHEN o ? 'error' THEN j.errors || jsonb_build_array(o -> 'error')
                    ELSE j.errors END,
               COALESCE(o -> 'progress', j.progress),
               j.metadata || COALESCE(o -> 'metadata', '{}'),
               COALESCE((o ->> 'callback_id')::uuid, j.callback_id),
               CASE WHEN o ->> 'state' = 'waiting_external'
                    THEN now() + make_interval(secs => (o ->> 'delay')::float8)
                    ELSE j.callback_timeout_at END
        FROM (SELECT %(outcomes)s::jsonb -> j.id::text AS o) AS outcome
    )
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state = 'running'
      AND j.run_lease = (%(leases)s::jsonb ->> j.id::text)::bigint
      AND %(outcomes)s::jsonb -> j.id::text @> ANY(ARRAY[
          '{"state": "waiting_external", "dead": false}',
          '{"state": "available", "dead": false}']::jsonb[])
    RETURNING j.id, j.state, j.attempt, j.run_at
),
moved AS (
    DELETE FROM awa_fast.jobs_hot j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state = 'running'
      AND j.run_lease = (%(leases)s::jsonb ->> j.id::text)::bigint
      AND NOT %(outcomes)s::jsonb -> j.id::text @> ANY(ARRAY[
          '{"state": "waiting_external", "dead": false}',
          '{"state": "available", "dead": false}']::jsonb[])
    RETURNING j.*, %(outcomes)s::jsonb -> j.id::text AS outcome
),
settled AS (
    SELECT id, kind, queue, args, priority, max_attempts, run_at, created_at, attempted_at,
           run_lease, tags, unique_key, callback_id, callback_timeout_at, callback_result,
           deadline_seconds, parent_id,
           (outcome ->> 'state')::awa_fast.job_state AS state,
           (outcome ->> 'dead')::boolean AS dead,
           (outcome ->> 'delay')::float8 AS delay_s,
           CASE WHEN outcome ->> 'state' = 'scheduled' THEN attempt - 1 ELSE attempt END
               AS attempt,
           CASE WHEN outcome ? 'error' THEN errors || jsonb_build_array(outcome -> 'error')
                ELSE errors END AS errors,
           -- none kept on completion, as in job_complete_many
           CASE WHEN outcome ->> 'state' = 'completed' THEN NULL
                ELSE COALESCE(outcome -> 'progress', progress) END AS progress,
           metadata || COALESCE(outcome -> 'metadata', '{}') AS metadata,
           COALESCE(outcome -> 'error' ->> 'error', 'failed') AS dlq_reason
    FROM moved
),
finished AS (
    -- include: into_done
    SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
           attempted_at, now(), run_lease, errors, metadata, tags, progress, unique_key,
           callback_id, callback_result, deadline_seconds, parent_id
    FROM settled WHERE state IN ('completed', 'failed', 'cancelled') AND NOT dead
    RETURNING id, state, attempt, run_at
),
deferred AS (
    INSERT INTO awa_fast.jobs_deferred (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
        attempted_at, finalized_at, run_lease, errors, metadata, tags, progress, unique_key,
        callback_id, callback_timeout_at, callback_result, deadline_seconds, parent_id)
    SELECT id, kind, queue, args, state, priority, attempt, max_attempts,
           now() + make_interval(secs => delay_s), created_at, attempted_at, now(), run_lease,
           errors, metadata, tags, progress, unique_key, callback_id, callback_timeout_at,
           callback_result, deadline_seconds, parent_id
    FROM settled WHERE state IN ('retryable', 'scheduled')
    RETURNING id, state, attempt, run_at
),
buried AS (
    -- include: into_dlq
    SELECT id, kind, queue, args, 'failed', priority, attempt, max_attempts, run_at,
           created_at, attempted_at, now(), run_lease, errors, metadata, tags, progress,
           unique_key, deadline_seconds, parent_id, dlq_reason
    FROM settled WHERE dead
    RETURNING id, state, attempt, run_at
)
SELECT id, state::text AS state, attempt, run_at FROM stay
UNION ALL
SELECT id, state::text AS state, attempt, run_at FROM finished
UNION ALL
SELECT id, state::text AS state, attempt, run_at FROM deferred
UNION ALL
SELECT id, state::text AS state, attempt, run_at FROM buried;

-- name: job_promote_due
-- Move due scheduled/retryable jobs back into the claimable table; the insert trigger on
-- jobs_hot sends one NOTIFY per queue for the whole batch.
WITH due AS (
    DELETE FROM awa_fast.jobs_deferred
    WHERE id IN (
        SELECT id FROM awa_fast.jobs_deferred
        WHERE run_at <= now()
        ORDER BY run_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    )
    RETURNING *
)
INSERT INTO awa_fast.jobs_hot (
    id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
    attempted_at, finalized_at, heartbeat_at, deadline_at, run_lease, errors, metadata,
    tags, progress, unique_key, callback_id, callback_timeout_at, callback_result,
    deadline_seconds, parent_id)
SELECT id, kind, queue, args, 'available', priority, attempt, max_attempts, run_at, created_at,
       attempted_at, NULL, NULL, NULL, run_lease, errors, metadata,
       tags, progress, unique_key, callback_id, callback_timeout_at, callback_result,
       deadline_seconds, parent_id
FROM due
RETURNING id;

-- name: job_next_due_in
-- Seconds until the earliest scheduled/retryable job is due (NULL when none waits).
SELECT EXTRACT(EPOCH FROM min(run_at) - clock_timestamp())::float8 FROM awa_fast.jobs_deferred;

-- name: job_register_callback
-- A handler asked for a callback id: it is on the row before the handler can hand it out,
-- so an external system that answers before the handler returns (and before its attempt
-- parks) finds the job. Its CEL expressions (resolve_callback's; NULL for none) replace any
-- an earlier callback of the attempt had. No row: the attempt no longer owns it.
UPDATE awa_fast.jobs_hot
SET callback_id = %(callback_id)s::uuid,
    callback_timeout_at = now() + make_interval(secs => %(timeout_s)s),
    callback_rules = %(rules)s::jsonb
WHERE id = %(id)s AND run_lease = %(lease)s AND state = 'running'
RETURNING id;

-- name: job_save_progress
-- A handler flushed its progress (and metadata updates) before its outcome. No row: the
-- attempt no longer owns its job.
UPDATE awa_fast.jobs_hot
SET progress = %(progress)s::jsonb, metadata = metadata || %(metadata)s::jsonb
WHERE id = %(id)s AND run_lease = %(lease)s AND state = 'running'
RETURNING id;

-- name: job_heartbeat_many
-- One heartbeat for every attempt a host runs, its rows reached as job_complete_many
-- reaches them (the map holds each job's newest lease the host runs: an older one cannot
-- own the row). It returns the attempts the host still owns (a slot missing from the result
-- was cancelled or rescued) and whether each is past its deadline (so the host can set its
-- cancel flag). An attempt whose handler waits for its callback (waiting_external with a
-- heartbeat, see callbacks.sql) is still owned, and never overdue while it waits; a parked
-- one (no heartbeat: its handler returned WaitForCallback or was cut short) is not, and
-- must not look held again.
-- It stamps them with the host's current id too: a host the leader took for dead, and
-- that registered again, moves its attempts to its new row here. An attempt claimed ahead
-- and still waiting in its worker (`waiting`) has its deadline moved to a full deadline from
-- now, its queue's (`deadlines`, by queue) unless the job has its own: its time to run
-- starts when it starts. It is marked held (held_lease, migration 0026) and every other
-- one unmarked: if this host is found gone, its held attempts are given back uncharged.
-- An attempt with no deadline (NULL: its queue has none, nor the job) is never overdue:
-- `overdue` is false for it, never NULL, which the host would take for an attempt it no
-- longer owns.
UPDATE awa_fast.jobs_hot j
SET heartbeat_at = now(), host_id = %(host_id)s,
    deadline_at = CASE WHEN j.id = ANY(%(waiting)s::bigint[]) AND j.state = 'running'
        THEN now() + make_interval(secs => COALESCE(
            j.deadline_seconds, (%(deadlines)s::jsonb ->> j.queue)::float8))
        ELSE j.deadline_at END,
    held_lease = CASE WHEN j.id = ANY(%(waiting)s::bigint[]) AND j.state = 'running'
        THEN j.run_lease END
WHERE j.id = ANY(%(ids)s::bigint[])
  AND (j.state = 'running' OR (j.state = 'waiting_external' AND j.heartbeat_at IS NOT NULL))
  AND j.run_lease = (%(leases)s::jsonb ->> j.id::text)::bigint
RETURNING j.id, j.run_lease, (j.state = 'running' AND j.deadline_at < now()) IS TRUE AS overdue;

-- name: host_register
-- `queues`: the settings of the queues this host serves (migration 0021). A host with no
-- session of its own (behind a transaction pooler, without a direct URL) holds no lock.
INSERT INTO awa_fast.hosts (name, queues) VALUES (%(name)s, %(queues)s) RETURNING id;

-- fragment: host_lock
-- A host's session advisory lock (migration 0026), in the two-int form: awa-fast's
-- namespace ("awaf") and the id of the host's row, `id` where it stands, read in pg_locks
-- as classid and objid. Host ids past 2^31 wrap, long after their first holder is gone.
1635213670, mod(id, 2147483648)::integer

-- name: host_register_holding
-- A host's row, and its lock on this session, in one statement: the row is never seen
-- without its lock. Nobody can hold a new row's lock: the leader tries only rows it sees.
WITH registered AS (
    INSERT INTO awa_fast.hosts (name, queues, holds_lock)
    VALUES (%(name)s, %(queues)s, true)
    RETURNING id
)
SELECT id, pg_advisory_lock(
    -- include: host_lock
) FROM registered;

-- name: host_heartbeat
-- No row: the leader took this host for dead and rescued its attempts.
UPDATE awa_fast.hosts SET heartbeat_at = now() WHERE id = %(id)s RETURNING id;

-- name: host_relock
-- host_heartbeat for a host whose session does not hold its lock (a new session after the
-- last one was lost, or one whose lock an old session still held): the lock is tried
-- first, and the row says whether it is held now. A lock another session holds is not
-- waited for: until that session ends, this host is found by its heartbeat alone.
UPDATE awa_fast.hosts
SET holds_lock = pg_try_advisory_lock(
        -- include: host_lock
    ),
    heartbeat_at = now()
WHERE id = %(id)s
RETURNING holds_lock;

-- name: host_unlock
-- The lock of this host's last row, which the leader took for dead, let go on this
-- session before the host registers again.
SELECT pg_advisory_unlock(
    -- include: host_lock
) FROM (SELECT %(id)s::bigint AS id) AS h;

-- name: host_forget
DELETE FROM awa_fast.hosts WHERE id = %(id)s;

-- fragment: insert_rows
-- The jobs of job_insert_many and job_insert_scheduled, given as parallel arrays: `d`.
-- A follow-up's parent_id names the job whose transition inserted it (migration 0022).
WITH d AS (
    SELECT * FROM unnest(
        %(ids)s::bigint[], %(kinds)s::text[], %(queues)s::text[], %(args)s::jsonb[],
        %(priorities)s::smallint[], %(max_attempts)s::smallint[], %(run_ats)s::timestamptz[],
        %(tags)s::jsonb[], %(metadata)s::jsonb[], %(unique_keys)s::bytea[],
        %(deadlines)s::float8[], %(parents)s::bigint[]
    ) AS d(id, kind, queue, args, priority, max_attempts, run_at, tags, metadata, unique_key,
           deadline_seconds, parent_id)
)

-- fragment: insert_scheduled
-- The rows of `d` (insert_rows) written to jobs_deferred as scheduled, for a WHERE to pick.
INSERT INTO awa_fast.jobs_deferred (id, kind, queue, args, state, priority, max_attempts,
                                    run_at, tags, metadata, unique_key, deadline_seconds,
                                    parent_id)
SELECT COALESCE(id, nextval('awa_fast.job_id_seq')), kind, queue, args, 'scheduled',
       priority, max_attempts, run_at,
       ARRAY(SELECT jsonb_array_elements_text(d.tags)), metadata, unique_key,
       deadline_seconds, parent_id
FROM d

-- name: job_insert_many
-- Insert rows given as parallel arrays; rows due now go to jobs_hot, future rows to
-- jobs_deferred as scheduled. A unique job's id comes from the caller (nextval) so its
-- claim can be taken first; other ids may be NULL and are drawn here.
-- include: insert_rows
, hot AS (
    INSERT INTO awa_fast.jobs_hot (id, kind, queue, args, state, priority, max_attempts, run_at,
                                   tags, metadata, unique_key, deadline_seconds, parent_id)
    SELECT COALESCE(id, nextval('awa_fast.job_id_seq')), kind, queue, args, 'available',
           priority, max_attempts, COALESCE(run_at, now()),
           ARRAY(SELECT jsonb_array_elements_text(d.tags)), metadata, unique_key,
           deadline_seconds, parent_id
    FROM d WHERE run_at IS NULL OR run_at <= now()
    RETURNING *
),
deferred AS (
    -- include: insert_scheduled
    WHERE run_at > now()
    RETURNING *
)
SELECT * FROM hot
UNION ALL
SELECT * FROM deferred;

-- name: job_insert_scheduled
-- job_insert_many for the bridge, as the Awa SDK's bridge inserts: a job given a run_at
-- starts scheduled in jobs_deferred, due or not, for the promoter to make available.
-- include: insert_rows
-- include: insert_scheduled
RETURNING *;

-- name: job_insert_uniform
-- A batch of args of one kind under one set of options, due now, none unique, in one
-- statement: the args come as one text of JSON objects separated by U+001E (which JSON
-- text never holds raw), so the client sends one parameter, not an array it must build,
-- and gets the ids back in the same round trip. Ids are drawn in the args' order, and the
-- ORDER BY keeps the inserted rows, and so RETURNING, in that order.
INSERT INTO awa_fast.jobs_hot (id, kind, queue, args, priority, max_attempts, tags, metadata,
                               deadline_seconds)
SELECT nextval('awa_fast.job_id_seq'), %(kind)s, %(queue)s, a.args::jsonb,
       %(priority)s::smallint, %(max_attempts)s::smallint, %(tags)s::text[],
       %(metadata)s::jsonb, %(deadline)s::float8
FROM unnest(string_to_array(%(args)s, E'\x1e')) WITH ORDINALITY AS a(args, n)
ORDER BY a.n
RETURNING id;

-- name: job_insert_pack
-- A uniform batch of 64 to 512 jobs (the args as in job_insert_uniform) as one pack
-- (migration 0016), its args stored as they came. Ids are drawn in the args' order.
WITH drawn AS (
    SELECT ARRAY(SELECT nextval('awa_fast.job_id_seq') FROM generate_series(1, %(count)s))
        AS ids
)
INSERT INTO awa_fast.job_packs (kind, queue, priority, max_attempts, tags, metadata,
                                deadline_seconds, ids, args, size, next_id)
SELECT %(kind)s, %(queue)s, %(priority)s::smallint, %(max_attempts)s::smallint,
       %(tags)s::text[], %(metadata)s::jsonb, %(deadline)s::float8, d.ids, %(args)s,
       %(count)s, d.ids[1]
FROM drawn d
RETURNING ids;

-- name: job_insert_packed
-- A uniform batch of more than 512 jobs as packs: one row per up to 512 jobs, the batch
-- split evenly. Ids are drawn in the args' order; the packs come back with them.
WITH args AS (
    SELECT a.args, a.n, nextval('awa_fast.job_id_seq') AS id
    FROM unnest(string_to_array(%(args)s, E'\x1e')) WITH ORDINALITY AS a(args, n)
    ORDER BY a.n
)
INSERT INTO awa_fast.job_packs (kind, queue, priority, max_attempts, tags, metadata,
                                deadline_seconds, ids, args, size, next_id)
SELECT %(kind)s, %(queue)s, %(priority)s::smallint, %(max_attempts)s::smallint,
       %(tags)s::text[], %(metadata)s::jsonb, %(deadline)s::float8,
       array_agg(a.id ORDER BY a.n), string_agg(a.args, E'\x1e' ORDER BY a.n), count(*),
       min(a.id)
FROM args a
GROUP BY (a.n - 1) * ((%(count)s + 511) / 512) / %(count)s
RETURNING ids;

-- name: job_next_ids
SELECT nextval('awa_fast.job_id_seq') FROM generate_series(1, %(count)s);

-- name: job_get
SELECT * FROM awa_fast.job_rows WHERE id = %(id)s
UNION ALL
SELECT * FROM awa_fast.packed_jobs(ARRAY[%(id)s::bigint]);

-- name: job_get_many
SELECT * FROM awa_fast.job_rows WHERE id = ANY(%(ids)s::bigint[])
UNION ALL
SELECT * FROM awa_fast.packed_jobs(%(ids)s::bigint[]);

-- name: job_lock_running
-- The follow-up path reads the trigger's row under lock before its transition, so `make`
-- sees exactly the attempt it is finishing.
SELECT * FROM awa_fast.jobs_hot
WHERE id = %(id)s AND run_lease = %(lease)s AND state = 'running'
FOR UPDATE;

-- name: unique_claim_take
-- Take the key for job_id unless a live job (one in the claim's states) holds it: returns
-- job_id when taken, else the holder's id (migration 0011 says why this is a function).
SELECT awa_fast.unique_claim_take(
    %(key)s, %(job_id)s, %(states)s::awa_fast.job_state[]
) AS holder;

-- name: job_rescue_many
-- Attempts that cannot finish on their own — their process died, their host stopped
-- heartbeating, their deadline passed, their callback timed out — leave `from_state`:
-- retryable with exponential backoff computed here, or, when the attempt was the last one,
-- failed (or dead-lettered, for queues with a DLQ): a rescue never grants an extra run. The
-- error entry records the lost attempt, with the reason from the `messages` map (id ->
-- text). The rows are reached as job_complete_many reaches them.
WITH moved AS (
    DELETE FROM awa_fast.jobs_hot j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state = %(from_state)s::awa_fast.job_state
      AND j.run_lease = (%(leases)s::jsonb ->> j.id::text)::bigint
    RETURNING j.*,
              j.attempt >= j.max_attempts AS exhausted,
              (%(dlq_all)s AND j.queue <> ALL(%(no_dlq)s::text[]))
                  OR j.queue = ANY(%(dlq)s::text[]) AS to_dlq,
              j.errors || jsonb_build_array(jsonb_build_object(
                  'error', %(messages)s::jsonb -> j.id::text, 'attempt', j.attempt,
                  'at', now())) AS new_errors
),
failed AS (
    -- include: into_done
    SELECT id, kind, queue, args, 'failed', priority, attempt, max_attempts, run_at,
           created_at, attempted_at, now(), run_lease, new_errors, metadata, tags, progress,
           unique_key, callback_id, callback_result, deadline_seconds, parent_id
    FROM moved WHERE exhausted AND NOT to_dlq
    RETURNING id, state, attempt, run_at
),
deferred AS (
    INSERT INTO awa_fast.jobs_deferred (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
        attempted_at, finalized_at, run_lease, errors, metadata, tags, progress, unique_key,
        callback_id, callback_timeout_at, callback_result, deadline_seconds, parent_id)
    SELECT id, kind, queue, args, 'retryable', priority, attempt, max_attempts,
           now() + make_interval(secs => least(%(base)s * power(2, attempt - 1), %(max)s)
                                         * (1 + random() * %(jitter)s)),
           created_at, attempted_at, now(), run_lease, new_errors, metadata, tags, progress,
           unique_key, callback_id, callback_timeout_at, callback_result, deadline_seconds,
           parent_id
    FROM moved WHERE NOT exhausted
    RETURNING id, state, attempt, run_at
),
buried AS (
    -- include: into_dlq
    SELECT id, kind, queue, args, 'failed', priority, attempt, max_attempts, run_at,
           created_at, attempted_at, now(), run_lease, new_errors, metadata, tags, progress,
           unique_key, deadline_seconds, parent_id, new_errors -> -1 ->> 'error'
    FROM moved WHERE exhausted AND to_dlq
    RETURNING id, state, attempt, run_at
)
SELECT id, state::text AS state, attempt, run_at FROM failed
UNION ALL
SELECT id, state::text AS state, attempt, run_at FROM deferred
UNION ALL
SELECT id, state::text AS state, attempt, run_at FROM buried;

-- name: dlq_get_many
SELECT * FROM awa_fast.dlq WHERE id = ANY(%(ids)s::bigint[]);
