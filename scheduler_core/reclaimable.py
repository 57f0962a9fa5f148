"""Reclaim rules of KAI's proportion plugin (KAI-SEMANTICS §3.7) and min-runtime resolution (§4.4).

Pure functions over `QueueAttrs` (the session's live or snapshotted accounting); nothing here changes
a queue. Every check returns a `Verdict`: whether it passed, a machine-readable `code`, a sentence with
the numbers that decided it ("queue A allocated 8 > allocatable share 6 in gpu") and those numbers, so
eviction explanations can quote them. Comparisons with -1 (unlimited deserved / limit) treat it as +∞.

Invariants: a reclaimer leaf never goes above its fair share (§8 inv. 15); a victim chunk is taken only
while its LCA-child queue is above its allocatable share, or above its deserved quota while the
reclaimer's LCA-child stays within its own (inv. 16); at every level of the reclaimer's path it stays
less saturated (× m) than each sibling it takes from, unless within its fair share (inv. 17).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler_core import reasons
from scheduler_core.proportion import RESOURCES, QueueAttrs, allocatable_share, is_unlimited, le_cap
from scheduler_core.units import amount

Vector = Sequence[float]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The result of one rule: `ok`, a `code` for machines, a `reason` for people, the deciding numbers."""

    ok: bool
    code: str
    reason: str
    numbers: dict[str, object] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True, slots=True)
class ChunkCheck:
    """What happened to one victim chunk: the strategy that allowed it and the victim-side numbers."""

    victim_leaf: str
    victim_level: str  # the victim's LCA-child queue (V*)
    chunk: tuple[float, ...]
    verdict: Verdict
    remaining_before: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class ReclaimOutcome:
    """Result of applying the strategies to ordered victim chunks (§3.7 d)."""

    verdict: Verdict
    chunks: list[ChunkCheck]
    remaining: dict[str, list[float]]  # allocation left per queue that lost something (leaves and ancestors)
    involved: dict[str, set[int]]  # resources (indices) taken from each such queue


@dataclass(frozen=True, slots=True)
class MinRuntime:
    """A resolved minimum runtime in seconds and where it came from (a queue name or "default")."""

    seconds: float
    source: str


def _n(r: int, x: float) -> str:
    """An amount of resource `r` with its unit; any cap below zero reads "unlimited"."""
    return amount(r, -1 if is_unlimited(x) else x)


def _vec(v: Vector) -> list[float]:
    if len(v) != 3:
        raise ValueError(f"resource vector must have 3 entries (cpu, memory, gpu), got {len(v)}")
    return [float(x) for x in v]


# --------------------------------------------------------------------------------------------
# Tree helpers
# --------------------------------------------------------------------------------------------


def path_to_root(queues: Mapping[str, QueueAttrs], name: str) -> list[str]:
    """The queues from the top level down to `name` (inclusive). Unknown queue → ValueError."""
    if name not in queues:
        raise ValueError(f"queue {name!r} does not exist")
    path: list[str] = []
    cur: str | None = name
    while cur is not None and cur in queues:
        if cur in path:
            raise ValueError(f"queue {name!r}: parent chain loops through {cur!r}")
        path.append(cur)
        cur = queues[cur].parent
    path.reverse()
    return path


def lowest_common_ancestor(queues: Mapping[str, QueueAttrs], a: str, b: str) -> str | None:
    """The deepest queue that is an ancestor of (or equal to) both; None when in different top-level trees."""
    pa, pb = path_to_root(queues, a), path_to_root(queues, b)
    lca: str | None = None
    for x, y in zip(pa, pb):
        if x != y:
            break
        lca = x
    return lca


