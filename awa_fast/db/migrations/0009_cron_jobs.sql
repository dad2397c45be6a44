-- Periodic jobs: schedules registered in code (client.periodic), kept here so that the
-- leader, whichever host it is, evaluates every schedule of the database. Registration
-- only inserts or updates (never deletes: deployments sharing a database register
-- different schedules); client.delete_cron_job removes one.
--
-- last_enqueued_at is the fire time of the last job enqueued; the statement that enqueues
-- a fire moves it from the value the leader read to the new fire time, so a fire is
-- enqueued once however many leaders evaluate it. A new schedule fires first at its first
-- time after created_at: registering does not backfill.
CREATE TABLE awa_fast.cron_jobs (
    name                text PRIMARY KEY,
    cron_expr           text NOT NULL,
    timezone            text NOT NULL,
    kind                text NOT NULL,
    queue               text NOT NULL,
    args                jsonb NOT NULL,
    priority            smallint NOT NULL,
    max_attempts        smallint NOT NULL,
    tags                text[] NOT NULL,
    metadata            jsonb NOT NULL,
    missed_fire_policy  text NOT NULL,
    last_enqueued_at    timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT cron_jobs_policy CHECK (missed_fire_policy IN ('coalesce', 'catch_up'))
);
