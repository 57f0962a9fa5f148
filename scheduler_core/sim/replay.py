"""Job-level replay through the engine on a simulated clock, and the queue-configuration what-if.

A discrete-event loop: scheduling cycles run every ``period`` simulated seconds. Before a cycle,
jobs whose run time has elapsed complete (their resources are freed) and jobs whose submission
time has come join the pending set. The cycle is ``scheduler_core.run_cycle`` on a snapshot of
the simulated cluster; its binds start tasks, its evictions send tasks back to pending.

Invariants:
* Deterministic: same jobs, queues, cluster, config and seed give the same ``ReplayResult``
  (the engine is deterministic, arrivals are sorted, the job→queue map is a hash, no wall clock
  enters the simulation).
* Gangs start whole: a job's tasks start together, in the cycle where every task that must run
  is bound; the engine's pipelined placements (onto resources being released) are retried in the
  next cycle, when the evictions have been applied. ``partial_gangs`` counts any cycle end with a
  job running fewer than its minimum; it must stay 0.
* An evicted job loses its progress (no checkpoints): it restarts from zero when it runs again.

Records per cycle: allocated GPUs, pending / running jobs, per-queue allocated vs fair share,
idle GPUs stranded on partly used nodes (fragmentation). Reports per queue: queueing delay
(first start − submit), job completion time (completion − submit), GPU-hours received, and
Jain's fairness index over queues of (time-averaged allocated / time-averaged fair share).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler_core import model as m
from scheduler_core.cycle import run_cycle
from scheduler_core.sim.traces import Job
from scheduler_core.units import mib_to_bytes

__all__ = [
    "ReplayCluster",
    "ReplayConfig",
    "ReplayResult",
    "assign_queues",
    "jain_index",
    "leaf_queues",
    "replay",
]

GIB = 1024**3


@dataclass(frozen=True)
class ReplayCluster:
    """A homogeneous cluster description: ``nodes`` nodes of ``gpus_per_node`` GPUs each."""

    nodes: int
    gpus_per_node: int = 8
    cpu_millis_per_node: int = 96_000
    memory_gib_per_node: int = 768

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"nodes: a cluster needs at least one node, got {self.nodes}")
        if self.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node: must be at least 1, got {self.gpus_per_node}")

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_specs(self) -> tuple[m.NodeSpec, ...]:
        return tuple(
            m.NodeSpec(
                name=f"node-{i:04d}",
                cpu_millis=float(self.cpu_millis_per_node),
                memory_bytes=float(self.memory_gib_per_node * GIB),
                gpus=self.gpus_per_node,
            )
            for i in range(self.nodes)
        )


@dataclass(frozen=True)
class ReplayConfig:
    """How the replay runs: cycle period (s), the engine's config, a seed for the queue map,
    and a bound on cycles (a guard against a workload that can never run)."""

    period_s: float = 60.0
    cycle: m.CycleConfig = field(default_factory=m.CycleConfig)
    seed: int = 0
    max_cycles: int = 100_000

    def __post_init__(self) -> None:
        if not self.period_s > 0:
            raise ValueError(f"period_s: must be > 0, got {self.period_s}")


# --------------------------------------------------------------------------- queues


def leaf_queues(queues: Sequence[m.QueueSpec]) -> list[str]:
    """Names of the queues with no children, sorted (only leaves hold jobs)."""
    parents = {q.parent for q in queues if q.parent}
    return sorted(q.name for q in queues if q.name not in parents)


def assign_queues(jobs: Sequence[Job], leaves: Sequence[str], seed: int = 0) -> dict[str, str]:
    """Map each job to a leaf queue by a stable hash of its user (or job id when the trace has
    no user), salted by ``seed``. All jobs of one user land in the same queue."""
    if not leaves:
        raise ValueError("queues: the queue tree has no leaf queue to put jobs in")
    out: dict[str, str] = {}
    for job in jobs:
        key = f"{seed}:{job.user if job.user is not None else job.job_id}".encode()
        h = int.from_bytes(hashlib.sha256(key).digest()[:8], "big")
        out[job.job_id] = leaves[h % len(leaves)]
    return out


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index (Σx)² / (n·Σx²): 1 when all equal, 1/n when one takes all."""
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return float("nan")
    sq = sum(v * v for v in vals)
    if sq == 0:
        return 1.0
    return sum(vals) ** 2 / (len(vals) * sq)


