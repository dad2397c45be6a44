-- Queue and job-kind descriptors (client.queue_descriptor / client.job_kind_descriptor):
-- metadata declared in code for people reading the catalog (display name, description,
-- owner, runbook, tags, free-form JSON), kept apart from queue_meta, which the claim reads.
-- One table for both, by scope ('queue' or 'kind') and name. Every host that runs handlers
-- upserts its descriptors when it starts; updated_at moves only when a definition changes,
-- last_seen_at on every registration. Registration never deletes: deployments sharing a
-- database declare different ones.
CREATE TABLE awa_fast.descriptors (
    scope         text NOT NULL CHECK (scope IN ('queue', 'kind')),
    name          text NOT NULL,
    display_name  text,
    description   text,
    owner         text,
    docs_url      text,
    tags          text[] NOT NULL DEFAULT '{}',
    extra         jsonb NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, name),
    CONSTRAINT descriptors_extra_object CHECK (jsonb_typeof(extra) = 'object')
);