def leveled_queues(queues: Mapping[str, QueueAttrs], reclaimer_leaf: str, victim_leaf: str) -> tuple[str, str]:
    """(R*, V*): the two queues at the first depth where the root-to-leaf paths differ (§3.7 b).

    When one path is a prefix of the other, the last common depth is returned for both (as KAI does)."""
    pr, pv = path_to_root(queues, reclaimer_leaf), path_to_root(queues, victim_leaf)
    r_star, v_star = pr[0], pv[0]
    for x, y in zip(pr, pv):
        r_star, v_star = x, y
        if x != y:
            break
    return r_star, v_star


# --------------------------------------------------------------------------------------------
# (a) reclaimer eligibility
# --------------------------------------------------------------------------------------------


def can_reclaim(
    queues: Mapping[str, QueueAttrs], reclaimer_leaf: str, req: Vector, preemptible: bool = True
) -> Verdict:
    """§3.7 (a): the reclaimer's leaf stays within its fair share in every resource after `req`; a
    non-preemptible reclaimer must also keep `allocated_np + req ≤ deserved`.

    Example: `can_reclaim(queues, "team-b", [0, 0, 2]).ok`."""
    q = queues[reclaimer_leaf]
    req = _vec(req)
    for r in range(3):
        after = q.allocated[r] + req[r]
        if not le_cap(after, q.fair[r]):
            return Verdict(False, reasons.RECLAIMER_OVER_FAIR_SHARE,
                           f"queue {q.name} would hold {_n(r, after)} (allocated {_n(r, q.allocated[r])}"
                           f" + job {_n(r, req[r])}) > its fair share {_n(r, q.fair[r])}",
                           {"queue": q.name, "resource": RESOURCES[r], "allocated": q.allocated[r],
                            "request": req[r], "fair_share": q.fair[r]})
    if not preemptible:
        for r in range(3):
            after = q.allocated_np[r] + req[r]
            if not le_cap(after, q.deserved[r]):
                return Verdict(False, reasons.NON_PREEMPTIBLE_OVER_QUOTA,
                               f"queue {q.name} would hold {_n(r, after)} of non-preemptible work"
                               f" (allocated {_n(r, q.allocated_np[r])} + job {_n(r, req[r])}) > its quota"
                               f" {_n(r, q.deserved[r])}",
                               {"queue": q.name, "resource": RESOURCES[r], "allocated_np": q.allocated_np[r],
                                "request": req[r], "deserved": q.deserved[r]})
    return Verdict(True, reasons.RECLAIMER_WITHIN_FAIR_SHARE,
                   f"queue {q.name} stays within its fair share with the job",
                   {"queue": q.name, "allocated": list(q.allocated), "request": req, "fair_share": list(q.fair)})


# --------------------------------------------------------------------------------------------
# Strategies and the victim pre-filter
# --------------------------------------------------------------------------------------------


def _shown_resource(req: Vector) -> int:
    """The resource a one-line explanation quotes: GPU if the job asks for any, else the first it asks for."""
    if req[2] > 0:
        return 2
    return next((r for r in range(3) if req[r] > 0), 2)


def fits_deserved(q: QueueAttrs, req: Vector) -> bool:
    """`allocated + req ≤ deserved` in every resource (deserved -1 = ∞)."""
    return all(le_cap(q.allocated[r] + req[r], q.deserved[r]) for r in range(3))


def _exceeds(amount: float, cap: float) -> bool:
    """`amount > cap` for an allocation against a cap: -1 is +∞ only on the cap side. An allocation is
    never a sentinel (a remaining allocation that went below zero is just below zero)."""
    return not is_unlimited(cap) and amount > cap + 1e-9


def _over_allocatable(v: QueueAttrs, remaining: Vector) -> int | None:
    """The first resource in which `remaining` exceeds V's allocatable share, if any."""
    alloc = allocatable_share(v)
    for r in range(3):
        if _exceeds(remaining[r], alloc[r]):
            return r
    return None


def _over_deserved(v: QueueAttrs, remaining: Vector) -> int | None:
    for r in range(3):
        if _exceeds(remaining[r], v.deserved[r]):
            return r
    return None


