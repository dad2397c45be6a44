-- Named queries of the maintenance services, run by the elected leader only: each that
-- changes rows in a transaction that leader_fence_lock and leader_fence open.

-- name: leader_elect
-- Renew the holder's term while it lasts, or begin the next term once the current one has
-- expired (or was released) and no transaction of the last term still runs: beginning a
-- term takes the fence lock (leader_fence_lock) exclusively, which it cannot while a
-- fenced transaction holds it shared, and does not wait for it. Returns the term the
-- holder now leads, or no row.
UPDATE awa_fast.leader
SET term = CASE WHEN holder = %(holder)s AND expires_at > now() THEN term ELSE term + 1 END,
    holder = %(holder)s,
    expires_at = now() + make_interval(secs => %(ttl_s)s)
WHERE CASE WHEN holder = %(holder)s AND expires_at > now() THEN true
           WHEN expires_at <= now() THEN pg_try_advisory_xact_lock(%(key)s)
           ELSE false END
RETURNING term;

-- name: leader_release
-- A leader stopping cleanly ends its term at once: the next host need not wait it out.
UPDATE awa_fast.leader SET expires_at = now()
WHERE holder = %(holder)s AND expires_at > now();

-- name: leader_fence_lock
-- The first statement of every maintenance transaction: the fence lock, held shared until
-- the transaction ends, so that no new term begins while it runs (leader_elect). Taken
-- before leader_fence reads the term, so that read sees any term begun before it. Neither
-- writes: a maintenance transaction that finds nothing to do commits without a WAL flush.
SELECT pg_advisory_xact_lock_shared(%(key)s);

-- name: leader_fence
-- No row unless `term` is still the current term, unexpired by the database's clock.
SELECT term FROM awa_fast.leader WHERE term = %(term)s AND expires_at > now();

-- fragment: host_stale
-- A host silent for staleness_s, counted only while the server has been up that long: a
-- restarted server does not count its own downtime against the hosts that could not
-- reach it. `by_staleness` is false while the leader itself has not been connected that
-- long (awa_fast.maintenance.rescuer).
(%(by_staleness)s AND heartbeat_at < now() - make_interval(secs => %(staleness_s)s)
 AND pg_postmaster_start_time() < now() - make_interval(secs => %(staleness_s)s))

-- fragment: host_lock_free
-- A host whose lock (migration 0026) this transaction can take at once: the session that
-- held it ended. Tried only for a host that says it holds its lock (an earlier version's
-- never does), and only once the server and the leader have been up for `settle_s`, time
-- for a live host to reconnect and take its lock again. Taken, the lock stays with this
-- transaction until it ends, so a host reconnecting meanwhile waits for it.
CASE WHEN %(by_lock)s AND holds_lock
          AND pg_postmaster_start_time() < now() - make_interval(secs => %(settle_s)s)
     THEN pg_try_advisory_xact_lock(
         -- include: host_lock
     )
     ELSE false END

-- name: host_rescue_due
-- Whether host_take_dead or standby_drop_orphans would find anything: a host gone (its
-- lock free), a host stale, or a standby claim whose host is gone. Reads of a small table;
-- in autocommit, a lock it takes is let go as it returns.
SELECT EXISTS (
           SELECT 1 FROM awa_fast.hosts WHERE
           -- include: host_lock_free
       ) AS gone,
       EXISTS (
           SELECT 1 FROM awa_fast.hosts WHERE
           -- include: host_stale
       )
    OR EXISTS (
           SELECT 1 FROM awa_fast.standby_claims s
           WHERE NOT EXISTS (SELECT 1 FROM awa_fast.hosts h WHERE h.id = s.host_id)
       ) AS other;

-- name: host_take_dead
-- Hosts gone or stale, removed; the same transaction rescues their attempts
-- (job_select_of_hosts), so a failed rescue leaves them to the next sweep. `gone`: found
-- by its lock with its heartbeat fresh, so that what it held at its last beat is known;
-- a host silent for longer (cut off, its session ended only later) may have started
-- anything since, and is settled as a stale one.
DELETE FROM awa_fast.hosts
WHERE
-- include: host_stale
   OR
-- include: host_lock_free
RETURNING id, heartbeat_at >= now() - make_interval(secs => %(staleness_s)s) AS gone;

-- name: standby_drop_orphans
-- Standby claims (migration 0018) of hosts that are gone, which no job starts on any more;
-- one an inserting transaction holds is left to the next sweep. A job started on such a
-- claim just before its host went is a running attempt of that host, rescued as its
-- others are (or by the backstop, if its transaction committed after that rescue).
DELETE FROM awa_fast.standby_claims
WHERE id IN (
    SELECT s.id FROM awa_fast.standby_claims s
    WHERE NOT EXISTS (SELECT 1 FROM awa_fast.hosts h WHERE h.id = s.host_id)
    FOR UPDATE SKIP LOCKED
);

-- name: job_select_of_hosts
-- The running attempts of dead hosts, with their host: a read of all of jobs_hot, only
-- when a host died. `unstarted`: an attempt that a host found gone (`gone`) held
-- unstarted at its last heartbeat (held_lease), unless it was given back uncharged at
-- this attempt already (job_give_back_many): a job whose start kills its host is
-- charged the second time, and cannot run on uncounted.
SELECT id, run_lease, host_id,
       host_id = ANY(%(gone)s::bigint[]) AND held_lease IS NOT DISTINCT FROM run_lease
       AND NOT COALESCE(errors -> -1 @> jsonb_build_object('given_back', true,
                                                          'attempt', attempt), false)
           AS unstarted
FROM awa_fast.jobs_hot
WHERE state = 'running' AND host_id = ANY(%(hosts)s::bigint[]);

