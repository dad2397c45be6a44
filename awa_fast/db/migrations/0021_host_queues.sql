-- Each host records the queues it serves and how (awa_fast.runtime.host), so that the
-- dashboard can show a queue's concurrency over the live hosts and its rate limit: by
-- queue name, {"concurrency": handlers at once, "rate_limit": [rate, burst] or null,
-- "prefetch": jobs claimed ahead per worker}.
--
-- A column of an existing table: the application role's table-wide grants cover it.
-- Hosts of an earlier version leave it empty, and show no settings.
ALTER TABLE awa_fast.hosts ADD COLUMN queues jsonb NOT NULL DEFAULT '{}';
