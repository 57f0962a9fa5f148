"""The fair-share division of one snapshot: its inputs, its steps, its result. One arithmetic.

The cycle (``cycle.open_session``) and everything that shows a fair share (the queue pages, the API,
the preview of a queue edit) go through this module, so what is shown is what the cycle divides:

* ``queue_attrs``: a queue spec as the division's per-queue input (quota, limit, weight, usage);
* ``capacity``: what is divided, the ready and schedulable nodes (GPUs with their MIG slices);
* ``divide_session``: the division (``proportion.compute_fair_shares``) on a session's queues, whose
  requests the session rolled up from its jobs as it charged them;
* ``divide``: all of it for a snapshot and a config, without running any action.

Pure and deterministic: the same snapshot and config give the same ``Division``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scheduler_core import model as m
from scheduler_core.proportion import DivisionStep, FairShareInputError, QueueAttrs, compute_fair_shares

if TYPE_CHECKING:
    from scheduler_core.session import Session


def queue_attrs(q: m.QueueSpec, usage: Sequence[float] = (0.0, 0.0, 0.0)) -> QueueAttrs:
    """The division's input for one queue, [cpu, memory, gpu] per field, in the engine's units.

    An over-quota weight of -1 counts as 1 and a negative one as 0 (KAI's defaults); ``usage`` is
    the queue's normalised past usage (0 when time-based fair share is off)."""

    def vec(attr: str) -> list[float]:
        return [float(getattr(q.cpu, attr)), float(getattr(q.memory, attr)), float(getattr(q.gpu, attr))]

    weight = [max(0.0, w) if w != m.UNLIMITED else 1.0 for w in vec("over_quota_weight")]
    return QueueAttrs(
        name=q.name, parent=q.parent, priority=q.priority, creation=q.creation,
        deserved=vec("quota"), limit=vec("limit"), weight=weight,
        usage=[float(x) for x in usage],
        preempt_min_runtime=q.preempt_min_runtime_s, reclaim_min_runtime=q.reclaim_min_runtime_s,
    )


def capacity(nodes: Iterable[m.NodeSpec], override: Sequence[float] | None = None) -> list[float]:
    """The capacity the division hands out (KAI-SEMANTICS §3.1): the nodes that are ready and not
    cordoned (KAI counts a cordoned node as not ready), GPUs in quota units (a MIG instance counts
    its slices). ``override`` (the snapshot's ``total_capacity``) replaces the sum."""
    if override is not None:
        return [float(x) for x in override]
    total = [0.0, 0.0, 0.0]
    for n in nodes:
        if not n.ready or n.unschedulable:
            continue
        total[0] += n.cpu_millis
        total[1] += n.memory_bytes
        total[2] += n.whole_gpus + sum(m.mig_profile_slices(p) * c for p, c in n.mig_instances.items())
    return total


@dataclass
class Division:
    """One division: the queues with their inputs and ``fair`` set, the steps that set it, the
    capacity divided, ``k`` and the problems found: queues left out of the division, or what
    stopped it (then no queue has a share)."""

    queues: dict[str, QueueAttrs]
    steps: list[DivisionStep]
    total: list[float]
    k: float
    errors: list[str] = field(default_factory=list)


def divide_session(s: Session) -> list[str]:
    """Divide the session's capacity among its queues (``fair`` on each, the steps on
    ``s.division_steps``); returns the problems that stopped the division (none: it ran)."""
    try:
        s.division_steps = compute_fair_shares(s.queues, s.total, s.config.k_value)
    except FairShareInputError as exc:
        return list(exc.problems)
    return []


def divide(snapshot: m.ClusterSnapshot, config: m.CycleConfig) -> Division:
    """The fair shares the cycle would compute on ``snapshot``: the session is built as the cycle
    builds it (queue requests from the jobs' charges and requests), then divided; no action runs."""
    # session.py builds its queues and capacity with this module's inputs, so it is imported here
    from scheduler_core.session import Session

    s = Session(snapshot, config)
    # a queue the session left out (bad values, a missing parent, a loop) is named, as the cycle names it
    errors = [e.message for e in s.errors if e.kind == "queue"] + divide_session(s)
    return Division(queues=s.queues, steps=s.division_steps, total=list(s.total), k=config.k_value, errors=errors)