-- name: job_give_back_many
-- Attempts a dead host held unstarted, back to available with their attempt given back,
-- as a claim given back by its own host is (job_transition_many), reached as
-- job_complete_many reaches them and guarded the same way. The error entry says so, and
-- marks the attempt as given back once (job_select_of_hosts). Claimers hear of them at
-- once: nothing was inserted for the insert trigger to announce.
WITH back AS (
    UPDATE awa_fast.jobs_hot j
    SET state = 'available', attempt = j.attempt - 1, heartbeat_at = NULL,
        deadline_at = NULL,
        errors = j.errors || jsonb_build_array(jsonb_build_object(
            'error', %(reason)s::text, 'attempt', j.attempt, 'at', now(),
            'given_back', true))
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state = 'running'
      AND j.run_lease = (%(leases)s::jsonb ->> j.id::text)::bigint
    RETURNING j.id, j.queue
)
SELECT id, pg_notify('awa_fast_jobs', queue) FROM back;

-- name: job_select_stale
-- The backstop, a read of all of jobs_hot every backstop interval: running attempts whose
-- own heartbeat went stale although no dead host was found for them (a claim whose rows
-- its host never received, an attempt whose finalize failed, a host that died between
-- being taken for dead and stamping its attempts with its new id). Like host_stale, it
-- counts no time the server was down.
SELECT id, run_lease FROM awa_fast.jobs_hot
WHERE state = 'running' AND heartbeat_at < now() - make_interval(secs => %(staleness_s)s)
  AND pg_postmaster_start_time() < now() - make_interval(secs => %(staleness_s)s)
ORDER BY heartbeat_at
LIMIT %(limit)s;

-- name: job_select_overdue
-- The backstop for deadlines, which each live host enforces itself: running attempts past
-- their hard deadline plus the grace their handler had to stop.
SELECT id, run_lease FROM awa_fast.jobs_hot
WHERE state = 'running' AND deadline_at < now() - make_interval(secs => %(grace_s)s)
ORDER BY deadline_at
LIMIT %(limit)s;

-- name: job_select_callback_expired
SELECT id, run_lease FROM awa_fast.jobs_hot
WHERE state = 'waiting_external' AND callback_timeout_at < now()
ORDER BY callback_timeout_at
LIMIT %(limit)s;

-- name: job_delete_expired
-- Retention of a queue with its own (`queue`): its finished jobs past it, in bounded
-- batches (the rest go by partition: done_free). The failed ones deleted are added to the
-- queue's count in pruned_failed_counts in the same statement (retry_failed reports it:
-- migration 0014). Returns how many it deleted.
WITH doomed AS (
    SELECT id FROM awa_fast.jobs_done
    WHERE ((state = 'completed'
            AND finalized_at < now() - make_interval(secs => %(completed_s)s))
        OR (state IN ('failed', 'cancelled')
            AND finalized_at < now() - make_interval(secs => %(failed_s)s)))
      AND queue = %(queue)s
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM awa_fast.jobs_done j USING doomed WHERE j.id = doomed.id
    RETURNING j.queue, j.state
),
counted AS (
    INSERT INTO awa_fast.pruned_failed_counts AS c (queue, pruned)
    SELECT queue, count(*) FROM deleted WHERE state = 'failed' GROUP BY queue
    ON CONFLICT (queue) DO UPDATE SET pruned = c.pruned + EXCLUDED.pruned
)
SELECT count(*) AS deleted FROM deleted;

-- name: done_free
-- Retention by partition (migration 0030): turn the ring of finished jobs once a period,
-- and TRUNCATE each sealed partition whose newest job is past the completed retention,
-- moving out the jobs still kept (`queues`: a queue's own pair of seconds). Returns how
-- many jobs it freed.
SELECT awa_fast.done_free(make_interval(secs => %(completed_s)s),
                          make_interval(secs => %(failed_s)s), %(queues)s,
                          make_interval(secs => %(period_s)s)) AS freed;

-- name: job_tables_dead_tuples
-- Dead tuples of the job tables: the claim scan walks every dead entry of the claim index
-- until a vacuum removes it, so the leader vacuums these tables itself once they pass a
-- threshold instead of waiting for autovacuum's minute-long naptime. jobs_hot by its
-- partitions (migration 0029), each vacuumed alone.
SELECT relname, n_dead_tup FROM pg_stat_user_tables
WHERE schemaname = 'awa_fast'
  AND (relname = 'jobs_deferred'
       OR relid IN (SELECT relid FROM pg_partition_tree('awa_fast.jobs_hot') WHERE isleaf));

-- name: oldest_xmin
-- The oldest transaction id this database's dead tuples wait for, as text (NULL when only
-- this session holds one): each session's snapshot or transaction, a replication slot's or a
-- standby's (its walsender's) xmin, a prepared transaction. While it is the same, a second
-- VACUUM of a table removes nothing the first could not.
SELECT x::text AS oldest FROM (
    SELECT coalesce(backend_xmin, backend_xid) AS x FROM pg_stat_activity
    WHERE pid <> pg_backend_pid() AND (datname = current_database() OR datid IS NULL)
    UNION ALL
    SELECT xmin FROM pg_replication_slots
    WHERE database = current_database() OR database IS NULL
    UNION ALL
    SELECT transaction FROM pg_prepared_xacts WHERE database = current_database()
) held
WHERE x IS NOT NULL
ORDER BY age(x) DESC
LIMIT 1;

-- name: ring_rotate
-- One pass over the ring `ring` (standby, ledger: migration 0028; hot: 0029), freeing
-- `least` rows or more: 'truncated', 'sealed', 'busy' (its lock held), or NULL (too few to free).
SELECT awa_fast.ring_rotate(%(ring)s, %(least)s) AS done;
