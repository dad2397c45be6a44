"""Stub of the native module ``awa_fast._core`` (Rust, PyO3). Checked with mypy.stubtest.

All shared structures (``OutcomeRing``, ``InFlight``) live in anonymous shared memory: create
them before ``os.fork()`` and use them from the parent and every child.
"""

from typing import TypeAlias, final

__all__ = [
    "Batch",
    "Batcher",
    "InFlight",
    "OutcomeRing",
    "callback_sign",
    "callback_verify",
    "cel_evaluate",
    "cel_variables",
]

_Record: TypeAlias = tuple[int, int, int, int, float, bytes]
"""``(job_id, run_lease, code, kind, number, payload)``."""

@final
class OutcomeRing:
    """Multi-producer single-consumer ring of outcome records in shared memory.

    ``push`` applies backpressure when the ring is full (never drops). A reserved slot that
    stays unpublished for ``stall_timeout`` seconds is skipped and counted in ``skipped`` once
    its producer's process is gone; a paused producer keeps its slots. Only one thread of one
    process may drain at a time (``RuntimeError`` otherwise).
    """

    def __new__(
        cls, capacity: int = 65536, slot_bytes: int = 128, *, stall_timeout: float = 2.0
    ) -> OutcomeRing: ...
    def push(
        self,
        job_id: int,
        run_lease: int,
        code: int,
        kind: int,
        number: float,
        payload: bytes = ...,
        timeout: float | None = None,
    ) -> None:
        """Push one record; waits (GIL released) while full. TimeoutError after ``timeout``."""

    def drain(self, max_records: int, timeout: float) -> list[_Record]:
        """Up to ``max_records`` ready records; blocks (GIL released) up to ``timeout`` for one."""

    def drain_into(
        self, batcher: Batcher, timeout: float, inflight: InFlight | None = None
    ) -> bool:
        """Move records into ``batcher`` until it is ready or ``timeout``; ``batcher.ready()``.
        With ``inflight``, a non-empty batch is ready once nothing is in flight there. A
        ready batch takes along the records already waiting, up to ``batcher.limit``."""

    def _abandon(self, payload_len: int, claim: bool = True) -> None:
        """Test hook: take the slots of a ``payload_len`` record and publish nothing, as a
        producer killed mid-push does (``claim=False``: killed before claiming them)."""

    def __len__(self) -> int:
        """Approximate pending records (pending slots; exact when payloads fit one slot)."""

    @property
    def capacity(self) -> int: ...
    @property
    def slot_bytes(self) -> int: ...
    @property
    def stall_timeout(self) -> float: ...
    @property
    def skipped(self) -> int:
        """Records skipped: their producer died, or stalled before taking its slots."""

    @property
    def max_payload(self) -> int:
        """Largest payload (bytes) one record can carry in this ring."""

@final
class Batcher:
    """In-process collector of outcome records; ready at ``max_size`` or after ``max_delay``.
    ``OutcomeRing.drain_into`` tops a ready batch up with records already waiting, up to
    ``limit`` (default ``max_size``; ValueError below it)."""

    def __new__(
        cls, max_size: int = 256, max_delay: float = 0.002, *, limit: int | None = None
    ) -> Batcher: ...
    def push(
        self,
        job_id: int,
        run_lease: int,
        code: int,
        kind: int,
        number: float,
        payload: bytes = ...,
    ) -> None: ...
    def ready(self) -> bool:
        """True when ``len >= max_size`` or the oldest record is older than ``max_delay``."""

    def take(self) -> Batch | None:
        """Everything collected (None when empty); the batcher starts over."""

    def __len__(self) -> int: ...
    @property
    def max_size(self) -> int: ...
    @property
    def limit(self) -> int: ...
    @property
    def max_delay(self) -> float: ...

