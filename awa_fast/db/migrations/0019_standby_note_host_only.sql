-- A job started on a standby claim is announced on awa_fast_standby by its host's id
-- alone (migration 0018 sent the job's whole row).
--
-- LISTEN and NOTIFY need no privilege: any role that can connect hears every note, and
-- can send any. A row in the note let such a role read the args and metadata of every job
-- started on a claim; and a runner that started jobs from notes ran whatever a forged one
-- named. Now the note is a hint to the host it names, which reads its spent claims
-- (standby_collect: rows only the application's role can read) and starts their jobs.
-- Identical notes of one transaction are sent once: one collect starts them all.
CREATE OR REPLACE FUNCTION awa_fast.notify_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    q text;
    available bigint;
    started bigint;
    claim record;
    started_id bigint;
    started_lease bigint;
BEGIN
    -- available: the queue's inserted available jobs, counted only if claims wait there
    FOR q, available IN
        SELECT i.queue,
               CASE WHEN EXISTS (
                   SELECT 1 FROM awa_fast.standby_claims s
                   WHERE s.queue = i.queue AND s.job_id IS NULL
               ) THEN count(*) ELSE 0 END
        FROM inserted i WHERE i.state = 'available' GROUP BY i.queue
    LOOP
        started := 0;
        -- Two IFs: a condition with a query in it is a query of its own, even when the
        -- count alone would decide it.
        IF available > 0 THEN
            IF EXISTS (SELECT 1 FROM awa_fast.queue_meta m WHERE m.queue = q AND m.paused)
            THEN
                available := 0;
            END IF;
        END IF;
        IF available > 0 THEN
            FOR claim IN
                SELECT s.id, s.host_id, s.deadline_s FROM awa_fast.standby_claims s
                WHERE s.queue = q AND s.job_id IS NULL
                  AND EXISTS (SELECT 1 FROM awa_fast.hosts h WHERE h.id = s.host_id)
                ORDER BY s.id
                LIMIT available
                FOR UPDATE SKIP LOCKED
            LOOP
                UPDATE awa_fast.jobs_hot j
                SET state = 'running',
                    attempt = j.attempt + 1,
                    run_lease = j.run_lease + 1,
                    attempted_at = clock_timestamp(),
                    heartbeat_at = clock_timestamp(),
                    host_id = claim.host_id,
                    deadline_at = clock_timestamp()
                        + make_interval(secs => COALESCE(j.deadline_seconds, claim.deadline_s)),
                    callback_id = NULL,
                    callback_timeout_at = NULL,
                    callback_rules = NULL
                WHERE j.id = (
                    SELECT i.id FROM inserted i WHERE i.queue = q AND i.state = 'available'
                    ORDER BY i.priority, i.run_at, i.id
                    OFFSET started LIMIT 1
                )
                RETURNING j.id, j.run_lease INTO started_id, started_lease;
                UPDATE awa_fast.standby_claims
                SET job_id = started_id, run_lease = started_lease
                WHERE id = claim.id;
                PERFORM pg_notify('awa_fast_standby', claim.host_id::text);
                started := started + 1;
            END LOOP;
        END IF;
        IF available = 0 OR started < available THEN
            PERFORM pg_notify('awa_fast_jobs', q);
        END IF;
    END LOOP;
    RETURN NULL;
END;
$$;
