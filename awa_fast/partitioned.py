"""One hot logical queue spread over several physical queues, as the Awa SDK's
``PartitionedQueue`` spreads it: its queue names and its key hash, so that a producer on
either library and workers on the other agree on where each key's jobs go.

Partition 0 is the logical queue's own name and partition ``i`` is ``{logical}__p{i}``:
jobs inserted straight into the logical queue during a move from 1 to N partitions are
still served. A key goes to partition ``hash(key) % partitions`` by the SDK's portable
64-bit hash (awa-model's ``partition_hash64``): a multiply-then-add FNV over the key's
bytes (a str's UTF-8), XORed with a constant and finished with SplitMix64, so that it does
not correlate with the raw FNV the SDK shards one queue's storage by.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from awa_fast import validation
from awa_fast.errors import ValidationError
from awa_fast.types import InsertOptions
from awa_fast.validation import check_rate_limit

MAX_PARTITIONS = 32767  # the SDK's bound: its queue-storage shard numbers are smallints
SUFFIX = "__p"

_MASK = (1 << 64) - 1
_FNV_OFFSET = 14_695_981_039_346_656_037
_FNV_PRIME = 1_099_511_628_211
_DOMAIN = 0x9D4D_1B2F_53A7_0C91

Key = bytes | bytearray | memoryview | str  # a str routes as its UTF-8


def partition_hash(key: bytes) -> int:
    """The SDK's partition hash of ``key``: equal keys land in the same partition on
    every producer, in any language the SDK serves."""
    value = _FNV_OFFSET
    for byte in key:
        value = (value * _FNV_PRIME + byte) & _MASK
    value ^= _DOMAIN
    value ^= value >> 30
    value = (value * 0xBF58_476D_1CE4_E5B9) & _MASK
    value ^= value >> 27
    value = (value * 0x94D0_49BB_1331_11EB) & _MASK
    return value ^ (value >> 31)


class PartitionedQueue:
    """Deterministic physical queue partitions for one hot logical queue. Insert with
    ``client.insert(args, **pq.route_by_key(key))``; serve every partition with
    ``client.start(pq.queue_configs(max_workers_per_partition))``."""

    __slots__ = ("_logical_queue", "_physical_queues")

    def __init__(self, logical_queue: str, partitions: int) -> None:
        logical = validation.name("logical_queue", logical_queue)
        count = _count("partitions", partitions)
        physical = [logical, *(f"{logical}{SUFFIX}{i}" for i in range(1, count))]
        if len(physical[-1]) > validation.MAX_NAME_LENGTH:
            raise ValidationError(
                "logical_queue",
                f"too long for {count} partitions: its last physical queue's name would be "
                f"{len(physical[-1])} characters, more than {validation.MAX_NAME_LENGTH}",
            )
        self._logical_queue = logical
        self._physical_queues = physical

    @classmethod
    def from_physical_queues(
        cls, logical_queue: str, physical_queues: Sequence[str]
    ) -> PartitionedQueue:
        """Partitions with names of the caller's choosing (queues an application already
        has), in the order given: a key's partition is its hash modulo their number.
        Names in the default scheme (the logical queue's own, ``{logical}__p{i}``) must
        sit at their default places, so that each key goes where
        ``PartitionedQueue(logical_queue, n)`` sends it, and a name in another logical
        queue's scheme is refused."""
        logical = validation.name("logical_queue", logical_queue)
        if isinstance(physical_queues, str | bytes) or not isinstance(physical_queues, Sequence):
            raise ValidationError(
                "physical_queues", f"must be a list of queue names, got {physical_queues!r}"
            )
        _count("physical_queues", len(physical_queues), noun="queue names")
        seen: set[str] = set()
        for index, queue in enumerate(physical_queues):
            name = validation.name(f"physical_queues[{index}]", queue)
            if name in seen:
                raise ValidationError("physical_queues", f"queue {name!r} is given twice")
            seen.add(name)
            _check_place(logical, name, index)
        self = cls.__new__(cls)
        self._logical_queue = logical
        self._physical_queues = list(physical_queues)
        return self

    @property
    def logical_queue(self) -> str:
        return self._logical_queue

    @property
    def physical_queues(self) -> list[str]:
        """Every queue workers must serve, partition 0 first."""
        return list(self._physical_queues)

    @property
    def partitions(self) -> int:
        return len(self._physical_queues)

    def queue_for_key(self, key: Key) -> str:
        """The physical queue of ``key`` (bytes, or a str as its UTF-8): the same for
        every producer, so one key's jobs stay in one queue."""
        return self._physical_queues[self._partition(_key_bytes(key))]

    def queue_for_index(self, index: int) -> str:
        """The physical queue at ``index`` modulo the partitions: round-robin for a bulk
        producer that needs no per-key order."""
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValidationError("index", f"must be an integer >= 0, got {index!r}")
        return self._physical_queues[index % len(self._physical_queues)]

    def route_by_key(self, key: Key) -> InsertOptions:
        """Insert options routed by ``key``: ``{"queue": ..., "ordering_key": key as
        bytes}``, for ``client.insert(args, **pq.route_by_key(key))``."""
        raw = _key_bytes(key)
        return {"queue": self._physical_queues[self._partition(raw)], "ordering_key": raw}

    def route_by_index(self, index: int) -> InsertOptions:
        """Insert options routed round-robin: ``{"queue": queue_for_index(index)}``."""
        return {"queue": self.queue_for_index(index)}

    def queue_configs(
        self,
        max_workers_per_partition: int | None = None,
        *,
        min_workers_per_partition: int | None = None,
        weight: int = 1,
        rate_limit_per_partition: tuple[float, int] | None = None,
        priority_aging_interval_ms: int | None = None,
        deadline_duration_ms: int | None = None,
        claimers: int | None = None,
        claim_batch_size: int | None = None,
    ) -> list[dict[str, Any]]:
        """One ``client.start`` queue dict per partition, each with the per-partition
        settings given, as the SDK's: ``max_workers``, or in weighted mode (with
        ``global_max_workers``) ``min_workers`` and ``weight``; ``rate_limit``,
        ``priority_aging_interval_ms``, ``deadline_duration_ms`` (0 turns either off),
        ``claimers`` and ``claim_batch_size`` when given."""
        _check_workers(max_workers_per_partition, min_workers_per_partition)
        settings: dict[str, Any] = (
            {"max_workers": max_workers_per_partition}
            if max_workers_per_partition is not None
            else {
                "min_workers": _at_least("min_workers_per_partition", min_workers_per_partition, 0),
                "weight": _at_least("weight", weight, 1),
            }
        )
        if rate_limit_per_partition is not None:
            settings["rate_limit"] = check_rate_limit(self._logical_queue, rate_limit_per_partition)
        # field -> (value, its least: 0 turns aging or the deadline off, as in the SDK)
        optional = {
            "priority_aging_interval_ms": (priority_aging_interval_ms, 0),
            "deadline_duration_ms": (deadline_duration_ms, 0),
            "claimers": (claimers, 1),
            "claim_batch_size": (claim_batch_size, 1),
        }
        for field, (value, low) in optional.items():
            if value is not None:
                settings[field] = _at_least(field, value, low)
        return [{"name": queue, **settings} for queue in self._physical_queues]

    def _partition(self, key: bytes) -> int:
        count = len(self._physical_queues)
        return 0 if count == 1 else partition_hash(key) % count

    def __len__(self) -> int:
        return len(self._physical_queues)

    def __repr__(self) -> str:
        logical = json.dumps(self._logical_queue, ensure_ascii=False)
        return f"PartitionedQueue(logical_queue={logical}, partitions={self.partitions})"


def _count(field: str, value: object, *, noun: str = "partitions") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_PARTITIONS:
        raise ValidationError(field, f"must be from 1 to {MAX_PARTITIONS} {noun}, got {value!r}")
    return value


def _check_place(logical: str, name: str, index: int) -> None:
    """Refuse a default-scheme name away from its default place, or of another queue."""
    base, suffix, number = name.rpartition(SUFFIX)
    if name == logical:
        owner, place = logical, 0
    elif suffix and number.isascii() and number.isdigit() and number[0] != "0":
        owner, place = base, int(number)
    else:
        return  # a name of the caller's own scheme
    if owner != logical:
        raise ValidationError(
            f"physical_queues[{index}]",
            f"{name!r} is partition {place} of logical queue {owner!r}, not of {logical!r}",
        )
    if place != index:
        raise ValidationError(
            f"physical_queues[{index}]",
            f"{name!r} is partition {place} of {logical!r} and must be at index {place}: "
            f"elsewhere, keys would not go where PartitionedQueue({logical!r}, n) sends them",
        )


def _key_bytes(key: object) -> bytes:
    if isinstance(key, str):
        try:
            return key.encode()
        except UnicodeEncodeError as exc:
            raise ValidationError("key", f"is not encodable as UTF-8: {exc}") from None
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key)
    raise ValidationError("key", f"must be bytes-like or str, got {type(key).__name__}")


def _check_workers(max_workers: int | None, min_workers: int | None) -> None:
    """The SDK's rule: exactly one of the two capacities."""
    if max_workers is not None and min_workers is not None:
        raise ValidationError(
            "max_workers_per_partition",
            "use max_workers_per_partition or min_workers_per_partition, not both",
        )
    if max_workers is None and min_workers is None:
        raise ValidationError(
            "max_workers_per_partition",
            "queue_configs requires max_workers_per_partition or min_workers_per_partition",
        )
    if max_workers is not None:
        _at_least("max_workers_per_partition", max_workers, 1)


def _at_least(field: str, value: object, low: int) -> int:
    """An integer setting of at least ``low`` (0 or 1)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        bound = "> 0" if low else ">= 0"
        raise ValidationError(field, f"must be an integer {bound}, got {value!r}")
    return value
