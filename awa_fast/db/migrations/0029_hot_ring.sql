-- jobs_hot as a ring: two partitions, written to in turn, each emptied by TRUNCATE once
-- what is still live in it has moved to the other, so that what claims and completions
-- leave behind is freed whatever the xmin horizon.
--
-- A job leaves two dead versions in jobs_hot: its claim's UPDATE to running and its
-- completion's DELETE (its row moves to jobs_done), and a standby start, a heartbeat or a
-- give-back one more each. While any transaction on the cluster held the xmin horizon,
-- vacuum could remove none of them: at 3,000 jobs/s the table grew from 4.5 to 318 MB in
-- a four-minute hold (benches/RESULTS.md), and grew for as long as the hold lasted.
--
-- The table is now LIST-partitioned by `slot`, 0 or 1, its rows inserted into the
-- partition the sequence hot_slot names, as the rings of migration 0028 are. A row stays
-- in its partition while claims, heartbeats and transitions update it; what leaves, by
-- completion or any other way, leaves from there. The leader rotates the ring once the
-- sealed partition holds enough dead versions and few live rows (ring_rotate): under the
-- sealed partition's lock, taken without waiting, it moves the live rows to the partition
-- in use (a cross-partition UPDATE, through the parent, so that the count triggers see
-- each job's state unchanged), TRUNCATEs the sealed partition and points writers at it.
--
-- Every statement that reaches a row goes through the parent, and a transaction that has
-- touched it holds a lock on both partitions until it ends, so no statement of one
-- overlaps a rotation: a guarded statement never races a move. A READ COMMITTED
-- statement takes its snapshot after its locks, so it sees either the rows before the
-- move or after it, never neither. Moved available rows are stamped anew (stamp_ready),
-- and so lie in a later window for claims (migration 0027), as any change to an available
-- row does.
--
-- The primary key includes the partition key, as a partitioned table's unique indexes
-- must: a job id stays unique by its sequence and by moves, which delete as they insert.
-- Callback ids likewise, being random. Lookups by id probe both partitions.

CREATE SEQUENCE awa_fast.hot_slot AS smallint MINVALUE 0 MAXVALUE 1 START 0 CYCLE;
SELECT setval('awa_fast.hot_slot', 0);
CREATE FUNCTION awa_fast.hot_slot() RETURNS smallint
LANGUAGE sql STABLE AS $$ SELECT pg_sequence_last_value('awa_fast.hot_slot')::smallint $$;

-- On every job table, as ready_xid (migration 0027), so that statements that move rows
-- between them whole, or return them side by side, see the same columns. NULL off jobs_hot.
ALTER TABLE awa_fast.jobs_deferred ADD COLUMN slot smallint;
ALTER TABLE awa_fast.jobs_done ADD COLUMN slot smallint;
ALTER TABLE awa_fast.dlq ADD COLUMN slot smallint;

-- The table, its rows carried over as they are: created before the triggers, so that
-- nothing is counted twice (the counts already hold these rows) and the available rows
-- keep their ready_xid (and so their place in their lane's window).
ALTER TABLE awa_fast.jobs_hot RENAME TO jobs_hot_0028;
ALTER TABLE awa_fast.jobs_hot_0028 RENAME CONSTRAINT jobs_hot_pkey TO jobs_hot_0028_pkey;
DROP INDEX awa_fast.jobs_hot_callback, awa_fast.jobs_hot_waiting, awa_fast.jobs_hot_parent,
    awa_fast.jobs_hot_ready;
CREATE TABLE awa_fast.jobs_hot (
    LIKE awa_fast.jobs_hot_0028 INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    slot smallint NOT NULL DEFAULT awa_fast.hot_slot(),
    PRIMARY KEY (id, slot)
) PARTITION BY LIST (slot);
-- The storage options of migrations 0003 and 0007, which a partitioned table's
-- partitions hold rather than the table.
CREATE TABLE awa_fast.jobs_hot_0 PARTITION OF awa_fast.jobs_hot FOR VALUES IN (0)
    WITH (fillfactor = 80, vacuum_truncate = false);
CREATE TABLE awa_fast.jobs_hot_1 PARTITION OF awa_fast.jobs_hot FOR VALUES IN (1)
    WITH (fillfactor = 80, vacuum_truncate = false);
INSERT INTO awa_fast.jobs_hot SELECT *, 0 FROM awa_fast.jobs_hot_0028;
CREATE UNIQUE INDEX jobs_hot_callback ON awa_fast.jobs_hot (callback_id, slot)
    WHERE callback_id IS NOT NULL;
CREATE INDEX jobs_hot_waiting ON awa_fast.jobs_hot (callback_timeout_at)
    WHERE state = 'waiting_external';
CREATE INDEX jobs_hot_parent ON awa_fast.jobs_hot (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX jobs_hot_ready ON awa_fast.jobs_hot (queue, priority, ready_xid, id)
    WHERE state = 'available';
-- Each partition's index named for the table's and the slot, as jobs_hot_ready_0 for
-- jobs_hot_ready, so that a plan names the index it reads. For the partitioned job tables
-- (jobs_done too: migration 0030), whose partitions are named <table>_<slot>.
CREATE FUNCTION awa_fast.name_partition_indexes(p_table regclass) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    i record;
BEGIN
    FOR i IN
        SELECT c.relname AS name, p.relname AS parent,
               substr(t.relname, length(b.relname) + 2) AS slot
        FROM pg_class b
        JOIN pg_index px ON px.indrelid = b.oid
        JOIN pg_class p ON p.oid = px.indexrelid
        JOIN pg_inherits h ON h.inhparent = p.oid
        JOIN pg_class c ON c.oid = h.inhrelid
        JOIN pg_index x ON x.indexrelid = c.oid
        JOIN pg_class t ON t.oid = x.indrelid
        WHERE b.oid = p_table
    LOOP
        EXECUTE format('ALTER INDEX awa_fast.%I RENAME TO %I', i.name,
                       i.parent || '_' || i.slot);
    END LOOP;
END;
$$;
SELECT awa_fast.name_partition_indexes('awa_fast.jobs_hot');

CREATE TRIGGER jobs_hot_notify AFTER INSERT ON awa_fast.jobs_hot
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION awa_fast.notify_inserted();
CREATE TRIGGER jobs_hot_count_insert AFTER INSERT ON awa_fast.jobs_hot
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION awa_fast.count_jobs();
CREATE TRIGGER jobs_hot_count_update AFTER UPDATE ON awa_fast.jobs_hot
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION awa_fast.count_jobs();
CREATE TRIGGER jobs_hot_count_delete AFTER DELETE ON awa_fast.jobs_hot
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION awa_fast.count_jobs();
CREATE TRIGGER jobs_hot_count_truncate BEFORE TRUNCATE ON awa_fast.jobs_hot
    FOR EACH STATEMENT EXECUTE FUNCTION awa_fast.count_truncated();
CREATE TRIGGER jobs_hot_ready BEFORE INSERT OR UPDATE ON awa_fast.jobs_hot
    FOR EACH ROW WHEN (NEW.state = 'available') EXECUTE FUNCTION awa_fast.stamp_ready();

-- The views read the new table (the columns of migration 0022).
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
DROP TABLE awa_fast.jobs_hot_0028;

-- A claim's candidate names its partition too: a ctid alone names a row in each.
ALTER TYPE awa_fast.claim_candidate ADD ATTRIBUTE row_rel oid;

-- window_rows as in migration 0027, each row with its partition.
DROP FUNCTION awa_fast.window_rows(text, smallint, pg_snapshot, pg_snapshot, xid8, bigint,
                                   bigint);
CREATE FUNCTION awa_fast.window_rows(
    p_queue text, p_priority smallint, lo pg_snapshot, hi pg_snapshot, pos_xid xid8,
    pos_id bigint, k bigint
) RETURNS TABLE (ready_xid xid8, id bigint, row_ctid tid, run_at timestamptz, row_rel oid)
LANGUAGE sql STABLE AS $$
    (SELECT r.ready_xid, r.id, r.row_ctid, r.run_at, r.row_rel
     FROM pg_snapshot_xip(lo) AS x(xid)
     CROSS JOIN LATERAL (
         SELECT r.ready_xid, r.id, r.ctid AS row_ctid, r.run_at, r.tableoid AS row_rel
         FROM awa_fast.jobs_hot r
         WHERE r.queue = p_queue AND r.priority = p_priority AND r.state = 'available'
           AND r.ready_xid = x.xid AND (x.xid > pos_xid OR r.id > pos_id)
         ORDER BY r.id LIMIT k) r
     WHERE x.xid >= pos_xid AND pg_visible_in_snapshot(x.xid, hi)
     ORDER BY r.ready_xid, r.id LIMIT k)
    UNION ALL
    (SELECT r.ready_xid, r.id, r.ctid, r.run_at, r.tableoid FROM awa_fast.jobs_hot r
     WHERE r.queue = p_queue AND r.priority = p_priority AND r.state = 'available'
       AND r.ready_xid < pg_snapshot_xmax(hi)
       AND (r.ready_xid, r.id) > (greatest(pos_xid, pg_snapshot_xmax(lo)),
                                  CASE WHEN pos_xid >= pg_snapshot_xmax(lo) THEN pos_id
                                       ELSE -1 END)
       AND pg_visible_in_snapshot(r.ready_xid, hi)
     ORDER BY r.ready_xid, r.id LIMIT k)
    ORDER BY 1, 2 LIMIT k
$$;

-- claim_jobs as in migration 0028, but each candidate reached by its partition and ctid:
-- rows are locked and updated by a TID probe per candidate (a nested loop; hash and merge
-- joins are off for the function, since either would read the partitions whole), and the
-- ledger's look at what is still available probes the same way.
CREATE OR REPLACE FUNCTION awa_fast.claim_jobs(
    p_queue text, p_limit integer, p_host_id bigint, p_deadline_s double precision,
    p_aging_s double precision, p_packs boolean, p_kind text DEFAULT NULL
) RETURNS TABLE (
    id bigint, run_lease bigint, kind text, queue text, args jsonb, attempt smallint,
    max_attempts smallint, priority smallint, tags text[], metadata jsonb, errors jsonb,
    progress jsonb, run_at timestamptz, created_at timestamptz, deadline_at timestamptz
)
LANGUAGE plpgsql
-- nested loops over the candidates, each a TID probe (see above)
SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
    v_open boolean;
    v_now pg_snapshot;
    v_lanes awa_fast.claim_windows[];
    v_candidates awa_fast.claim_candidate[];
    v_taken bigint;
BEGIN
    -- "awac": the two-key form, in a key space of its own
    PERFORM pg_advisory_xact_lock(1635213667, hashtext(p_queue));

    IF p_kind IS NOT NULL THEN
        SELECT array_agg((k.priority, 0, k.ready_xid, k.id, k.ctid, k.run_at,
                          k.tableoid)::awa_fast.claim_candidate)
        INTO v_candidates
        FROM (
            SELECT k.priority, k.ready_xid, k.id, k.ctid, k.run_at, k.tableoid
            FROM awa_fast.jobs_hot k
            WHERE k.queue = p_queue AND k.state = 'available' AND k.kind = p_kind
              AND NOT EXISTS (
                  SELECT 1 FROM awa_fast.queue_meta m WHERE m.queue = p_queue AND m.paused
              )
            ORDER BY k.priority, k.run_at, k.id
            LIMIT 1
        ) k;
    ELSE
        WITH queue_open AS (
            SELECT NOT EXISTS (
                SELECT 1 FROM awa_fast.queue_meta m WHERE m.queue = p_queue AND m.paused
            ) AS open
        ),
        now_snap AS (SELECT pg_current_snapshot() AS hi),
        lanes AS (
            SELECT (p_queue, p.priority, COALESCE(l.n, 0), COALESCE(l.lo, '1:1:'),
                    COALESCE(l.hi, '1:1:'), COALESCE(l.pos_xid, '0'),
                    COALESCE(l.pos_id, 0), 0)::awa_fast.claim_windows AS lane
            FROM generate_series(1, 4) AS p(priority)
            LEFT JOIN LATERAL (
                SELECT * FROM awa_fast.claim_windows w
                WHERE w.queue = p_queue AND w.priority = p.priority
                ORDER BY w.n DESC LIMIT 1
            ) l ON true
        ),
        rest AS (
            SELECT (l.lane).priority, 0 AS w, r.*
            FROM lanes l, queue_open o,
                 awa_fast.window_rows(p_queue, (l.lane).priority, (l.lane).lo, (l.lane).hi,
                                      (l.lane).pos_xid, (l.lane).pos_id, p_limit) r
            WHERE o.open
        ),
        -- each lane's count in rest as a column, not a subquery in window_rows' arguments,
        -- which would keep the function from being inlined (and so planned at each call)
        rested AS (
            SELECT l.lane,
                   (SELECT count(*) FROM rest t WHERE t.priority = (l.lane).priority) AS n
            FROM lanes l
        ),
        fresh AS (
            SELECT (l.lane).priority, 1 AS w, r.*
            FROM rested l, queue_open o, now_snap s,
                 awa_fast.window_rows(p_queue, (l.lane).priority, (l.lane).hi, s.hi, '0', 0,
                                      p_limit - l.n) r
            WHERE o.open
        )
        SELECT (SELECT open FROM queue_open), (SELECT hi FROM now_snap),
               (SELECT array_agg(lane) FROM lanes),
               (SELECT array_agg((c.priority, c.w, c.ready_xid, c.id, c.row_ctid,
                                  c.run_at, c.row_rel)::awa_fast.claim_candidate)
                FROM (SELECT * FROM rest UNION ALL SELECT * FROM fresh) c)
        INTO v_open, v_now, v_lanes, v_candidates;
    END IF;

    RETURN QUERY
    WITH candidate_rows AS (
        SELECT c.row_ctid AS ctid, c.row_rel AS rel, NULL::bigint AS pack, c.run_at, c.id,
               0 AS taken,
               1 AS size, awa_fast.claim_rank(c.priority, c.run_at, p_aging_s) AS rank
        FROM unnest(v_candidates) c
    ),
    candidate_packs AS (
        SELECT NULL::tid, NULL::oid, c.id, c.run_at, c.next_id, c.taken, c.size - c.taken,
               awa_fast.claim_rank(c.priority, c.run_at, p_aging_s)
        FROM generate_series(1, 4) AS p(priority), LATERAL (
            SELECT k.id, k.priority, k.run_at, k.next_id, k.taken, k.size
            FROM awa_fast.job_packs k
            WHERE k.queue = p_queue AND k.priority = p.priority AND p_packs AND v_open
            ORDER BY k.run_at, k.next_id
            LIMIT p_limit / 64 + 2
            FOR UPDATE SKIP LOCKED
        ) c
    ),
    ahead AS (
        SELECT *, sum(size) OVER (ORDER BY rank, run_at, id ROWS UNBOUNDED PRECEDING)
                  - size AS before
        FROM (SELECT * FROM candidate_rows UNION ALL SELECT * FROM candidate_packs) c
    ),
    chosen AS (
        SELECT ctid, rel, pack, least(size, p_limit - before) AS k
        FROM ahead WHERE before < p_limit
    ),
    -- A row another transaction holds is passed over, never waited for: a long
    -- transaction that locked one job must not stop the queue's claims, and a claim that
    -- waited on rows while holding the queue's lock could deadlock with their holder.
    -- Each by its partition and ctid, the version step 2 read available (a version's
    -- state never changes); a probe each, as a ctid alone names a row in each partition.
    locked AS (
        SELECT k.* FROM chosen c, LATERAL (
            SELECT k.tableoid AS rel, k.ctid FROM awa_fast.jobs_hot k
            WHERE k.ctid = c.ctid AND k.tableoid = c.rel
            FOR UPDATE SKIP LOCKED) k
        WHERE c.pack IS NULL
    ),
    claimed AS (
        UPDATE awa_fast.jobs_hot j
        SET state = 'running',
            attempt = j.attempt + 1,
            run_lease = j.run_lease + 1,
            attempted_at = now(),
            heartbeat_at = now(),
            host_id = p_host_id,
            deadline_at = now() + make_interval(secs => COALESCE(j.deadline_seconds,
                                                                 p_deadline_s)),
            -- A callback id belongs to the attempt that registered it: one from an
            -- earlier attempt must not resolve this one. Its expressions go with it.
            callback_id = NULL,
            callback_timeout_at = NULL,
            callback_rules = NULL
        FROM locked l
        WHERE j.ctid = l.ctid AND j.tableoid = l.rel
        RETURNING j.id, j.run_lease, j.kind, j.queue, j.args, j.attempt, j.max_attempts,
                  j.priority, j.tags, NULLIF(j.metadata, '{}'), NULLIF(j.errors, '[]'),
                  j.progress, j.run_at, j.created_at, j.deadline_at
    ),
    started AS (
        -- once a pack taken, from the select list: a claim that takes none runs none
        SELECT (t.job).* FROM (
            SELECT awa_fast.start_packed(c.pack, c.k::integer, p_host_id, p_deadline_s)
                AS job
            FROM chosen c WHERE c.pack IS NOT NULL
        ) t
    )
    SELECT j.* FROM (SELECT * FROM claimed UNION ALL SELECT * FROM started) j
    ORDER BY awa_fast.claim_rank(j.priority, j.run_at, p_aging_s), j.run_at, j.id;
    GET DIAGNOSTICS v_taken = ROW_COUNT;

    IF v_lanes IS NULL OR NOT v_open THEN
        RETURN;
    END IF;
    IF v_taken = 0 THEN
        -- A claim that took nothing writes only ledger rows, whose loss in a crash costs
        -- a claim a longer read: its commit need not wait for the flush, as an empty
        -- claim's did not before it wrote any. (Claims run in a transaction of their own.)
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    -- per lane, the first candidate in window order still available: the prefix before it
    -- was taken or is gone. The state in the select list: a condition on it would match
    -- jobs_hot_ready's predicate, and the plan would read that index instead of the ctid.
    WITH marked AS (
        SELECT c.*, bool_or(COALESCE(s.available, false)) OVER (
                   PARTITION BY c.priority ORDER BY c.w, c.ready_xid, c.id
                   ROWS UNBOUNDED PRECEDING) AS blocked
        FROM unnest(v_candidates) c LEFT JOIN LATERAL (
            SELECT j.state = 'available' AS available FROM awa_fast.jobs_hot j
            WHERE j.ctid = c.row_ctid AND j.tableoid = c.row_rel) s ON true
    ),
    -- per lane: whether it was read to the end (fewer candidates than asked for) with
    -- every candidate taken or gone, and whether the window lags this claim's snapshot
    -- by 1,000 transactions or more
    lanes AS (
        SELECT l.priority, l.n, l.lo, l.hi,
               (SELECT count(*) < p_limit AND NOT COALESCE(bool_or(m.blocked), false)
                FROM marked m WHERE m.priority = l.priority) AS ended,
               pg_snapshot_xmax(v_now)::text::bigint
                   - pg_snapshot_xmax(l.hi)::text::bigint >= 1000 AS lags
        FROM unnest(v_lanes) l
    ),
    reached AS (
        SELECT DISTINCT ON (m.priority) m.priority, m.w, m.ready_xid, m.id
        FROM marked m WHERE NOT m.blocked
        ORDER BY m.priority, m.w DESC, m.ready_xid DESC, m.id DESC
    )
    INSERT INTO awa_fast.claim_windows (queue, priority, n, lo, hi, pos_xid, pos_id)
    -- A lane read to its end: nothing in it after the position is available as of this
    -- snapshot, and whatever is made available later lies in a later window. It moves to
    -- the empty window (now, now], so that the next claim reads only what committed since,
    -- not the entries of jobs that left the lane without a claim (started on a standby
    -- claim, cancelled), which a held horizon keeps in the index. Once it has taken a
    -- candidate; with none taken, only once it lags, so that idle claims append no row.
    SELECT p_queue, l.priority, l.n + 1, v_now, v_now, '0'::xid8, 0
    FROM lanes l
    WHERE l.ended AND (l.lags OR EXISTS (SELECT 1 FROM reached r WHERE r.priority = l.priority))
    UNION ALL
    SELECT p_queue, l.priority, l.n + 1,
           CASE WHEN r.w = 1 THEN l.hi ELSE l.lo END,
           CASE WHEN r.w = 1 THEN v_now ELSE l.hi END,
           r.ready_xid, r.id
    FROM reached r JOIN lanes l ON l.priority = r.priority
    WHERE NOT l.ended;
END;
$$;

-- The rings' functions of migration 0028, with jobs_hot as the ring `hot`.
CREATE OR REPLACE FUNCTION awa_fast.ring_partition(p_ring text, p_slot smallint)
RETURNS regclass
LANGUAGE sql STABLE AS $$
    SELECT format('awa_fast.%s_%s',
                  CASE p_ring WHEN 'standby' THEN 'standby_claims'
                              WHEN 'ledger' THEN 'claim_windows'
                              WHEN 'hot' THEN 'jobs_hot'
                              WHEN 'done' THEN 'jobs_done' END,
                  p_slot)::regclass
$$;

-- A ring partition's lock, for its rotation: never waited for, but looked for again, 25
-- times a millisecond apart. Every statement on jobs_hot and every inserting transaction
-- that starts a job on a standby claim holds it a millisecond or two at a time, and a look
-- once a second found it free too seldom. Whether it was taken; held until the caller's
-- transaction ends.
CREATE FUNCTION awa_fast.ring_lock(p_partition regclass) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    FOR v_try IN 1..25 LOOP
        BEGIN
            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE NOWAIT', p_partition);
            RETURN true;
        EXCEPTION WHEN lock_not_available THEN
            PERFORM pg_sleep(0.001);
        END;
    END LOOP;
    RETURN false;
END;
$$;

-- For jobs_hot, as for the standby claims, what a rotation frees is dead versions, by the
-- statistics.
CREATE OR REPLACE FUNCTION awa_fast.ring_freeable(p_ring text, p_slot smallint,
                                                  p_least bigint)
RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_freeable boolean;
BEGIN
    IF p_ring IN ('standby', 'hot') THEN
        RETURN pg_stat_get_dead_tuples(awa_fast.ring_partition(p_ring, p_slot)) >= p_least;
    END IF;
    SELECT count(*) >= p_least FROM (
        SELECT 1 FROM awa_fast.claim_windows s
        WHERE s.slot = p_slot AND EXISTS (
            SELECT 1 FROM awa_fast.claim_windows c
            WHERE c.queue = s.queue AND c.priority = s.priority AND c.n > s.n)
        LIMIT p_least) behind
    INTO v_freeable;
    RETURN v_freeable;
END;
$$;

-- ring_rotate as in migration 0028, and for `hot`: the sealed partition's live rows
-- (available, running and waiting jobs) move to the partition in use by a cross-partition
-- UPDATE, before the TRUNCATE. Only while it holds 1,000 live rows or fewer, by the
-- statistics: the move holds every statement on jobs_hot off until it commits, and a
-- partition that still holds a backlog is left for its claims to drain (the partition in
-- use is sealed meanwhile, if it has enough to free, so that writers go on rotating).
CREATE OR REPLACE FUNCTION awa_fast.ring_rotate(p_ring text, p_least bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_current smallint;
    v_sealed regclass;
BEGIN
    IF p_ring NOT IN ('standby', 'ledger', 'hot') THEN
        RAISE EXCEPTION 'no ring named %', p_ring;
    END IF;
    v_current := awa_fast.ring_slot(p_ring);
    v_sealed := awa_fast.ring_partition(p_ring, (1 - v_current)::smallint);
    IF NOT awa_fast.ring_freeable(p_ring, (1 - v_current)::smallint, p_least)
       OR (p_ring = 'hot' AND pg_stat_get_live_tuples(v_sealed) > 1000) THEN
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
