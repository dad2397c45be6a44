-- Named queries of queue and job-kind descriptors (awa_fast/descriptors.py).

-- name: descriptor_list
SELECT name, display_name, description, owner, docs_url, tags, extra, created_at,
       updated_at, last_seen_at
FROM awa_fast.descriptors
WHERE scope = %(scope)s
ORDER BY name;

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
