"""``awa_fast.PartitionedQueue`` against the Awa SDK's (awa-pg 0.6.9): the same physical
queue names, the same queue for every key (the table below was read from the SDK), the
same insert options, and queue configs that ``client.start`` takes; bad input refused by
name. The last test runs routed jobs through a real runner."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

import awa_fast
from awa_fast import ConfigError, PartitionedQueue, ValidationError
from tests.helpers import job as row_of
from tests.helpers import run, run_until, states

# (logical queue, partitions, key, the SDK's queue_for_key), from awa-pg 0.6.9.
SDK_ROUTES: list[tuple[str, int, bytes | str, str]] = [
    ("emails", 2, "customer-1", "emails__p1"),
    ("emails", 2, b"customer-2", "emails__p1"),
    ("emails", 3, "customer-42", "emails"),
    ("emails", 4, "a", "emails__p1"),
    ("emails", 4, "customer-1", "emails__p3"),
    ("emails", 4, b"\x00\xff", "emails"),
    ("emails", 4, "", "emails__p2"),
    ("emails", 4, "é", "emails"),
    ("emails", 4, "日本語", "emails__p3"),
    ("orders", 5, "order:1001", "orders__p3"),
    ("orders", 5, b"order:1002", "orders__p1"),
    ("orders", 7, "tenant/7/user/99", "orders"),
    ("orders", 8, "k" * 200, "orders"),
    ("orders", 8, b"\x01\x02\x03\x04", "orders__p6"),
    ("orders", 16, "0", "orders__p11"),
    ("orders", 16, "1", "orders__p9"),
    ("orders", 16, "2", "orders__p4"),
    ("hot", 100, "user-123456", "hot__p85"),
    ("hot", 100, b"user-123457", "hot__p39"),
    ("hot", 1000, "session:abcdef", "hot__p536"),
    ("hot", 32767, "x", "hot__p14823"),
    ("hot", 32767, b"\xff" * 33, "hot__p538"),
    ("hot", 1, "anything", "hot"),
    ("ingest.events", 12, "device-0007", "ingest.events__p2"),
    ("ingest.events", 12, "device-0008", "ingest.events"),
    ("ingest.events", 12, "device-0009", "ingest.events__p7"),
]

# The SDK's queue_for_key over queues of the caller's own names, in the order given.
CUSTOM = ["email-fast", "email-bulk", "email-slow"]
SDK_CUSTOM_ROUTES: list[tuple[bytes | str, str]] = [
    ("customer-1", "email-bulk"),
    ("customer-2", "email-fast"),
    ("customer-3", "email-fast"),
    (b"\x00", "email-fast"),
    ("z", "email-bulk"),
]


@pytest.mark.parametrize(("logical", "partitions", "key", "queue"), SDK_ROUTES)
def test_a_key_goes_to_the_sdks_queue(
    logical: str, partitions: int, key: bytes | str, queue: str
) -> None:
    pq = PartitionedQueue(logical, partitions)
    raw = key.encode() if isinstance(key, str) else key
    assert pq.queue_for_key(key) == queue
    assert pq.route_by_key(key) == {"queue": queue, "ordering_key": raw}


def test_a_key_of_any_bytes_like_type_or_its_text_goes_to_one_queue() -> None:
    pq = PartitionedQueue("emails", 16)
    for key in ("customer-1", "é", ""):
        raw = key.encode()
        queues = {pq.queue_for_key(k) for k in (key, raw, bytearray(raw), memoryview(raw))}
        assert queues == {pq.queue_for_key(key)}
        assert pq.route_by_key(bytearray(raw)) == {"queue": queues.pop(), "ordering_key": raw}


def test_the_sdks_physical_queue_names() -> None:
    """Partition 0 is the logical queue itself, so one partition is just that queue."""
    four = PartitionedQueue("emails", 4)
    assert four.physical_queues == ["emails", "emails__p1", "emails__p2", "emails__p3"]
    assert (four.logical_queue, four.partitions, len(four)) == ("emails", 4, 4)
    assert repr(four) == 'PartitionedQueue(logical_queue="emails", partitions=4)'
    assert PartitionedQueue("emails", 1).physical_queues == ["emails"]
    four.physical_queues.append("mutated")
    assert four.partitions == 4


def test_an_index_goes_round_robin() -> None:
    pq = PartitionedQueue("emails", 4)
    assert [pq.queue_for_index(i) for i in (0, 1, 3, 4, 5, 2**70)] == [
        "emails",
        "emails__p1",
        "emails__p3",
        "emails",
        "emails__p1",
        "emails",
    ]
    assert pq.route_by_index(7) == {"queue": "emails__p3"}


def test_queues_of_the_callers_names_route_as_the_sdks() -> None:
    pq = PartitionedQueue.from_physical_queues("email", CUSTOM)
    assert (pq.physical_queues, pq.partitions, pq.logical_queue) == (CUSTOM, 3, "email")
    for key, queue in SDK_CUSTOM_ROUTES:
        assert pq.queue_for_key(key) == queue
    assert pq.queue_for_index(4) == "email-bulk"


def test_the_default_names_given_explicitly_route_as_the_default() -> None:
    default = PartitionedQueue("emails", 5)
    explicit = PartitionedQueue.from_physical_queues("emails", default.physical_queues)
    assert explicit.physical_queues == default.physical_queues
    for i in range(200):
        assert explicit.queue_for_key(f"k{i}") == default.queue_for_key(f"k{i}")
    # The logical queue first, then the caller's own names: a 1 -> N rollout.
    mixed = PartitionedQueue.from_physical_queues("emails", ["emails", "emails-extra"])
    assert mixed.physical_queues == ["emails", "emails-extra"]


BAD_INPUT: list[tuple[Callable[[], object], str, str]] = [
    (lambda: PartitionedQueue("emails", 0), "partitions", "from 1 to 32767"),
    (lambda: PartitionedQueue("emails", -3), "partitions", "got -3"),
    (lambda: PartitionedQueue("emails", 32768), "partitions", "from 1 to 32767"),
    (lambda: PartitionedQueue("emails", True), "partitions", "got True"),
    (lambda: PartitionedQueue("emails", 2.0), "partitions", "got 2.0"),  # type: ignore[arg-type]
    (lambda: PartitionedQueue("", 2), "logical_queue", "non-empty"),
    (lambda: PartitionedQueue(5, 2), "logical_queue", "non-empty"),  # type: ignore[arg-type]
    (lambda: PartitionedQueue("q" * 126, 2), "logical_queue", "too long for 2 partitions"),
    (lambda: PartitionedQueue("e", 2).queue_for_index(-1), "index", ">= 0"),
    (lambda: PartitionedQueue("e", 2).queue_for_index(1.0), "index", "got 1.0"),  # type: ignore[arg-type]
    (lambda: PartitionedQueue("e", 2).route_by_index(-1), "index", ">= 0"),
    (lambda: PartitionedQueue("e", 2).queue_for_key(5), "key", "bytes-like or str"),  # type: ignore[arg-type]
    (lambda: PartitionedQueue("e", 2).route_by_key(None), "key", "bytes-like or str"),  # type: ignore[arg-type]
    (lambda: PartitionedQueue("e", 2).queue_for_key("\ud800"), "key", "UTF-8"),
    (lambda: PartitionedQueue.from_physical_queues("e", []), "physical_queues", "from 1"),
    (lambda: PartitionedQueue.from_physical_queues("e", "ab"), "physical_queues", "a list"),
    (lambda: PartitionedQueue.from_physical_queues("", ["a"]), "logical_queue", "non-empty"),
    (lambda: PartitionedQueue.from_physical_queues("e", ["a", ""]), "physical_queues[1]", "empty"),
    (
        lambda: PartitionedQueue.from_physical_queues("e", ["a", "b", "a"]),
        "physical_queues",
        "twice",
    ),
    (
        lambda: PartitionedQueue.from_physical_queues("e", ["e__p1", "e"]),
        "physical_queues[0]",
        "partition 1 of 'e' and must be at index 1",
    ),
    (
        lambda: PartitionedQueue.from_physical_queues("e", ["e", "e__p2"]),
        "physical_queues[1]",
        "must be at index 2",
    ),
    (
        lambda: PartitionedQueue.from_physical_queues("e", ["e", "orders__p1"]),
        "physical_queues[1]",
        "partition 1 of logical queue 'orders', not of 'e'",
    ),
    (
        lambda: PartitionedQueue.from_physical_queues("e", [f"q{i}" for i in range(32768)]),
        "physical_queues",
        "from 1 to 32767",
    ),
    (
        lambda: PartitionedQueue("e", 2).queue_configs(),
        "max_workers_per_partition",
        "requires max_workers_per_partition or min_workers_per_partition",
    ),
    (
        lambda: PartitionedQueue("e", 2).queue_configs(2, min_workers_per_partition=1),
        "max_workers_per_partition",
        "not both",
    ),
    (lambda: PartitionedQueue("e", 2).queue_configs(0), "max_workers_per_partition", "> 0"),
    (
        lambda: PartitionedQueue("e", 2).queue_configs(2, deadline_duration_ms=-1),
        "deadline_duration_ms",
        ">= 0",
    ),
    (
        lambda: PartitionedQueue("e", 2).queue_configs(2, claimers=0),
        "claimers",
        "> 0",
    ),
]


@pytest.mark.parametrize(("call", "field", "says"), BAD_INPUT)
def test_bad_input_is_refused_by_name(call: Callable[[], object], field: str, says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        call()
    assert refused.value.field == field
    assert says in refused.value.message


def test_queue_configs_are_the_sdks_for_what_awa_fast_honours() -> None:
    pq = PartitionedQueue("emails", 3)
    assert pq.queue_configs(4) == [
        {"name": "emails", "max_workers": 4},
        {"name": "emails__p1", "max_workers": 4},
        {"name": "emails__p2", "max_workers": 4},
    ]
    configs = pq.queue_configs(
        2, rate_limit_per_partition=(5.0, 3), deadline_duration_ms=1500, weight=1
    )
    assert configs[2] == {
        "name": "emails__p2",
        "max_workers": 2,
        "rate_limit": (5.0, 3),
        "deadline_duration_ms": 1500,
    }


def test_queue_configs_give_the_sdks_weighted_and_claim_settings() -> None:
    """What awa-pg 0.6.9's queue_configs returned for these arguments."""
    pq = PartitionedQueue("orders", 2)
    weighted = pq.queue_configs(
        min_workers_per_partition=2,
        weight=3,
        claimers=2,
        claim_batch_size=16,
        priority_aging_interval_ms=500,
        deadline_duration_ms=1000,
        rate_limit_per_partition=(5.0, 2),
    )
    assert weighted[1] == {
        "name": "orders__p1",
        "min_workers": 2,
        "weight": 3,
        "rate_limit": (5.0, 2),
        "priority_aging_interval_ms": 500,
        "deadline_duration_ms": 1000,
        "claimers": 2,
        "claim_batch_size": 16,
    }
    assert pq.queue_configs(min_workers_per_partition=0)[0] == {
        "name": "orders",
        "min_workers": 0,
        "weight": 1,
    }
    assert pq.queue_configs(4, weight=2)[0] == {"name": "orders", "max_workers": 4}
    # 0 turns aging and the deadline off, passed on as given
    assert pq.queue_configs(1, priority_aging_interval_ms=0, deadline_duration_ms=0)[0] == {
        "name": "orders",
        "max_workers": 1,
        "priority_aging_interval_ms": 0,
        "deadline_duration_ms": 0,
    }
    with pytest.raises(ValidationError, match="weight: must be an integer > 0"):
        pq.queue_configs(min_workers_per_partition=1, weight=0)