# --------------------------------------------------------------------------- simulation state


@dataclass
class _Task:
    name: str
    request: m.TaskRequest
    node: str | None = None
    groups: tuple[str, ...] = ()


@dataclass
class _JobState:
    job: Job
    uid: str
    queue: str
    order: int
    tasks: list[_Task]
    min_available: int
    submitted: bool = False
    running: bool = False
    start: float | None = None  # start of the current run
    first_start: float | None = None
    end: float | None = None
    completed: bool = False
    evictions: int = 0


@dataclass
class ReplayResult:
    """The replay's records and summary (``summary()`` is JSON-ready)."""

    queues: tuple[str, ...]
    total_gpus: int
    # Plain JSON-ready records (one per cycle, one per job), read by key.
    cycles: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    preempted_jobs: int
    evicted_tasks: int
    partial_gangs: int
    deferred_gangs: int
    engine_errors: list[str]
    sim_seconds: float
    unfinished_jobs: int

    def per_queue(self) -> dict[str, dict[str, float]]:
        """Per leaf queue: jobs, completed, mean/p50/p95 queueing delay, mean JCT, GPU-hours,
        time-averaged allocated and fair-share GPUs."""
        out: dict[str, dict[str, float]] = {}
        for q in self.queues:
            jobs = [j for j in self.jobs if j["queue"] == q]
            waits = sorted(float(j["queueing_delay_s"]) for j in jobs if j["queueing_delay_s"] is not None)
            jcts = [float(j["jct_s"]) for j in jobs if j["jct_s"] is not None]
            alloc, fair, quota, span = 0.0, 0.0, 0.0, 0.0
            for c in self.cycles:
                dt = float(c["dt"])
                qa = c["queues"].get(q)
                if qa is None:
                    continue
                alloc += qa[0] * dt
                fair += qa[1] * dt
                quota += qa[2] * dt
                span += dt
            out[q] = {
                "jobs": float(len(jobs)),
                "completed": float(len(jcts)),
                "queueing_delay_mean_s": _mean(waits),
                "queueing_delay_p50_s": _pct(waits, 50),
                "queueing_delay_p95_s": _pct(waits, 95),
                "jct_mean_s": _mean(jcts),
                "gpu_hours": sum(float(j["gpu_seconds"]) for j in jobs) / 3600.0,
                "allocated_gpus_avg": alloc / span if span else 0.0,
                "fair_share_gpus_avg": fair / span if span else 0.0,
                "quota_gpus_avg": quota / span if span else 0.0,
                "preemptions": float(sum(int(j["evictions"]) for j in jobs)),
            }
        return out

    def fairness(self, against: str = "fair_share_gpus_avg") -> float:
        """Jain's index over leaf queues of allocated / ``against`` (time averages): against the
        engine's fair share (how well the engine delivers what it computed; demand-capped, so
        close to 1 unless gangs or fragmentation get in the way), or against the quota
        (``quota_gpus_avg``: how evenly queues are served relative to what they are guaranteed)."""
        ratios = [v["allocated_gpus_avg"] / v[against] for v in self.per_queue().values() if v[against] > 1e-9]
        return jain_index(ratios)

    def timeline(self) -> dict[str, Any]:
        """Per-cycle series for charts: time, allocated and stranded GPUs, pending and running
        jobs, evictions, and per leaf queue allocated / fair share / quota GPUs."""
        keys = ("t", "allocated_gpus", "stranded_gpus", "pending_jobs", "running_jobs", "evictions")
        out: dict[str, Any] = {k: [c[k] for c in self.cycles] for k in keys}
        out["queues"] = {
            q: {
                name: [c["queues"].get(q, (0.0, 0.0, 0.0))[i] for c in self.cycles]
                for i, name in enumerate(("allocated", "fair_share", "quota"))
            }
            for q in self.queues
        }
        return out

    def summary(self) -> dict[str, Any]:
        waits = [float(j["queueing_delay_s"]) for j in self.jobs if j["queueing_delay_s"] is not None]
        jcts = [float(j["jct_s"]) for j in self.jobs if j["jct_s"] is not None]
        busy = sum(float(c["allocated_gpus"]) * float(c["dt"]) for c in self.cycles)
        span = sum(float(c["dt"]) for c in self.cycles)
        frag = sum(float(c["stranded_gpus"]) * float(c["dt"]) for c in self.cycles)
        # while some job waits, the share of GPUs nobody holds: what placement left unusable
        waiting = [c for c in self.cycles if int(c["pending_jobs"]) > 0]
        wait_span = sum(float(c["dt"]) for c in waiting)
        idle_while_waiting = sum((self.total_gpus - float(c["allocated_gpus"])) * float(c["dt"])
                                 for c in waiting)
        waits_sorted, jcts_sorted = sorted(waits), sorted(jcts)
        return {
            "jobs": len(self.jobs),
            "completed": len(jcts),
            "unfinished": self.unfinished_jobs,
            "cycles": len(self.cycles),
            "simulated_seconds": round(self.sim_seconds, 1),
            "total_gpus": self.total_gpus,
            "gpu_utilisation": round(busy / (span * self.total_gpus), 4) if span else 0.0,
            "stranded_gpus_avg": round(frag / span, 3) if span else 0.0,
            "unallocated_gpu_pct_while_waiting": (round(100 * idle_while_waiting / (wait_span * self.total_gpus), 2)
                                                  if wait_span else None),
            "queueing_delay_mean_s": _r(_mean(waits)),
            "queueing_delay_p95_s": _r(_pct(waits_sorted, 95)) if waits_sorted else None,
            "jct_mean_s": _r(_mean(jcts)),
            "jct_p95_s": _r(_pct(jcts_sorted, 95)) if jcts_sorted else None,
            "jain_fairness": _r(self.fairness(), 4),
            "jain_fairness_vs_quota": _r(self.fairness("quota_gpus_avg"), 4),
            "preempted_jobs": self.preempted_jobs,
            "evicted_tasks": self.evicted_tasks,
            "partial_gangs": self.partial_gangs,
            "deferred_gangs": self.deferred_gangs,
            "engine_errors": self.engine_errors[:10],
            "per_queue": {q: {k: _r(v) for k, v in d.items()} for q, d in self.per_queue().items()},
        }


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _pct(sorted_xs: Sequence[float], p: float) -> float:
    if not sorted_xs:
        return float("nan")
    k = max(0, min(len(sorted_xs) - 1, math.ceil(p / 100 * len(sorted_xs)) - 1))
    return sorted_xs[k]


