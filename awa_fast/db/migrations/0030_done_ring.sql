-- jobs_done as a ring: retention frees finished jobs by TRUNCATE of a partition, not by a
-- DELETE of each row.
--
-- The cleaner deleted finished jobs past their retention row by row: a dead tuple a job,
-- and index entries for vacuum to find, a day after the fact, at the rate the queue ran.
-- jobs_done is now LIST-partitioned by `slot` into eight partitions, and finished jobs go
-- to the one the sequence done_slot names. The cleaner turns the ring once the partition
-- in use has been in use for a period (its retention over six: four hours for a day), and
-- frees each sealed partition whose newest job is past retention: it moves the jobs still
-- kept (failed and cancelled jobs kept longer, queues kept longer) to the partition in use,
-- then TRUNCATEs it (awa_fast.done_free). A job is kept for its retention and at most a
-- period more. Queues with a retention shorter than the ring's keep their DELETEs.
--
-- The counters (migration 0025) count each partition's jobs apart (`part`, -1 off
-- jobs_done), so that a TRUNCATE takes away exactly what the partition held without
-- counting its rows; a move between partitions is an UPDATE that the count triggers see.

CREATE SEQUENCE awa_fast.done_slot AS smallint MINVALUE 0 MAXVALUE 7 START 0 CYCLE;
SELECT setval('awa_fast.done_slot', 0);
CREATE FUNCTION awa_fast.done_slot() RETURNS smallint
LANGUAGE sql STABLE AS $$ SELECT pg_sequence_last_value('awa_fast.done_slot')::smallint $$;

-- When each partition last became the one in use: written once a turn.
CREATE TABLE awa_fast.done_turns (
    slot smallint PRIMARY KEY,
    turned_at timestamptz NOT NULL
);
INSERT INTO awa_fast.done_turns SELECT s, now() FROM generate_series(0, 7) AS s;

-- Counts by partition: the rows of count_deltas and count_rollup gain `part`.
ALTER TABLE awa_fast.count_deltas ADD COLUMN part smallint NOT NULL DEFAULT -1;
ALTER TABLE awa_fast.count_rollup ADD COLUMN part smallint NOT NULL DEFAULT -1;
ALTER TABLE awa_fast.count_rollup DROP CONSTRAINT count_rollup_pkey,
    ADD PRIMARY KEY (queue, state, part);
ALTER TABLE awa_fast.count_minutes ADD COLUMN part smallint NOT NULL DEFAULT -1;
ALTER TABLE awa_fast.count_minutes DROP CONSTRAINT count_minutes_pkey,
    ADD PRIMARY KEY (minute, queue, state, part);