def test_a_bad_rate_limit_is_refused() -> None:
    with pytest.raises(ConfigError, match="rate_limit burst must be an integer >= 1"):
        PartitionedQueue("emails", 2).queue_configs(2, rate_limit_per_partition=(5.0, 0))


@dataclass
class Order:
    customer: str


def test_routed_jobs_run_in_their_partitions(dsn: str) -> None:
    """Jobs inserted with route_by_key and route_by_index land in the physical queues the
    routes name; a runner started on queue_configs serves them all, with the per-partition
    deadline those configs carry."""
    pq = PartitionedQueue("orders", 3)
    client = awa_fast.Client(dsn)
    keys = [f"customer-{i}" for i in range(12)]
    by_key = [client.insert(Order(key), **pq.route_by_key(key)) for key in keys]
    by_index = [client.insert(Order("any"), **pq.route_by_index(i)) for i in range(3)]
    assert [job.queue for job in by_key] == [pq.queue_for_key(key) for key in keys]
    assert [job.queue for job in by_index] == pq.physical_queues

    worker = awa_fast.AsyncClient(dsn)

    @worker.task(Order, queue="orders")  # a queue the runner runs, as start() asks
    async def handle(job: awa_fast.Job[Order]) -> None:
        job.update_metadata({"ran_in": job.queue, "deadline": job.datetimes.deadline.isoformat()})

    async def main() -> None:
        async with worker:
            await run_until(
                worker,
                pq.queue_configs(2, deadline_duration_ms=45_000),
                lambda: states(dsn) == {"completed": len(keys) + 3},
            )

    run(main())
    for inserted in by_key + by_index:
        row = row_of(dsn, inserted.id)
        assert row["metadata"]["ran_in"] == inserted.queue
        deadline = datetime.fromisoformat(row["metadata"]["deadline"])
        assert deadline == row["attempted_at"] + timedelta(seconds=45)
