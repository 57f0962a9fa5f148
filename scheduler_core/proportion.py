"""Per-queue accounting, fair share and the queue-level rules of KAI's proportion plugin.

This module is the contract between the division/ordering/reclaim rules (KAI-SEMANTICS §2.4,
§3, §4.4) and the actions that use them (allocate, reclaim, preempt, consolidation).
Everything here is pure and deterministic. Vectors are lists of three floats indexed by
CPU (millicores), MEMORY (bytes), GPU (devices); -1 means unlimited for deserved and limit.

INTERFACE STUB: the signatures below are the agreed contract; bodies are being implemented.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CPU, MEMORY, GPU = 0, 1, 2
RESOURCES = ("cpu", "memory", "gpu")
UNLIMITED = -1.0


def _zeros() -> list[float]:
    return [0.0, 0.0, 0.0]


@dataclass(slots=True)
class QueueAttrs:
    """One queue's attributes and live accounting for one cycle (leaf or not).

    `request`, `allocated`, `allocated_np` are sums over the queue's whole subtree and are kept
    in step by the session on every (virtual) allocate / evict / undo, on the leaf and every
    ancestor. `fair` is set once per cycle by `compute_fair_shares` and not changed after.
    """

    name: str
    parent: str | None
    priority: int
    creation: float  # ordering key: smaller = older (ties broken by name)
    deserved: list[float]
    limit: list[float]
    weight: list[float]
    children: list[str] = field(default_factory=list)
    request: list[float] = field(default_factory=_zeros)
    allocated: list[float] = field(default_factory=_zeros)
    allocated_np: list[float] = field(default_factory=_zeros)
    usage: list[float] = field(default_factory=_zeros)  # normalised historical usage, 0 when off
    fair: list[float] = field(default_factory=_zeros)


@dataclass(slots=True)
class DivisionStep:
    """One line of the fair-share arithmetic, for explanations ("why is my fair share X")."""

    queue: str
    resource: str
    phase: str  # "deserved", "over-quota", "remainder"
    amount: float
    detail: str


def compute_fair_shares(
    queues: dict[str, QueueAttrs], total: list[float], k: float = 1.0
) -> list[DivisionStep]:
    """Set `fair` on every queue: KAI's division (§3.3) per resource, top level first, then each
    queue's fair share divided among its children (§3.4). Returns the steps taken."""
    raise NotImplementedError


def compare_queues(
    left: QueueAttrs, right: QueueAttrs, left_req: list[float] | None, right_req: list[float] | None,
    total: list[float],
) -> int:
    """QueueOrder (§2.4, the eight rules + name as last tie-break): < 0 when `left` goes first.
    `*_req` is the resource vector of the queue's best pending job's next batch (None = no job)."""
    raise NotImplementedError


def compare_victim_queues(
    left: QueueAttrs, right: QueueAttrs, left_removed: list[float], right_removed: list[float],
    total: list[float],
) -> int:
    """Victim-mode queue order (§2.10, §4.2): QueueOrder reversed, evaluated with each queue's
    `allocated` minus `*_removed` (its already-popped victims plus its next candidate), no job."""
    raise NotImplementedError