def fits_reclaim_strategy(
    reclaimer_level: QueueAttrs, victim_level: QueueAttrs, req: Vector, remaining: Vector,
    queue_priority_in_quota_reclaim: bool = False,
) -> Verdict:
    """§3.7 (d) for one chunk: may the victim's LCA-child, still holding `remaining`, give something up?

    MaintainFairShare: `remaining > allocatable share` in some resource. GuaranteeDeservedQuota: the
    reclaimer's LCA-child stays within deserved with `req`, and `remaining > deserved` in some resource.
    With `queue_priority_in_quota_reclaim` (a newer KAI option, off by default) a strictly higher-priority
    reclaimer within its deserved quota may also take from an in-quota victim."""
    v, rq = victim_level, reclaimer_level
    alloc = allocatable_share(v)
    r = _over_allocatable(v, remaining)
    if r is not None:
        return Verdict(True, reasons.MAINTAIN_FAIR_SHARE,
                       f"queue {v.name} allocated {_n(r, remaining[r])} > allocatable share {_n(r, alloc[r])}",
                       {"queue": v.name, "resource": RESOURCES[r], "remaining": remaining[r],
                        "allocatable": alloc[r], "fair_share": v.fair[r], "deserved": v.deserved[r]})
    within = fits_deserved(rq, req)
    if within:
        r = _over_deserved(v, remaining)
        if r is not None:
            return Verdict(True, reasons.GUARANTEE_DESERVED_QUOTA,
                           f"queue {rq.name} is within its quota and queue {v.name} allocated"
                           f" {_n(r, remaining[r])} > its quota {_n(r, v.deserved[r])}",
                           {"queue": v.name, "resource": RESOURCES[r], "remaining": remaining[r],
                            "deserved": v.deserved[r], "reclaimer": rq.name})
        if queue_priority_in_quota_reclaim and rq.priority > v.priority:
            return Verdict(True, reasons.IN_QUOTA_QUEUE_PRIORITY,
                           f"queue {rq.name} (priority {rq.priority}) is within its quota and outranks queue"
                           f" {v.name} (priority {v.priority})",
                           {"queue": v.name, "reclaimer": rq.name, "priority": v.priority,
                            "reclaimer_priority": rq.priority})
    r = _shown_resource(req)
    return Verdict(False, reasons.VICTIM_PROTECTED,
                   f"queue {v.name} allocated {_n(r, remaining[r])} is within its allocatable share"
                   f" {_n(r, alloc[r])}" + ("" if not within else f" and its quota {_n(r, v.deserved[r])}")
                   + " in every resource"
                   + ("" if within else f"; queue {rq.name} would be over its quota"),
                   {"queue": v.name, "remaining": list(remaining), "allocatable": alloc,
                    "deserved": list(v.deserved), "reclaimer": rq.name, "reclaimer_within_quota": within})


