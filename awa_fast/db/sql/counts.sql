-- Named queries of the counters (migration 0025): the leader's fold of the deltas
-- (awa_fast.maintenance.counts) and the metrics' read of the queues' depths.

-- name: counts_look
-- The partition writers append to now (`current`), and whether it and the other one hold
-- deltas: the unfenced look before a fold. Two reads that stop at a partition's first row.
SELECT s.current,
       EXISTS (SELECT 1 FROM awa_fast.count_deltas d WHERE d.slot = 1 - s.current)
           AS sealed_rows,
       EXISTS (SELECT 1 FROM awa_fast.count_deltas d WHERE d.slot = s.current)
           AS current_rows
FROM (SELECT awa_fast.count_slot() AS current) s;

-- name: counts_fold
-- Fold the partition `slot` into the rollup (awa_fast.count_fold, migration 0025), under
-- the leader's fence; its lock waited `lock_timeout_s` at most.
SELECT awa_fast.count_fold(%(slot)s::smallint, make_interval(secs => %(lock_timeout_s)s))
    AS folded;

-- name: counts_move_slot
-- Writers append to the other partition from now on. A sequence moves at once, committed
-- or not, and changes no count: a deposed leader that moves it does no harm.
SELECT nextval('awa_fast.count_slot') AS current;

-- name: queue_depths
-- Each queue's jobs in each of `states`, zeros included for a queue that has any count: a
-- gauge that drops to zero stays in the exposition.
SELECT c.queue, s.state, COALESCE(sum(c.n) FILTER (WHERE c.state = s.state), 0)::bigint AS n
FROM awa_fast.queue_counts c
CROSS JOIN unnest(%(states)s::text[]) AS s(state)
GROUP BY c.queue, s.state
ORDER BY c.queue, s.state;

-- name: queue_backlog
-- The available jobs (packed ones included) of each of `queues` that has any: a
-- backpressure check's depth (awa_fast.backpressure). From the counters, as every count
-- is: each queue's rollup row by its key, and the deltas the leader has not folded yet
-- (about two count intervals of statements while it runs), never the job rows.
SELECT queue, sum(n)::bigint AS depth
FROM awa_fast.queue_counts
WHERE queue = ANY(%(queues)s::text[]) AND state = 'available'
GROUP BY queue;
