-- How many failed jobs retention has deleted from each queue, ever. retry_failed reports it
-- (the Awa SDK's pruned_failed_count), so an operator who finds fewer failed jobs to retry
-- than failed learns that the rest are gone past retention, not lost. Retention
-- (job_delete_expired) adds to a queue's count in the statement that deletes its rows, so
-- a failed job is always either in jobs_done or in this count, never both nor neither. A
-- row per queue that ever had a failed job pruned; the count only grows.
CREATE TABLE awa_fast.pruned_failed_counts (
    queue  text PRIMARY KEY,
    pruned bigint NOT NULL CHECK (pruned >= 0)
);
