"""Per-queue accounting, fair share and the queue-level rules of KAI's proportion plugin.

This module is the contract between the division/ordering/reclaim rules (KAI-SEMANTICS §2.4,
§3, §4.4) and the actions that use them (allocate, reclaim, preempt, consolidation).
Everything here is pure and deterministic. Vectors are lists of three floats indexed by
CPU (millicores), MEMORY (bytes), GPU (devices); -1 means unlimited for deserved and limit.

Invariants kept by `compute_fair_shares` (KAI-SEMANTICS §8):
* deserved is granted first, whatever the queue priority or history: `fair ≥ min(deserved, requestable)`;
* surplus goes to higher queue priority first, inside a priority by (usage-adjusted) over-quota weight,
  never to a queue with weight 0 and never above `requestable`, except the two documented rounding quirks
  (Q1: fractional leftovers of a higher priority flow to lower priorities first; Q2: the remainder phase
  hands out up to one unit without re-checking request/limit);
* historical usage changes only the over-quota weights;
* the same queues, total and k always give the same fair shares and the same steps.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

CPU, MEMORY, GPU = 0, 1, 2
RESOURCES = ("cpu", "memory", "gpu")
UNLIMITED = -1.0

# Fractions closer than this to a whole unit are treated as that unit when flooring, so that float
# artefacts (2.9999999999999996 GPUs) do not cost a queue a whole device.
_EPS = 1e-9
# Quantities closer than this compare as equal (KAI's LessOrEqualWithTolerance).
_QTY_TOLERANCE = 1e-9
# Rule 5 of the queue order: a resource the queue may not hold at all weighs this much per unit.
_ZERO_SHARE_PENALTY = 1000.0


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
    # Min-runtime overrides in seconds (None = inherit from the parent, §4.4).
    preempt_min_runtime: float | None = None
    reclaim_min_runtime: float | None = None


@dataclass(slots=True)
class DivisionStep:
    """One line of the fair-share arithmetic, for explanations ("why is my fair share X")."""

    queue: str
    resource: str
    phase: str  # "deserved", "over-quota", "remainder"
    amount: float
    detail: str
    parent: str | None = None  # the queue whose share was being divided (None = the cluster)
    level_total: float = 0.0  # the amount being divided among this queue and its siblings
    priority: int | None = None  # the priority bucket (over-quota and remainder phases)
    round: int = 0  # water-filling round inside the bucket, from 1 (over-quota phase)
    fair_after: float = 0.0  # the queue's fair share of this resource after the step


class FairShareInputError(ValueError):
    """Queue attributes that the division cannot work with; `problems` names each field and rule."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


# --------------------------------------------------------------------------------------------
# Small helpers shared with reclaimable.py and the engine
# --------------------------------------------------------------------------------------------


def is_unlimited(value: float) -> bool:
    """True for the -1 sentinel ("no cap" / "the whole amount")."""
    return value == UNLIMITED


def le_cap(value: float, cap: float) -> bool:
    """`value ≤ cap` as KAI compares quotas: -1 is +∞ on either side, and differences up to 1e-9 are
    float noise (0.1 + 0.2 GPUs fits a quota of 0.3)."""
    if cap == UNLIMITED:
        return True
    if value == UNLIMITED:
        return False
    return value <= cap + _QTY_TOLERANCE


def requestable(q: QueueAttrs, r: int) -> float:
    """What the queue can use of resource r: its request, capped by its limit (§3.2)."""
    return q.request[r] if is_unlimited(q.limit[r]) else min(q.limit[r], q.request[r])


def allocatable_share(q: QueueAttrs) -> list[float]:
    """`min(limit, max(deserved, fair))` per resource (§2.4 rule 5, §3.7); limit -1 is ignored.

    With deserved -1 the result is the limit (which may itself be -1 = unbounded)."""
    out = [0.0, 0.0, 0.0]
    deserved, limit, fair = q.deserved, q.limit, q.fair
    for r in (0, 1, 2):
        d, lim = deserved[r], limit[r]
        if d == UNLIMITED:
            out[r] = lim
        else:
            f = fair[r]
            value = d if d >= f else f
            out[r] = value if lim == UNLIMITED or lim >= value else lim
    return out


