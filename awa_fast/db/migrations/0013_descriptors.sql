-- Queue and job-kind descriptors (client.queue_descriptor / client.job_kind_descriptor):
-- metadata declared in code for people reading the catalog (display name, description,
-- owner, runbook, tags, free-form JSON), kept apart from queue_meta, which the claim reads.
-- Every host that runs handlers upserts its descriptors when it starts; updated_at moves
-- only when a definition changes, last_seen_at on every registration. Registration never
-- deletes: deployments sharing a database declare different ones.
CREATE TABLE awa_fast.queue_descriptors (
    queue         text PRIMARY KEY,
    display_name  text,
    description   text,
    owner         text,
    docs_url      text,
    tags          text[] NOT NULL DEFAULT '{}',
    extra         jsonb NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_descriptors_extra_object CHECK (jsonb_typeof(extra) = 'object')
);

CREATE TABLE awa_fast.job_kind_descriptors (
    kind          text PRIMARY KEY,
    display_name  text,
    description   text,
    owner         text,
    docs_url      text,
    tags          text[] NOT NULL DEFAULT '{}',
    extra         jsonb NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_kind_descriptors_extra_object CHECK (jsonb_typeof(extra) = 'object')
);
