-- Named queries of queue and job-kind descriptors (awa_fast/descriptors.py).

-- name: descriptor_delete_stale
-- Retention: descriptors no host has registered or refreshed for retention_s seconds. A
-- row a host is refreshing right now is skipped, not waited for: it is being seen.
DELETE FROM awa_fast.descriptors d
USING (SELECT scope, name FROM awa_fast.descriptors
       WHERE last_seen_at < now() - make_interval(secs => %(retention_s)s)
       FOR UPDATE SKIP LOCKED) stale
WHERE (d.scope, d.name) = (stale.scope, stale.name);

-- name: descriptor_list
SELECT name, display_name, description, owner, docs_url, tags, extra, created_at,
       updated_at, last_seen_at
FROM awa_fast.descriptors
WHERE scope = %(scope)s
ORDER BY name;

-- name: descriptor_refresh_many
-- A running host's descriptors seen again, so that retention keeps them. SKIP LOCKED: a
-- row another host or a registration holds is being seen by it, and one the leader holds
-- is being deleted as stale; either way waiting would add nothing, and never waiting
-- means hosts refreshing the same rows in any order cannot deadlock.
UPDATE awa_fast.descriptors d SET last_seen_at = now()
FROM (SELECT scope, name FROM awa_fast.descriptors
      WHERE (scope, name) IN (SELECT * FROM unnest(%(scopes)s::text[], %(names)s::text[]))
      FOR NO KEY UPDATE SKIP LOCKED) mine
WHERE (d.scope, d.name) = (mine.scope, mine.name);

-- name: descriptor_register
-- A descriptor as declared in code: the new definition replaces the stored one, and
-- updated_at moves only when it changed.
INSERT INTO awa_fast.descriptors AS d (
    scope, name, display_name, description, owner, docs_url, tags, extra)
VALUES (%(scope)s, %(name)s, %(display_name)s, %(description)s, %(owner)s, %(docs_url)s,
        %(tags)s::text[], %(extra)s::jsonb)
ON CONFLICT (scope, name) DO UPDATE
SET display_name = EXCLUDED.display_name, description = EXCLUDED.description,
    owner = EXCLUDED.owner, docs_url = EXCLUDED.docs_url, tags = EXCLUDED.tags,
    extra = EXCLUDED.extra, last_seen_at = now(),
    updated_at = CASE
        WHEN (d.display_name, d.description, d.owner, d.docs_url, d.tags, d.extra)
             IS DISTINCT FROM
             (EXCLUDED.display_name, EXCLUDED.description, EXCLUDED.owner,
              EXCLUDED.docs_url, EXCLUDED.tags, EXCLUDED.extra)
        THEN now() ELSE d.updated_at END;
