"""What the maintenance services have done since this host started, for its metrics."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class MaintenanceStats:
    """Counts each service adds to as its passes commit."""

    promoted: int = 0
    rescued: dict[str, int] = field(default_factory=dict)  # by the query that found them
    deleted: int = 0
    descriptors_deleted: int = 0
    vacuumed: int = 0
    periodic: int = 0
    counts_folded: int = 0  # count deltas folded into the rollup
    rings_truncated: int = 0  # standby claims' and claim ledger's partitions truncated
    batch_changed: int = 0  # jobs changed by batch operations
