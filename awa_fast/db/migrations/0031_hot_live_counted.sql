-- The rotation of jobs_hot moves the sealed partition's live jobs only while there are
-- 1,000 of them or fewer (migration 0029), and read that number from the statistics. Those
-- drift upward for good: a TRUNCATE zeroes a partition's counts, and the inserts other
-- sessions had not reported yet (a backend reports at most once a second, later under
-- contention) are added after it, while the deletes of the rows it took never come. Past
-- 1,000 the partition was never truncated again, the ring only turning writers between two
-- partitions that grew, until a VACUUM or ANALYZE set the count right: under a held
-- horizon, where the leader's vacuum runs once, that could take the whole hold (one run at
-- 3,000 jobs/s: 160 s, and 950,000 dead tuples). The live jobs are counted now, at most
-- 1,001 of them, in the rotation's snapshot.
CREATE OR REPLACE FUNCTION awa_fast.ring_rotate(p_ring text, p_least bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_current smallint;
    v_sealed regclass;
    v_freeable boolean;
BEGIN
    IF p_ring NOT IN ('standby', 'ledger', 'hot') THEN
        RAISE EXCEPTION 'no ring named %', p_ring;
    END IF;
    v_current := awa_fast.ring_slot(p_ring);
    v_sealed := awa_fast.ring_partition(p_ring, (1 - v_current)::smallint);
    v_freeable := awa_fast.ring_freeable(p_ring, (1 - v_current)::smallint, p_least);
    IF v_freeable AND p_ring = 'hot' THEN
        EXECUTE format('SELECT count(*) <= 1000 FROM (SELECT 1 FROM %s LIMIT 1001) live',
                       v_sealed)
            INTO v_freeable;
    END IF;
    IF NOT v_freeable THEN
        IF awa_fast.ring_freeable(p_ring, v_current, p_least) THEN
            PERFORM setval(format('awa_fast.%s_slot', p_ring), 1 - v_current);
            RETURN 'sealed';
        END IF;
        RETURN NULL;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    IF NOT awa_fast.ring_lock(v_sealed) THEN
        RETURN 'busy';
    END IF;
    IF p_ring = 'standby' THEN
        EXECUTE format(
            'INSERT INTO awa_fast.standby_claims'
            ' (id, queue, host_id, deadline_s, job_id, run_lease, slot)'
            ' OVERRIDING SYSTEM VALUE'
            ' SELECT id, queue, host_id, deadline_s, job_id, run_lease, $1 FROM %s',
            v_sealed) USING v_current;
    ELSIF p_ring = 'ledger' THEN
        EXECUTE format(
            'INSERT INTO awa_fast.claim_windows'
            ' (queue, priority, n, lo, hi, pos_xid, pos_id, slot)'
            ' SELECT DISTINCT ON (s.queue, s.priority)'
            '        s.queue, s.priority, s.n, s.lo, s.hi, s.pos_xid, s.pos_id, $1'
            ' FROM %s s'
            ' WHERE NOT EXISTS (SELECT 1 FROM awa_fast.claim_windows c'
            '                   WHERE c.slot = $1 AND c.queue = s.queue'
            '                     AND c.priority = s.priority AND c.n > s.n)'
            ' ORDER BY s.queue, s.priority, s.n DESC',
            v_sealed) USING v_current;
    ELSE
        -- the slots as constants, so that the plan reads the sealed partition alone
        EXECUTE format('UPDATE awa_fast.jobs_hot SET slot = %s WHERE slot = %s',
                       v_current, 1 - v_current);
    END IF;
    EXECUTE format('TRUNCATE %s', v_sealed);
    PERFORM setval(format('awa_fast.%s_slot', p_ring), 1 - v_current);
    RETURN 'truncated';
END;
$$;