def dominant_share(
    q: QueueAttrs,
    total: list[float],
    add: Iterable[float] | None = None,
    remove: Iterable[float] | None = None,
    alloc: list[float] | None = None,
) -> float:
    """DRF dominant share: `max_r (allocated[r] + add[r] − remove[r]) / allocatable[r]` (§2.4 rule 5).

    An unbounded allocatable share (deserved and limit -1) is replaced by the cluster total; a zero
    allocatable share weighs the amount × 1000 (KAI's penalty for using what one may not hold).
    `alloc` may pass the queue's `allocatable_share` when the caller already has it."""
    used = list(q.allocated)
    if add is not None:
        used = [u + a for u, a in zip(used, add)]
    if remove is not None:
        used = [u - x for u, x in zip(used, remove)]
    if alloc is None:
        alloc = allocatable_share(q)
    best = 0.0
    for r in (0, 1, 2):
        cap = alloc[r]
        if cap == UNLIMITED:
            cap = total[r]
        term = used[r] * _ZERO_SHARE_PENALTY if cap == 0 else used[r] / cap
        if term > best:
            best = term
    return best


def _num(x: float) -> str:
    """A number for an explanation: whole values without decimals, others with two."""
    if abs(x - round(x)) < 1e-9:
        return str(int(round(x)))
    return f"{x:.2f}"


def _floor(x: float) -> float:
    f = math.floor(x)
    if x - f > 1 - _EPS:
        f += 1
    return float(f)


def _order_key(q: QueueAttrs) -> tuple[float, str]:
    return (q.creation, q.name)


# --------------------------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------------------------


def _vector_looks_fine(vec: list[float], allow_unlimited: bool) -> bool:
    """Fast path of `validate_queues`: three finite numbers, each ≥ 0 (or -1 where allowed)."""
    try:
        if len(vec) != 3 or not math.isfinite(vec[0] + vec[1] + vec[2]):
            return False
        if allow_unlimited:
            return all(v >= 0 or v == UNLIMITED for v in vec)
        return min(vec) >= 0
    except TypeError:
        return False


def validate_queues(queues: dict[str, QueueAttrs], total: list[float] | None = None) -> list[str]:
    """Every problem that would make the division meaningless, one sentence per field and rule.

    Empty list = fine. Checked: vector lengths, finite numbers, deserved/limit ≥ 0 or -1, weight,
    request, allocated and usage ≥ 0, a known parent, no cycles, and (when given) the total."""
    problems: list[str] = []
    if total is not None:
        if len(total) != 3:
            problems.append(f"total: must have 3 entries (cpu, memory, gpu), got {len(total)}")
        else:
            for r, v in enumerate(total):
                if not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                    problems.append(f"total[{RESOURCES[r]}] = {v}: must be a finite number ≥ 0")
    for key, q in sorted(queues.items()):
        if q.name != key:
            problems.append(f"queue {key}: name {q.name!r} differs from its key")
        for fname, allow_unlimited in (
            ("deserved", True), ("limit", True), ("weight", False), ("request", False),
            ("allocated", False), ("allocated_np", False), ("usage", False),
        ):
            vec = getattr(q, fname)
            if _vector_looks_fine(vec, allow_unlimited):
                continue
            if len(vec) != 3:
                problems.append(f"queue {key}: {fname} must have 3 entries (cpu, memory, gpu), got {len(vec)}")
                continue
            for r, v in enumerate(vec):
                if not isinstance(v, int | float) or not math.isfinite(v):
                    problems.append(f"queue {key}: {fname}[{RESOURCES[r]}] = {v!r} is not a finite number")
                elif v < 0 and not (allow_unlimited and v == UNLIMITED):
                    rule = "≥ 0 or -1 (unlimited)" if allow_unlimited else "≥ 0"
                    problems.append(f"queue {key}: {fname}[{RESOURCES[r]}] = {v} must be {rule}")
        if q.parent is not None:
            if q.parent == key:
                problems.append(f"queue {key}: parent is the queue itself")
            elif q.parent not in queues:
                problems.append(f"queue {key}: parent {q.parent!r} does not exist")
    # Cycles: walk up from every queue; meeting a queue already seen on the walk means a loop.
    for key in sorted(queues):
        seen = {key}
        cur = queues[key].parent
        while cur is not None and cur in queues:
            if cur in seen:
                problems.append(f"queue {key}: parent chain loops through {cur!r}")
                break
            seen.add(cur)
            cur = queues[cur].parent
    return problems


