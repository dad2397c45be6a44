-- Named queries of the dashboard (awa_fast/ui/ops.py): what its pages read beyond the
-- admin operations, which it shares with the clients. Every read is bounded, so that a page
-- costs the same on a table of millions of jobs as on an empty one.

-- name: job_list_page
-- A page of the jobs list, newest first, below the cursor `before` (NULL: from the top).
-- The filters (each NULL for any) are applied inside a window of ids that bounds what is
-- read: the `scan` newest job rows below the cursor, read down the tables' primary keys,
-- and of the packs (migration 0016) that match, the `packs` whose newest unclaimed job
-- below the cursor (`top`) is newest. Above the window's floor every job is in it; below
-- it there may be more. Every row carries the floor (`window_floor`, 0 when the window
-- reached the oldest job), and when no job in the window matches there is one row with
-- only the floor: the next page starts below the last job shown when the page is full,
-- else below the floor. Packs' ranges overlap when producers interleave, hence their
-- tops: a pack passed over has its every job below the floor.
WITH scanned AS (
    SELECT * FROM awa_fast.job_rows
    WHERE %(before)s::bigint IS NULL OR id < %(before)s
    ORDER BY id DESC
    LIMIT %(scan)s
),
rows_floor AS (
    SELECT CASE WHEN count(*) = %(scan)s THEN min(id) ELSE 0 END AS floor FROM scanned
),
candidates AS (
    SELECT p AS pack, (SELECT max(i) FROM unnest(p.ids[p.taken + 1:]) AS i
                 WHERE %(before)s::bigint IS NULL OR i < %(before)s) AS top
    FROM awa_fast.job_packs p
    WHERE (%(state)s::text IS NULL OR %(state)s = 'available')
      AND (%(kind)s::text IS NULL OR p.kind = %(kind)s)
      AND (%(queue)s::text IS NULL OR p.queue = %(queue)s)
      AND (%(tag)s::text IS NULL OR p.tags @> ARRAY[%(tag)s::text])
      AND int8range(p.ids[1], p.ids[cardinality(p.ids)], '[]')
          && int8range((SELECT floor FROM rows_floor), %(before)s::bigint, '[)')
),
packs AS (
    SELECT * FROM candidates WHERE top IS NOT NULL ORDER BY top DESC LIMIT %(packs)s + 1
),
window_floor AS (
    -- greatest() passes over the NULL of a packs' floor when no pack was passed over.
    SELECT greatest(
        (SELECT floor FROM rows_floor),
        (SELECT min(top) + 1 FROM packs HAVING count(*) > %(packs)s)) AS floor
)
SELECT w.floor AS window_floor, j.*
FROM window_floor w
LEFT JOIN LATERAL (
    SELECT * FROM (
        SELECT * FROM scanned
        UNION ALL
        SELECT pj.* FROM packs p, awa_fast.pack_jobs(p.pack) pj
        WHERE %(before)s::bigint IS NULL OR pj.id < %(before)s
    ) m
    WHERE m.id >= w.floor
      AND (%(state)s::text IS NULL OR m.state::text = %(state)s)
      AND (%(kind)s::text IS NULL OR m.kind = %(kind)s)
      AND (%(queue)s::text IS NULL OR m.queue = %(queue)s)
      AND (%(tag)s::text IS NULL OR m.tags @> ARRAY[%(tag)s::text])
      AND (%(search)s::text IS NULL OR strpos(lower(m.args::text), lower(%(search)s)) > 0)
    ORDER BY m.id DESC
    LIMIT %(limit)s
) j ON true
ORDER BY j.id DESC;

-- name: job_count_failed
-- The failed jobs of a kind that retry_failed and discard_failed would act on, for their
-- preview (through jobs_done_failed); by queue alone they are counted (state_count).
SELECT count(*) AS count FROM awa_fast.jobs_done
WHERE state = 'failed'
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s);

-- name: job_throughput
-- Jobs finished in each `bucket_s` bucket (a whole number of minutes) since `since` (NULL:
-- the last `window_s` seconds), by queue: completed, and failed (in jobs_done, or
-- dead-lettered), by the minute each finished in, from the counters (awa_fast.queue_minutes,
-- migration 0025). `bucket` is the bucket's start in seconds since the epoch, `now` the
-- database's clock.
SELECT queue,
       (floor(extract(epoch FROM minute) / %(bucket_s)s) * %(bucket_s)s)::float8 AS bucket,
       COALESCE(sum(n) FILTER (WHERE state = 'completed'), 0)::bigint AS completed,
       COALESCE(sum(n) FILTER (WHERE state IN ('failed', 'dlq')), 0)::bigint AS failed,
       extract(epoch FROM now())::float8 AS now
FROM awa_fast.queue_minutes
WHERE minute >= COALESCE(%(since)s::timestamptz, now() - make_interval(secs => %(window_s)s))
GROUP BY queue, bucket
HAVING sum(n) <> 0
ORDER BY queue, bucket;

-- name: dlq_count
-- The dead-lettered jobs of a kind or with a tag that bulk_retry_from_dlq and purge_dlq
-- would act on, for their preview; by queue alone they are counted (state_count).
SELECT count(*) AS count FROM awa_fast.dlq
WHERE (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(tag)s::text IS NULL OR tags @> ARRAY[%(tag)s::text]);

-- name: host_list
-- Every host with its heartbeat's age, its queues' settings (migration 0021) and its
-- running attempts by queue (running rows number at most the fleet's concurrency).
WITH running AS (
    SELECT host_id, jsonb_object_agg(queue, n) AS running
    FROM (
        SELECT host_id, queue, count(*) AS n FROM awa_fast.jobs_hot
        WHERE state = 'running'
        GROUP BY host_id, queue
    ) per_queue
    GROUP BY host_id
)
SELECT h.id, h.name, h.started_at, h.heartbeat_at,
       extract(epoch FROM now() - h.heartbeat_at)::float8 AS heartbeat_age,
       h.queues, COALESCE(r.running, '{}') AS running
FROM awa_fast.hosts h
LEFT JOIN running r ON r.host_id = h.id
ORDER BY h.name, h.id;

-- name: leader_get
-- Who holds the leader's term (migration 0020), and whether it is still live; before
-- the first term its end is -infinity, which Python has no datetime for.
SELECT term, holder, CASE WHEN isfinite(expires_at) THEN expires_at END AS expires_at,
       expires_at > now() AS live
FROM awa_fast.leader;