-- Every finished job there is now goes to partition 0, below (the dlq's count as 'dlq').
UPDATE awa_fast.count_rollup SET part = 0 WHERE state IN ('completed', 'failed', 'cancelled');
UPDATE awa_fast.count_minutes SET part = 0 WHERE state IN ('completed', 'failed');
UPDATE awa_fast.count_deltas SET part = 0 WHERE state IN ('completed', 'failed', 'cancelled');

-- The table, its rows carried over as they are, before the triggers (the counts hold them).
ALTER TABLE awa_fast.jobs_done RENAME TO jobs_done_0029;
ALTER TABLE awa_fast.jobs_done_0029 RENAME CONSTRAINT jobs_done_pkey TO jobs_done_0029_pkey;
DROP INDEX awa_fast.jobs_done_finalized, awa_fast.jobs_done_failed, awa_fast.jobs_done_parent;
CREATE TABLE awa_fast.jobs_done (
    LIKE awa_fast.jobs_done_0029 INCLUDING DEFAULTS INCLUDING CONSTRAINTS
) PARTITION BY LIST (slot);
ALTER TABLE awa_fast.jobs_done ALTER COLUMN slot SET DEFAULT awa_fast.done_slot(),
    ALTER COLUMN slot SET NOT NULL, ADD PRIMARY KEY (id, slot);
DO $$
BEGIN
    FOR s IN 0..7 LOOP
        EXECUTE format('CREATE TABLE awa_fast.jobs_done_%s PARTITION OF awa_fast.jobs_done'
                       ' FOR VALUES IN (%s) WITH (vacuum_truncate = false)', s, s);
    END LOOP;
END;
$$;
INSERT INTO awa_fast.jobs_done
SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
       attempted_at, finalized_at, heartbeat_at, deadline_at, run_lease, errors, metadata,
       tags, progress, unique_key, callback_id, callback_timeout_at, callback_result,
       deadline_seconds, host_id, callback_rules, parent_id, held_lease, ready_xid, 0
FROM awa_fast.jobs_done_0029;
CREATE INDEX jobs_done_finalized ON awa_fast.jobs_done (finalized_at);
CREATE INDEX jobs_done_failed ON awa_fast.jobs_done (state, queue)
    WHERE state IN ('failed', 'cancelled');
CREATE INDEX jobs_done_parent ON awa_fast.jobs_done (parent_id) WHERE parent_id IS NOT NULL;
-- Each partition's index named as jobs_hot's are (migration 0029): jobs_done_pkey_3.
SELECT awa_fast.name_partition_indexes('awa_fast.jobs_done');

CREATE TRIGGER jobs_done_count_insert AFTER INSERT ON awa_fast.jobs_done
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION awa_fast.count_jobs();
CREATE TRIGGER jobs_done_count_update AFTER UPDATE ON awa_fast.jobs_done
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION awa_fast.count_jobs();
CREATE TRIGGER jobs_done_count_delete AFTER DELETE ON awa_fast.jobs_done
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION awa_fast.count_jobs();
CREATE TRIGGER jobs_done_count_truncate BEFORE TRUNCATE ON awa_fast.jobs_done
    FOR EACH STATEMENT EXECUTE FUNCTION awa_fast.count_truncated();

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
DROP TABLE awa_fast.jobs_done_0029;

-- A job's partition as counted: jobs_done's slot, -1 elsewhere.
CREATE FUNCTION awa_fast.counted_part(p_table name, p_slot smallint) RETURNS smallint
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_table = 'jobs_done' THEN p_slot ELSE -1 END::smallint
$$;

-- count_jobs as in migration 0025, each sum by partition too.
CREATE OR REPLACE FUNCTION awa_fast.count_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO awa_fast.count_deltas (slot, queue, state, minute, part, n)
        SELECT awa_fast.count_slot(), g.queue,
               awa_fast.counted_state(TG_TABLE_NAME, g.state),
               awa_fast.counted_minute(g.state, g.finalized_at),
               awa_fast.counted_part(TG_TABLE_NAME, g.slot), sum(g.n)::bigint
        FROM (SELECT queue, state, finalized_at, slot, count(*) AS n FROM new_rows
              GROUP BY 1, 2, 3, 4) g
        GROUP BY 2, 3, 4, 5;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO awa_fast.count_deltas (slot, queue, state, minute, part, n)
        SELECT awa_fast.count_slot(), g.queue,
               awa_fast.counted_state(TG_TABLE_NAME, g.state),
               awa_fast.counted_minute(g.state, g.finalized_at),
               awa_fast.counted_part(TG_TABLE_NAME, g.slot), -sum(g.n)::bigint
        FROM (SELECT queue, state, finalized_at, slot, count(*) AS n FROM old_rows
              GROUP BY 1, 2, 3, 4) g
        GROUP BY 2, 3, 4, 5;
    ELSE
        INSERT INTO awa_fast.count_deltas (slot, queue, state, minute, part, n)
        SELECT awa_fast.count_slot(), g.queue,
               awa_fast.counted_state(TG_TABLE_NAME, g.state),
               awa_fast.counted_minute(g.state, g.finalized_at),
               awa_fast.counted_part(TG_TABLE_NAME, g.slot), sum(g.n)::bigint
        FROM (SELECT queue, state, finalized_at, slot, count(*) AS n FROM new_rows
              GROUP BY 1, 2, 3, 4
              UNION ALL
              SELECT queue, state, finalized_at, slot, -count(*) FROM old_rows
              GROUP BY 1, 2, 3, 4) g
        GROUP BY 2, 3, 4, 5
        HAVING sum(g.n) <> 0;
    END IF;
    RETURN NULL;
END;
$$;

-- counted_rows and count_truncated as in migration 0025, by partition too.
DROP FUNCTION awa_fast.counted_rows(regclass);
CREATE FUNCTION awa_fast.counted_rows(p_table regclass)
RETURNS TABLE (queue text, state text, minute timestamptz, part smallint, n bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_table = 'awa_fast.job_packs'::regclass THEN
        RETURN QUERY
        SELECT p.queue, 'available'::text, NULL::timestamptz, -1::smallint,
               sum(p.size - p.taken)::bigint
        FROM awa_fast.job_packs p
        GROUP BY p.queue;
    ELSE
        RETURN QUERY EXECUTE format(
            'SELECT queue, awa_fast.counted_state(%1$L, state),'
            ' awa_fast.counted_minute(state, finalized_at), awa_fast.counted_part(%1$L, slot),'
            ' count(*) FROM %2$s GROUP BY 1, 2, 3, 4',
            (SELECT relname FROM pg_class WHERE oid = p_table), p_table);
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION awa_fast.count_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO awa_fast.count_deltas (slot, queue, state, minute, part, n)
    SELECT awa_fast.count_slot(), c.queue, c.state, c.minute, c.part, -c.n
    FROM awa_fast.counted_rows(TG_RELID) c
    WHERE c.n <> 0;
    RETURN NULL;
END;
$$;

-- count_fold as in migration 0025, its sums kept by partition.
CREATE OR REPLACE FUNCTION awa_fast.count_fold(p_slot smallint, p_lock_timeout interval)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    sealed text := format('awa_fast.count_deltas_%s', p_slot);
    folded bigint;
BEGIN
    PERFORM set_config('lock_timeout',
                       (extract(epoch FROM p_lock_timeout) * 1000)::bigint::text, true);
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', sealed);
    WITH deltas AS (
        SELECT queue, state, minute, part, sum(n)::bigint AS n, count(*) AS appended
        FROM awa_fast.count_deltas
        WHERE slot = p_slot
        GROUP BY queue, state, minute, part
    ),
    totals AS (
        SELECT d.queue, d.state, d.part, COALESCE(c.n, 0) + d.n AS n
        FROM (SELECT queue, state, part, sum(n)::bigint AS n FROM deltas
              GROUP BY queue, state, part HAVING sum(n) <> 0) d
        LEFT JOIN awa_fast.count_rollup c USING (queue, state, part)
    ),
    minutes AS (
        SELECT d.minute, d.queue, d.state, d.part, COALESCE(m.n, 0) + d.n AS n
        FROM deltas d
        LEFT JOIN awa_fast.count_minutes m USING (minute, queue, state, part)
        WHERE d.minute IS NOT NULL AND d.n <> 0
    ),
    totals_gone AS (
        DELETE FROM awa_fast.count_rollup c USING totals t
        WHERE t.n = 0 AND c.queue = t.queue AND c.state = t.state AND c.part = t.part
    ),
    totals_set AS (
        INSERT INTO awa_fast.count_rollup (queue, state, part, n)
        SELECT queue, state, part, n FROM totals WHERE n <> 0
        ON CONFLICT (queue, state, part) DO UPDATE SET n = EXCLUDED.n
    ),
    minutes_gone AS (
        DELETE FROM awa_fast.count_minutes c USING minutes t
        WHERE t.n = 0 AND c.minute = t.minute AND c.queue = t.queue AND c.state = t.state
          AND c.part = t.part
    ),
    minutes_set AS (
        INSERT INTO awa_fast.count_minutes (minute, queue, state, part, n)
        SELECT minute, queue, state, part, n FROM minutes WHERE n <> 0
        ON CONFLICT (minute, queue, state, part) DO UPDATE SET n = EXCLUDED.n
    )
    SELECT COALESCE(sum(appended), 0) INTO folded FROM deltas;
    EXECUTE format('TRUNCATE %s', sealed);
    DELETE FROM awa_fast.count_minutes WHERE minute < now() - awa_fast.count_horizon();
    RETURN folded;
END;
$$;

-- Whether a job finished at p_at is still kept: completed ones for p_completed, failed and
-- cancelled ones for p_failed, or for their queue's pair of seconds in p_queues.
CREATE FUNCTION awa_fast.done_kept(
    p_queue text, p_state awa_fast.job_state, p_at timestamptz, p_completed interval,
    p_failed interval, p_queues jsonb
) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT p_at >= now() - CASE
        WHEN p_state = 'completed'
        THEN COALESCE(make_interval(secs => (p_queues -> p_queue ->> 0)::float8), p_completed)
        ELSE COALESCE(make_interval(secs => (p_queues -> p_queue ->> 1)::float8), p_failed)
    END
$$;

-- One pass over the ring of finished jobs (awa_fast.maintenance.cleaner):
-- * the turn: once the partition in use has been in use for p_period, writers move to the
--   next empty one, in ring order;
-- * each sealed partition whose newest job finished before p_completed (the bulk of what
--   it holds is past retention) is freed: under its lock, taken without waiting (25 looks
--   a millisecond apart; a partition whose lock is held waits for the next pass), the
--   jobs still kept (done_kept) move to the partition in use, the counts of the rest are
--   taken away (the partition's own counts, with its failed jobs added to
--   pruned_failed_counts, as the cleaner's deletes do), and it is TRUNCATEd.
-- Returns how many jobs it freed. SECURITY DEFINER: TRUNCATE is the owner's.
CREATE FUNCTION awa_fast.done_free(
    p_completed interval, p_failed interval, p_queues jsonb, p_period interval
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_current smallint := awa_fast.done_slot();
    v_slot smallint;
    v_empty boolean;
    v_newest timestamptz;
    v_gone bigint;
    v_freed bigint := 0;
BEGIN
    IF (SELECT t.turned_at FROM awa_fast.done_turns t WHERE t.slot = v_current)
       <= now() - p_period THEN
        FOR k IN 1..7 LOOP
            v_slot := (v_current + k) % 8;
            EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM %s)',
                           awa_fast.ring_partition('done', v_slot))
                INTO v_empty;
            IF v_empty THEN
                PERFORM setval('awa_fast.done_slot', v_slot);
                UPDATE awa_fast.done_turns SET turned_at = now() WHERE slot = v_slot;
                v_current := v_slot;
                EXIT;
            END IF;
        END LOOP;
    END IF;
    FOR k IN 1..7 LOOP
        v_slot := (v_current + k) % 8;
        EXECUTE format('SELECT max(finalized_at) FROM %s',
                       awa_fast.ring_partition('done', v_slot))
            INTO v_newest;
        CONTINUE WHEN v_newest IS NULL OR v_newest >= now() - p_completed;
        CONTINUE WHEN NOT awa_fast.ring_lock(awa_fast.ring_partition('done', v_slot));
        -- the slots as constants, so that the plan reads the sealed partition alone
        EXECUTE format(
            'UPDATE awa_fast.jobs_done j SET slot = %s WHERE j.slot = %s'
            ' AND awa_fast.done_kept(j.queue, j.state, j.finalized_at, $1, $2, $3)',
            v_current, v_slot) USING p_completed, p_failed, p_queues;
        -- What is left, by the partition's counts: a delta fold adds to its total and, for a
        -- job finished within count_horizon(), to its minute.
        WITH totals AS (
            SELECT queue, state, sum(n)::bigint AS n FROM (
                SELECT queue, state, n FROM awa_fast.count_rollup WHERE part = v_slot
                UNION ALL
                SELECT queue, state, n FROM awa_fast.count_deltas WHERE part = v_slot) t
            GROUP BY queue, state HAVING sum(n) <> 0
        ),
        minutes AS (
            SELECT queue, state, minute, sum(n)::bigint AS n FROM (
                SELECT queue, state, minute, n FROM awa_fast.count_minutes
                WHERE part = v_slot
                UNION ALL
                SELECT queue, state, minute, n FROM awa_fast.count_deltas
                WHERE part = v_slot AND minute IS NOT NULL) m
            GROUP BY queue, state, minute HAVING sum(n) <> 0
        ),
        -- a minute's count is in its total too: the rest of the total is what no minute has
        taken AS (
            SELECT queue, state, minute, -n AS n FROM minutes
            UNION ALL
            SELECT t.queue, t.state, NULL, -(t.n - COALESCE(
                (SELECT sum(m.n) FROM minutes m WHERE m.queue = t.queue AND m.state = t.state),
                0))
            FROM totals t
        ),
        subtracted AS (
            INSERT INTO awa_fast.count_deltas (slot, queue, state, minute, part, n)
            SELECT awa_fast.count_slot(), queue, state, minute, v_slot, n FROM taken
            WHERE n <> 0
        ),
        pruned AS (
            INSERT INTO awa_fast.pruned_failed_counts AS c (queue, pruned)
            SELECT queue, n FROM totals WHERE state = 'failed'
            ON CONFLICT (queue) DO UPDATE SET pruned = c.pruned + EXCLUDED.pruned
        )
        SELECT COALESCE(sum(n), 0) INTO v_gone FROM totals;
        EXECUTE format('TRUNCATE %s', awa_fast.ring_partition('done', v_slot));
        v_freed := v_freed + v_gone;
    END LOOP;
    RETURN v_freed;
END;
$$;
