-- A callback's CEL expressions (job.register_callback(filter=..., on_complete=..., on_fail=...,
-- transform=...)), which client.resolve_callback evaluates against a payload: one jsonb
-- object of the expressions given, by name; NULL for a callback registered without any.
--
-- They belong to the attempt's callback, so they sit beside callback_id on the job's row and
-- go with it: job_register_callback writes both together, and the statements that clear
-- callback_id (the claim's SET, callback_resume) clear them in the same SET. A finished job
-- has no callback to resolve: the statements that move a row to jobs_done copy named
-- columns and leave them behind. Nothing on the hot path reads them; the claim's SET gains
-- one NULL, the completion statements nothing. A table of its own, keyed by callback id,
-- would have spared the claim even that, but then a callback that ends any other way
-- (complete_external, a timeout, a cancel, the next attempt's claim) would leave its row
-- behind for a sweep to delete, or need a foreign key whose trigger fires on every
-- completion's DELETE.
--
-- The column is on jobs_deferred and jobs_done too, as host_id is (0008): statements union
-- those tables' rows with jobs_hot's (RETURNING *), so the three keep one shape. A nullable
-- column without a default is added without rewriting a table.
ALTER TABLE awa_fast.jobs_hot ADD COLUMN callback_rules jsonb;
ALTER TABLE awa_fast.jobs_deferred ADD COLUMN callback_rules jsonb;
ALTER TABLE awa_fast.jobs_done ADD COLUMN callback_rules jsonb;
