-- Counts of jobs per queue and state kept as counters, not counted from the job rows.
--
-- queue_stats, the dashboard, the command line, the health check and the metrics counted
-- job rows: a call read every waiting job, and the history through indexes, 0.55-0.63 s
-- at 650,000 finished jobs, and polling it every 200 ms halved a drain's throughput. They
-- now read awa_fast.queue_counts and awa_fast.queue_minutes (below), whose cost follows
-- the number of queues, not of jobs.
--
-- Whatever statement moves job rows (claims, commits, rescues, promotions, admin and batch
-- operations, retention, COPY, packs), a statement-level trigger on each job table sums the
-- rows it inserted, updated or deleted by (queue, state) and appends the sums to
-- count_deltas, in the statement's own transaction: a count changes when, and only when,
-- the rows do. A statement that nets to nothing (a heartbeat, a progress save) appends
-- nothing. The leader folds the deltas into count_rollup (awa_fast.maintenance.counts).
--
-- Where a count lives:
-- * count_deltas: appended to, never updated. Two partitions by `slot`; writers append to
--   the one the sequence count_slot names. Each pass, the leader folds the other one,
--   sealed at its pass before, into count_rollup and TRUNCATEs it in one transaction, then
--   moves count_slot to it, sealing the one in use: a delta is never deleted row by row,
--   and leaves no dead tuple;
-- * count_rollup: the folded sums, a row per queue and state (a row that folds to zero is
--   deleted); one dead tuple per changed row per fold;
-- * count_minutes: the finished jobs per minute, queue and state (completed and failed in
--   jobs_done, failed in the dlq), over count_horizon(), for "completed in the last hour"
--   and the dashboard's throughput charts; the leader deletes minutes past the horizon.
--
-- A count is count_rollup plus every unfolded delta, which queue_counts and queue_minutes
-- add up, in one snapshot: a fold commits its sums and its TRUNCATE together. (TRUNCATE is
-- not MVCC-safe: a REPEATABLE READ transaction that read these before a fold and reads
-- them again after it sees the deltas gone and the sums not yet there.)

-- The partition writers append to: read, not locked, by every writer; moved by the leader.
-- A sequence rather than a one-row table: it is written in place, so moving it leaves no
-- row version for every writer's read to step over while a long transaction elsewhere
-- holds back vacuum. Which partition a writer picks matters to how long a fold waits for
-- its lock, never to the counts: a delta appended to a partition after its fold stays
-- there, counted, until the next fold of that partition.
CREATE SEQUENCE awa_fast.count_slot AS smallint MINVALUE 0 MAXVALUE 1 START 0 CYCLE;
SELECT setval('awa_fast.count_slot', 0);  -- called: the first nextval moves it to 1

-- The partition writers append to now. Read through pg_sequence_last_value, which needs
-- only the USAGE on the sequence that the application's role has (cli.py's grants), where
-- a SELECT from the sequence would need SELECT on it.
CREATE FUNCTION awa_fast.count_slot() RETURNS smallint
LANGUAGE sql STABLE AS $$ SELECT pg_sequence_last_value('awa_fast.count_slot')::smallint $$;

CREATE TABLE awa_fast.count_deltas (
    slot   smallint NOT NULL,
    queue  text NOT NULL,
    state  text NOT NULL,  -- a job_state, or 'dlq' for the dead-letter queue
    minute timestamptz,    -- for finished jobs within count_horizon(): their minute
    n      bigint NOT NULL
) PARTITION BY LIST (slot);
-- Insert-only, then truncated: nothing for autovacuum to do, and a vacuum's lock would
-- make a fold wait.
CREATE TABLE awa_fast.count_deltas_0 PARTITION OF awa_fast.count_deltas FOR VALUES IN (0)
    WITH (autovacuum_enabled = false);
CREATE TABLE awa_fast.count_deltas_1 PARTITION OF awa_fast.count_deltas FOR VALUES IN (1)
    WITH (autovacuum_enabled = false);

CREATE TABLE awa_fast.count_rollup (
    queue text NOT NULL,
    state text NOT NULL,
    n     bigint NOT NULL,
    PRIMARY KEY (queue, state)
);