def filter_victim_queue(
    queues: Mapping[str, QueueAttrs], reclaimer_leaf: str, victim_leaf: str, req: Vector,
    queue_priority_in_quota_reclaim: bool = False,
) -> Verdict:
    """§3.7 (c): may jobs of `victim_leaf` be reclaim candidates for a job of `reclaimer_leaf` at all?

    If the reclaimer's LCA-child would exceed its deserved quota, the victim's LCA-child must be above its
    allocatable share in some resource; otherwise, over the resources the job requests (deserved -1
    skipped), the victim's LCA-child must be over its deserved quota in one, or at it in all.

    Example: `filter_victim_queue(queues, "team-b", "team-a", [0, 0, 2]).ok`."""
    req = _vec(req)
    r_name, v_name = leveled_queues(queues, reclaimer_leaf, victim_leaf)
    rq, v = queues[r_name], queues[v_name]
    if not fits_deserved(rq, req):
        r = _over_allocatable(v, v.allocated)
        alloc = allocatable_share(v)
        if r is not None:
            return Verdict(True, reasons.VICTIM_OVER_ALLOCATABLE,
                           f"queue {v.name} allocated {_n(r, v.allocated[r])} > allocatable share {_n(r, alloc[r])}",
                           {"queue": v.name, "resource": RESOURCES[r], "allocated": v.allocated[r],
                            "allocatable": alloc[r]})
        shown = _shown_resource(req)
        return Verdict(False, reasons.VICTIM_WITHIN_ALLOCATABLE,
                       f"queue {rq.name} would exceed its quota, and queue {v.name} is within its allocatable"
                       f" share {_n(shown, alloc[shown])} (allocated {_n(shown, v.allocated[shown])}) in every"
                       " resource",
                       {"queue": v.name, "allocated": list(v.allocated), "allocatable": alloc,
                        "reclaimer": rq.name})
    if queue_priority_in_quota_reclaim and rq.priority > v.priority:
        return Verdict(True, reasons.IN_QUOTA_QUEUE_PRIORITY,
                       f"queue {rq.name} is within its quota and outranks queue {v.name}",
                       {"queue": v.name, "reclaimer": rq.name})
    under: list[str] = []
    for r in range(3):
        if req[r] <= 0 or is_unlimited(v.deserved[r]):
            continue
        if v.allocated[r] > v.deserved[r]:
            return Verdict(True, reasons.VICTIM_OVER_QUOTA,
                           f"queue {v.name} allocated {_n(r, v.allocated[r])} > its quota {_n(r, v.deserved[r])}",
                           {"queue": v.name, "resource": RESOURCES[r], "allocated": v.allocated[r],
                            "deserved": v.deserved[r]})
        if v.allocated[r] < v.deserved[r]:
            under.append(RESOURCES[r])
    if under:
        return Verdict(False, reasons.VICTIM_UNDER_QUOTA,
                       f"queue {v.name} is below its quota in {', '.join(under)}",
                       {"queue": v.name, "allocated": list(v.allocated), "deserved": list(v.deserved),
                        "resources": under})
    return Verdict(True, reasons.VICTIM_AT_QUOTA,
                   f"queue {v.name} is at its quota in every resource the job requests",
                   {"queue": v.name, "allocated": list(v.allocated), "deserved": list(v.deserved)})


# --------------------------------------------------------------------------------------------
# (d) strategies over ordered victim chunks, (e) saturation
# --------------------------------------------------------------------------------------------


def reclaim_victims(
    queues: Mapping[str, QueueAttrs], reclaimer_leaf: str, req: Vector,
    chunks: Sequence[tuple[str, Vector]], queue_priority_in_quota_reclaim: bool = False,
) -> ReclaimOutcome:
    """§3.7 (d): walk the victim chunks in order (each `(victim_leaf, resources)`); before subtracting a
    chunk the victim's LCA-child must satisfy a strategy with what it still holds. Each chunk is then
    subtracted from the victim leaf and all its ancestors in `remaining`.

    `queues` should be the accounting as it was when solving for the job started (KAI snapshots it).
    Example: `reclaim_victims(queues, "qB", [0, 0, 2], [("qA", [0, 0, 1]), ("qA", [0, 0, 1])])`."""
    req = _vec(req)
    remaining: dict[str, list[float]] = {}
    involved: dict[str, set[int]] = {}
    checks: list[ChunkCheck] = []
    for victim_leaf, raw in chunks:
        chunk = _vec(raw)
        r_name, v_name = leveled_queues(queues, reclaimer_leaf, victim_leaf)
        rem = remaining.setdefault(v_name, list(queues[v_name].allocated))
        verdict = fits_reclaim_strategy(queues[r_name], queues[v_name], req, rem, queue_priority_in_quota_reclaim)
        checks.append(ChunkCheck(victim_leaf, v_name, tuple(chunk), verdict, tuple(rem)))
        if not verdict.ok:
            return ReclaimOutcome(verdict, checks, remaining, involved)
        taken = {r for r in range(3) if chunk[r] > 0}
        for name in path_to_root(queues, victim_leaf):
            acc = remaining.setdefault(name, list(queues[name].allocated))
            for r in range(3):
                acc[r] -= chunk[r]
            involved.setdefault(name, set()).update(taken)
    n = len(checks)
    return ReclaimOutcome(
        Verdict(True, reasons.STRATEGIES_SATISFIED, f"every one of the {n} victim chunks fits a reclaim strategy",
                {"chunks": n}),
        checks, remaining, involved)


