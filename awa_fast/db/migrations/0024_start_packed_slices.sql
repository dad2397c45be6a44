-- A claim's jobs from a pack, sliced out of the pack's arrays: awa_fast.start_packed (0023)
-- took them through pack_slice, which is given the pack as a whole-row value (every
-- TOASTed array copied into it) and numbers all of the pack's jobs to keep the ones it
-- takes. Slicing the ids and the split args by subscript skips both: the backend's CPU
-- for a claim of 2 jobs from a 500-job pack fell by 9-17 % (benches/RESULTS.md, "Design
-- measurements"). What it does is unchanged, statement for statement.
CREATE OR REPLACE FUNCTION awa_fast.start_packed(
    p_pack bigint, p_take integer, p_host_id bigint, p_deadline_s double precision
) RETURNS TABLE (
    id bigint, run_lease bigint, kind text, queue text, args jsonb, attempt smallint,
    max_attempts smallint, priority smallint, tags text[], metadata jsonb, errors jsonb,
    progress jsonb, run_at timestamptz, created_at timestamptz, deadline_at timestamptz
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH pack AS (
        SELECT * FROM awa_fast.job_packs p WHERE p.id = p_pack
    ),
    advanced AS (
        UPDATE awa_fast.job_packs p
        SET taken = p.taken + p_take, next_id = p.ids[p.taken + p_take + 1]
        WHERE p.id = p_pack AND p.taken + p_take < p.size
        RETURNING pg_notify('awa_fast_packs', p.queue)
    ),
    emptied AS (
        DELETE FROM awa_fast.job_packs p WHERE p.id = p_pack AND p.taken + p_take = p.size
    ),
    started AS (
        INSERT INTO awa_fast.jobs_hot AS j (
            id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
            created_at, attempted_at, heartbeat_at, run_lease, host_id, tags, metadata,
            deadline_seconds, deadline_at)
        SELECT s.id, p.kind, p.queue, s.args::jsonb, 'running', p.priority, 1,
               p.max_attempts, p.run_at, p.created_at, now(), now(), 1, p_host_id, p.tags,
               p.metadata, p.deadline_seconds,
               now() + make_interval(secs => COALESCE(p.deadline_seconds, p_deadline_s))
        FROM pack p,
             unnest(p.ids[p.taken + 1 : p.taken + p_take],
                    (string_to_array(p.args, E'\x1e'))[p.taken + 1 : p.taken + p_take])
                 AS s(id, args)
        RETURNING j.id, j.run_lease, j.kind, j.queue, j.args, j.attempt, j.max_attempts,
                  j.priority, j.tags, NULLIF(j.metadata, '{}'), NULLIF(j.errors, '[]'),
                  j.progress, j.run_at, j.created_at, j.deadline_at
    )
    SELECT * FROM started;
END;
$$;
