-- Liveness per host, not per running row: a claim no longer adds an index entry.
--
-- A claim is never a HOT update (it changes `state`, which the claim index's predicate
-- names), so every index that holds running rows gets an entry per claimed job:
-- jobs_hot_heartbeat cost the claim 1-2.6 us a job, about a tenth of its backend's CPU.
-- Each supervisor now has a row in awa_fast.hosts whose heartbeat it refreshes, and each
-- claim (and each per-attempt heartbeat) stamps its rows with the host's id. The leader
-- finds a dead host by its row and reads jobs_hot once for that host's attempts, a rare
-- event; the per-row sweeps (an attempt whose own heartbeat went stale, one past its
-- deadline) remain as a slow backstop over the whole table.
CREATE TABLE awa_fast.hosts (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);
-- On every job table, so their rows keep one shape (statements union and move them whole);
-- only jobs_hot's running rows carry a value.
ALTER TABLE awa_fast.jobs_hot ADD COLUMN host_id bigint;
ALTER TABLE awa_fast.jobs_deferred ADD COLUMN host_id bigint;
ALTER TABLE awa_fast.jobs_done ADD COLUMN host_id bigint;
DROP INDEX awa_fast.jobs_hot_heartbeat;
