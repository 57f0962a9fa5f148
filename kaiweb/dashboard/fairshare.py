"""Fair share as the pages explain it: the engine's division on the current snapshot, the
time-based usage arithmetic with its numbers, and the preview of a queue change.

The division itself is `scheduler_core.proportion.compute_fair_shares` on queue accounting built by
the engine's own `Session` from `kaiweb.scheduling.adapters.build_snapshot`: the numbers here are
the numbers the next cycle would compute, not a re-implementation.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from scheduler_core.proportion import RESOURCES, DivisionStep, FairShareInputError, compute_fair_shares

MB = 1_000_000


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


def usage_arithmetic(shard: Any, now: Any = None) -> UsageArithmetic | None:
    """The usage accounting's decayed sums for every queue (None without a shard)."""
    from kaiweb.usage.accounting import compute_usage

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
    return out


@dataclass
class Division:
    """The result of one division: per-queue attrs (fair, request, …), the steps, the inputs."""

    queues: dict[str, Any]
    steps: list[DivisionStep]
    total: list[float]
    k: float
    usage: UsageArithmetic | None
    errors: list[str] = field(default_factory=list)


def current_shard() -> Any:
    from kaiweb.cluster.models import SchedulingShard

    return SchedulingShard.objects.filter(enabled=True).select_related("cluster").order_by("pk").first()


def divide(override: Any = None, with_usage: bool = True) -> Division:
    """Run the engine's division on the current snapshot; `override` is an unsaved Queue whose
    values replace (or add) that queue in the snapshot — the preview of an edit."""
    from kaiweb.queues.models import Queue
    from kaiweb.scheduling.adapters import build_snapshot, queue_to_spec
    from scheduler_core import model as m
    from scheduler_core.session import Session

    shard = current_shard()
    now = timezone.now()
    names = dict(Queue.objects.values_list("pk", "name"))
    usage_math: UsageArithmetic | None = None
    usage: dict[str, tuple[float, float, float]] = {}
    snapshot, _index = build_snapshot(shard, now.timestamp(), None)
    if override is not None:
        parent_name = names.get(override.parent_id) if override.parent_id else None
        spec = queue_to_spec(override, parent_name)
        old_name = names.get(override.pk) if override.pk else None
        kept = [q for q in snapshot.queues if q.name not in {old_name, spec.name}]
        if old_name and old_name != spec.name:
            kept = [dataclasses.replace(q, parent=spec.name) if q.parent == old_name else q for q in kept]
        snapshot = dataclasses.replace(snapshot, queues=(*kept, spec))
    k = float(shard.k_value) if shard is not None else 1.0
    session = Session(snapshot, m.CycleConfig(k_value=k))
    if with_usage and k > 0 and shard is not None:
        # The same input the cycle gives the engine (usage.accounting.usage_for_engine).
        usage_math = usage_arithmetic(shard, now)
        for name, row in (usage_math.rows.items() if usage_math else ()):
            usage[name] = (row.normalised[0], row.normalised[1], row.normalised[2])
        for name, q in session.queues.items():
            q.usage = list(usage.get(name, (0.0, 0.0, 0.0)))
    errors = [e.message for e in session.errors if e.kind == "queue"]
    try:
        steps = compute_fair_shares(session.queues, session.total, k)
    except FairShareInputError as exc:
        return Division(queues=session.queues, steps=[], total=session.total, k=k, usage=usage_math,
                        errors=errors + exc.problems)
    return Division(queues=session.queues, steps=steps, total=session.total, k=k, usage=usage_math, errors=errors)


def to_queue_units(vec: list[float]) -> dict[str, float]:
    """Engine vector (millicores, bytes, devices) → queue units (millicores, MB, devices)."""
    return {"cpu": vec[0], "memory": vec[1] / MB if vec[1] >= 0 else vec[1], "gpu": vec[2]}


def preview(proposed: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """Every queue's fair share now and with `proposed` (an unsaved Queue), per resource.

    Returns rows {queue, depth, changed, per resource: (before, after, delta)} in tree order,
    and the problems the engine found with the proposed tree (shown instead of numbers).
    """
    before = divide(None, with_usage=True)
    after = divide(proposed, with_usage=True)
    names = sorted(set(before.queues) | set(after.queues))
    parents = {n: (after.queues.get(n) or before.queues.get(n)).parent for n in names}

    def depth(n: str) -> int:
        d, cur, seen = 0, parents.get(n), set()
        while cur is not None and cur not in seen:
            seen.add(cur)
            d, cur = d + 1, parents.get(cur)
        return d

    def order_key(n: str) -> list[str]:
        chain, cur, seen = [n], parents.get(n), set()
        while cur is not None and cur not in seen:
            seen.add(cur)
            chain.append(cur)
            cur = parents.get(cur)
        return list(reversed(chain))

    rows = []
    for n in sorted(names, key=order_key):
        b = to_queue_units(before.queues[n].fair) if n in before.queues else None
        a = to_queue_units(after.queues[n].fair) if n in after.queues else None
        per = {}
        changed = False
        for r in RESOURCES:
            bv = b[r] if b else 0.0
            av = a[r] if a else 0.0
            per[r] = {"before": bv, "after": av, "delta": av - bv}
            changed = changed or not math.isclose(bv, av, abs_tol=1e-6)
        rows.append({"queue": n, "depth": depth(n), "changed": changed, "new": b is None, "gone": a is None, **per})
    return rows, after.errors
