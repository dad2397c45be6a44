-- awa-fast schema, version 1.
--
-- Storage is split by what can still happen to a job: `jobs_hot` holds what can be
-- claimed or is running (and finished rows until retention removes them); `jobs_deferred` holds
-- scheduled and retryable jobs until promotion moves them back. Keeping not-yet-due rows
-- out of the hot table keeps the claim index small and the claim scan short.

CREATE TYPE awa_fast.job_state AS ENUM (
    'scheduled', 'available', 'running', 'waiting_external',
    'retryable', 'completed', 'failed', 'cancelled'
);

CREATE SEQUENCE awa_fast.job_id_seq AS bigint;

CREATE TABLE awa_fast.jobs_hot (
    id                  bigint PRIMARY KEY DEFAULT nextval('awa_fast.job_id_seq'),
    kind                text NOT NULL,
    queue               text NOT NULL,
    args                jsonb NOT NULL DEFAULT '{}',
    state               awa_fast.job_state NOT NULL DEFAULT 'available',
    priority            smallint NOT NULL DEFAULT 2,
    attempt             smallint NOT NULL DEFAULT 0,
    max_attempts        smallint NOT NULL DEFAULT 25,
    run_at              timestamptz NOT NULL DEFAULT now(),
    created_at          timestamptz NOT NULL DEFAULT now(),
    attempted_at        timestamptz,
    finalized_at        timestamptz,
    heartbeat_at        timestamptz,
    deadline_at         timestamptz,
    run_lease           bigint NOT NULL DEFAULT 0,
    errors              jsonb NOT NULL DEFAULT '[]',
    metadata            jsonb NOT NULL DEFAULT '{}',
    tags                text[] NOT NULL DEFAULT '{}',
    progress            jsonb,
    unique_key          bytea,
    callback_id         uuid,
    callback_timeout_at timestamptz,
    callback_result     jsonb,
    CONSTRAINT jobs_hot_state CHECK (state NOT IN ('scheduled', 'retryable')),
    CONSTRAINT jobs_hot_priority CHECK (priority BETWEEN 1 AND 4),
    CONSTRAINT jobs_hot_max_attempts CHECK (max_attempts >= 1)
) WITH (fillfactor = 80);

-- The claim scan: only available rows, in claim order, per queue.
CREATE INDEX jobs_hot_claim ON awa_fast.jobs_hot (queue, priority, run_at, id)
    WHERE state = 'available';
-- Heartbeat/deadline rescue and callback timeouts look at running/parked rows only.
CREATE INDEX jobs_hot_running ON awa_fast.jobs_hot (heartbeat_at)
    WHERE state = 'running';
CREATE UNIQUE INDEX jobs_hot_callback ON awa_fast.jobs_hot (callback_id)
    WHERE callback_id IS NOT NULL;
CREATE INDEX jobs_hot_finalized ON awa_fast.jobs_hot (finalized_at)
    WHERE state IN ('completed', 'failed', 'cancelled');

CREATE TABLE awa_fast.jobs_deferred (
    LIKE awa_fast.jobs_hot INCLUDING DEFAULTS,
    PRIMARY KEY (id),
    CONSTRAINT jobs_deferred_state CHECK (state IN ('scheduled', 'retryable')),
    CONSTRAINT jobs_deferred_priority CHECK (priority BETWEEN 1 AND 4),
    CONSTRAINT jobs_deferred_max_attempts CHECK (max_attempts >= 1)
);
ALTER TABLE awa_fast.jobs_deferred ALTER COLUMN state SET DEFAULT 'scheduled';
CREATE INDEX jobs_deferred_due ON awa_fast.jobs_deferred (run_at, id);

-- Everything, wherever it lives: what admin reads and tests look at.
CREATE VIEW awa_fast.jobs AS
    SELECT * FROM awa_fast.jobs_hot
    UNION ALL
    SELECT * FROM awa_fast.jobs_deferred;

-- Dead-letter queue: a failed job moved out of the live tables, with why.
CREATE TABLE awa_fast.dlq (
    LIKE awa_fast.jobs_hot INCLUDING DEFAULTS,
    PRIMARY KEY (id),
    dlq_reason   text NOT NULL,
    dlq_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE awa_fast.queue_meta (
    queue       text PRIMARY KEY,
    paused      boolean NOT NULL DEFAULT false,
    paused_at   timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Unique jobs: one claim per key. A claim whose job has left the key's states is stale and
-- is taken over by the next insert (checked at insert time; nothing on the hot path).
CREATE TABLE awa_fast.unique_claims (
    unique_key  bytea PRIMARY KEY,
    job_id      bigint NOT NULL,
    states      awa_fast.job_state[] NOT NULL
);

-- Wake-ups: one NOTIFY per inserting statement and queue, never one per row. Promotion
-- inserts into jobs_hot too, so promoted jobs wake claimers the same way.
CREATE FUNCTION awa_fast.notify_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    q text;
BEGIN
    FOR q IN SELECT DISTINCT queue FROM inserted WHERE state = 'available' LOOP
        PERFORM pg_notify('awa_fast_jobs', q);
    END LOOP;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_hot_notify
    AFTER INSERT ON awa_fast.jobs_hot
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION awa_fast.notify_inserted();