def children_of(queues: dict[str, QueueAttrs]) -> dict[str | None, list[str]]:
    """Children of each queue (None = the top level), each list in (creation, name) order."""
    out: dict[str | None, list[str]] = {None: []}
    for q in queues.values():
        out.setdefault(q.name, [])
    for q in sorted(queues.values(), key=_order_key):
        out.setdefault(q.parent, []).append(q.name)
    return out


# --------------------------------------------------------------------------------------------
# Fair-share division (§3.3, §3.4, §3.8)
# --------------------------------------------------------------------------------------------


class _Division:
    """The division of one resource among one sibling set: the three phases of §3.3."""

    def __init__(
        self, siblings: list[QueueAttrs], r: int, amount: float, k: float, parent: str | None,
        steps: list[DivisionStep], remainder_per_priority: bool = False,
    ) -> None:
        self.remainder_per_priority = remainder_per_priority
        self.siblings = siblings
        self.r = r
        self.res = RESOURCES[r]
        self.amount = amount
        self.k = k
        self.parent = parent
        self.steps = steps

    def _step(self, q: QueueAttrs, phase: str, amount: float, detail: str, priority: int | None = None,
              rnd: int = 0) -> None:
        self.steps.append(DivisionStep(
            queue=q.name, resource=self.res, phase=phase, amount=amount, detail=detail, parent=self.parent,
            level_total=self.amount, priority=priority, round=rnd, fair_after=q.fair[self.r],
        ))

    def _unsatisfied(self, q: QueueAttrs) -> bool:
        r = self.r
        if q.request[r] <= q.fair[r]:
            return False
        return is_unlimited(q.limit[r]) or q.limit[r] > q.fair[r]

    def _remaining(self, q: QueueAttrs) -> float:
        return max(0.0, requestable(q, self.r) - q.fair[self.r])

    def run(self) -> None:
        r = self.r
        left = self.amount
        # Phase 1 — deserved, regardless of priority and of what is left (over-subscription allowed).
        for q in self.siblings:
            d = self.amount if is_unlimited(q.deserved[r]) else q.deserved[r]
            req = requestable(q, r)
            give = min(d, req)
            q.fair[r] += give
            left -= give
            quota = "unlimited (the whole " + _num(self.amount) + ")" if is_unlimited(q.deserved[r]) else _num(d)
            cap = "" if is_unlimited(q.limit[r]) else f", limit {_num(q.limit[r])}"
            self._step(q, "deserved", give,
                       f"deserved min(quota {quota}, requestable {_num(req)} = request {_num(q.request[r])}{cap})"
                       f" = {_num(give)}")
        if left <= 0:
            return
        # Phase 2 — over-quota, one priority bucket at a time, highest first; what a bucket cannot
        # use (including the fractions flooring left over) flows to the next bucket (quirk Q1).
        priorities = sorted({q.priority for q in self.siblings}, reverse=True)
        remainders: dict[int, dict[str, float]] = {}
        for p in priorities:
            bucket = [q for q in self.siblings if q.priority == p]
            remainders[p] = {}
            if left > 0:
                left = self._water_fill(left, bucket, p, remainders[p])
            if self.remainder_per_priority and left > 0:
                # Newer KAI releases settle a bucket's fractions before the next bucket sees anything.
                left = self._hand_out_remainders(left, p, remainders[p])
        # Phase 3 — at most one unit per queue by largest remainder, bucket by bucket (quirk Q2:
        # no request/limit re-check).
        for p in priorities:
            if left <= _EPS:
                break
            left = self._hand_out_remainders(left, p, remainders[p])

    def _hand_out_remainders(self, left: float, p: int, rem: dict[str, float]) -> float:
        by_name = {q.name: q for q in self.siblings}
        ranked = sorted(rem.items(), key=lambda kv: (-kv[1], by_name[kv[0]].creation, kv[0]))
        for name, frac in ranked:
            if left <= _EPS:
                break
            g = min(1.0, left)
            q = by_name[name]
            q.fair[self.r] += g
            left -= g
            self._step(q, "remainder", g,
                       f"leftover {_num(g)} given by largest remaining fraction ({frac:.2f}) in priority {p}",
                       priority=p)
        # A bucket's fractions are handed out once: clear them so phase 3 does not repeat them.
        rem.clear()
        return left

    def _water_fill(self, left: float, bucket: list[QueueAttrs], p: int, rem: dict[str, float]) -> float:
        r = self.r
        for q in bucket:
            if q.weight[r] == 0 and self._unsatisfied(q):
                self._step(q, "over-quota", 0.0,
                           f"priority {p}: over-quota weight 0, so no share of the {_num(left)} surplus",
                           priority=p)
        rnd = 0
        while True:
            rnd += 1
            round_amount = left
            # the queues still wanting more (``_remaining`` > 0 is ``_unsatisfied``) share this round
            weights = usage_adjusted_weights([q for q in bucket if self._remaining(q) > 0], r, self.k)
            if not weights:
                break
            shares = {name: adjusted for name, (_w_norm, adjusted) in weights.items()}
            w_total = sum(q.weight[r] for q in bucket if q.name in weights)
            s_sum = sum(shares.values())
            if s_sum <= 0:
                break
            again = False
            for q in bucket:
                if left <= 0:
                    break
                if q.name not in shares or q.weight[r] == 0:
                    continue
                fs = round_amount * shares[q.name] / s_sum
                need = self._remaining(q)
                if need <= fs + _EPS:
                    give = need
                    rem.pop(q.name, None)
                    how = f"needs only {_num(need)} of its {_num(fs)}"
                else:
                    give = _floor(fs)
                    frac = fs - give
                    if frac > _EPS:
                        rem[q.name] = frac
                    how = f"proportional {_num(fs)} floored to {_num(give)}"
                usage = "" if self.k == 0 or q.usage[r] == 0 else (
                    f", usage-adjusted max(0, {q.weight[r] / w_total:.3f} + {_num(self.k)}·"
                    f"({q.weight[r] / w_total:.3f} − usage {q.usage[r]:.3f})) = {shares[q.name]:.3f}")
                detail = (f"priority {p} round {rnd}: weight {_num(q.weight[r])} of {_num(w_total)}{usage}"
                          f" → {_num(fs)} of {_num(round_amount)}; {how}")
                if give <= 0:
                    # Nothing this round (a fraction below one unit, or a usage-adjusted weight of 0):
                    # still a line of the explanation.
                    self._step(q, "over-quota", 0.0, detail, priority=p, rnd=rnd)
                    continue
                q.fair[r] += give
                left -= give
                self._step(q, "over-quota", give, detail, priority=p, rnd=rnd)
                again = again or need < fs
            if left < _EPS:
                left = 0.0
            if not again or left == 0:
                break
        return left


