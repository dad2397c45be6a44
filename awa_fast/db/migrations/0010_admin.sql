-- Admin reads of the history, and who paused a queue.
--
-- queue_stats counts failed and cancelled jobs, and retry_failed, discard_failed and the
-- moves of failed jobs to the dead-letter queue look them up, in jobs_done, where completed
-- jobs far outnumber them: each read the whole retention window. This index holds failed
-- and cancelled rows only, so a completion, the hot path, adds no entry to it. (Building it
-- reads jobs_done once and holds off finishes meanwhile: seconds for millions of rows.)
CREATE INDEX jobs_done_failed ON awa_fast.jobs_done (state, queue)
    WHERE state IN ('failed', 'cancelled');

-- pause_queue(queue, paused_by=...) records who paused it, as the Awa SDK's queue_meta does.
ALTER TABLE awa_fast.queue_meta ADD COLUMN paused_by text;
