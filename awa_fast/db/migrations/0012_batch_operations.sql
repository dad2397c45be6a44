-- Durable batch operations (the Awa SDK's set_priority / move_queue): an operation is a
-- row here, submitted by a client and applied by the maintenance leader in bounded chunks
-- (awa_fast.maintenance.batch), with its progress and final state kept for inspection
-- until retention_until. The states are the SDK's; `scanning` never occurs here (the
-- snapshot is taken by the step that starts the operation).
CREATE TABLE awa_fast.batch_operations (
    id              uuid PRIMARY KEY,
    op_kind         text NOT NULL,
    filter          jsonb NOT NULL,
    spec            jsonb NOT NULL,
    state           text NOT NULL DEFAULT 'pending',
    submitted_by    text,
    submitted_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at      timestamptz,
    finalized_at    timestamptz,
    cursor          jsonb,
    total_matched   bigint,
    processed       bigint NOT NULL DEFAULT 0,
    skipped         bigint NOT NULL DEFAULT 0,
    errored         bigint NOT NULL DEFAULT 0,
    last_error      text,
    runner_instance uuid,
    retention_until timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT batch_operations_op_kind CHECK (op_kind IN ('set_priority', 'move_queue')),
    CONSTRAINT batch_operations_state CHECK (state IN (
        'pending', 'scanning', 'running', 'cancelling', 'completed', 'cancelled', 'failed'))
);
-- The leader takes the oldest unfinished operation; listings filter by state.
CREATE INDEX batch_operations_state ON awa_fast.batch_operations (state, submitted_at);
CREATE INDEX batch_operations_retention ON awa_fast.batch_operations (retention_until)
    WHERE retention_until IS NOT NULL;

-- An operation's snapshot: the jobs its filter matched when the leader started it, less
-- those already applied. A chunk deletes the ids it takes, so the table holds only work
-- still to do, and a cancelled or finished operation's rows go with it.
CREATE TABLE awa_fast.batch_operation_items (
    operation_id uuid NOT NULL REFERENCES awa_fast.batch_operations (id) ON DELETE CASCADE,
    job_id       bigint NOT NULL,
    PRIMARY KEY (operation_id, job_id)
);

-- The jobs a filter (a BatchOperationFilter as stored: every key present, null when
-- unset) selects among queued ones: available (jobs_hot) and scheduled (jobs_deferred),
-- as the Awa SDK counts them; retryable jobs wait for a retry and are left alone. One
-- definition for preview, count and snapshot. Inlined by the planner; each absent key
-- drops out of the condition. It reads the queued rows of both tables: an admin
-- operation's cost, never the claim's.
CREATE FUNCTION awa_fast.batch_operation_targets(f jsonb) RETURNS SETOF awa_fast.jobs
LANGUAGE sql STABLE AS $$
    SELECT * FROM awa_fast.jobs j
    WHERE j.state IN ('available', 'scheduled')
      AND (f ->> 'state' IS NULL OR j.state::text = f ->> 'state')
      AND (f ->> 'kind' IS NULL OR j.kind = f ->> 'kind')
      AND (f ->> 'queue' IS NULL OR j.queue = f ->> 'queue')
      AND (f ->> 'tag' IS NULL OR j.tags @> ARRAY[f ->> 'tag'])
      AND (jsonb_typeof(f -> 'ids') IS DISTINCT FROM 'array'
           OR j.id IN (SELECT jsonb_array_elements_text(f -> 'ids')::bigint))
      AND (f ->> 'created_at_gte' IS NULL OR j.created_at >= (f ->> 'created_at_gte')::timestamptz)
      AND (f ->> 'created_at_lt' IS NULL OR j.created_at < (f ->> 'created_at_lt')::timestamptz)
$$;
