"""Fair share as the pages explain it: the engine's division on the next cycle's snapshot, the
time-based usage arithmetic with its numbers, and the preview of a queue change.

The division is `scheduler_core.fair_share.divide` on the snapshot and config the shard's next cycle
decides on (`cycle.next_snapshot`, built by `adapters.build_snapshot`): the inputs (queues, capacity,
requests, usage) and the steps are the cycle's own, computed once in the engine.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from kaiweb.cluster.models import SchedulingShard
from kaiweb.scheduling.adapters import SnapshotIndex
from kaiweb.scheduling.cycle import next_snapshot
from kaiweb.usage.accounting import compute_usage
from scheduler_core import fair_share
from scheduler_core import model as m
from scheduler_core.proportion import RESOURCES
from scheduler_core.units import vector_to_queue_units


@dataclass
class UsageRow:
    """One queue's time-based fair-share inputs (KAI-SEMANTICS §3.8), per resource [cpu, memory, gpu]."""

    queue: str
    decayed: list[float]  # Σ allocated(t)·decay(t) over the window's samples
    normalised: list[float]  # U = decayed / capacity decayed


@dataclass
class UsageArithmetic:
    """The numbers of `kaiweb.usage.accounting.compute_usage`, shaped for the page."""

    window_seconds: float
    half_life_seconds: float | None
    window_type: str
    k: float
    samples: int
    capacity: dict[str, float]
    capacity_decayed: list[float]
    rows: dict[str, UsageRow] = field(default_factory=dict)
    # where U comes from when not from these sums: the shard's usage database (its answer replaces U)
    source: str = ""


def usage_arithmetic(shard: Any, now: Any = None) -> UsageArithmetic | None:
    """The usage accounting's decayed sums for every queue (None without a shard)."""
    if shard is None:
        return None
    full = compute_usage(shard, now=now)
    params = full["params"]
    out = UsageArithmetic(
        window_seconds=params["window_seconds"], half_life_seconds=params["half_life_seconds"],
        window_type=params["window_type"], k=float(params["k"]), samples=len(full["sample_times"]),
        capacity=full["capacity"], capacity_decayed=full["capacity_decayed"],
    )
    for name, usage in full["usage"].items():
        out.rows[name] = UsageRow(queue=name, decayed=full["queue_decayed"].get(name, [0.0, 0.0, 0.0]),
                                  normalised=list(usage))
    answer, source = shard.usage_db_answer()
    if answer is not None:  # the cycle reads the usage database's U (usage.accounting.usage_for_engine)
        out.source = source
        for row in out.rows.values():
            row.normalised = [0.0, 0.0, 0.0]
        for name, usage in answer.items():
            row = out.rows.setdefault(name, UsageRow(queue=name, decayed=[0.0, 0.0, 0.0], normalised=[]))
            row.normalised = list(usage)
    return out


@dataclass
class Division(fair_share.Division):
    """The engine's division of the shard's next snapshot, with the time-based usage arithmetic
    behind its usage inputs (None when not asked for, without a shard, or with k = 0)."""

    usage: UsageArithmetic | None = None


def divide(override: Any = None, with_usage: bool = True) -> Division:
    """The fair shares the default shard's next cycle computes (``scheduler_core.fair_share.divide``).

    The snapshot and config are the ones that cycle decides on (``cycle.next_snapshot``, through
    ``adapters.build_snapshot``): the same queues, nodes, jobs and usage, so the numbers are the
    cycle's. ``override`` is an unsaved Queue whose values replace that queue: the preview of an edit.
    ``with_usage`` adds the usage accounting's sums to show (they do not change the division)."""
    shard = SchedulingShard.objects.default()
    snapshot, config, index = next_snapshot(shard)
    if override is not None:
        snapshot = _with_queue(snapshot, index, override)
    division = fair_share.divide(snapshot, config)
    usage_math = None
    if with_usage and config.k_value > 0 and shard is not None:
        usage_math = usage_arithmetic(shard, timezone.now())
    return Division(queues=division.queues, steps=division.steps, total=division.total, k=division.k,
                    errors=division.errors, usage=usage_math)


def _with_queue(snapshot: m.ClusterSnapshot, index: SnapshotIndex, queue: Any) -> m.ClusterSnapshot:
    """The snapshot with ``queue`` (an unsaved edit of a queue in it) in place of the queue's spec;
    its children follow a new name."""
    old = next((name for name, pk in index.queues.items() if pk == queue.pk), None)
    if old is None:
        return snapshot
    spec = queue.to_spec(queue.parent.name if queue.parent_id and queue.parent else None)
    specs = []
    for q in snapshot.queues:
        if q.name == old:
            q = spec
        elif q.parent == old:
            q = dataclasses.replace(q, parent=spec.name)
        specs.append(q)
    return dataclasses.replace(snapshot, queues=tuple(specs))


def preview(proposed: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """Every queue's fair share now and with `proposed` (an unsaved Queue), per resource.

    Returns rows {queue, depth, changed, per resource: (before, after, delta)} in tree order,
    and the problems the engine found with the proposed tree that the current one does not have.
    """
    # one snapshot, divided as it is and with the edit
    snapshot, config, index = next_snapshot(SchedulingShard.objects.default())
    before = fair_share.divide(snapshot, config)
    after = fair_share.divide(_with_queue(snapshot, index, proposed), config)
    return compare_divisions(before, after)


def compare_divisions(before: Any, after: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """Two divisions of one shard (as it is, and with a change) side by side: rows {queue, depth, changed,
    new, gone, per resource: (before, after, delta)} in tree order, and the problems the engine found
    with the changed tree that the current one does not have (a problem the tree already had is not
    the change's). The one comparison every fair-share preview shows."""
    names = sorted(set(before.queues) | set(after.queues))
    parents = {n: (after.queues.get(n) or before.queues.get(n)).parent for n in names}

    def chain(n: str) -> list[str]:
        out, cur, seen = [n], parents.get(n), {n}
        while cur is not None and cur not in seen:
            seen.add(cur)
            out.append(cur)
            cur = parents.get(cur)
        return list(reversed(out))

    rows = []
    for n in sorted(names, key=chain):
        b = vector_to_queue_units(before.queues[n].fair) if n in before.queues else None
        a = vector_to_queue_units(after.queues[n].fair) if n in after.queues else None
        per, changed = {}, False
        for r in RESOURCES:
            bv, av = (b[r] if b else 0.0), (a[r] if a else 0.0)
            per[r] = {"before": bv, "after": av, "delta": av - bv}
            changed = changed or not math.isclose(bv, av, abs_tol=1e-6)
        rows.append({"queue": n, "depth": len(chain(n)) - 1, "changed": changed, "new": b is None,
                     "gone": a is None, **per})
    return rows, [e for e in after.errors if e not in before.errors]
