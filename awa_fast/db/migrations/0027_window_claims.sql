-- Window claims: a claim reads only the available rows made available since the claims
-- before it, never the index entries those claims left behind.
--
-- A claim that walked jobs_hot_claim from the front of its queue walked, under a held xmin
-- horizon, the entry of every job claimed since the horizon was pinned: vacuum cannot
-- remove them while it is held, and the claim's p50 went from 3 to 98 ms in 80 s at 3,000
-- jobs/s (benches/RESULTS.md, "Claims under a held horizon"). Claims now consume each lane
-- (a queue's priority) in windows, as benches/window_claim.py does with append-only
-- entries: a window holds the available rows whose versions were written by transactions
-- that committed between two snapshots, lo and hi, and a claim reads its window from the
-- position the last claim reached, so it never meets the entries behind that position.
--
-- ready_xid: the transaction that wrote an available version of a row. Set by the database
-- for every available version (the default and the trigger below), so that whatever makes
-- a job available (an insert, a promotion, a release, a priority change, an admin retry)
-- writes a version that commits after any window that saw an older one, and so lies in a
-- later window. On every job table, which statements move rows between whole (NULL there).
ALTER TABLE awa_fast.jobs_hot ADD COLUMN ready_xid xid8;
ALTER TABLE awa_fast.jobs_deferred ADD COLUMN ready_xid xid8;
ALTER TABLE awa_fast.jobs_done ADD COLUMN ready_xid xid8;
ALTER TABLE awa_fast.dlq ADD COLUMN ready_xid xid8;
ALTER TABLE awa_fast.jobs_hot ALTER COLUMN ready_xid SET DEFAULT pg_current_xact_id();

-- pg_current_xact_id() is the top-level transaction's id, inside a savepoint too: the id a
-- snapshot's visibility is judged by. The WHEN clause keeps the call off claims,
-- heartbeats and completions, which write no available version.
CREATE FUNCTION awa_fast.stamp_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.ready_xid := pg_current_xact_id();
    RETURN NEW;
END;
$$;
CREATE TRIGGER jobs_hot_ready
    BEFORE INSERT OR UPDATE ON awa_fast.jobs_hot
    FOR EACH ROW WHEN (NEW.state = 'available') EXECUTE FUNCTION awa_fast.stamp_ready();

-- Available rows from before, stamped with this migration's id: the first window covers them.
UPDATE awa_fast.jobs_hot SET ready_xid = pg_current_xact_id() WHERE state = 'available';

-- A lane's rows in window order. It replaces jobs_hot_claim, which only claims read (the
-- queue's statistics read jobs_hot whole): every index costs each insert.
CREATE INDEX jobs_hot_ready ON awa_fast.jobs_hot (queue, priority, ready_xid, id)
    WHERE state = 'available';
DROP INDEX awa_fast.jobs_hot_claim;

-- The ledger: one row per claim that advanced a lane, never updated, the lane's state
-- being its newest row (a backward read of the primary key): the window (lo, hi] the lane
-- is in and the last row (pos_xid, pos_id) taken or gone in it. The leader prunes all but
-- each lane's newest row (ledger_prune).
CREATE TABLE awa_fast.claim_windows (
    queue text NOT NULL,
    priority smallint NOT NULL,
    n bigint NOT NULL,
    lo pg_snapshot NOT NULL,
    hi pg_snapshot NOT NULL,
    pos_xid xid8 NOT NULL,
    pos_id bigint NOT NULL,
    PRIMARY KEY (queue, priority, n)
);

-- A claim's candidate row, carried from the statement that reads it to those that take it.
CREATE TYPE awa_fast.claim_candidate AS (
    priority smallint, w integer, ready_xid xid8, id bigint, row_ctid tid, run_at timestamptz
);

-- The lane's available rows in the window (lo, hi] after (pos_xid, pos_id), in window
-- order: those of transactions in progress at lo, found by id (one probe each), then those
-- of the id range [xmax(lo), xmax(hi)), which starts at the position, never before it.
-- STABLE, so it reads in its caller's snapshot, which is hi or later (a later snapshot sees
-- only versions of transactions that commit after hi in addition: their rows are filtered
-- out by pg_visible_in_snapshot).
CREATE FUNCTION awa_fast.window_rows(
    p_queue text, p_priority smallint, lo pg_snapshot, hi pg_snapshot, pos_xid xid8,
    pos_id bigint, k bigint
) RETURNS TABLE (ready_xid xid8, id bigint, row_ctid tid, run_at timestamptz)
LANGUAGE sql STABLE AS $$
    (SELECT r.ready_xid, r.id, r.row_ctid, r.run_at
     FROM pg_snapshot_xip(lo) AS x(xid)
     CROSS JOIN LATERAL (
         SELECT r.ready_xid, r.id, r.ctid AS row_ctid, r.run_at FROM awa_fast.jobs_hot r
         WHERE r.queue = p_queue AND r.priority = p_priority AND r.state = 'available'
           AND r.ready_xid = x.xid AND (x.xid > pos_xid OR r.id > pos_id)
         ORDER BY r.id LIMIT k) r
     WHERE x.xid >= pos_xid AND pg_visible_in_snapshot(x.xid, hi)
     ORDER BY r.ready_xid, r.id LIMIT k)
    UNION ALL
    (SELECT r.ready_xid, r.id, r.ctid, r.run_at FROM awa_fast.jobs_hot r
     WHERE r.queue = p_queue AND r.priority = p_priority AND r.state = 'available'
       AND r.ready_xid < pg_snapshot_xmax(hi)
       AND (r.ready_xid, r.id) > (greatest(pos_xid, pg_snapshot_xmax(lo)),
                                  CASE WHEN pos_xid >= pg_snapshot_xmax(lo) THEN pos_id
                                       ELSE -1 END)
       AND pg_visible_in_snapshot(r.ready_xid, hi)
     ORDER BY r.ready_xid, r.id LIMIT k)
    ORDER BY 1, 2 LIMIT k
