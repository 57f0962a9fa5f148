"""Start-time estimates: the engine run forward from a snapshot, with sampled run times.

For every pending job of a snapshot, when it may start: a p50 and a p80 (epoch seconds) and the
reason it waits. The estimate is the engine's own answer, not a re-implementation of its rules:
``run_cycle`` is run on the snapshot, the running jobs end at sampled times, the cycle is run again
on what is left, and so on; a job's start in a sample is the moment the cycle that binds it has
the room it needed. Several samples give the percentiles. The cycles are spaced wider than many
runs (see Bounded): a run that begins in one simulated cycle and ends before the next frees its
room at its end, and the job that takes the room in the next cycle starts then (never before the
snapshot, or before the simulation evicted it); so a line of short jobs drains at the pace of
their runs, not of the cycles.

* **Run times.** A running job ends at its declared end when it has one (``Declared``: a run time
  from its start, or a deadline), else at a remaining time drawn from the recorded run times of
  jobs like it (``RuntimeHistory``: by queue, owner, kind and size, backing off to broader classes
  when a class has few records; the size of a job on a share of a GPU is that share rounded up to a
  power of two, as whole GPUs are, since a half-GPU notebook and a tenth-GPU inference server run
  for unlike times, and such a class backs off to every shared-GPU job before every job), conditioned on the time it has already run: only records longer
  than that count, and the draw is what is left of one of them (Kaplan–Meier, with the runs still
  going as lower bounds). Past the longest finished run the survival falls as a Pareto tail.
  Jobs that start during the simulation run for a drawn run time of their class.
* **No arrivals are guessed.** Only the snapshot's jobs take part, so an estimate can only move
  later when new work that outranks the job arrives (or a run ends later than drawn).
* **Deterministic.** Same snapshot, config, history, declared ends, seed and budget, same
  estimates: the draws come from a seeded generator, one column per job in uid order (Latin
  hypercube over the samples, so few samples still cover the distribution), and the engine is
  deterministic.
* **Bounded.** ``Budget``: the run forward takes the first ``max_pending`` pending jobs in the
  engine's order (``engine_order``: the order the first cycle's allocate tried them); the jobs
  behind them are left out of it (they would only take room that frees after the ones ahead took
  theirs, unless they fit where those do not) and get no p50 or p80 but the code ``beyond-bound``
  and, in ``details["after"]``, the moment the room freeing for the jobs ahead has all been taken
  (the median over the samples of the last start among them): a lower bound for a job that needs
  what they need. At most ``samples`` samples, each simulating at most ``horizon_s`` seconds ahead in
  at most ``max_cycles`` cycles; all cycles together at most ``max_work`` units of work, a unit being
  one job or node of a simulated cycle's snapshot (what a cycle's cost follows); the simulated
  cycles after the first bound their victim search (``victim_scenarios``). A large snapshot gets
  fewer samples (at least ``min_samples``) and coarser steps: the simulated cycles are spaced at the
  next end of a run, but no closer than a step that grows geometrically from ``period_s`` so that
  the horizon is reached within the cycles allowed. Every simulated cycle of every sample runs
  with one ``CycleMemo``: a cycle takes back the job states and node tables the last one handed
  over (most job specs are the same objects from one sample to the next); the memo never changes a
  decision (``memo.py``), and ``CycleConfig(shortcuts=False)`` gives the same estimates from plain
  cycles. At 2,000 nodes and 16,000 pending (B8's ``--budget-only``) a refresh with the default
  budget runs 2,000 jobs forward in 4 samples.

A job that has not started by the end of a sample counts as starting after the horizon: its
percentile is ``None`` when the percentile falls there ("not within the horizon").
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduler_core import model as m
from scheduler_core.cycle import collector_paused, run_cycle
from scheduler_core.memo import CycleMemo

__all__ = [
    "Budget",
    "Declared",
    "Estimate",
    "Run",
    "RuntimeHistory",
    "engine_order",
    "estimate_starts",
    "job_class",
    "reason_text",
    "running_runs",
    "size_class",
]

#: task states that hold resources on a node (a job with such a task has started)
_HOLDING = m.ACTIVE_USED_STATES
#: task states on their way out: they free their room in the first simulated step
_LEAVING = frozenset({m.RELEASING, m.STUCK_IN_RELEASING})
#: the step to the next simulated cycle when the last one evicted pods (their jobs wait again)
_RETRY_S = 1.0


# --------------------------------------------------------------------------- classes of jobs


# What an estimate's reason says (``Estimate.reason.code``): room is free now; room frees within the
# horizon; not within it with the jobs known now; further back in line than the run forward goes.
STARTS_NOW, WAITS, BEYOND_HORIZON, BEYOND_BOUND = "starts-now", "waits", "beyond-horizon", "beyond-bound"
ESTIMATE_CODES = (STARTS_NOW, WAITS, BEYOND_HORIZON, BEYOND_BOUND)


def size_class(gpus: float) -> str:
    """A job's size as a class name: ``cpu``; under one GPU, its share of a GPU rounded up to a power
    of two (``shared-1``: over a half, ``shared-1/2``: over a quarter, ``shared-1/4``, … ``shared-1/64``);
    else the power of two of its GPUs rounded up (``1``, ``2``, ``4``, ``8``, ``16``, …)."""
    if gpus <= 0:
        return "cpu"
    if gpus < 1:
        # the share of one GPU rounded up to a power of two: 1/2 (over a quarter), 1/4, 1/8, at least 1/64
        k = min(6, math.floor(math.log2(1.0 / gpus) + 1e-9))
        return "shared-1" if k == 0 else f"shared-1/{2 ** k}"
    return str(2 ** math.ceil(math.log2(gpus - 1e-9)) if gpus > 1 else 1)


def _kind(job: m.JobSpec) -> str:
    """A job's kind: ``gang`` when it needs several pods at once, else ``single``."""
    need = len(job.tasks) if job.min_available is None else job.min_available
    return "gang" if need > 1 else "single"