def _r(x: float, nd: int = 1) -> float | None:
    return None if isinstance(x, float) and math.isnan(x) else round(x, nd)


def _task_request(job: Job) -> m.TaskRequest:
    cpu = float(job.cpu_millis_per_pod or 4000 * max(1, math.ceil(job.gpu_per_pod)))
    mem = float(job.memory_bytes_per_pod or mib_to_bytes(16 * 1024 * max(1, math.ceil(job.gpu_per_pod))))
    g = job.gpu_per_pod
    if g <= 0:
        return m.TaskRequest(cpu_millis=cpu, memory_bytes=mem)
    if g < 1:
        return m.TaskRequest(cpu_millis=cpu, memory_bytes=mem, gpu_kind=m.GPU_FRACTION, gpu_fraction=g)
    return m.TaskRequest(cpu_millis=cpu, memory_bytes=mem, gpu_kind=m.GPU_WHOLE, gpus=float(math.ceil(g)))


# --------------------------------------------------------------------------- the loop


def replay(
    jobs: Sequence[Job],
    queues: Sequence[m.QueueSpec],
    cluster: ReplayCluster,
    config: ReplayConfig | None = None,
    queue_of: dict[str, str] | None = None,
) -> ReplayResult:
    """Replay ``jobs`` on ``cluster`` under the queue tree ``queues``; see the module docstring.

    ``queue_of`` maps job id → leaf queue; by default ``assign_queues`` (hash of user/job id).
    Jobs asking for more GPUs per pod than a node has are rejected with ValueError (they could
    never run). Returns a ``ReplayResult``; deterministic.
    """
    config = config or ReplayConfig()
    leaves = leaf_queues(queues)
    names = {q.name for q in queues}
    queue_of = queue_of or assign_queues(jobs, leaves, config.seed)
    states: list[_JobState] = []
    for i, job in enumerate(sorted(jobs, key=lambda j: (j.submit_time, j.job_id))):
        if job.gpu_per_pod > cluster.gpus_per_node:
            raise ValueError(
                f"jobs[{job.job_id}].gpu_per_pod: {job.gpu_per_pod} GPUs per pod exceeds the "
                f"{cluster.gpus_per_node} GPUs of a node"
            )
        q = queue_of.get(job.job_id)
        if q is None or q not in names:
            raise ValueError(f"jobs[{job.job_id}].queue: {q!r} is not a queue of the tree")
        req = _task_request(job)
        uid = f"job-{i:06d}"
        tasks = [_Task(f"{uid}-{k}", req) for k in range(max(1, job.num_pods))]
        states.append(_JobState(job, uid, q, i, tasks, len(tasks)))
    by_uid = {s.uid: s for s in states}
    nodes = cluster.node_specs()
    node_gpus = {n.name: float(n.gpus) for n in nodes}
    queue_specs = tuple(queues)

    cycles: list[dict[str, Any]] = []
    errors: list[str] = []
    evicted_tasks = preempted_jobs = partial = deferred = 0
    arrivals = 0
    if not states:
        return ReplayResult(tuple(leaves), cluster.total_gpus, [], [], 0, 0, 0, 0, [], 0.0, 0)
    period = config.period_s
    t0 = states[0].job.submit_time
    now = t0
    idle_cycle = False
    for _ in range(config.max_cycles):
        # 1. completions (exact end times; resources are seen free from this cycle on)
        for s in states:
            if s.running and s.end is not None and s.end <= now:
                s.running, s.completed = False, True
                for t in s.tasks:
                    t.node, t.groups = None, ()
        # 2. arrivals
        while arrivals < len(states) and states[arrivals].job.submit_time <= now:
            states[arrivals].submitted = True
            arrivals += 1
        active = [s for s in states if s.submitted and not s.completed]
        if not active and arrivals >= len(states):
            break
        if not active or idle_cycle and not _something_changed(states, now, period):
            # nothing can change before the next arrival or completion: jump there on the grid
            nxt = _next_event(states, arrivals, now)
            if nxt is None:
                break
            now = t0 + math.ceil((nxt - t0) / period) * period
            idle_cycle = False
            cycles.append(_idle_record(cycles, states, now))
            continue
        snap = m.ClusterSnapshot(
            nodes=nodes,
            queues=queue_specs,
            jobs=tuple(_job_spec(s) for s in active),
            now=now,
        )
        result = run_cycle(snap, config.cycle)
        errors.extend(f"{e.kind} {e.name}.{e.field}: {e.message}" for e in result.errors if len(errors) < 50)
        # 3. evictions: the task goes back to pending; the rest of its gang too (a gang cannot
        #    run below its minimum), and the job loses its progress.
        evicted_jobs: set[str] = set()
        for ev in result.evictions:
            evicted_jobs.add(ev.job)
            evicted_tasks += 1
        for uid in sorted(evicted_jobs):
            s = by_uid[uid]
            if s.running:
                s.running, s.start, s.end = False, None, None
                s.evictions += 1
                preempted_jobs += 1
            for t in s.tasks:
                t.node, t.groups = None, ()
        # 4. binds: start a job when all its tasks are placed; defer if part is only pipelined
        binds: dict[str, list[m.BindDecision]] = {}
        for b in result.binds:
            binds.setdefault(b.job, []).append(b)
        pipelined = {p.job for p in result.pipelined}
        for uid in sorted(binds):
            s = by_uid[uid]
            if s.running or uid in evicted_jobs:
                continue
            placed = {b.task: b for b in binds[uid]}
            if len(placed) < s.min_available or uid in pipelined:
                deferred += 1
                continue
            for t in s.tasks:
                bound = placed.get(t.name)
                if bound is not None:
                    t.node, t.groups = bound.node, bound.gpu_groups
            s.running, s.start = True, now
            s.end = now + s.job.duration
            if s.first_start is None:
                s.first_start = now
        partial += sum(
            1 for s in states if s.running and sum(1 for t in s.tasks if t.node) < s.min_available
        )
        rec = _record(result, states, node_gpus, now, cycles)
        cycles.append(rec)
        idle_cycle = not result.binds and not result.evictions
        now += period
    finished = [s for s in states if s.completed]
    job_rows = []
    for s in states:
        gpus = s.job.num_gpu if s.job.num_gpu else s.job.gpu_per_pod * len(s.tasks)
        job_rows.append(
            {
                "job": s.job.job_id,
                "queue": s.queue,
                "gpus": gpus,
                "submit": s.job.submit_time,
                "queueing_delay_s": None if s.first_start is None else s.first_start - s.job.submit_time,
                "jct_s": None if not s.completed or s.end is None else s.end - s.job.submit_time,
                "gpu_seconds": gpus * s.job.duration if s.completed else 0.0,
                "evictions": s.evictions,
            }
        )
    return ReplayResult(
        queues=tuple(leaves),
        total_gpus=cluster.total_gpus,
        cycles=cycles,
        jobs=job_rows,
        preempted_jobs=preempted_jobs,
        evicted_tasks=evicted_tasks,
        partial_gangs=partial,
        deferred_gangs=deferred,
        engine_errors=errors,
        sim_seconds=now - t0,
        unfinished_jobs=len(states) - len(finished),
    )