$$;

-- The run_at of the row a claim of the lane would take first: the first of the rest of its
-- window, else the first of the window a claim would open now. queue_stats' lag reads it:
-- like a claim, it starts at the lane's position, so a held horizon does not slow it.
CREATE FUNCTION awa_fast.lane_head(p_queue text, p_priority smallint) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT h.run_at
    FROM (SELECT 1) AS one
    LEFT JOIN LATERAL (
        SELECT * FROM awa_fast.claim_windows w
        WHERE w.queue = p_queue AND w.priority = p_priority
        ORDER BY w.n DESC LIMIT 1
    ) l ON true,
    LATERAL (
        (SELECT r.run_at, 0 AS w
         FROM awa_fast.window_rows(p_queue, p_priority, COALESCE(l.lo, '1:1:'),
                                   COALESCE(l.hi, '1:1:'), COALESCE(l.pos_xid, '0'),
                                   COALESCE(l.pos_id, 0), 1) r)
        UNION ALL
        (SELECT r.run_at, 1
         FROM awa_fast.window_rows(p_queue, p_priority, COALESCE(l.hi, '1:1:'),
                                   pg_current_snapshot(), '0', 0, 1) r)
    ) h
    ORDER BY h.w
    LIMIT 1
$$;

-- A job's rank in claim order: its priority, or with aging (p_aging_s) one higher for each
-- p_aging_s it has waited since its run_at, up to 1.
CREATE FUNCTION awa_fast.claim_rank(
    p_priority smallint, p_run_at timestamptz, p_aging_s double precision
) RETURNS double precision
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_aging_s IS NULL THEN p_priority
                ELSE greatest(1, p_priority - floor(extract(epoch FROM now() - p_run_at)
                                                    / p_aging_s)) END
$$;

-- Take up to p_limit available jobs of p_queue, from its rows and (p_packs) its packs, in
-- claim order: priority (aged by p_aging_s when given, as the Awa SDK's priority aging),
-- run_at, id. Returns them as job_claim_rows did, in that order.
--
-- Statements, each with its own snapshot (VOLATILE, READ COMMITTED):
-- 1. The queue's claim lock: claims of a queue take turns, and each statement below sees
--    the ledger rows and claims of the one before.
-- 2. Per lane: its newest ledger row, this statement's snapshot (now_snap), and up to
--    p_limit candidates in window order: the rest of the current window, then the new
--    window from its hi to now_snap. No row locks.
-- 3. The candidates merged with packs, as before, and the chosen rows locked FOR UPDATE
--    SKIP LOCKED and updated by ctid. A row another transaction holds is passed over; one
--    a committed transaction changed no longer matches its ctid and is skipped (its
--    successor, if available, carries a newer ready_xid). Packs are locked as before.
-- 4. The candidates still current and available (a TID read): the others were taken by
--    step 3 or are gone. Each lane moves its position past its longest prefix (in window
--    order) of candidates taken or gone, never past one still available: a row passed
--    over because another transaction holds it stops the position until it is released,
--    though the claim takes the rows after it.
-- With p_kind, the one candidate is the first available job of that kind in claim order
-- (the test client's work_one claims so): no window is read and no position moves; to
-- window claims the job is one made running by another statement, gone.
CREATE FUNCTION awa_fast.claim_jobs(
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
                    COALESCE(l.pos_id, 0))::awa_fast.claim_windows AS lane
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

    IF v_candidates IS NULL OR v_lanes IS NULL THEN
        RETURN;
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
    reached AS (
        SELECT DISTINCT ON (m.priority) m.priority, m.w, m.ready_xid, m.id
        FROM marked m WHERE NOT m.blocked
        ORDER BY m.priority, m.w DESC, m.ready_xid DESC, m.id DESC
    )
    INSERT INTO awa_fast.claim_windows
    SELECT p_queue, l.priority, l.n + 1,
           CASE WHEN r.w = 1 THEN l.hi ELSE l.lo END,
           CASE WHEN r.w = 1 THEN v_now ELSE l.hi END,
           r.ready_xid, r.id
    FROM reached r JOIN unnest(v_lanes) l ON l.priority = r.priority;
END;
$$;