@final
class Batch:
    """An immutable batch as columns; each column property builds a new list."""

    @property
    def ids(self) -> list[int]: ...
    @property
    def leases(self) -> list[int]: ...
    @property
    def codes(self) -> list[int]: ...
    @property
    def kinds(self) -> list[int]: ...
    @property
    def numbers(self) -> list[float]: ...
    @property
    def payloads(self) -> list[bytes | None]:
        """Payload per record, None where it is empty."""

    def __len__(self) -> int: ...
    def settle(self, applied_ids: list[int]) -> list[int]:
        """Ids of this batch NOT in ``applied_ids`` (stale attempts), in batch order."""

    def select(self, indices: list[int]) -> Batch:
        """Sub-batch at ``indices``, in that order (IndexError when out of range)."""

    def split_by_code(self) -> dict[int, Batch]: ...

@final
class InFlight:
    """Per-queue capacity counters and per-attempt slots in shared memory.

    ``reserve`` takes capacity units; an occupied slot holds one unit of its queue, returned
    by ``release_slot`` / ``release_worker``; unused reserved units go back with ``release``.
    A capacity is at most 8,388,607 (ValueError above it).
    """

    def __new__(cls, capacities: list[int], slots: int) -> InFlight: ...
    def reserve(self, queue: int, want: int) -> int:
        """Take up to ``want`` free units of ``queue``; returns how many were granted."""

    def release(self, queue: int, n: int = 1) -> None:
        """Return ``n`` units (ValueError if more than are in flight)."""

    def in_flight(self, queue: int) -> int: ...
    def capacity(self, queue: int) -> int: ...
    def free(self, queue: int) -> int: ...
    def set_capacity(self, queue: int, cap: int) -> None: ...
    def acquire_slot(self, job_id: int, run_lease: int, queue: int, worker: int) -> int:
        """Occupy a slot; RuntimeError("in-flight table full") when none is free."""

    def release_slot(self, slot: int) -> bool:
        """Free a slot and return its queue unit; False if it was not occupied."""

    def slot_info(self, slot: int) -> tuple[int, int, int, int, bool] | None:
        """``(job_id, run_lease, queue, worker, cancelled)`` of an occupied slot."""

    def cancel(self, job_id: int, run_lease: int | None = None) -> bool:
        """Flag the slot(s) running ``job_id`` (and ``run_lease``); True if any matched."""

    def is_cancelled(self, slot: int) -> bool: ...
    def mark_started(self, slot: int) -> None:
        """Mark ``slot``'s attempt started, just before its handler runs."""

    def cancel_worker(self, worker: int) -> int:
        """Flag every slot of ``worker``; returns how many."""

    def running(self) -> tuple[list[int], list[int]]:
        """``(ids, leases)`` of every occupied slot."""

    def attempts(self) -> list[tuple[int, int, int, bool]]:
        """``(job_id, run_lease, queue, started)`` of every occupied slot: an attempt whose
        handler runs, or (not started) a prefetched job waiting in its worker."""

    def held_by(self, worker: int) -> list[tuple[int, int]]:
        """``(job_id, run_lease)`` of each slot of ``worker``."""

    def release_worker(self, worker: int) -> list[tuple[int, int, int, bool]]:
        """Free a dead worker's slots: ``(job_id, run_lease, queue, started)`` each, units
        returned."""

    @property
    def queue_count(self) -> int: ...
    @property
    def slot_count(self) -> int: ...

def callback_sign(secret: bytes, callback_id: str) -> str:
    """Lowercase hex of BLAKE3's keyed hash of ``callback_id`` (UTF-8) under the 32-byte
    ``secret`` (ValueError for another length)."""

def callback_verify(secret: bytes, callback_id: str, signature: str) -> bool:
    """Whether ``signature`` is the hex (either case) of ``callback_sign(secret,
    callback_id)``; compared in constant time. Malformed hex is False."""

def cel_variables(expression: str) -> list[str]:
    """The variables a CEL expression references, sorted; ValueError if it does not parse."""

def cel_evaluate(expression: str, payload: str) -> str:
    """A CEL expression evaluated with ``payload`` (JSON text) bound to ``payload``, as JSON
    text; ValueError if it does not parse or evaluate, or yields a value JSON cannot hold."""
