-- Jobs inserted together as a pack: a uniform insert_many batch (one kind, one set of
-- options, due now, none unique) is stored as one row per up to 512 jobs, holding their ids
-- and args, instead of one row per job. A row per job cost the producer's backend a heap
-- tuple, a primary-key entry and a claim-index entry each; a pack pays those once, and a
-- claim writes each job's row as it starts it: running, in jobs_hot, where it would have
-- updated the available row instead (benches/RESULTS.md, "Design measurements").
--
-- A pack's jobs are available jobs in every sense but their storage:
-- * claims take them in the same (priority, run_at, id) order as jobs_hot's available rows,
--   a pack's place in it being its first unclaimed job's (all of its jobs share priority
--   and run_at, and its ids ascend); a claim may take part of a pack, advancing `taken`;
-- * the jobs view shows them, available, with the columns a row of theirs would have;
-- * anything that acts on particular available jobs (a cancel by id, a queue's drain, a
--   batch operation, the test client's work_one) first unpacks the packs that hold them
--   (awa_fast.unpack_jobs, below) into jobs_hot's available rows, and then acts on rows as
--   before. Unpacking changes how a job is stored, not what it is: its id, order, run_at
--   and created_at stay.
CREATE TABLE awa_fast.job_packs (
    id bigint PRIMARY KEY DEFAULT nextval('awa_fast.job_id_seq'),
    kind text NOT NULL,
    queue text NOT NULL,
    priority smallint NOT NULL CONSTRAINT job_packs_priority CHECK (priority BETWEEN 1 AND 4),
    max_attempts smallint NOT NULL CONSTRAINT job_packs_max_attempts CHECK (max_attempts >= 1),
    tags text[] NOT NULL,
    metadata jsonb NOT NULL,
    deadline_seconds double precision,
    run_at timestamptz NOT NULL DEFAULT now(),
    created_at timestamptz NOT NULL DEFAULT now(),
    -- The jobs' ids, ascending, and their args: JSON texts joined by U+001E (which JSON
    -- text never holds raw), as the producer sent them, parsed when a job is claimed.
    ids bigint[] NOT NULL,
    args text NOT NULL,
    -- How many jobs the pack holds, how many of them, from the first, have been claimed,
    -- and the id of the first unclaimed one: what a claim orders and counts packs by, kept
    -- beside the arrays so that it reads none of them (a large value, stored apart) but
    -- the packs it takes.
    size integer NOT NULL,
    taken integer NOT NULL DEFAULT 0,
    next_id bigint NOT NULL,
    CONSTRAINT job_packs_taken CHECK (taken >= 0 AND taken < size)
);
-- In claim order: a pack's place is its first unclaimed job's.
CREATE INDEX job_packs_claim ON awa_fast.job_packs (queue, priority, run_at, next_id);
-- The range of a pack's ids, for a job looked up by id (awa_fast.packed_jobs, below): a
-- pack's index entries cost its producer one per pack, not one per job.
CREATE INDEX job_packs_ids ON awa_fast.job_packs
    USING gist (int8range(ids[1], ids[cardinality(ids)], '[]'));

CREATE FUNCTION awa_fast.notify_packed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    q text;
BEGIN
    FOR q IN SELECT DISTINCT queue FROM inserted LOOP
        PERFORM pg_notify('awa_fast_jobs', q);
    END LOOP;
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_packs_notify
    AFTER INSERT ON awa_fast.job_packs
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION awa_fast.notify_packed();

-- The pack's jobs after the claimed ones up to the `upto`-th: each one's id and args text.
CREATE FUNCTION awa_fast.pack_slice(p awa_fast.job_packs, upto integer)
RETURNS TABLE (id bigint, args text)
LANGUAGE sql IMMUTABLE AS $$
    SELECT j.id, j.args
    FROM unnest(p.ids, string_to_array(p.args, E'\x1e')) WITH ORDINALITY AS j(id, args, n)
    WHERE j.n > p.taken AND j.n <= upto
$$;

-- The jobs that are rows: the jobs view as it was before packs, under a name of its own. A
-- statement looking for a job that cannot be packed (claimed once, or holding a unique
-- key) reads this one.
ALTER VIEW awa_fast.jobs RENAME TO job_rows;