def _job_spec(s: _JobState) -> m.JobSpec:
    tasks = tuple(
        m.TaskSpec(
            name=t.name,
            request=t.request,
            state=m.RUNNING if (s.running and t.node) else m.PENDING,
            node=t.node if s.running else None,
            gpu_groups=t.groups if s.running else (),
        )
        for t in s.tasks
    )
    return m.JobSpec(
        name=s.uid,
        queue=s.queue,
        tasks=tasks,
        creation=s.job.submit_time,
        build_order=s.order,
        min_available=s.min_available,
        last_start=s.start,
    )


def _something_changed(states: list[_JobState], now: float, period: float) -> bool:
    """Whether an arrival or a completion falls in the last period (the cycle would see news)."""
    for s in states:
        if s.submitted and now - period < s.job.submit_time <= now:
            return True
        if s.completed and s.end is not None and now - period < s.end <= now:
            return True
    return False


def _next_event(states: list[_JobState], arrivals: int, now: float) -> float | None:
    times = [s.end for s in states if s.running and s.end is not None and s.end > now]
    if arrivals < len(states):
        times.append(states[arrivals].job.submit_time)
    return min(times) if times else None


def _record(
    result: m.CycleResult, states: list[_JobState], node_gpus: dict[str, float], now: float,
    cycles: list[dict[str, Any]],
) -> dict[str, Any]:
    used: dict[str, float] = {}
    for s in states:
        if s.running:
            for t in s.tasks:
                if t.node:
                    used[t.node] = used.get(t.node, 0.0) + t.request.gpu_required
    allocated = sum(used.values())
    # Idle GPUs on partly used nodes: they cannot host a whole-node job (fragmentation).
    stranded = sum(node_gpus[n] - u for n, u in used.items() if 0 < u < node_gpus[n])
    per_q: dict[str, tuple[float, float, float]] = {}
    for name, qs in result.queues.items():
        per_q[name] = (float(qs.allocated[2]), float(qs.fair_share[2]), float(qs.deserved[2]))
    # queue "allocated" as the engine saw it before our binds; use ours after the binds
    after: dict[str, float] = {}
    for s in states:
        if s.running:
            after[s.queue] = after.get(s.queue, 0.0) + sum(t.request.gpu_required for t in s.tasks if t.node)
    per_q = {q: (after.get(q, 0.0), fs, dq) for q, (_, fs, dq) in per_q.items()}
    _close_dt(cycles, now)
    return {
        "t": now,
        "dt": 0.0,
        "allocated_gpus": allocated,
        "stranded_gpus": stranded,
        "pending_jobs": sum(1 for s in states if s.submitted and not s.running and not s.completed),
        "running_jobs": sum(1 for s in states if s.running),
        "binds": len(result.binds),
        "evictions": len(result.evictions),
        "queues": per_q,
    }


def _idle_record(cycles: list[dict[str, Any]], states: list[_JobState], now: float) -> dict[str, Any]:
    """A marker for a skipped stretch: the state of the previous cycle holds until ``now``."""
    _close_dt(cycles, now)
    prev = cycles[-1] if cycles else None
    return {
        "t": now,
        "dt": 0.0,
        "allocated_gpus": prev["allocated_gpus"] if prev else 0.0,
        "stranded_gpus": prev["stranded_gpus"] if prev else 0.0,
        "pending_jobs": sum(1 for s in states if s.submitted and not s.running and not s.completed),
        "running_jobs": sum(1 for s in states if s.running),
        "binds": 0,
        "evictions": 0,
        "queues": dict(prev["queues"]) if prev else {},
        "skipped": True,
    }


def _close_dt(cycles: list[dict[str, Any]], now: float) -> None:
    """Set the previous record's duration: its state held until ``now``."""
    if cycles:
        cycles[-1]["dt"] = now - float(cycles[-1]["t"])
