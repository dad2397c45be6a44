-- A follow-up names the job whose transition inserted it (awa_fast/runtime/followups.py):
-- parent_id, NULL for a job inserted any other way. The dashboard's job page lists a job's
-- follow-ups (job_list_followups) and links a follow-up to its parent.
--
-- On every job table and the dead-letter queue, as host_id is (0008): the statements that
-- move a row name it, so the link survives retries, scheduling and finishing. No foreign
-- key: retention or a purge may delete a parent before its follow-ups. A nullable column
-- without a default is added without rewriting a table.
ALTER TABLE awa_fast.jobs_hot ADD COLUMN parent_id bigint;
ALTER TABLE awa_fast.jobs_deferred ADD COLUMN parent_id bigint;
ALTER TABLE awa_fast.jobs_done ADD COLUMN parent_id bigint;
ALTER TABLE awa_fast.dlq ADD COLUMN parent_id bigint;

-- A job's follow-ups, wherever each is. Only follow-ups have entries, and no statement
-- changes parent_id: a job inserted by a user costs these indexes nothing.
CREATE INDEX jobs_hot_parent ON awa_fast.jobs_hot (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX jobs_deferred_parent ON awa_fast.jobs_deferred (parent_id)
    WHERE parent_id IS NOT NULL;
CREATE INDEX jobs_done_parent ON awa_fast.jobs_done (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX dlq_parent ON awa_fast.dlq (parent_id) WHERE parent_id IS NOT NULL;

-- The views show it, appended to the columns they had (0016); host_id and callback_rules
-- stay out of them, as before.
CREATE OR REPLACE VIEW awa_fast.job_rows AS
    SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
           attempted_at, finalized_at, heartbeat_at, deadline_at, run_lease, errors,
           metadata, tags, progress, unique_key, callback_id, callback_timeout_at,
           callback_result, deadline_seconds, parent_id
    FROM (
        SELECT * FROM awa_fast.jobs_hot
        UNION ALL
        SELECT * FROM awa_fast.jobs_deferred
        UNION ALL
        SELECT * FROM awa_fast.jobs_done
    ) j;

-- A packed job is never a follow-up (follow-ups are inserted one by one).
CREATE OR REPLACE FUNCTION awa_fast.pack_jobs(p awa_fast.job_packs)
RETURNS SETOF awa_fast.job_rows
LANGUAGE sql IMMUTABLE AS $$
    SELECT j.id, p.kind, p.queue, j.args::jsonb, 'available'::awa_fast.job_state, p.priority,
           0::smallint, p.max_attempts, p.run_at, p.created_at, NULL::timestamptz,
           NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, 0::bigint, '[]'::jsonb,
           p.metadata, p.tags, NULL::jsonb, NULL::bytea, NULL::uuid, NULL::timestamptz,
           NULL::jsonb, p.deadline_seconds, NULL::bigint
    FROM awa_fast.pack_slice(p, p.size) j
$$;

CREATE OR REPLACE VIEW awa_fast.jobs AS
    SELECT * FROM awa_fast.job_rows
    UNION ALL
    SELECT j.* FROM awa_fast.job_packs p, awa_fast.pack_jobs(p) j;