def job_gpus(job: m.JobSpec) -> float:
    """GPUs a job's pods ask for together (fractions as parts of one)."""
    return sum(t.request.gpu_required for t in job.tasks)


def job_class(job: m.JobSpec, owner: str | None = None) -> tuple[str, str, str, str]:
    """The class of a job whose run times are alike: (queue, owner, kind, size). ``owner`` is who
    submitted it (a user, or by default its namespace)."""
    return (job.queue, owner if owner is not None else job.namespace, _kind(job), size_class(job_gpus(job)))


@dataclass(frozen=True, slots=True)
class Run:
    """One finished run: its class and how long it ran (seconds)."""

    queue: str
    owner: str
    kind: str
    size: str
    seconds: float


#: the keys a class backs off to, most specific first: (queue, owner, kind, size), (queue, kind,
#: size), (kind, size), (size), every shared-GPU job for a share of a GPU, everything
def _levels(cls: tuple[str, str, str, str]) -> tuple[tuple[str, ...], ...]:
    queue, owner, kind, size = cls
    if size.startswith("shared-"):
        return ((queue, owner, kind, size), ("q", queue, kind, size), ("k", kind, size), ("s", size), ("s", "shared"), ())
    return ((queue, owner, kind, size), ("q", queue, kind, size), ("k", kind, size), ("s", size), ())