def usage_adjusted_share(w_norm: float, k: float, usage: float) -> float:
    """A queue's over-quota weight after its past usage (§3.8): ``max(0, w + k·(w − U))`` for its
    normalised weight ``w`` and normalised usage ``U``; ``k`` 0 leaves the weight as it is."""
    return max(0.0, w_norm + k * (w_norm - usage))


def usage_adjusted_weights(bucket: list[QueueAttrs], r: int, k: float) -> dict[str, tuple[float, float]]:
    """Per queue of one priority bucket, in the bucket's order: its over-quota weight of resource
    ``r`` normalised over the bucket, and that weight adjusted by its usage (``usage_adjusted_share``).
    Empty when the bucket's weights sum to 0 (nothing is divided by weight). One round of the
    over-quota phase divides its amount in proportion to the adjusted weights."""
    w_total = sum(q.weight[r] for q in bucket)
    if w_total <= 0:
        return {}
    out: dict[str, tuple[float, float]] = {}
    for q in bucket:
        w_norm = q.weight[r] / w_total
        out[q.name] = (w_norm, usage_adjusted_share(w_norm, k, q.usage[r]))
    return out


def compute_fair_shares(
    queues: dict[str, QueueAttrs], total: list[float], k: float = 1.0, remainder_per_priority: bool = False,
) -> list[DivisionStep]:
    """Set `fair` on every queue: KAI's division (§3.3) per resource, top level first, then each
    queue's fair share divided among its children (§3.4). Returns the steps taken.

    `total` is the capacity to divide (§3.1); `k` scales the time-based penalty of §3.8 (values ≤ 0
    turn it off). Each queue's `usage` must already be normalised to the whole cluster.
    `remainder_per_priority=True` follows newer KAI releases, which hand out a priority bucket's
    rounding fractions inside that bucket before lower priorities get anything (no quirk Q1); the
    default reproduces the reference release (KAI-SEMANTICS §3.3, §9 Q1). Raises
    `FairShareInputError` (before changing anything) when `validate_queues` finds problems.
    Deterministic: siblings are visited in (creation, name) order and no result depends on it.
    Each queue's `children` is refreshed from the `parent` links (in (creation, name) order).
    """
    problems = validate_queues(queues, total)
    if problems:
        raise FairShareInputError(problems)
    k = max(0.0, float(k))
    for q in queues.values():
        q.fair = _zeros()
    kids = children_of(queues)
    for q in queues.values():
        q.children = list(kids[q.name])
    steps: list[DivisionStep] = []
    # Breadth-first: a parent's fair share is final before its children are divided.
    level: list[str | None] = [None]
    while level:
        nxt: list[str | None] = []
        for parent in level:
            names = kids.get(parent, [])
            if not names:
                continue
            siblings = [queues[n] for n in names]
            for r in range(3):
                amount = total[r] if parent is None else queues[parent].fair[r]
                _Division(siblings, r, amount, k, parent, steps, remainder_per_priority).run()
            nxt.extend(names)
        level = nxt
    return steps


