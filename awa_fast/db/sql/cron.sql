-- Named queries of periodic jobs: the leader's (awa_fast/maintenance/periodic.py) and
-- the admin's (awa_fast/admin/catalog.py).

-- name: cron_register
-- A schedule as registered in code; an existing one takes the new definition and keeps
-- its last fire.
INSERT INTO awa_fast.cron_jobs AS c (
    name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags, metadata,
    missed_fire_policy)
VALUES (%(name)s, %(cron_expr)s, %(timezone)s, %(kind)s, %(queue)s, %(args)s::jsonb,
        %(priority)s, %(max_attempts)s, %(tags)s::text[], %(metadata)s::jsonb,
        %(missed_fire_policy)s)
ON CONFLICT (name) DO UPDATE
SET cron_expr = EXCLUDED.cron_expr, timezone = EXCLUDED.timezone, kind = EXCLUDED.kind,
    queue = EXCLUDED.queue, args = EXCLUDED.args, priority = EXCLUDED.priority,
    max_attempts = EXCLUDED.max_attempts, tags = EXCLUDED.tags, metadata = EXCLUDED.metadata,
    missed_fire_policy = EXCLUDED.missed_fire_policy, updated_at = now()
WHERE (c.cron_expr, c.timezone, c.kind, c.queue, c.args, c.priority, c.max_attempts, c.tags,
       c.metadata, c.missed_fire_policy)
   IS DISTINCT FROM
      (EXCLUDED.cron_expr, EXCLUDED.timezone, EXCLUDED.kind, EXCLUDED.queue, EXCLUDED.args,
       EXCLUDED.priority, EXCLUDED.max_attempts, EXCLUDED.tags, EXCLUDED.metadata,
       EXCLUDED.missed_fire_policy);

-- name: cron_due
-- Every schedule with the moment its next fire is counted from, and the server's clock:
-- leaders on different hosts judge "due" by one clock.
SELECT name, cron_expr, timezone, missed_fire_policy, last_enqueued_at,
       coalesce(last_enqueued_at, created_at) AS since, statement_timestamp() AS now
FROM awa_fast.cron_jobs
ORDER BY name;

-- name: cron_enqueue
-- One fire: the schedule's last fire moves from the value read (%(previous)s) to this
-- one, and the job is inserted, in one statement. A fire another leader enqueued first
-- finds last_enqueued_at moved, updates nothing, and so inserts nothing.
WITH fired AS (
    UPDATE awa_fast.cron_jobs
    SET last_enqueued_at = %(fire_at)s, updated_at = now()
    WHERE name = %(name)s AND last_enqueued_at IS NOT DISTINCT FROM %(previous)s
    RETURNING *
)
INSERT INTO awa_fast.jobs_hot (kind, queue, args, priority, max_attempts, tags, metadata)
SELECT kind, queue, args, priority, max_attempts, tags,
       metadata || jsonb_build_object('cron_name', name, 'cron_fire_at', %(fire_at)s)
FROM fired
RETURNING id;

-- name: cron_run_now
-- A periodic job's job now, outside its schedule: inserted as cron_enqueue inserts a fire,
-- marked with who asked instead of a fire time. last_enqueued_at stays, and so does the
-- schedule's next fire.
INSERT INTO awa_fast.jobs_hot (kind, queue, args, priority, max_attempts, tags, metadata)
SELECT kind, queue, args, priority, max_attempts, tags,
       metadata || jsonb_build_object('cron_name', name, 'cron_run_by', %(actor)s::text)
FROM awa_fast.cron_jobs
WHERE name = %(name)s
RETURNING id;

-- name: cron_list
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags, metadata,
       missed_fire_policy, last_enqueued_at, created_at, updated_at
FROM awa_fast.cron_jobs
ORDER BY name;

-- name: cron_delete
DELETE FROM awa_fast.cron_jobs WHERE name = %(name)s RETURNING name;