CREATE TABLE awa_fast.count_minutes (
    minute timestamptz NOT NULL,
    queue  text NOT NULL,
    state  text NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (minute, queue, state)
);

-- How long finished jobs are counted by minute: the dashboard's longest chart (24 h) and
-- an hour to spare.
CREATE FUNCTION awa_fast.count_horizon() RETURNS interval
LANGUAGE sql IMMUTABLE AS $$ SELECT interval '25 hours' $$;

-- A row's state as counted: the dead-letter queue's rows (state failed) count apart.
CREATE FUNCTION awa_fast.counted_state(p_table name, p_state awa_fast.job_state) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_table = 'dlq' THEN 'dlq' ELSE p_state::text END
$$;

-- The minute (in UTC, whatever the session's time zone) a completed or failed job counts
-- in, when it finished within count_horizon(); NULL otherwise.
CREATE FUNCTION awa_fast.counted_minute(p_state awa_fast.job_state, p_at timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_state IN ('completed', 'failed')
                     AND p_at >= now() - awa_fast.count_horizon()
                THEN date_trunc('minute', p_at, 'UTC') END
$$;

-- The rows of jobs_hot, jobs_deferred, jobs_done and the dlq as counted. Each statement
-- counts the rows by their columns first, each side of an UPDATE apart, and computes the
-- counted key of those groups only (a batch's rows share their queue, state and
-- finalized_at): keyed row by row, or the two sides of an UPDATE summed as one, a claim
-- of 256 jobs cost the trigger twice as much or more.
CREATE FUNCTION awa_fast.count_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO awa_fast.count_deltas (slot, queue, state, minute, n)
        SELECT awa_fast.count_slot(), g.queue,
               awa_fast.counted_state(TG_TABLE_NAME, g.state),
               awa_fast.counted_minute(g.state, g.finalized_at), sum(g.n)::bigint
        FROM (SELECT queue, state, finalized_at, count(*) AS n FROM new_rows GROUP BY 1, 2, 3) g
        GROUP BY 2, 3, 4;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO awa_fast.count_deltas (slot, queue, state, minute, n)
        SELECT awa_fast.count_slot(), g.queue,
               awa_fast.counted_state(TG_TABLE_NAME, g.state),
               awa_fast.counted_minute(g.state, g.finalized_at), -sum(g.n)::bigint
        FROM (SELECT queue, state, finalized_at, count(*) AS n FROM old_rows GROUP BY 1, 2, 3) g
        GROUP BY 2, 3, 4;
    ELSE
        INSERT INTO awa_fast.count_deltas (slot, queue, state, minute, n)
        SELECT awa_fast.count_slot(), g.queue,
               awa_fast.counted_state(TG_TABLE_NAME, g.state),
               awa_fast.counted_minute(g.state, g.finalized_at), sum(g.n)::bigint
        FROM (SELECT queue, state, finalized_at, count(*) AS n FROM new_rows GROUP BY 1, 2, 3
              UNION ALL
              SELECT queue, state, finalized_at, -count(*) FROM old_rows GROUP BY 1, 2, 3) g
        GROUP BY 2, 3, 4
        HAVING sum(g.n) <> 0;
    END IF;
    RETURN NULL;
END;
$$;

-- A pack's unclaimed jobs (size - taken) are available jobs of its queue.
CREATE FUNCTION awa_fast.count_packs() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO awa_fast.count_deltas (slot, queue, state, n)
        SELECT awa_fast.count_slot(), r.queue, 'available',
               sum(r.size - r.taken)
        FROM new_rows r
        GROUP BY r.queue;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO awa_fast.count_deltas (slot, queue, state, n)
        SELECT awa_fast.count_slot(), r.queue, 'available',
               -sum(r.size - r.taken)
        FROM old_rows r
        GROUP BY r.queue;
    ELSE
        INSERT INTO awa_fast.count_deltas (slot, queue, state, n)
        SELECT awa_fast.count_slot(), r.queue, 'available',
               sum(r.n)::bigint
        FROM (SELECT queue, sum(size - taken) AS n FROM new_rows GROUP BY queue
              UNION ALL
              SELECT queue, -sum(size - taken) FROM old_rows GROUP BY queue) r
        GROUP BY r.queue
        HAVING sum(r.n) <> 0;
    END IF;
    RETURN NULL;
END;
$$;

-- What the rows of one job table (or job_packs) count for now, by queue, state and minute:
-- what a TRUNCATE of it takes away, and what this migration counts to begin with.
CREATE FUNCTION awa_fast.counted_rows(p_table regclass)
RETURNS TABLE (queue text, state text, minute timestamptz, n bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_table = 'awa_fast.job_packs'::regclass THEN
        RETURN QUERY
        SELECT p.queue, 'available'::text, NULL::timestamptz, sum(p.size - p.taken)::bigint
        FROM awa_fast.job_packs p
        GROUP BY p.queue;
    ELSE
        RETURN QUERY EXECUTE format(
            'SELECT queue, awa_fast.counted_state(%L, state),'
            ' awa_fast.counted_minute(state, finalized_at), count(*)'
            ' FROM %s GROUP BY 1, 2, 3',
            (SELECT relname FROM pg_class WHERE oid = p_table), p_table);
    END IF;
END;
$$;

-- A TRUNCATE of a job table takes its rows' counts away, as a DELETE of them all would.
CREATE FUNCTION awa_fast.count_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO awa_fast.count_deltas (slot, queue, state, minute, n)
    SELECT awa_fast.count_slot(), c.queue, c.state, c.minute, -c.n
    FROM awa_fast.counted_rows(TG_RELID) c
    WHERE c.n <> 0;
    RETURN NULL;
END;
$$;

-- The triggers, created before the counting below: creating one waits for the table's
-- writers and holds off new ones until this migration commits, so each row is counted
-- either here or by a trigger, never both and never neither.
DO $$
DECLARE
    t text;
    f text;
BEGIN
    FOREACH t IN ARRAY ARRAY['jobs_hot', 'job_packs', 'jobs_deferred', 'jobs_done', 'dlq'] LOOP
        f := CASE t WHEN 'job_packs' THEN 'count_packs' ELSE 'count_jobs' END;
        EXECUTE format(
            'CREATE TRIGGER %1$s_count_insert AFTER INSERT ON awa_fast.%1$I'
            ' REFERENCING NEW TABLE AS new_rows'
            ' FOR EACH STATEMENT EXECUTE FUNCTION awa_fast.%2$I()', t, f);
        EXECUTE format(
            'CREATE TRIGGER %1$s_count_update AFTER UPDATE ON awa_fast.%1$I'
            ' REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows'
            ' FOR EACH STATEMENT EXECUTE FUNCTION awa_fast.%2$I()', t, f);
        EXECUTE format(
            'CREATE TRIGGER %1$s_count_delete AFTER DELETE ON awa_fast.%1$I'
            ' REFERENCING OLD TABLE AS old_rows'
            ' FOR EACH STATEMENT EXECUTE FUNCTION awa_fast.%2$I()', t, f);
        EXECUTE format(
            'CREATE TRIGGER %1$s_count_truncate BEFORE TRUNCATE ON awa_fast.%1$I'
            ' FOR EACH STATEMENT EXECUTE FUNCTION awa_fast.count_truncated()', t);
    END LOOP;
END;
$$;

-- The jobs there are now, counted once.
WITH counted AS (
    SELECT c.* FROM unnest(ARRAY['awa_fast.jobs_hot', 'awa_fast.job_packs',
                                 'awa_fast.jobs_deferred', 'awa_fast.jobs_done',
                                 'awa_fast.dlq']::regclass[]) AS t,
                    awa_fast.counted_rows(t) c
),
totals AS (
    INSERT INTO awa_fast.count_rollup (queue, state, n)
    SELECT queue, state, sum(n) FROM counted GROUP BY queue, state HAVING sum(n) <> 0
)
INSERT INTO awa_fast.count_minutes (minute, queue, state, n)
SELECT minute, queue, state, sum(n) FROM counted
WHERE minute IS NOT NULL
GROUP BY minute, queue, state;

-- The leader's fold (awa_fast.maintenance.counts) of the partition `p_slot`, which writers
-- no longer pick: its lock first, waiting `p_lock_timeout` at most for the writers that
-- picked it before the slot moved (a reader of the counts waits behind the lock too), so
-- that every delta it holds is committed and none can be added until this transaction
-- ends; then the deltas added to the rollup and the minutes (a sum that comes to zero
-- deletes its row), the partition truncated, and the minutes past count_horizon()
-- deleted. Returns how many deltas it folded. It runs as the schema's owner: TRUNCATE
-- needs a privilege the application's role is not granted (cli.py's grants), and a fold
-- changes no count, whoever calls it. Its lock_timeout ends with it.
CREATE FUNCTION awa_fast.count_fold(p_slot smallint, p_lock_timeout interval) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    sealed text := format('awa_fast.count_deltas_%s', p_slot);
    folded bigint;
BEGIN
    PERFORM set_config('lock_timeout',
                       (extract(epoch FROM p_lock_timeout) * 1000)::bigint::text, true);
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', sealed);
    WITH deltas AS (
        SELECT queue, state, minute, sum(n)::bigint AS n, count(*) AS appended
        FROM awa_fast.count_deltas
        WHERE slot = p_slot
        GROUP BY queue, state, minute
    ),
    totals AS (
        SELECT d.queue, d.state, COALESCE(c.n, 0) + d.n AS n
        FROM (SELECT queue, state, sum(n)::bigint AS n FROM deltas
              GROUP BY queue, state HAVING sum(n) <> 0) d
        LEFT JOIN awa_fast.count_rollup c USING (queue, state)
    ),
    minutes AS (
        SELECT d.minute, d.queue, d.state, COALESCE(m.n, 0) + d.n AS n
        FROM deltas d
        LEFT JOIN awa_fast.count_minutes m USING (minute, queue, state)
        WHERE d.minute IS NOT NULL AND d.n <> 0
    ),
    totals_gone AS (
        DELETE FROM awa_fast.count_rollup c USING totals t
        WHERE t.n = 0 AND c.queue = t.queue AND c.state = t.state
    ),
    totals_set AS (
        INSERT INTO awa_fast.count_rollup (queue, state, n)
        SELECT queue, state, n FROM totals WHERE n <> 0
        ON CONFLICT (queue, state) DO UPDATE SET n = EXCLUDED.n
    ),
    minutes_gone AS (
        DELETE FROM awa_fast.count_minutes c USING minutes t
        WHERE t.n = 0 AND c.minute = t.minute AND c.queue = t.queue AND c.state = t.state
    ),
    minutes_set AS (
        INSERT INTO awa_fast.count_minutes (minute, queue, state, n)
        SELECT minute, queue, state, n FROM minutes WHERE n <> 0
        ON CONFLICT (minute, queue, state) DO UPDATE SET n = EXCLUDED.n
    )
    SELECT COALESCE(sum(appended), 0) INTO folded FROM deltas;
    EXECUTE format('TRUNCATE %s', sealed);
    DELETE FROM awa_fast.count_minutes WHERE minute < now() - awa_fast.count_horizon();
    RETURN folded;
END;
$$;

-- The counts: each queue's jobs by state, folded and not.
CREATE VIEW awa_fast.queue_counts AS
    SELECT queue, state, sum(n)::bigint AS n
    FROM (
        SELECT queue, state, n FROM awa_fast.count_rollup
        UNION ALL
        SELECT queue, state, n FROM awa_fast.count_deltas
    ) c
    GROUP BY queue, state;

-- Finished jobs by minute, queue and state (completed, failed, dlq), folded and not.
CREATE VIEW awa_fast.queue_minutes AS
    SELECT minute, queue, state, sum(n)::bigint AS n
    FROM (
        SELECT minute, queue, state, n FROM awa_fast.count_minutes
        UNION ALL
        SELECT minute, queue, state, n FROM awa_fast.count_deltas WHERE minute IS NOT NULL
    ) c
    GROUP BY minute, queue, state;