def explain_fair_share(steps: list[DivisionStep], queue: str, resource: str = "gpu") -> list[str]:
    """The sentences behind one queue's fair share of one resource, in the order they happened."""
    return [f"{s.phase}: +{_num(s.amount)} ({s.detail}) → {_num(s.fair_after)}"
            for s in steps if s.queue == queue and s.resource == resource]


def summarize_division(steps: list[DivisionStep]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per queue and resource: how much came from each phase, the final share, the divided amount
    and the sentences, JSON-ready (`{"team-a": {"gpu": {"deserved": 2, "over_quota": 3, ...}}}`)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for s in steps:
        entry = out.setdefault(s.queue, {}).setdefault(s.resource, {
            "deserved": 0.0, "over_quota": 0.0, "remainder": 0.0, "fair_share": 0.0,
            "divided_among_siblings": s.level_total, "parent": s.parent, "lines": [],
        })
        entry[s.phase.replace("-", "_")] += s.amount
        entry["fair_share"] = s.fair_after
        entry["lines"].append(f"{s.phase}: +{_num(s.amount)} ({s.detail})")
    return out


def _roll_up_requests(queues: dict[str, QueueAttrs]) -> None:
    """Only leaf queues hold jobs, so a parent's request is the sum of its children's (deepest first)."""
    kids = children_of(queues)
    depth: dict[str, int] = {}
    for name in queues:
        d, cur = 0, queues[name].parent
        while cur is not None:
            d, cur = d + 1, queues[cur].parent
        depth[name] = d
    for name in sorted(queues, key=lambda n: -depth[n]):
        if kids[name]:
            queues[name].request = [sum(queues[c].request[r] for c in kids[name]) for r in range(3)]


def what_if_fair_shares(
    queues: dict[str, QueueAttrs], total: list[float], k: float = 1.0,
    changes: dict[str, dict[str, Any]] | None = None, remainder_per_priority: bool = False,
) -> tuple[dict[str, list[float]], list[DivisionStep]]:
    """Fair shares if some queue attributes were different, without touching `queues`.

    `changes` maps a queue name to attribute overrides, e.g. `{"team-a": {"weight": [1, 1, 3]}}`; a
    queue name not in `queues` adds a queue (then all of `QueueAttrs`' required fields must be given),
    and `{"team-b": None}` removes one. With changes, parents' requests are re-summed from their
    children (only leaf queues hold jobs). Returns (fair share per queue, steps). Bad overrides raise
    `FairShareInputError` naming the queue and field."""
    trial = {name: copy.deepcopy(q) for name, q in queues.items()}
    problems: list[str] = []
    for name, fields in sorted((changes or {}).items()):
        if fields is None:
            trial.pop(name, None)
            continue
        if name not in trial:
            try:
                trial[name] = QueueAttrs(name=name, **fields)
            except TypeError as exc:
                problems.append(f"queue {name}: cannot be added ({exc})")
            continue
        for field_name, value in fields.items():
            if field_name in ("name", "fair", "children") or not hasattr(trial[name], field_name):
                problems.append(f"queue {name}: {field_name} cannot be changed in a what-if")
                continue
            setattr(trial[name], field_name, copy.deepcopy(value))
    if problems:
        raise FairShareInputError(problems)
    problems = validate_queues(trial, total)
    if problems:
        raise FairShareInputError(problems)
    if changes:
        _roll_up_requests(trial)
    steps = compute_fair_shares(trial, total, k, remainder_per_priority)
    return {name: list(q.fair) for name, q in trial.items()}, steps


# --------------------------------------------------------------------------------------------
# Queue order (§2.4) and victim-queue order (§2.10, §4.2)
# --------------------------------------------------------------------------------------------


def is_over_utilized(q: QueueAttrs) -> bool:
    """Rule 1: `fair < allocated` in all three resources (quirk Q3)."""
    f, a = q.fair, q.allocated
    return f[0] < a[0] and f[1] < a[1] and f[2] < a[2]


def is_starved(q: QueueAttrs, req: list[float]) -> bool:
    """Rule 2: `allocated + req ≤ deserved` in every resource (deserved -1 = ∞)."""
    a, d = q.allocated, q.deserved
    for r in (0, 1, 2):
        cap = d[r]
        if cap != UNLIMITED and a[r] + req[r] > cap + _QTY_TOLERANCE:
            return False
    return True


def has_zero_share_violation(q: QueueAttrs, req: list[float], alloc: list[float] | None = None) -> bool:
    """Rule 4: the queue holds (or would hold) some resource of which its allocatable share is 0."""
    if alloc is None:
        alloc = allocatable_share(q)
    return any(alloc[r] == 0 and q.allocated[r] + req[r] > 0 for r in range(3))


def _vec_le(a: list[float], b: list[float]) -> bool:
    for r in (0, 1, 2):
        if not le_cap(a[r], b[r]):
            return False
    return True


def _vec_lt_any(a: list[float], b: list[float]) -> bool:
    """Some resource of `a` is below `b` (KAI's LessInAtLeastOneResource: not `b ≤ a` everywhere)."""
    return not _vec_le(b, a)


def _cmp(a: Any, b: Any) -> int:
    """-1, 0 or 1 for two values of one kind (numbers, or names)."""
    return -1 if a < b else (1 if a > b else 0)


_ZEROS: list[float] = [0.0, 0.0, 0.0]  # read only


def queue_order_reasons(
    left: QueueAttrs, right: QueueAttrs, left_req: list[float] | None, right_req: list[float] | None,
    total: list[float], left_removed: list[float] | None = None, right_removed: list[float] | None = None,
) -> tuple[int, str]:
    """The queue-order cascade with the name of the deciding rule ("starved", "priority", …).

    `*_removed` (victim mode) is subtracted from `allocated` only in the dominant-share-with-job rule,
    as KAI does (`calculateDominantResourceShareWithJob`); the other rules read live `allocated`."""
    lreq = left_req if left_req is not None else _ZEROS
    rreq = right_req if right_req is not None else _ZEROS
    # 1. not over-utilized first
    lo, ro = is_over_utilized(left), is_over_utilized(right)
    if lo != ro:
        return (1 if lo else -1), "over-utilized"
    # 2. starved first
    ls, rs = is_starved(left, lreq), is_starved(right, rreq)
    if ls != rs:
        return (-1 if ls else 1), "starved"
    # 3. higher queue priority first
    if left.priority != right.priority:
        return (-1 if left.priority > right.priority else 1), "priority"
    # 4. zero-share penalty
    la, ra = allocatable_share(left), allocatable_share(right)
    lz = has_zero_share_violation(left, lreq, la)
    rz = has_zero_share_violation(right, rreq, ra)
    if lz != rz:
        return (1 if lz else -1), "zero-share"
    # 5. dominant share including the job (and, in victim mode, without the removed victims)
    c = _cmp(dominant_share(left, total, lreq, left_removed, la), dominant_share(right, total, rreq, right_removed, ra))
    if c:
        return c, "dominant-share-with-job"
    # 6. dominant share as allocated
    c = _cmp(dominant_share(left, total, alloc=la), dominant_share(right, total, alloc=ra))
    if c:
        return c, "dominant-share"
    # 7. smaller allocatable share (≤ everywhere and < somewhere)
    if _vec_le(la, ra) and _vec_lt_any(la, ra):
        return -1, "allocatable-share"
    if _vec_le(ra, la) and _vec_lt_any(ra, la):
        return 1, "allocatable-share"
    # 8. older queue first, then name (KAI leaves exact ties to heap position; we do not)
    c = _cmp(left.creation, right.creation)
    if c:
        return c, "creation"
    return _cmp(left.name, right.name), "name"


def compare_queues(
    left: QueueAttrs, right: QueueAttrs, left_req: list[float] | None, right_req: list[float] | None,
    total: list[float],
) -> int:
    """QueueOrder (§2.4, the eight rules + name as last tie-break): < 0 when `left` goes first.
    `*_req` is the resource vector of the queue's best pending job's next batch (None = no job)."""
    return queue_order_reasons(left, right, left_req, right_req, total)[0]


def compare_victim_queues(
    left: QueueAttrs, right: QueueAttrs, left_removed: list[float], right_removed: list[float],
    total: list[float],
) -> int:
    """Victim-mode queue order (§2.10, §4.2): QueueOrder reversed, evaluated with each queue's
    `allocated` minus `*_removed` (its already-popped victims plus its next candidate), no job.

    < 0 when `left`'s candidate should be taken first: over-utilized queues, then queues over their
    deserved quota, then lower priority, zero-share violators, larger dominant share after removal,
    larger dominant share, larger allocatable share, newer queue, later name. As in KAI, the removed
    amounts enter only the dominant-share-after-removal rule (§2.10)."""
    return -queue_order_reasons(left, right, None, None, total, left_removed, right_removed)[0]