def saturation_multiplier(m: float | None) -> float:
    """The reclaimer saturation multiplier as KAI uses it: missing or < 1 becomes 1."""
    if m is None or not math.isfinite(m) or m < 1:
        return 1.0
    return float(m)


def saturation_ratio(allocated: float, fair: float) -> float:
    """`allocated / fair`; +∞ when fair is 0 and something is allocated, 0 when both are 0 or fair is -1."""
    if is_unlimited(fair):
        return 0.0
    if fair == 0:
        return math.inf if allocated > 0 else 0.0
    return allocated / fair


def _json_ratio(x: float) -> float | str:
    """Ratios for `Verdict.numbers` stay JSON-safe: an infinite ratio is the string "inf"."""
    return x if math.isfinite(x) else "inf"


def _ratio_text(x: float) -> str:
    return f"{x:.2f}" if math.isfinite(x) else "∞"


def check_saturation(
    queues: Mapping[str, QueueAttrs], reclaimer_leaf: str, req: Vector,
    remaining: Mapping[str, Sequence[float]], involved: Mapping[str, set[int]],
    multiplier: float = 1.0, preemptible: bool = True,
) -> Verdict:
    """§3.7 (e): for each queue X on the reclaimer's path (leaf to root) and each sibling Y of X that lost
    resources, in every involved resource, reject when `ratioX > 1`, `Y.fair > 0` and
    `ratioX × m ≥ ratioY`; for a non-preemptible reclaimer, also `allocated_np + req ≤ deserved` at every
    level. `remaining`/`involved` come from `reclaim_victims`."""
    req = _vec(req)
    m = saturation_multiplier(multiplier)
    req_involved = {r for r in range(3) if req[r] > 0}
    for x_name in reversed(path_to_root(queues, reclaimer_leaf)):
        x = queues[x_name]
        x_after = [a + b for a, b in zip(remaining.get(x_name, x.allocated), req)]
        for y_name in sorted(remaining):
            y = queues[y_name]
            if y_name == x_name or y.parent != x.parent:
                continue
            y_rem = remaining[y_name]
            for r in sorted(involved.get(y_name, set()) | req_involved):
                if is_unlimited(x.fair[r]) and is_unlimited(y.fair[r]):
                    continue
                rx = saturation_ratio(x_after[r], x.fair[r])
                ry = saturation_ratio(y_rem[r], y.fair[r])
                if rx > 1 and y.fair[r] > 0 and rx * m >= ry:
                    return Verdict(
                        False, reasons.RECLAIMER_MORE_SATURATED,
                        f"queue {x.name} would be at {_n(r, x_after[r])} of {_n(r, x.fair[r])} = {_ratio_text(rx)} of its"
                        f" fair share, not below queue {y.name} at {_n(r, y_rem[r])} of {_n(r, y.fair[r])}"
                        f" = {_ratio_text(ry)}" + ("" if m == 1 else f" (multiplier {m:g})"),
                        {"queue": x.name, "sibling": y.name, "resource": RESOURCES[r], "ratio": _json_ratio(rx),
                         "sibling_ratio": _json_ratio(ry), "multiplier": m, "allocated": x_after[r], "fair_share": x.fair[r],
                         "sibling_allocated": y_rem[r], "sibling_fair_share": y.fair[r]})
        if not preemptible:
            for r in range(3):
                after = x.allocated_np[r] + req[r]
                if not le_cap(after, x.deserved[r]):
                    return Verdict(
                        False, reasons.NON_PREEMPTIBLE_OVER_QUOTA,
                        f"queue {x.name} would hold {_n(r, after)} of non-preemptible work > its quota"
                        f" {_n(r, x.deserved[r])}",
                        {"queue": x.name, "resource": RESOURCES[r], "allocated_np": x.allocated_np[r],
                         "request": req[r], "deserved": x.deserved[r]})
    return Verdict(True, reasons.SATURATION_OK, "the reclaiming queues stay less saturated than the queues they take from",
                   {"multiplier": m})


