"""Fair share as the pages explain it: the engine's division on the current snapshot, the
time-based usage arithmetic with its numbers, and the preview of a queue change.

The division itself is `scheduler_core.proportion.compute_fair_shares` on queue accounting built by
the engine's own `Session` from `kaiweb.scheduling.adapters.build_snapshot`: the numbers here are
the numbers the next cycle would compute, not a re-implementation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from scheduler_core.proportion import RESOURCES, DivisionStep, FairShareInputError, compute_fair_shares
from scheduler_core.units import queue_units_to_vector, vector_to_queue_units


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
class Division:
    """The result of one division: per-queue attrs (fair, request, …), the steps, the inputs."""

    queues: dict[str, Any]
    steps: list[DivisionStep]
    total: list[float]
    k: float
    usage: UsageArithmetic | None
    errors: list[str] = field(default_factory=list)


def divide(override: Any = None, with_usage: bool = True) -> Division:
    """Run the engine's division (`compute_fair_shares`) on the current state of the shard.

    The inputs are what the scheduling cycle itself uses: the queues' quota, limit, weight and
    priority (converted by `Queue.to_spec`), the capacity of the shard's ready
    nodes, each leaf queue's request as the last cycle recorded it (allocated + pending, rolled up
    the tree as the engine does) and the historical usage from usage accounting. Reading recorded
    requests instead of re-building the whole cluster snapshot keeps this to a few queries.
    `override` is an unsaved Queue whose values replace that queue: the preview of an edit.
    """
    from kaiweb.cluster.models import Node, SchedulingShard
    from kaiweb.queues.models import Queue
    from scheduler_core.proportion import QueueAttrs

    shard = SchedulingShard.objects.default()
    now = timezone.now()
    queues = [q for q in Queue.objects.order_by("name") if shard is None or shard.matches(q.labels)]
    if override is not None:
        queues = [override if q.pk == override.pk else q for q in queues]
    names = {q.pk: q.name for q in queues}
    statuses = _latest_requests(names)

    attrs: dict[str, QueueAttrs] = {}
    for q in queues:
        spec = q.to_spec(names.get(q.parent_id) if q.parent_id else None)

        def vec(part: str, spec: Any = spec) -> list[float]:
            return [float(getattr(spec.cpu, part)), float(getattr(spec.memory, part)), float(getattr(spec.gpu, part))]

        weight = [max(0.0, w) if w != -1 else 1.0 for w in vec("over_quota_weight")]
        attrs[q.name] = QueueAttrs(name=q.name, parent=spec.parent, priority=spec.priority, creation=spec.creation,
                                   deserved=vec("quota"), limit=vec("limit"), weight=weight)
    # Requests roll up from the leaves, with the (possibly edited) parent links.
    parents_with_children = {a.parent for a in attrs.values() if a.parent}
    for name in attrs:
        if name in parents_with_children:
            continue
        req = statuses.get(name)
        if not req:
            continue
        amount = queue_units_to_vector(req)
        cur: str | None = name
        seen: set[str] = set()
        while cur is not None and cur in attrs and cur not in seen:
            seen.add(cur)
            attrs[cur].request = [x + y for x, y in zip(attrs[cur].request, amount)]
            cur = attrs[cur].parent

    nodes = [n for n in Node.objects.filter(ready=True).only("labels", "allocatable_cpu", "allocatable_memory",
                                                               "allocatable_gpu", "cluster_id")
             if (shard is None or n.cluster_id == shard.cluster_id) and (shard is None or shard.matches(n.labels))]
    total = [float(sum(n.allocatable_cpu for n in nodes)), float(sum(n.allocatable_memory for n in nodes)),
             float(sum(n.allocatable_gpu for n in nodes))]

    k = float(shard.k_value) if shard is not None else 1.0
    usage_math: UsageArithmetic | None = None
    if with_usage and k > 0 and shard is not None:
        # The same input the cycle gives the engine (usage.accounting.usage_for_engine).
        usage_math = usage_arithmetic(shard, now)
        for name, row in (usage_math.rows.items() if usage_math else ()):
            if name in attrs:
                attrs[name].usage = [float(x) for x in row.normalised]
    try:
        steps = compute_fair_shares(attrs, total, k)
    except FairShareInputError as exc:
        return Division(queues=attrs, steps=[], total=total, k=k, usage=usage_math, errors=list(exc.problems))
    return Division(queues=attrs, steps=steps, total=total, k=k, usage=usage_math)


def _latest_requests(names: dict[int, str]) -> dict[str, dict[str, float]]:
    """Each queue's `requested` (queue units) as its latest recorded status says; two queries."""
    from kaiweb.queues.selectors import latest_statuses

    statuses = latest_statuses([pk for pk in names if pk is not None])
    return {names[qid]: (st.requested or {}) for qid, st in statuses.items() if qid in names}


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
        b = vector_to_queue_units(before.queues[n].fair) if n in before.queues else None
        a = vector_to_queue_units(after.queues[n].fair) if n in after.queues else None
        per = {}
        changed = False
        for r in RESOURCES:
            bv = b[r] if b else 0.0
            av = a[r] if a else 0.0
            per[r] = {"before": bv, "after": av, "delta": av - bv}
            changed = changed or not math.isclose(bv, av, abs_tol=1e-6)
        rows.append({"queue": n, "depth": depth(n), "changed": changed, "new": b is None, "gone": a is None, **per})
    return rows, after.errors