@dataclass(frozen=True)
class _Curve:
    """Kaplan–Meier survival of the run times of one class: ``times`` (ascending, distinct finished run
    times), ``survival`` (the share still running just after each), and the observations sorted
    (``finished``; ``running``: how long the jobs still running have run, lower bounds of their run times)."""

    times: tuple[float, ...]
    survival: tuple[float, ...]
    finished: tuple[float, ...]
    running: tuple[float, ...]

    @classmethod
    def of(cls, finished: list[float], running: list[float]) -> _Curve:
        f, r = sorted(finished), sorted(running)
        times: list[float] = []
        survival: list[float] = []
        s, i = 1.0, 0
        while i < len(f):
            t = f[i]
            d = bisect.bisect_right(f, t) - i
            at_risk = (len(f) - i) + (len(r) - bisect.bisect_left(r, t))
            s *= 1.0 - d / at_risk
            times.append(t)
            survival.append(s)
            i += d
        return cls(tuple(times), tuple(survival), tuple(f), tuple(r))

    def at_risk(self, elapsed: float) -> int:
        """Observations longer than ``elapsed``."""
        return (len(self.finished) - bisect.bisect_right(self.finished, elapsed)
                + len(self.running) - bisect.bisect_right(self.running, elapsed))

    def survives(self, t: float) -> float:
        i = bisect.bisect_right(self.times, t)
        return 1.0 if i == 0 else self.survival[i - 1]

    def end(self, elapsed: float, u: float, tail_index: float = 2.0) -> float | None:
        """The ``u``-quantile of the run time of a job that has run ``elapsed``; None when the curve
        says nothing beyond it (every observation ended before)."""
        base = self.survives(elapsed)
        if base <= 0:
            return None
        target = base * (1.0 - u)
        lo = bisect.bisect_right(self.times, elapsed)
        # the first finished time after ``elapsed`` at which the survival falls to the target
        hi = len(self.times)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.survival[mid] <= target:
                hi = mid
            else:
                lo = mid + 1
        if lo < len(self.times):
            return self.times[lo]
        # beyond the last finished time the survival falls as a Pareto tail: (t_last / t) ** tail_index
        last_t = max(self.times[-1] if self.times else 0.0, elapsed, 1.0)
        last_s = min(self.survival[-1] if self.survival else 1.0, base)
        return float(last_t * (last_s / target) ** (1.0 / tail_index)) if target > 0 else None


@dataclass(frozen=True)
class RuntimeHistory:
    """Run times by class, at every level of ``_levels``, as survival curves (Kaplan–Meier) of the
    finished runs and of the runs still going (how long they have run so far: a run time at least that
    long; leaving them out would make the history the short runs only). ``min_records``: how many
    observations longer than a job's run so far a class needs before a draw uses it (else the next
    broader class)."""

    curves: Mapping[tuple[str, ...], _Curve] = field(default_factory=dict)
    min_records: int = 8
    #: the median run time assumed for a job that has not run yet when no record exists at all
    default_s: float = 3600.0
    #: the index of the Pareto tail past the longest finished run (2: the tail has a finite mean)
    tail_index: float = 2.0

    @classmethod
    def from_runs(cls, runs: Iterable[Run], min_records: int = 8, running: Iterable[Run] = ()) -> RuntimeHistory:
        """The history of these finished runs and of the ``running`` ones (their ``seconds``: how long
        they have run so far). Runs of no positive length are left out."""
        pools: dict[tuple[str, ...], tuple[list[float], list[float]]] = {}
        for which, group in ((0, runs), (1, running)):
            for r in group:
                if not r.seconds > 0 or not math.isfinite(r.seconds):
                    continue
                for key in _levels((r.queue, r.owner, r.kind, r.size)):
                    pools.setdefault(key, ([], []))[which].append(float(r.seconds))
        return cls({k: _Curve.of(f, c) for k, (f, c) in pools.items()}, min_records)

    def __len__(self) -> int:
        curve = self.curves.get(())
        return len(curve.finished) if curve else 0

    def mean(self) -> float | None:
        """The mean of the finished run times (None without any)."""
        curve = self.curves.get(())
        return sum(curve.finished) / len(curve.finished) if curve and curve.finished else None

    def remaining(self, cls: tuple[str, str, str, str], elapsed: float, u: float) -> float:
        """The ``u``-quantile (0 < u < 1) of the time left to a job of class ``cls`` that has run
        ``elapsed`` seconds: from the survival curve of the most specific class with ``min_records``
        observations longer than ``elapsed``, else of the broadest class with any, else a Pareto tail
        of index ``tail_index`` past the time it has run (``default_s`` in the median when it has not run)."""
        elapsed = max(0.0, elapsed)
        return self.draw(self.curve_for(cls, elapsed), elapsed, u)

    def curve_for(self, cls: tuple[str, str, str, str], elapsed: float) -> _Curve | None:
        """The survival curve ``remaining`` draws from for a job of class ``cls`` that has run ``elapsed``
        seconds (None: the Pareto tail)."""
        fallback: _Curve | None = None
        for key in _levels(cls):
            curve = self.curves.get(key)
            if curve is None:
                continue
            n = curve.at_risk(elapsed)
            if n >= self.min_records and curve.survives(elapsed) > 0:
                return curve
            if n and fallback is None:
                fallback = curve
        return fallback if fallback is not None and fallback.survives(elapsed) > 0 else None

    def draw(self, curve: _Curve | None, elapsed: float, u: float) -> float:
        """The ``u``-quantile of the time left after ``elapsed`` seconds, from ``curve`` (``curve_for``)."""
        if curve is not None:
            end = curve.end(elapsed, u, self.tail_index)
            if end is not None:
                return max(0.0, end - elapsed)
        if elapsed > 0:
            return float(elapsed * ((1.0 / (1.0 - u)) ** (1.0 / self.tail_index) - 1.0))
        return float(self.default_s * (2.0 * u if u <= 0.5 else (0.5 / (1.0 - u)) ** (1.0 / self.tail_index)))


