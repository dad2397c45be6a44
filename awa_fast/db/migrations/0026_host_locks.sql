-- A dead host is seen when its session ends, not only when its heartbeat goes stale.
--
-- Each host takes a session advisory lock, in the two-int form (awa-fast's namespace and
-- its row's id: pg_locks' classid and objid), on the connection its heartbeats use, in
-- the statement that inserts its row: the row is never visible without its lock. Postgres
-- releases the lock the moment that session ends, which a killed host's does at once. The
-- leader tries each host's lock on every rescue pass; one it can take is a host gone
-- (awa_fast/db/sql/maintenance.sql, host_take_dead). A host cut off or frozen keeps its
-- session open, and is still found by its stale heartbeat.
--
-- holds_lock: the host held its lock when it last wrote its row. Hosts of an earlier
-- version take none and leave it false: the leader finds them by heartbeat alone. A host
-- that reconnected and could not take its lock yet (its old session not yet ended) says
-- false too, until it has it again.
ALTER TABLE awa_fast.hosts ADD COLUMN holds_lock boolean NOT NULL DEFAULT false;

-- held_lease: the run_lease of a running attempt that its host held claimed and not yet
-- started (prefetched) at its last heartbeat; anything else for a started one. A host
-- found gone by its lock has its held attempts given back with their attempt returned,
-- and the others rescued. No claim writes it: the heartbeat's statement, which writes
-- each running row anyway, sets it. A new attempt has a new lease, so an old mark never
-- names it.
--
-- On every job table, as host_id is (0008): statements move rows between them whole. A
-- nullable column without a default is added without rewriting a table.
ALTER TABLE awa_fast.jobs_hot ADD COLUMN held_lease bigint;
ALTER TABLE awa_fast.jobs_deferred ADD COLUMN held_lease bigint;
ALTER TABLE awa_fast.jobs_done ADD COLUMN held_lease bigint;
