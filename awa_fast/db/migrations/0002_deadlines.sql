-- Per-job deadline override (seconds per attempt); NULL means the queue's deadline.
ALTER TABLE awa_fast.jobs_hot ADD COLUMN deadline_seconds double precision;
ALTER TABLE awa_fast.jobs_deferred ADD COLUMN deadline_seconds double precision;
ALTER TABLE awa_fast.dlq ADD COLUMN deadline_seconds double precision;

CREATE INDEX jobs_hot_waiting ON awa_fast.jobs_hot (callback_timeout_at)
    WHERE state = 'waiting_external';
CREATE INDEX jobs_hot_deadline ON awa_fast.jobs_hot (deadline_at)
    WHERE state = 'running';