def running_runs(snapshot: m.ClusterSnapshot, owners: Mapping[str, str] | None = None) -> list[Run]:
    """The runs still going in a snapshot, each with how long it has run (for ``RuntimeHistory.from_runs``'s
    ``running``): the jobs holding resources with a start time."""
    owners = owners or {}
    out = []
    for j in snapshot.jobs:
        if j.last_start is not None and _holds(j) and snapshot.now > j.last_start:
            q, o, k, size = job_class(j, owners.get(j.uid))
            out.append(Run(q, o, k, size, snapshot.now - j.last_start))
    return out


@dataclass(frozen=True, slots=True)
class Declared:
    """What a job says of its own end: a run time from its start, and/or a deadline (epoch
    seconds) by which it ends; the earlier one wins. Either beats the history."""

    runtime_s: float | None = None
    deadline: float | None = None

    def end(self, start: float) -> float | None:
        ends = [e for e in (None if self.runtime_s is None else start + self.runtime_s, self.deadline)
                if e is not None]
        return min(ends) if ends else None


# --------------------------------------------------------------------------- budget and output


@dataclass(frozen=True, slots=True)
class Budget:
    """How much work one estimate may take (see the module docstring)."""

    samples: int = 16
    min_samples: int = 4
    horizon_s: float = 7 * 24 * 3600.0
    max_cycles: int = 200
    max_work: int = 350_000
    period_s: float = 60.0
    # the victim search (consolidation, reclaim, preempt) of a simulated cycle after the first tries at
    # most this many victim sets per pending job (``CycleConfig.max_victim_scenarios``)
    victim_scenarios: int = 32
    # the run forward takes at most this many pending jobs, the first in the engine's order
    max_pending: int = 2000

    def __post_init__(self) -> None:
        for name in ("samples", "min_samples", "max_cycles", "max_work", "victim_scenarios", "max_pending"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, got {getattr(self, name)}")
        if self.min_samples > self.samples:
            raise ValueError(f"min_samples: must be at most samples ({self.samples}), got {self.min_samples}")
        for name in ("horizon_s", "period_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class Estimate:
    """When a pending job may start: ``p50`` and ``p80`` in epoch seconds (None: not within the
    horizon in that share of the samples, or not run forward: code ``beyond-bound``), how many samples
    it started in, and why it waits (``reason``: a code, ``starts-now``, ``waits``, ``beyond-horizon`` or
    ``beyond-bound``, a sentence, and the figures; ``reason_text`` words them with a time format)."""

    p50: float | None
    p80: float | None
    started: int
    samples: int
    reason: m.Reason


@dataclass
class _Sim:
    """One sample's mutable state."""

    jobs: dict[str, m.JobSpec]
    ends: dict[str, float]  # running job uid -> end time
    now: float = 0.0
    evicted: dict[str, float] = field(default_factory=dict)  # job uid -> when the simulation last evicted it
    starts: dict[str, float] = field(default_factory=dict)  # waiting job uid -> start time
    frees: dict[str, float] = field(default_factory=dict)  # waiting job uid -> when its node freed
    node_of: dict[str, str] = field(default_factory=dict)


def _holds(job: m.JobSpec) -> bool:
    return any(t.state in _HOLDING for t in job.tasks)


def _needs(job: m.JobSpec) -> int:
    need = len(job.tasks) if job.min_available is None else min(job.min_available, len(job.tasks))
    return max(1, need)


def _active(job: m.JobSpec) -> int:
    return sum(1 for t in job.tasks if t.state in m.ACTIVE_ALLOCATED_STATES)


def estimate_starts(
    snapshot: m.ClusterSnapshot,
    config: m.CycleConfig | None = None,
    history: RuntimeHistory | None = None,
    *,
    declared: Mapping[str, Declared] | None = None,
    owners: Mapping[str, str] | None = None,
    seed: int = 0,
    budget: Budget | None = None,
    first: m.CycleResult | None = None,
) -> dict[str, Estimate]:
    """Estimate when each pending job of ``snapshot`` starts; see the module docstring.

    ``config``: the shard's cycle config (the simulated cycles run with it). ``history``: recorded
    run times (none: every draw is the Pareto tail). ``declared``: job uid → its declared end.
    ``owners``: job uid → who submitted it (default: its namespace). ``first``: the result of
    ``run_cycle(snapshot, config)`` when the caller has it (the first simulated cycle is that one).
    Returns job uid → ``Estimate`` for the jobs the first cycle leaves pending. Deterministic.
    """
    config = config or m.CycleConfig()
    history = history or RuntimeHistory()
    declared = declared or {}
    owners = owners or {}
    budget = budget or Budget()
    first = first if first is not None else run_cycle(snapshot, config)
    if not first.pending:
        return {}
    with collector_paused():
        return _estimate_all(snapshot, config, history, declared, owners, seed, budget, first)


def engine_order(first: m.CycleResult) -> list[str]:
    """The jobs ``first`` leaves pending in the order its allocate tried them (``positions``), then
    those it did not try, by uid."""
    return sorted(first.pending, key=lambda uid: (first.positions[uid][0] if uid in first.positions else math.inf,
                                                  uid))


def _estimate_all(snapshot: m.ClusterSnapshot, config: m.CycleConfig, history: RuntimeHistory,
                  declared: Mapping[str, Declared], owners: Mapping[str, str], seed: int, budget: Budget,
                  first: m.CycleResult) -> dict[str, Estimate]:
    now = snapshot.now
    order = engine_order(first)
    # the run forward takes the first ``max_pending`` of them; the rest are left out of it
    left_out = frozenset(order[budget.max_pending:])
    base = dataclasses.replace(snapshot, jobs=tuple(j for j in snapshot.jobs if j.uid not in left_out)) \
        if left_out else snapshot
    size = len(base.jobs) + len(base.nodes)
    # the first cycle is shared by every sample; the rest of the work is split between them
    work_left = max(0, budget.max_work - size)
    samples = max(budget.min_samples, min(budget.samples, work_left // max(1, size * 4)))
    cycles = max(1, min(budget.max_cycles, work_left // max(1, size * samples)))
    growth = (budget.horizon_s / budget.period_s) ** (1.0 / cycles)
    uids = sorted(j.uid for j in base.jobs)
    column = {uid: i for i, uid in enumerate(uids)}
    rng = np.random.default_rng(seed)
    # Latin hypercube: in each job's column, one draw in each of the ``samples`` strata, in a random order
    width = max(1, len(uids))
    strata = rng.random((samples, width)).argsort(axis=0)
    draws = np.clip((strata + rng.random((samples, width))) / samples, 1e-6, 1 - 1e-6)
    classes = {j.uid: job_class(j, owners.get(j.uid)) for j in base.jobs}
    ahead = dataclasses.replace(config, max_victim_scenarios=min(config.max_victim_scenarios, budget.victim_scenarios))
    ends = _Ends(history, declared, classes, column)
    # the runs going on after the first cycle, with their starts (the same in every sample)
    runs = [(j.uid, ends.plan(j.uid, j.last_start if j.last_start is not None else now, now)) for j in base.jobs
            if j.uid not in first.pending and _holds(j)]
    # one memo for every simulated cycle: a cycle takes back the job states and node tables the last one
    # handed over (most specs are the same objects from sample to sample); it never changes a decision
    memo = CycleMemo()
    outcomes = [_simulate(base, ahead, first, ends, runs, draws[k].tolist(), budget, cycles, growth, memo)
                for k in range(samples)]
    by_uid = {j.uid: j for j in snapshot.jobs}
    smallest = min((n.whole_gpus for n in snapshot.nodes if n.whole_gpus > 0), default=0)
    horizon = now + budget.horizon_s
    after: float | None = None
    if left_out:
        # the left-out jobs are behind every simulated one, which take the room that frees first: until
        # the last of them has started (the median over the samples; None: not all within the horizon)
        run = len(order) - len(left_out)
        last = _percentile([max(o.starts.values(), default=now) if len(o.starts) == run else math.inf
                            for o in outcomes], 0.5)
        after = None if math.isinf(last) else last
    return {uid: _left_out(by_uid[uid], snapshot, first, len(outcomes), horizon, smallest, after)
            if uid in left_out else _estimate(by_uid[uid], snapshot, first, outcomes, horizon, smallest)
            for uid in sorted(first.pending)}


class _Ends:
    """When runs end: a declared end first, else a draw from the history. What is the same in every
    sample (the declared end, the curve a class and a time run draw from) is found once (``plan``)."""

    def __init__(self, history: RuntimeHistory, declared: Mapping[str, Declared],
                 classes: Mapping[str, tuple[str, str, str, str]], column: Mapping[str, int]) -> None:
        self.history = history
        self.declared = declared
        self.classes = classes
        self.column = column
        self._curves: dict[tuple[tuple[str, str, str, str], float], _Curve | None] = {}

    def plan(self, uid: str, start: float, now: float) -> tuple[float | None, _Curve | None, float, int]:
        """For the run of ``uid`` that began at ``start``, seen at ``now``: its declared end (at least
        ``now``; None: none), else the curve its draw comes from, the time it has run and its column."""
        said = self.declared.get(uid)
        end = said.end(start) if said is not None else None
        if end is not None:
            return max(end, now), None, 0.0, 0
        elapsed = max(0.0, now - start)
        key = (self.classes[uid], elapsed)
        curve = self._curves[key] if key in self._curves else self._curves.setdefault(
            key, self.history.curve_for(*key))
        return None, curve, elapsed, self.column[uid]

    def drawn(self, plan: tuple[float | None, _Curve | None, float, int], now: float, u: Sequence[float]) -> float:
        """The end ``plan`` gives in the sample of draws ``u`` (one per column)."""
        fixed, curve, elapsed, col = plan
        return fixed if fixed is not None else now + self.history.draw(curve, elapsed, u[col])

    def end(self, uid: str, start: float, now: float, u: Sequence[float]) -> float:
        """When the run of ``uid`` that began at ``start`` ends, seen at ``now``, in the sample of draws ``u``."""
        return self.drawn(self.plan(uid, start, now), now, u)


def _simulate(snapshot: m.ClusterSnapshot, config: m.CycleConfig, first: m.CycleResult, ends: _Ends,
              runs: Sequence[tuple[str, tuple[float | None, _Curve | None, float, int]]], u: Sequence[float],
              budget: Budget, cycles: int, growth: float, memo: CycleMemo) -> _Sim:
    now = snapshot.now
    sim = _Sim(jobs={j.uid: j for j in snapshot.jobs}, ends={uid: ends.drawn(plan, now, u) for uid, plan in runs}, now=now)
    waiting = {uid for uid in first.pending if uid in sim.jobs}
    horizon = now + budget.horizon_s
    result = first
    t = now
    freed: dict[str, float] = {}  # node -> the latest end of a run on it since the last cycle
    _apply(sim, first, t, freed, waiting, ends, u)
    for step in range(cycles):
        if not waiting:
            break
        pending_retry = bool(result.evictions)
        nxt = min(sim.ends.values(), default=math.inf)
        floor = now + budget.period_s * growth ** (step + 1) if step + 1 < cycles else horizon
        t_next = max(nxt, min(floor, horizon), t + (_RETRY_S if pending_retry else budget.period_s))
        if pending_retry:
            t_next = min(t_next, t + budget.period_s)
        if t_next > horizon or (math.isinf(nxt) and not pending_retry and not result.binds):
            break
        t = t_next
        # the room of the runs that ended since the last cycle, freed at their ends (a run that began in
        # the last cycle may have ended before it: not clamped to it)
        freed = {}
        for uid in sorted(uid for uid, end in sim.ends.items() if end <= t):
            job = sim.jobs.pop(uid)
            end = sim.ends.pop(uid)
            for n in {tk.node for tk in job.tasks if tk.node is not None and tk.state in _HOLDING}:
                freed[n] = max(end, freed.get(n, end))
        # tasks on their way out are gone by the second cycle
        if step == 0:
            for uid, job in list(sim.jobs.items()):
                if any(tk.state in _LEAVING for tk in job.tasks):
                    sim.jobs[uid] = dataclasses.replace(job, tasks=tuple(
                        dataclasses.replace(tk, state=m.PENDING, node=None, gpu_groups=())
                        if tk.state in _LEAVING else tk for tk in job.tasks))
        snap = dataclasses.replace(snapshot, jobs=tuple(sim.jobs[uid] for uid in _order(snapshot, sim)), now=t)
        result = run_cycle(snap, config, memo)
        _apply(sim, result, t, freed, waiting, ends, u)
    return sim


def _order(snapshot: m.ClusterSnapshot, sim: _Sim) -> list[str]:
    return [j.uid for j in snapshot.jobs if j.uid in sim.jobs]


def _apply(sim: _Sim, result: m.CycleResult, t: float, freed: Mapping[str, float],
           waiting: set[str], ends: _Ends, u: Sequence[float]) -> None:
    """A simulated cycle's decisions applied: bound pods run, evicted pods wait again (their job
    loses its run), and a waiting job whose gang is complete starts."""
    # a pipelined pod waits for room being released; here the release is immediate (the evicted
    # pods leave below), so it runs from this cycle on, as a bound one
    bound: dict[str, dict[str, m.BindDecision | m.PipelineDecision]] = {}
    placed: list[m.BindDecision | m.PipelineDecision] = [*result.binds, *result.pipelined]
    for b in placed:
        bound.setdefault(b.job, {})[b.task] = b
    evicted: dict[str, set[str]] = {}
    for e in result.evictions:
        evicted.setdefault(e.job, set()).add(e.task)
    for uid in sorted(evicted):
        job = sim.jobs.get(uid)
        if job is None:
            continue
        sim.jobs[uid] = dataclasses.replace(job, tasks=tuple(
            dataclasses.replace(tk, state=m.PENDING, node=None, gpu_groups=()) if tk.name in evicted[uid] else tk
            for tk in job.tasks))
        if _active(sim.jobs[uid]) < _needs(sim.jobs[uid]):
            sim.ends.pop(uid, None)
            sim.evicted[uid] = t
    for uid in sorted(bound):
        job = sim.jobs.get(uid)
        if job is None:
            continue
        binds = bound[uid]
        tasks = tuple(dataclasses.replace(tk, state=m.RUNNING, node=binds[tk.name].node,
                                          gpu_groups=binds[tk.name].gpu_groups) if tk.name in binds else tk
                      for tk in job.tasks)
        if sum(1 for tk in tasks if tk.state in m.ACTIVE_ALLOCATED_STATES) >= _needs(job) and uid not in sim.ends:
            # the room it took freed at the latest end of a run on its nodes since the last cycle; a run
            # that began in the last cycle may have ended before this one: the room was free from then
            nodes = {b.node for b in binds.values()}
            at = max((freed[n] for n in nodes if n in freed), default=t)
            start = min(t, max(sim.evicted.get(uid, sim.now), at))
            sim.jobs[uid] = dataclasses.replace(job, tasks=tasks, last_start=start)
            sim.ends[uid] = ends.end(uid, start, start, u)
            if uid in waiting:
                waiting.discard(uid)
                sim.starts[uid] = start
                sim.node_of[uid] = min(nodes)
                sim.frees[uid] = at if at != t else start
        else:
            sim.jobs[uid] = dataclasses.replace(job, tasks=tasks)


# --------------------------------------------------------------------------- percentiles and reasons


def _percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``values`` (inf allowed), linear between samples."""
    xs = sorted(values)
    x = q * (len(xs) - 1)
    i = int(x)
    if i >= len(xs) - 1:
        return xs[-1]
    lo, hi = xs[i], xs[i + 1]
    if math.isinf(hi):
        return hi if x > i else lo
    return lo + (x - i) * (hi - lo)


def _details(job: m.JobSpec, snapshot: m.ClusterSnapshot, first: m.CycleResult, horizon: float,
             smallest_node: int) -> dict[str, Any]:
    place = first.positions.get(job.uid)
    pending = [t for t in job.tasks if t.state == m.PENDING]
    per_pod = max((t.request.gpu_required for t in pending), default=0.0)
    return {
        "queue": job.queue,
        "ahead_in_queue": (place[1] - 1) if place else None,
        "ahead_in_shard": (place[0] - 1) if place else None,
        "pods": len(pending),
        "gpus": round(sum(t.request.gpu_required for t in pending), 4),
        "gpus_per_pod": round(per_pod, 4),
        "whole_node": bool(per_pod) and bool(smallest_node) and per_pod >= smallest_node,
        "frees_at": None,
        "node": None,
        "horizon": horizon,
        "now": snapshot.now,
        "why": first.pending[job.uid].code,
    }


def _estimate(job: m.JobSpec, snapshot: m.ClusterSnapshot, first: m.CycleResult, outcomes: list[_Sim],
              horizon: float, smallest_node: int) -> Estimate:
    uid = job.uid
    starts = [o.starts.get(uid, math.inf) for o in outcomes]
    p50, p80 = _percentile(starts, 0.5), _percentile(starts, 0.8)
    started = sum(1 for s in starts if math.isfinite(s))
    # the sample whose start is the median one: its node and the moment that node's room freed
    ranked = sorted(range(len(outcomes)), key=lambda k: starts[k])
    mid = outcomes[ranked[len(ranked) // 2]]
    details = _details(job, snapshot, first, horizon, smallest_node)
    details.update(frees_at=mid.frees.get(uid), node=mid.node_of.get(uid))
    code = STARTS_NOW if math.isfinite(p50) and p50 <= snapshot.now else (
        BEYOND_HORIZON if not math.isfinite(p50) else WAITS)
    reason = m.Reason(code, reason_text(code, details, _epoch_text), details)
    return Estimate(None if math.isinf(p50) else p50, None if math.isinf(p80) else p80, started, len(outcomes),
                    reason)


def _left_out(job: m.JobSpec, snapshot: m.ClusterSnapshot, first: m.CycleResult, samples: int, horizon: float,
              smallest_node: int, after: float | None) -> Estimate:
    """The estimate of a job beyond ``Budget.max_pending`` in the engine's order: no p50 or p80; its
    reason says the jobs ahead of it take the room that frees until ``after`` (a lower bound for it
    when it needs what they need)."""
    details = _details(job, snapshot, first, horizon, smallest_node)
    details["after"] = after
    return Estimate(None, None, 0, samples, m.Reason(BEYOND_BOUND, reason_text(BEYOND_BOUND, details, _epoch_text),
                                                      details))


def _epoch_text(at: float) -> str:
    """A time in the engine's own words: seconds on the snapshot's clock (the pages reword it)."""
    return f"t={at:.0f}"


def reason_text(code: str, details: Mapping[str, Any], when: Callable[[float], str]) -> str:
    """The reason an estimate gives, in plain words; ``when`` formats an epoch time (e.g. ``14:20``
    in the reader's zone)."""
    parts: list[str] = []
    ahead = details.get("ahead_in_queue")
    if ahead:
        parts.append(f"behind {ahead} job{'s' if ahead != 1 else ''} of {details.get('queue')}")
    gpus, per_pod, pods = details.get("gpus") or 0, details.get("gpus_per_pod") or 0, details.get("pods") or 0
    if per_pod:
        amount = f"{per_pod:g} GPU{'s' if per_pod != 1 else ''}"
        if details.get("whole_node"):
            parts.append(f"needs {amount} on one node (a whole node)")
        elif pods > 1:
            parts.append(f"needs {pods} pods of {amount} ({gpus:g} GPUs) at once")
        else:
            parts.append(f"needs {amount} on one node")
    frees = details.get("frees_at")
    if code == STARTS_NOW:
        parts.append("room is free now")
    elif code == BEYOND_BOUND:
        after = details.get("after")
        parts.append("further back in line than the estimate runs forward"
                     + (f": the jobs ahead of it take the room that frees until ~{when(float(after))}"
                        if after is not None else ""))
    elif code == BEYOND_HORIZON:
        parts.append(f"no room frees for it before {when(float(details.get('horizon') or 0))} "
                     "with the jobs known now")
    elif frees is not None:
        node = details.get("node")
        parts.append(f"the room it needs frees at ~{when(float(frees))}" + (f" (on {node})" if node else ""))
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] if text else "Waits for room to free"
