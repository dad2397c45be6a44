-- Rings: the standby claims and the claim ledger kept in two partitions each, emptied in
-- turn by TRUNCATE, so that what they leave behind is freed whatever the xmin horizon.
--
-- Both tables hold a few live rows at a time and churn through many: a standby claim is
-- inserted, updated when a job starts on it and deleted when its host collects it (two
-- dead tuples a job started so); the ledger gains a row a claim and the leader deleted
-- the rows behind each lane's newest (one a claim). While a transaction anywhere held the
-- xmin horizon, vacuum could remove none of them, and every insert into jobs_hot probed
-- standby_claims_waiting through the entry of every claim taken since the hold began
-- (0.33-0.74 dead tuples a job at 500 jobs/s). The ledger's prune stood down while it saw
-- a hold, but a role without pg_read_all_stats does not see other roles' transactions.
--
-- Each table is now LIST-partitioned by `slot`, 0 or 1, its rows appended to the
-- partition a sequence names, as count_deltas (migration 0025) are. The leader rotates a
-- ring once it has enough to free (awa_fast.maintenance.rings): it takes the sealed
-- partition's lock without waiting, copies the rows still wanted into the partition in
-- use, TRUNCATEs the sealed one and points writers at it, sealing the one in use. What a
-- hold leaves is about two rotations' worth, and rows are never deleted just to be rid
-- of them.
--
-- The lock is never waited for: any transaction that has read a ring (every inserting
-- transaction's trigger reads standby_claims whole) holds a lock on both partitions until
-- it ends, and a TRUNCATE that queued behind one would queue every writer behind itself.
-- A pass that does not get it rotates at the next one.

-- The partition writers append to now, as count_slot (migration 0025): a sequence, moved
-- in place, read through pg_sequence_last_value with USAGE alone.
CREATE SEQUENCE awa_fast.standby_slot AS smallint MINVALUE 0 MAXVALUE 1 START 0 CYCLE;
SELECT setval('awa_fast.standby_slot', 0);
CREATE FUNCTION awa_fast.standby_slot() RETURNS smallint
LANGUAGE sql STABLE AS $$ SELECT pg_sequence_last_value('awa_fast.standby_slot')::smallint $$;

CREATE SEQUENCE awa_fast.ledger_slot AS smallint MINVALUE 0 MAXVALUE 1 START 0 CYCLE;
SELECT setval('awa_fast.ledger_slot', 0);
CREATE FUNCTION awa_fast.ledger_slot() RETURNS smallint
LANGUAGE sql STABLE AS $$ SELECT pg_sequence_last_value('awa_fast.ledger_slot')::smallint $$;

-- Standby claims: the columns of migration 0018, and the slot. A partitioned table cannot
-- be UNLOGGED; its partitions are, as the table was. Ids stay unique: a rotation copies a
-- row with its id and truncates the original in the same transaction.
ALTER TABLE awa_fast.standby_claims RENAME TO standby_claims_0018;
ALTER TABLE awa_fast.standby_claims_0018 RENAME CONSTRAINT standby_claims_pkey
    TO standby_claims_0018_pkey;
DROP INDEX awa_fast.standby_claims_waiting, awa_fast.standby_claims_host;
CREATE TABLE awa_fast.standby_claims (
    id bigint GENERATED ALWAYS AS IDENTITY,
    queue text NOT NULL,
    host_id bigint NOT NULL,
    deadline_s double precision NOT NULL,
    job_id bigint,
    run_lease bigint,
    slot smallint NOT NULL DEFAULT awa_fast.standby_slot(),
    PRIMARY KEY (id, slot)
) PARTITION BY LIST (slot);
-- Vacuumed as before too: a ring whose lock a rotation never gets (inserting
-- transactions that always overlap) churns no worse than the table did.
CREATE UNLOGGED TABLE awa_fast.standby_claims_0 PARTITION OF awa_fast.standby_claims
    FOR VALUES IN (0);
CREATE UNLOGGED TABLE awa_fast.standby_claims_1 PARTITION OF awa_fast.standby_claims
    FOR VALUES IN (1);
CREATE INDEX standby_claims_waiting ON awa_fast.standby_claims (queue, id)
    WHERE job_id IS NULL;
CREATE INDEX standby_claims_host ON awa_fast.standby_claims (host_id);
INSERT INTO awa_fast.standby_claims (id, queue, host_id, deadline_s, job_id, run_lease)
OVERRIDING SYSTEM VALUE
SELECT id, queue, host_id, deadline_s, job_id, run_lease FROM awa_fast.standby_claims_0018;
SELECT setval(pg_get_serial_sequence('awa_fast.standby_claims', 'id'),
              (SELECT COALESCE(max(id), 0) + 1 FROM awa_fast.standby_claims_0018), false);
DROP TABLE awa_fast.standby_claims_0018;

-- The ledger: the columns of migration 0027, and the slot. Each lane's newest row is all
-- claims read; the older rows are left to the rotation.
ALTER TABLE awa_fast.claim_windows RENAME TO claim_windows_0027;
ALTER TABLE awa_fast.claim_windows_0027 RENAME CONSTRAINT claim_windows_pkey
    TO claim_windows_0027_pkey;
CREATE TABLE awa_fast.claim_windows (
    queue text NOT NULL,
    priority smallint NOT NULL,
    n bigint NOT NULL,
    lo pg_snapshot NOT NULL,
    hi pg_snapshot NOT NULL,
    pos_xid xid8 NOT NULL,
    pos_id bigint NOT NULL,
    slot smallint NOT NULL DEFAULT awa_fast.ledger_slot(),
    PRIMARY KEY (queue, priority, n, slot)
) PARTITION BY LIST (slot);
CREATE TABLE awa_fast.claim_windows_0 PARTITION OF awa_fast.claim_windows
    FOR VALUES IN (0);
CREATE TABLE awa_fast.claim_windows_1 PARTITION OF awa_fast.claim_windows
    FOR VALUES IN (1);
INSERT INTO awa_fast.claim_windows (queue, priority, n, lo, hi, pos_xid, pos_id)
SELECT DISTINCT ON (queue, priority) queue, priority, n, lo, hi, pos_xid, pos_id
FROM awa_fast.claim_windows_0027
ORDER BY queue, priority, n DESC;
DROP TABLE awa_fast.claim_windows_0027;

-- claim_jobs as in migration 0027, but for the ledger:
-- * a lane read from it is an awa_fast.claim_windows value, whose row type now ends in
--   `slot` (any value: it is never read), and a row appended names its columns, `slot`
--   taking its default;
-- * a lane read to its end moves to an empty window at the claim's snapshot. Its position
--   moved only past candidates, so a lane whose jobs all left it another way (started on
--   standby claims, as most are at low rates) stayed put, and each claim walked the index
--   entries of every such job since: while a horizon was held, those entries stayed, and
--   at 500 jobs/s pickup p50 went from 0.27 to 1.09 ms over a 60 s hold.
CREATE OR REPLACE FUNCTION awa_fast.claim_jobs(
    p_queue text, p_limit integer, p_host_id bigint, p_deadline_s double precision,
    p_aging_s double precision, p_packs boolean, p_kind text DEFAULT NULL
) RETURNS TABLE (
    id bigint, run_lease bigint, kind text, queue text, args jsonb, attempt smallint,
    max_attempts smallint, priority smallint, tags text[], metadata jsonb, errors jsonb,
    progress jsonb, run_at timestamptz, created_at timestamptz, deadline_at timestamptz
)
LANGUAGE plpgsql AS $$
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
        SELECT array_agg((j.priority, 0, j.ready_xid, j.id, j.ctid,
                          j.run_at)::awa_fast.claim_candidate)
        INTO v_candidates
        FROM awa_fast.jobs_hot j
        WHERE j.ctid = (
            SELECT k.ctid FROM awa_fast.jobs_hot k
            WHERE k.queue = p_queue AND k.state = 'available' AND k.kind = p_kind
              AND NOT EXISTS (
                  SELECT 1 FROM awa_fast.queue_meta m WHERE m.queue = p_queue AND m.paused
              )
            ORDER BY k.priority, k.run_at, k.id
            LIMIT 1
        );
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
                                  c.run_at)::awa_fast.claim_candidate)
                FROM (SELECT * FROM rest UNION ALL SELECT * FROM fresh) c)
        INTO v_open, v_now, v_lanes, v_candidates;
    END IF;

    RETURN QUERY
    WITH candidate_rows AS (
        SELECT c.row_ctid AS ctid, NULL::bigint AS pack, c.run_at, c.id, 0 AS taken,
               1 AS size, awa_fast.claim_rank(c.priority, c.run_at, p_aging_s) AS rank
        FROM unnest(v_candidates) c
    ),
    candidate_packs AS (
        SELECT NULL::tid, c.id, c.run_at, c.next_id, c.taken, c.size - c.taken,
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
        SELECT ctid, pack, least(size, p_limit - before) AS k
        FROM ahead WHERE before < p_limit
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
        -- ctid alone, so that the plans are TID scans: a ctid names the version step 2
        -- read available, and a version's state never changes. A row another
        -- transaction holds is passed over, never waited for: a long transaction that
        -- locked one job must not stop the queue's claims, and a claim that waited on
        -- rows while holding the queue's lock could deadlock with their holder.
        WHERE j.ctid = ANY (ARRAY(
            SELECT k.ctid FROM awa_fast.jobs_hot k
            WHERE k.ctid = ANY (ARRAY(SELECT c.ctid FROM chosen c WHERE c.pack IS NULL))
            FOR UPDATE SKIP LOCKED))
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
    WITH still AS (
        -- the state in the select list: a condition on it would match jobs_hot_ready's
        -- predicate, and the plan would read that index whole instead of the ctids
        SELECT j.ctid, j.state = 'available' AS available FROM awa_fast.jobs_hot j
        WHERE j.ctid = ANY (ARRAY(SELECT c.row_ctid FROM unnest(v_candidates) c))
    ),
    -- per lane, the first candidate in window order still available: the prefix before it
    -- was taken or is gone
    marked AS (
        SELECT c.*, bool_or(COALESCE(s.available, false)) OVER (
                   PARTITION BY c.priority ORDER BY c.w, c.ready_xid, c.id
                   ROWS UNBOUNDED PRECEDING) AS blocked
        FROM unnest(v_candidates) c LEFT JOIN still s ON s.ctid = c.row_ctid
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

-- Partition `p_slot` of ring `p_ring`; and the slot its writers append to now, by the
-- ring's sequence (awa_fast.standby_slot or awa_fast.ledger_slot).
CREATE FUNCTION awa_fast.ring_partition(p_ring text, p_slot smallint) RETURNS regclass
LANGUAGE sql STABLE AS $$
    SELECT format('awa_fast.%s_%s',
                  CASE p_ring WHEN 'standby' THEN 'standby_claims'
                              WHEN 'ledger' THEN 'claim_windows' END,
                  p_slot)::regclass
$$;
CREATE FUNCTION awa_fast.ring_slot(p_ring text) RETURNS smallint
LANGUAGE sql STABLE AS $$
    SELECT pg_sequence_last_value(format('awa_fast.%s_slot', p_ring)::regclass)::smallint
$$;

-- Whether partition `p_slot` of ring `p_ring` holds `p_least` or more of what a rotation
-- would free: for the standby claims, dead versions (the statistics' count, which lags by
-- a second or so); for the ledger, rows behind their lane's newest.
CREATE FUNCTION awa_fast.ring_freeable(p_ring text, p_slot smallint, p_least bigint)
RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_freeable boolean;
BEGIN
    IF p_ring = 'standby' THEN
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

-- One pass over ring `p_ring` (`standby` or `ledger`), freeing `p_least` rows or more:
-- * 'truncated': the sealed partition held enough to free. Its rows still wanted were
--   copied to the partition in use (every standby claim: a waiting one is an offer still
--   open, a spent one a start its host has not collected; each lane's newest ledger row,
--   unless the partition in use has a newer one), it was truncated, and writers moved to
--   it, sealing the one they used;
-- * 'sealed': not enough to free there, but enough in the partition in use: writers moved
--   to the sealed one, so that the next pass frees it;
-- * 'busy': the sealed partition's lock was held: the next pass tries again;
-- * NULL: not enough to free. An idle ring is left alone rather than copied back and
--   forth, and a rotation, which holds the sealed partition's lock while it commits, costs
--   the ring's readers that wait a few milliseconds each time.
-- It commits without waiting for its flush (synchronous_commit off): a rotation lost in a
-- crash is one that did not happen, its copies and its TRUNCATE alike, and the lock is
-- let go without waiting for the disk.
-- SECURITY DEFINER: TRUNCATE is the owner's, not the application role's to grant.
CREATE FUNCTION awa_fast.ring_rotate(p_ring text, p_least bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_current smallint;
    v_sealed regclass;
BEGIN
    IF p_ring NOT IN ('standby', 'ledger') THEN
        RAISE EXCEPTION 'no ring named %', p_ring;
    END IF;
    v_current := awa_fast.ring_slot(p_ring);
    v_sealed := awa_fast.ring_partition(p_ring, (1 - v_current)::smallint);
    IF NOT awa_fast.ring_freeable(p_ring, (1 - v_current)::smallint, p_least) THEN
        IF awa_fast.ring_freeable(p_ring, v_current, p_least) THEN
            PERFORM setval(format('awa_fast.%s_slot', p_ring), 1 - v_current);
            RETURN 'sealed';
        END IF;
        RETURN NULL;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    BEGIN
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE NOWAIT', v_sealed);
    EXCEPTION WHEN lock_not_available THEN
        RETURN 'busy';
    END;
    IF p_ring = 'standby' THEN
        EXECUTE format(
            'INSERT INTO awa_fast.standby_claims'
            ' (id, queue, host_id, deadline_s, job_id, run_lease, slot)'
            ' OVERRIDING SYSTEM VALUE'
            ' SELECT id, queue, host_id, deadline_s, job_id, run_lease, $1 FROM %s',
            v_sealed) USING v_current;
    ELSE
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
    END IF;
    EXECUTE format('TRUNCATE %s', v_sealed);
    PERFORM setval(format('awa_fast.%s_slot', p_ring), 1 - v_current);
    RETURN 'truncated';
END;
$$;
