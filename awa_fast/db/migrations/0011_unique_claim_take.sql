-- Taking a unique key without a race. The statement this replaces took the key with
-- INSERT ... ON CONFLICT DO UPDATE ... WHERE NOT EXISTS (a live holder job): a second
-- inserter waited on the first's uncommitted claim, then judged the holder's job in the
-- snapshot its statement took before that wait, did not see it, and took the key too, so
-- both jobs were inserted. Each statement of a (volatile) function below takes its own
-- snapshot, after the lock its previous statement waited for: the holder's job is judged
-- as committed by whoever held the key.
CREATE FUNCTION awa_fast.unique_claim_take(
    p_key bytea, p_job_id bigint, p_states awa_fast.job_state[]
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    holder awa_fast.unique_claims%ROWTYPE;
BEGIN
    LOOP
        -- Waits for an uncommitted claim of the key; takes a key nobody holds.
        INSERT INTO awa_fast.unique_claims (unique_key, job_id, states)
        VALUES (p_key, p_job_id, p_states)
        ON CONFLICT (unique_key) DO NOTHING;
        IF FOUND THEN
            RETURN p_job_id;
        END IF;
        -- Waits for a transaction taking the key over; its job is visible from here on.
        SELECT * INTO holder FROM awa_fast.unique_claims WHERE unique_key = p_key FOR UPDATE;
        CONTINUE WHEN NOT FOUND;  -- the claim went away meanwhile: insert again
        IF EXISTS (
            SELECT 1 FROM awa_fast.jobs j
            WHERE j.id = holder.job_id AND j.state = ANY(holder.states)
        ) THEN
            RETURN holder.job_id;  -- a live job holds the key
        END IF;
        UPDATE awa_fast.unique_claims SET job_id = p_job_id, states = p_states
        WHERE unique_key = p_key;
        RETURN p_job_id;
    END LOOP;
END
$$;

-- A finished job revived (retry, retry_from_dlq) takes its unique key back the same way,
-- with the states its claim was taken with (``p_default_states`` when the claim is gone);
-- a job without a key holds nothing. Returns p_job_id, or the live holder's id.
CREATE FUNCTION awa_fast.unique_claim_retake(
    p_key bytea, p_job_id bigint, p_default_states awa_fast.job_state[]
) RETURNS bigint
LANGUAGE sql AS $$
    SELECT CASE WHEN p_key IS NULL THEN p_job_id ELSE awa_fast.unique_claim_take(
        p_key, p_job_id, COALESCE(
            (SELECT c.states FROM awa_fast.unique_claims c WHERE c.unique_key = p_key),
            p_default_states))
    END
$$;
