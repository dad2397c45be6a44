-- Standby claims: a job inserted into an idle queue starts on its inserting transaction's
-- commit, with no claim of its own.
--
-- A claim is a write that must be durable before its handler may start, and on a machine
-- whose workers wait idle a durable write costs a flush from idle, most of a pickup
-- (benches/RESULTS.md, "Pickup latency"). A runner whose claim found a queue drained, with capacity to spare, leaves a standby
-- claim for it here instead. The next statement that inserts available jobs into that
-- queue starts one of them on the standby claim, in its own transaction: the job's row
-- becomes running (as a claim makes it), the standby claim names the job, and the NOTIFY
-- on awa_fast_standby, delivered at commit, carries the job's row to the runner, which
-- starts it from there. The start is as durable as the insert, which flushes anyway; the
-- runner's collect (its spent claims deleted, their jobs read) writes only this table,
-- which has no WAL to flush.
--
-- UNLOGGED: a standby claim is a runner's offer, not a job's state. After a crash the
-- table is empty and runners offer again (their collect notices; awa_fast.runtime.standby).
-- A job started on a claim that a crash then wiped is a running attempt of its host, as
-- any claimed job is: the host runs it if it heard of it, and the leader rescues it if not.
CREATE UNLOGGED TABLE awa_fast.standby_claims (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue text NOT NULL,
    -- No job starts on the claim of a host that has stopped (host_forget) or was taken
    -- for dead (host_take_dead); the leader deletes such claims (standby_drop_orphans).
    -- Not a foreign key: deleting a host would wait for every transaction that holds one
    -- of its claims, and the leader's rescue with it.
    host_id bigint NOT NULL,
    -- The queue's deadline on that host, for a job that has none of its own.
    deadline_s double precision NOT NULL,
    -- The attempt started on this claim; NULL while the claim waits.
    job_id bigint,
    run_lease bigint
);
CREATE INDEX standby_claims_waiting ON awa_fast.standby_claims (queue, id)
    WHERE job_id IS NULL;
CREATE INDEX standby_claims_host ON awa_fast.standby_claims (host_id);

-- The wake-up after an insert, as before (one NOTIFY per inserting statement and queue),
-- except for a queue with standby claims: its first inserted jobs in claim order start on
-- them, one a claim, as job_claim_rows would start them (claim_set in
-- awa_fast/db/sql/jobs.sql), each claim's host hears of it on awa_fast_standby, and
-- awa_fast_jobs is told only of jobs left available. Standby claims locked by another
-- inserting transaction are skipped, never waited for, and so are those of hosts gone.
-- The start is stamped with clock_timestamp(), not the transaction's start.
--
-- A queue without waiting claims, nearly every insert under load, costs a probe of
-- standby_claims_waiting in the query that finds the inserted queues: a one-row insert
-- took its backend 11-20 us more than before, 60-70 (benches/insert_trigger_cost.py; the
-- probe as a query of its own cost twice that). A claim taken costs two updates by
-- primary key. (One statement that joined claims to inserted jobs cost an insert 4-5 ms
-- in a transaction of 5,000 of them: its plan read jobs_hot whole.)
CREATE OR REPLACE FUNCTION awa_fast.notify_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    q text;
    available bigint;
    started bigint;
    claim record;
    job awa_fast.jobs_hot;
    note text;
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
                RETURNING j.* INTO job;
                UPDATE awa_fast.standby_claims
                SET job_id = job.id, run_lease = job.run_lease
                WHERE id = claim.id;
                -- The job's row as a claim returns it (claim_columns), jsonb as its text
                -- and times as microseconds since 2000 (the binary format's), so that its
                -- host starts it from the NOTIFY without reading it; too long a row for a
                -- NOTIFY goes as the host's id alone, and its host reads it.
                note := claim.host_id || ' ' || json_build_array(
                    claim.id, job.id, job.run_lease, job.kind, job.queue, job.args::text,
                    job.attempt, job.max_attempts, job.priority, job.tags,
                    NULLIF(job.metadata, '{}')::text, NULLIF(job.errors, '[]')::text,
                    job.progress::text,
                    (extract(epoch FROM job.run_at) * 1000000)::bigint - 946684800000000,
                    (extract(epoch FROM job.created_at) * 1000000)::bigint - 946684800000000,
                    (extract(epoch FROM job.deadline_at) * 1000000)::bigint - 946684800000000
                )::text;
                IF octet_length(note) > 7900 THEN
                    note := claim.host_id::text;
                END IF;
                PERFORM pg_notify('awa_fast_standby', note);
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
