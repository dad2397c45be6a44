-- News of packs on a channel of their own. A runner claims with job_claim_rows, which reads
-- jobs_hot alone, until it hears that a queue may hold packs (migration 0016): a one-job
-- claim costs less that way (benches/RESULTS.md, "Design measurements"). Packs are news
-- when they are inserted, and when a claim takes part of one and leaves the rest: a runner
-- whose claim skipped that pack, locked by this claim, saw no packs and claims rows alone
-- until told.
-- Inserts still notify awa_fast_jobs as well, for runners of an earlier version.
CREATE OR REPLACE FUNCTION awa_fast.notify_packed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    q text;
BEGIN
    FOR q IN SELECT DISTINCT queue FROM inserted LOOP
        PERFORM pg_notify('awa_fast_jobs', q);
        PERFORM pg_notify('awa_fast_packs', q);
    END LOOP;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION awa_fast.start_packed(
    p_pack bigint, p_take integer, p_host_id bigint, p_deadline_s double precision
) RETURNS TABLE (
    id bigint, run_lease bigint, kind text, queue text, args jsonb, attempt smallint,
    max_attempts smallint, priority smallint, tags text[], metadata jsonb, errors jsonb,
    progress jsonb, run_at timestamptz, created_at timestamptz, deadline_at timestamptz
)
LANGUAGE sql AS $$
    WITH pack AS (
        SELECT * FROM awa_fast.job_packs WHERE id = p_pack
    ),
    advanced AS (
        UPDATE awa_fast.job_packs p
        SET taken = p.taken + p_take, next_id = p.ids[p.taken + p_take + 1]
        WHERE p.id = p_pack AND p.taken + p_take < p.size
        RETURNING pg_notify('awa_fast_packs', p.queue)
    ),
    emptied AS (
        DELETE FROM awa_fast.job_packs p WHERE p.id = p_pack AND p.taken + p_take = p.size
    )
    INSERT INTO awa_fast.jobs_hot AS j (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
        attempted_at, heartbeat_at, run_lease, host_id, tags, metadata, deadline_seconds,
        deadline_at)
    SELECT s.id, p.kind, p.queue, s.args::jsonb, 'running', p.priority, 1, p.max_attempts,
           p.run_at, p.created_at, now(), now(), 1, p_host_id, p.tags, p.metadata,
           p.deadline_seconds,
           now() + make_interval(secs => COALESCE(p.deadline_seconds, p_deadline_s))
    FROM pack p, awa_fast.pack_slice(p::awa_fast.job_packs, p.taken + p_take) s
    RETURNING j.id, j.run_lease, j.kind, j.queue, j.args, j.attempt, j.max_attempts,
              j.priority, j.tags, NULLIF(j.metadata, '{}'), NULLIF(j.errors, '[]'),
              j.progress, j.run_at, j.created_at, j.deadline_at
$$;