-- A pack's unclaimed jobs as the jobs view shows them: available, first attempt to come.
CREATE FUNCTION awa_fast.pack_jobs(p awa_fast.job_packs) RETURNS SETOF awa_fast.job_rows
LANGUAGE sql IMMUTABLE AS $$
    SELECT j.id, p.kind, p.queue, j.args::jsonb, 'available'::awa_fast.job_state, p.priority,
           0::smallint, p.max_attempts, p.run_at, p.created_at, NULL::timestamptz,
           NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, 0::bigint, '[]'::jsonb,
           p.metadata, p.tags, NULL::jsonb, NULL::bytea, NULL::uuid, NULL::timestamptz,
           NULL::jsonb, p.deadline_seconds
    FROM awa_fast.pack_slice(p, p.size) j
$$;

CREATE VIEW awa_fast.jobs AS
    SELECT * FROM awa_fast.job_rows
    UNION ALL
    SELECT j.* FROM awa_fast.job_packs p, awa_fast.pack_jobs(p) j;

-- The packed jobs among `ids`: the jobs view's rows for them, found through the packs'
-- id ranges, where the view would unpack every pack to find them.
CREATE FUNCTION awa_fast.packed_jobs(p_ids bigint[]) RETURNS SETOF awa_fast.job_rows
LANGUAGE sql STABLE AS $$
    SELECT j.*
    FROM awa_fast.job_packs p, awa_fast.pack_jobs(p) j
    WHERE int8range(p.ids[1], p.ids[cardinality(p.ids)], '[]')
          && (SELECT int8range(min(i), max(i), '[]') FROM unnest(p_ids) i)
      AND j.id = ANY (p_ids) AND cardinality(p_ids) > 0
$$;

-- Start the next `p_take` jobs of the pack `p_pack`, which the calling claim holds locked
-- (job_claim_batch): each becomes its running row in jobs_hot, the row a claim of its
-- available row would leave, and the pack advances past them, or goes once all are taken.
CREATE FUNCTION awa_fast.start_packed(
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

-- Unpack into jobs_hot's available rows the packs of `p_queue` (NULL: of every queue) that
-- hold the unclaimed job `p_id` (NULL: any); how many jobs were unpacked. A pack a claim
-- holds is waited for, and then unpacked as that claim left it.
CREATE FUNCTION awa_fast.unpack_jobs(p_queue text, p_id bigint) RETURNS bigint
LANGUAGE sql AS $$
    WITH unpacked AS (
        DELETE FROM awa_fast.job_packs p
        WHERE (p_queue IS NULL OR p.queue = p_queue)
          AND (p_id IS NULL OR (p.ids[1] <= p_id AND p_id = ANY (p.ids[p.taken + 1:])))
        RETURNING p.*
    ),
    moved AS (
        INSERT INTO awa_fast.jobs_hot (id, kind, queue, args, priority, max_attempts, run_at,
                                       created_at, tags, metadata, deadline_seconds)
        SELECT j.id, j.kind, j.queue, j.args, j.priority, j.max_attempts, j.run_at,
               j.created_at, j.tags, j.metadata, j.deadline_seconds
        FROM unpacked p, awa_fast.pack_jobs(p::awa_fast.job_packs) j
        ORDER BY j.id
        RETURNING 1
    )
    SELECT count(*) FROM moved
$$;

-- A unique key's holder is never packed (job_insert_packed takes no unique job): judged
-- among the rows, as in migration 0011, without unpacking every pack to look.
CREATE OR REPLACE FUNCTION awa_fast.unique_claim_take(
    p_key bytea, p_job_id bigint, p_states awa_fast.job_state[]
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    holder awa_fast.unique_claims%ROWTYPE;
BEGIN
    LOOP
        INSERT INTO awa_fast.unique_claims (unique_key, job_id, states)
        VALUES (p_key, p_job_id, p_states)
        ON CONFLICT (unique_key) DO NOTHING;
        IF FOUND THEN
            RETURN p_job_id;
        END IF;
        SELECT * INTO holder FROM awa_fast.unique_claims WHERE unique_key = p_key FOR UPDATE;
        CONTINUE WHEN NOT FOUND;
        IF EXISTS (
            SELECT 1 FROM awa_fast.job_rows j
            WHERE j.id = holder.job_id AND j.state = ANY(holder.states)
        ) THEN
            RETURN holder.job_id;
        END IF;
        UPDATE awa_fast.unique_claims SET job_id = p_job_id, states = p_states
        WHERE unique_key = p_key;
        RETURN p_job_id;
    END LOOP;
END
$$;
