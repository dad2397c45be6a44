-- Running attempts keep one partial index (jobs_hot_running), not two.
--
-- Every claim writes a new version of the row; each index on a running row costs one
-- index insert per claim (and its cleanup later). The deadline sweep needs no index of its
-- own: running rows number at most the fleet's total concurrency, so scanning
-- jobs_hot_running and filtering on deadline_at is cheap, and it runs once per rescue
-- interval on the leader only.
DROP INDEX awa_fast.jobs_hot_deadline;