def validate_reclaim(
    queues: Mapping[str, QueueAttrs], reclaimer_leaf: str, req: Vector,
    chunks: Sequence[tuple[str, Vector]], multiplier: float = 1.0, preemptible: bool = True,
    queue_priority_in_quota_reclaim: bool = False,
) -> tuple[Verdict, ReclaimOutcome]:
    """The proportion validator of a reclaim scenario: strategies per chunk (d), then saturation (e).

    Example: `ok, detail = validate_reclaim(queues, "qB", [0, 0, 2], [("qA", [0, 0, 1])] * 2)`."""
    outcome = reclaim_victims(queues, reclaimer_leaf, req, chunks, queue_priority_in_quota_reclaim)
    if not outcome.verdict.ok:
        return outcome.verdict, outcome
    return check_saturation(queues, reclaimer_leaf, req, outcome.remaining, outcome.involved,
                            multiplier, preemptible), outcome


# --------------------------------------------------------------------------------------------
# Min runtime (§4.4)
# --------------------------------------------------------------------------------------------


def preempt_min_runtime(queues: Mapping[str, QueueAttrs], victim_leaf: str, default: float = 0.0) -> MinRuntime:
    """The first `preempt_min_runtime` set walking up from the victim's leaf, else `default`.

    Example: `preempt_min_runtime(queues, "team-a", default=0).seconds`."""
    for name in reversed(path_to_root(queues, victim_leaf)):
        value = queues[name].preempt_min_runtime
        if value is not None:
            return MinRuntime(float(value), name)
    return MinRuntime(float(default), "default")


def reclaim_min_runtime(
    queues: Mapping[str, QueueAttrs], reclaimer_leaf: str, victim_leaf: str, default: float = 0.0,
    method: str = "lca",
) -> MinRuntime:
    """Reclaim min runtime. `lca` (default): different top-level trees → the victim's top-level value (else
    default); otherwise one step below the lowest common ancestor towards the victim, then upward, first
    value set wins, else default. `queue`: like preempt, from the victim leaf upward.

    Example: `reclaim_min_runtime(queues, "leaf1", "leaf3").seconds`."""
    if method not in ("lca", "queue"):
        raise ValueError(f"method {method!r}: must be 'lca' or 'queue'")
    pv = path_to_root(queues, victim_leaf)
    if method == "queue":
        for name in reversed(pv):
            value = queues[name].reclaim_min_runtime
            if value is not None:
                return MinRuntime(float(value), name)
        return MinRuntime(float(default), "default")
    pr = path_to_root(queues, reclaimer_leaf)
    if pr[0] != pv[0]:
        value = queues[pv[0]].reclaim_min_runtime
        return MinRuntime(float(value), pv[0]) if value is not None else MinRuntime(float(default), "default")
    lca_index = 0
    for i, (x, y) in enumerate(zip(pr, pv)):
        if x != y:
            break
        lca_index = i
    if lca_index + 1 < len(pv):
        lca_index += 1
    for i in range(lca_index, -1, -1):
        value = queues[pv[i]].reclaim_min_runtime
        if value is not None:
            return MinRuntime(float(value), pv[i])
    return MinRuntime(float(default), "default")


def min_runtime_end(last_start: float | None, min_runtime: float) -> float | None:
    """When a victim's minimum runtime ends: it is protected while `now < last_start + min_runtime`,
    never when it has not started (None)."""
    return None if last_start is None else last_start + min_runtime
