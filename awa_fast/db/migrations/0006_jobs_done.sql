-- Finished jobs (completed, failed, cancelled) live in a table of their own.
--
-- jobs_hot kept each finished job until retention deleted it (24 h by default), so its
-- primary key held a day of jobs, and every VACUUM of jobs_hot, which the leader runs
-- every few seconds under load, read that whole index and the index of finished rows:
-- 65 ms a VACUUM with an empty history, 135 ms with 3 million finished rows beside a
-- 25k jobs/s load, and growing with retention. A finish now moves the row (DELETE from
-- jobs_hot, INSERT here) instead of writing a third version of it in place: the same
-- work per job, measured, while jobs_hot holds only work that can still run.
-- jobs_done is append-only but for retention and retry, so it is packed full.
CREATE TABLE awa_fast.jobs_done (
    LIKE awa_fast.jobs_hot INCLUDING DEFAULTS,
    PRIMARY KEY (id),
    CONSTRAINT jobs_done_state CHECK (state IN ('completed', 'failed', 'cancelled')),
    CONSTRAINT jobs_done_priority CHECK (priority BETWEEN 1 AND 4),
    CONSTRAINT jobs_done_max_attempts CHECK (max_attempts >= 1)
);
ALTER TABLE awa_fast.jobs_done ALTER COLUMN state SET DEFAULT 'completed';
-- Retention deletes by finalized_at, per state and queue.
CREATE INDEX jobs_done_finalized ON awa_fast.jobs_done (finalized_at);

WITH finished AS (
    DELETE FROM awa_fast.jobs_hot
    WHERE state IN ('completed', 'failed', 'cancelled')
    RETURNING *
)
INSERT INTO awa_fast.jobs_done SELECT * FROM finished;

DROP INDEX awa_fast.jobs_hot_finalized;
ALTER TABLE awa_fast.jobs_hot DROP CONSTRAINT jobs_hot_state;
ALTER TABLE awa_fast.jobs_hot ADD CONSTRAINT jobs_hot_state
    CHECK (state IN ('available', 'running', 'waiting_external'));

CREATE OR REPLACE VIEW awa_fast.jobs AS
    SELECT * FROM awa_fast.jobs_hot
    UNION ALL
    SELECT * FROM awa_fast.jobs_deferred
    UNION ALL
    SELECT * FROM awa_fast.jobs_done;
