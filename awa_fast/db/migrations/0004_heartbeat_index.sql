-- The index of running attempts is keyed on what only running attempts have.
--
-- jobs_hot_running was partial on `state = 'running'`, the very predicate of every
-- statement that finishes an attempt, so the planner could reach a batch's rows through
-- it: on a fresh or small table it chose to scan every running row (and every dead
-- version of one since the last vacuum) for each id, instead of the primary key. A claim
-- sets heartbeat_at and every transition away from running clears it, so an index partial
-- on `heartbeat_at IS NOT NULL` holds the same rows, serves the heartbeat and deadline
-- sweeps (whose conditions imply it), and is out of reach of statements that match
-- (id, run_lease, state).
DROP INDEX awa_fast.jobs_hot_running;
CREATE INDEX jobs_hot_heartbeat ON awa_fast.jobs_hot (heartbeat_at)
    WHERE heartbeat_at IS NOT NULL;
