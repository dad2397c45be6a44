-- VACUUM never truncates the job tables.
--
-- A VACUUM that finds empty pages at the end of a table cuts them off under an ACCESS
-- EXCLUSIVE lock, which stops every claim, completion and insert of that table until it
-- gives the lock back. Since finished jobs move to jobs_done, a jobs_hot that has caught
-- up with its producers is mostly empty pages, and in the bench's sustained runs the
-- pool stalled for up to 3 s while the leader's or autovacuum's VACUUM truncated it. A
-- queue's tables refill the pages they empty: VACUUM keeps them for reuse instead.
ALTER TABLE awa_fast.jobs_hot SET (vacuum_truncate = false);
ALTER TABLE awa_fast.jobs_deferred SET (vacuum_truncate = false);
ALTER TABLE awa_fast.jobs_done SET (vacuum_truncate = false);
