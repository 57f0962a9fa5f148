"""The eviction actions: consolidation, reclaim, preempt (one victim solver) and stale gangs.

Invariants (KAI-SEMANTICS §2.10, §4, §8.11–22):
* evictions are committed only when a full simulation places the pending job's whole gang
  (pipelined) and every validator passes; otherwise nothing changes (no speculative evictions);
* a victim loses one elastic surplus pod at a time, or its whole remaining gang;
* non-preemptible jobs are never reclaim / preempt / consolidation victims;
* preemption stays inside one queue and takes only strictly lower priorities;
* reclaim keeps the reclaimer within its fair share and respects the victim queues' protections;
* consolidation never loses a pod: every moved pod is re-placed;
* the search is bounded by a scenario count (``CycleConfig.max_victim_scenarios``), never by
  wall-clock time, so the answer depends only on the input.
"""

from __future__ import annotations

import bisect
import copy
import heapq
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from scheduler_core import model as m
from scheduler_core import reclaimable as rc
from scheduler_core.allocate import Placer, allocate_job
from scheduler_core.model import Key
from scheduler_core.ordering import JobsOrder, batch_request, tasks_to_allocate
from scheduler_core.proportion import QueueAttrs, allocatable_share, compare_victim_queues
from scheduler_core.session import GPU, JobState, PodSet, Session, Statement, SubGroupSet, TaskState

_EPS = 1e-9


def _fmt(x: float) -> str:
    if x == m.UNLIMITED:
        return "unlimited"
    if abs(x - round(x)) < 1e-9:
        return str(int(round(x)))
    return f"{x:.2f}"


# --------------------------------------------------------------------------------------------
# Victim granularity (§2.10 GetTasksToEvict)


def _evictable(t: TaskState) -> bool:
    """A pod an eviction may take: active (allocated, bound, running or pipelined), including
    pods placed earlier in this cycle, as in KAI."""
    return t.status in m.ACTIVE_ALLOCATED_STATES


def _has_evictable(job: JobState) -> bool:
    return job.active_allocated() > 0 and any(_evictable(t) for t in job.tasks)


class VictimJob:
    """A candidate victim job with the tasks not yet taken by the search."""

    __slots__ = ("job", "remaining", "taken")

    def __init__(self, job: JobState, remaining: list[TaskState] | None = None) -> None:
        self.job = job
        # ``remaining`` is replaced, never changed in place, so a cached list may be shared
        self.remaining = [t for t in job.tasks if _evictable(t)] if remaining is None else remaining
        self.taken = 0

    def _count(self, ps: PodSet) -> int:
        return sum(1 for t in self.remaining if t.pod_set is ps)

    def _surplus_member(self, x: PodSet | SubGroupSet) -> PodSet | None:
        """The least-prioritized pod set with surplus (reverse member order), recursively."""
        if isinstance(x, PodSet):
            return x if self._count(x) > x.min_available else None
        for y in sorted(x.members, key=lambda y: y.name, reverse=True):
            got = self._surplus_member(y)
            if got is not None:
                return got
        return None

    def next_chunk(self) -> list[TaskState]:
        """One surplus pod (last in task order), else every remaining pod (the whole gang)."""
        if not self.remaining:
            return []
        members = self.job.root.members
        if len(members) == 1 and isinstance(members[0], PodSet) and len(self.remaining) <= members[0].min_available:
            return list(self.remaining)  # one pod set at (or below) its minimum: the whole gang
        ps = self._surplus_member(self.job.root)
        if ps is not None:
            pods = [t for t in self.remaining if t.pod_set is ps]
            pods.sort(key=lambda t: t.order_key)
            return [pods[-1]]
        return list(self.remaining)

    def take(self, chunk: list[TaskState]) -> None:
        ids = {t.index for t in chunk}
        self.remaining = [t for t in self.remaining if t.index not in ids]
        self.taken += 1

    def elastic_state(self) -> int:
        members = self.job.root.members
        if len(members) == 1 and isinstance(members[0], PodSet):
            n, mn = len(self.remaining), members[0].min_available
            return 0 if n < mn else (2 if n > mn else 1)
        above = False
        for ps in self.job.pod_sets.values():
            n = self._count(ps)
            if n < ps.min_available:
                return 0
            if n > ps.min_available:
                above = True
        return 2 if above else 1

    def order_key(self) -> Key:
        """Reversed JobOrder: lowest priority, above-min before at-min before below-min, newest."""
        j = self.job
        static = j.victim_key
        if static is None:
            s = j.spec
            static = j.victim_key = (-s.creation, -s.build_order, _neg(j.uid))
        return (j.priority, -self.elastic_state(), static[0], static[1], static[2])


def victim_entry(s: Session, j: JobState) -> tuple[Key, int, JobState, list[TaskState]] | None:
    """A job's entry in a leaf heap of ``VictimOrder`` keyed by its index (victim keys end with
    the job's name, so they are unique and the index never decides); None without evictable pods."""
    got = s.victim_cache.get(j.index)
    if got is None or got[0] != j.version:
        v = VictimJob(j)
        got = s.victim_cache[j.index] = (j.version, v.remaining, v.order_key() if v.remaining else ())
    return (got[2], j.index, j, got[1]) if got[1] else None


def _neg(name: str) -> tuple[int, ...]:
    return tuple(-b for b in name.encode())


def _vec(tasks: list[TaskState]) -> list[float]:
    out = [0.0, 0.0, 0.0]
    for t in tasks:
        out[0] += t.qvec[0]
        out[1] += t.qvec[1]
        out[2] += t.qvec[2]
    return out


class VictimOrder:
    """Victim chunks in the exact reverse of the scheduling order (§4.2): the queue tree in victim
    mode (each queue judged without what it already gave up plus its next candidate), then the
    reversed job order inside a leaf; a job with pods left competes again after each chunk."""

    def __init__(self, s: Session, jobs: list[JobState],
                 heaps: dict[str, list[tuple[Key, int, JobState, list[TaskState]]]] | None = None) -> None:
        """``heaps``: the leaf heaps of exactly ``jobs`` when the caller keeps them (a sorted list
        is a heap); they are copied, not changed."""
        self.s = s
        self.removed: dict[str, list[float]] = {}
        self.children: dict[str | None, list[str]] = {}
        # heap entries: (victim order key, position in ``jobs``, job, its evictable pods then);
        # the VictimJob of an entry is made when the search first reaches it (most never are)
        self.heaps: dict[str, list[tuple[Key, int, JobState, list[TaskState]]]] = {}
        self.victims: dict[int, VictimJob] = {}
        # A job's evictable pods and its key change only when one of its tasks moves (its version
        # changes), so both are kept across the pending jobs of a cycle instead of recomputed for
        # every candidate victim each time.
        prebuilt = heaps is not None
        if heaps is not None:
            self.heaps = {leaf: list(h) for leaf, h in heaps.items() if h}
            jobs = []
        cache = s.victim_cache
        heaps = self.heaps
        for k, j in enumerate(jobs):
            got = cache.get(j.index)
            if got is None or got[0] != j.version:
                v = VictimJob(j)
                got = cache[j.index] = (j.version, v.remaining, v.order_key() if v.remaining else ())
            if got[1]:
                heap = heaps.get(j.queue)
                if heap is None:
                    heap = heaps[j.queue] = []
                heap.append((got[2], k, j, got[1]))
        for h in self.heaps.values() if not prebuilt else ():
            heapq.heapify(h)  # (sorted lists given by the caller already are heaps)
        seen: set[str] = set()
        for leaf in self.heaps:
            for q in s.chain[leaf]:
                if q.name in seen:
                    continue
                seen.add(q.name)
                self.children.setdefault(q.parent, []).append(q.name)
        for kids in self.children.values():
            kids.sort()

    def _candidate(self, name: str) -> tuple[VictimJob, list[float]] | None:
        """The next victim under queue ``name`` and the resources its next chunk would free."""
        heap = self.heaps.get(name)
        if heap is not None:
            if not heap:
                return None
            v = self._victim(heap[0])
            return v, _vec(v.next_chunk())
        return self._pick(name)

    def _victim(self, entry: tuple[Key, int, JobState, list[TaskState]]) -> VictimJob:
        v = self.victims.get(entry[1])
        if v is None:
            v = self.victims[entry[1]] = VictimJob(entry[2], entry[3])
        return v

    def _pick(self, parent: str | None) -> tuple[VictimJob, list[float]] | None:
        best: tuple[VictimJob, list[float]] | None = None
        best_q: QueueAttrs | None = None
        best_removed: list[float] | None = None
        kids = self.children.get(parent, [])
        for name in kids:
            cand = self._candidate(name)
            if cand is None:
                continue
            if len(kids) == 1:
                return cand
            q = self.s.queues[name]
            removed = [a + b for a, b in zip(self.removed.get(name, [0.0, 0.0, 0.0]), cand[1])]
            if (best is None or best_q is None or best_removed is None
                    or compare_victim_queues(q, best_q, removed, best_removed, self.s.total) < 0):
                best, best_q, best_removed = cand, q, removed
        return best

    def __iter__(self) -> Iterator[tuple[VictimJob, list[TaskState]]]:
        while True:
            got = self._pick(None)
            if got is None:
                return
            v, _ = got
            chunk = v.next_chunk()
            if not chunk:
                return
            heap = self.heaps[v.job.queue]
            k = heapq.heappop(heap)[1]
            v.take(chunk)
            if v.remaining:
                heapq.heappush(heap, (v.order_key(), k, v.job, v.remaining))
            vec = _vec(chunk)
            for q in self.s.chain[v.job.queue]:
                acc = self.removed.setdefault(q.name, [0.0, 0.0, 0.0])
                for r in range(3):
                    acc[r] += vec[r]
            yield v, chunk


# --------------------------------------------------------------------------------------------
# The solver


class Attempt:
    """What one solve produced: success, victims evicted, and the validator's verdict text."""

    def __init__(self) -> None:
        self.ok = False
        self.evicted: list[TaskState] = []
        self.moved: list[TaskState] = []
        self.verdict: str = ""
        self.detail: dict[str, Any] = {}
        self.scenarios = 0


Validator = Callable[[list[list[TaskState]], Attempt], bool]


def _gpu_demand(tasks: list[TaskState]) -> list[float]:
    return sorted((float(t.request.gpus) for t in tasks if t.request.gpu_kind == m.GPU_WHOLE and t.request.gpus > 0),
                  reverse=True)


def _greedy_gpu_fit(s: Session, demand: list[float], freed: np.ndarray, allowed: np.ndarray) -> bool:
    """Cheap filter: can the whole-GPU pods fit node by node on idle + releasing + freed GPUs?"""
    if not demand:
        return True
    cap = (s.idle[:, GPU] + s.rel[:, GPU] + freed)[allowed]
    if cap.sum() + _EPS < sum(demand):
        return False
    if demand[0] == demand[-1]:
        # all pods alike: each node hosts floor(room / d) of them
        return int(np.floor((cap + _EPS) / demand[0]).sum()) >= len(demand)
    cap = np.sort(cap)[::-1].copy()
    for d in demand:
        idx = np.nonzero(cap + _EPS >= d)[0]
        if len(idx) == 0:
            return False
        # best fit: the node with the least room that still fits
        k = idx[-1]
        cap[k] -= d
        cap[: k + 1] = np.sort(cap[: k + 1])[::-1]
    return True


def _local_hopeless(s: Session, victims: list[JobState], base_free: float, need_total: float) -> bool:
    """Whether every node-local scenario of ``solve`` would fail its quick GPU count: true when
    each victim's evictable pods sit on one node and, on every node, the free GPUs plus all that
    its victims could free stay below the demand. Then the node-local pass is skipped (it would
    only walk the whole victim order to reject each scenario)."""
    if need_total <= 0 or len(s.nodes) == 0 or need_total <= base_free + float(s.cap[:, GPU].max()) + _EPS:
        return False  # one node's victims might be enough: let the pass run
    per_node: dict[int, float] = {}
    for v in victims:
        node = None
        for t in v.tasks:
            if not _evictable(t):
                continue
            if t.node is None or (node is not None and t.node != node):
                return False  # a chunk could span nodes: no per-node bound
            if t.freed_gpus != math.floor(t.freed_gpus):
                return False  # whole amounts only, so the bound is exact in any summing order
            node = t.node
            per_node[node] = per_node.get(node, 0.0) + t.freed_gpus
    return all(base_free + f + _EPS < need_total for f in per_node.values())


def _simulate(s: Session, placer: Placer, stmt: Statement, job: JobState, chunks: list[list[TaskState]],
              validate: Validator, attempt: Attempt, move_all: bool = False, replace_victims: bool = True) -> bool:
    """Evict ``chunks``, re-place preemptor and victims pipeline-only, validate; roll back on failure."""
    cp = stmt.checkpoint()
    before = job.active_allocated()
    victim_jobs: dict[int, JobState] = {}
    for chunk in chunks:
        for t in chunk:
            stmt.evict(t)
            victim_jobs[t.job.index] = t.job
    # victims that lost only elastic surplus stay gang-satisfied and are not re-placed
    # (reclaim / preempt); consolidation tries to move every victim
    replace = [j for j in sorted(victim_jobs.values(), key=lambda j: j.index)
               if replace_victims and (move_all or not j.gang_satisfied())]
    order = JobsOrder(s, [job, *replace], simulation=True)
    # A batch that found no room fails again for any batch of the same shape in the same queue as
    # long as no node changed: remember (shape, node version) to skip the repeats.
    no_room: dict[Key, int] = {}
    while True:
        j = order.pop()
        if j is None:
            break
        sig = None
        if j is not job and not j.has_topology:
            batch = tasks_to_allocate(j, simulation=True)
            sig = (j.queue, j.preemptible, tuple(t.shape_id for t in batch))
            if no_room.get(sig) == s.node_version:
                continue
        sub = stmt.checkpoint()
        # each job gets one attempt (its next batch), as in KAI's scenario simulation
        if not allocate_job(s, placer, stmt, j, pipeline_only=True, simulation=True, record=False):
            stmt.rollback(sub)
            if sig is not None:
                no_room[sig] = s.node_version
    placed = job.gang_satisfied() and job.active_allocated() > before
    if placed:
        still = [[t for t in c if t.status == m.RELEASING] for c in chunks]
        still = [c for c in still if c]
        if validate(still, attempt):
            attempt.evicted = [t for c in still for t in c]
            attempt.moved = [t for c in chunks for t in c if t.status == m.PIPELINED]
            return True
    elif not attempt.verdict:
        attempt.verdict = "the job could not be placed even with the candidate victims evicted"
    stmt.rollback(cp)
    return False


def solve(s: Session, placer: Placer, stmt: Statement, job: JobState, victims: list[JobState],
          validate: Validator, max_victim_jobs: int | None = None, move_all: bool = False,
          replace_victims: bool = True,
          victim_heaps: dict[str, list[tuple[Key, int, JobState, list[TaskState]]]] | None = None) -> Attempt:
    """Find the first victim set (node-local scenarios first, then multi-node ones) whose simulation
    places the job and passes ``validate``. Bounded by ``config.max_victim_scenarios``.
    ``victim_heaps``: the victim order's leaf heaps of exactly ``victims``, when the caller keeps them."""
    attempt = Attempt()
    tasks = tasks_to_allocate(job)
    if not tasks or not victims:
        attempt.verdict = "no running job may be evicted for it" if not victims else "nothing to place"
        return attempt
    demand = _gpu_demand(tasks)
    budget = s.config.max_victim_scenarios
    n_nodes = len(s.nodes)
    # only nodes some pending pod may use at all (taints, affinity, cordon, GPU type): the
    # victims' GPUs elsewhere cannot help it
    allowed = np.zeros(n_nodes, dtype=bool)
    for t in tasks:
        allowed |= placer._static_mask(t)
    tried: set[frozenset[int]] = set()

    def freed_of(chunks: list[list[TaskState]]) -> np.ndarray:
        freed = np.zeros(n_nodes)
        for c in chunks:
            for t in c:
                if t.node is not None:
                    freed[t.node] += t.freed_gpus
        return freed

    base_free = float(np.maximum(s.idle[:, GPU] + s.rel[:, GPU], 0).sum()) + s.n_groups
    need_total = sum(demand)

    def run(chunks: list[list[TaskState]], freed: np.ndarray | None = None) -> bool:
        if demand and freed is None:
            # quick reject: all free GPUs plus what these victims free cannot cover the demand
            total = base_free
            for c in chunks:
                for t in c:
                    total += t.freed_gpus
            if total + _EPS < need_total:
                return False
        if freed is None:
            freed = freed_of(chunks)
        if not _greedy_gpu_fit(s, demand, freed, allowed):
            return False
        key = frozenset(t.index for c in chunks for t in c)
        if not key or key in tried:
            return False
        tried.add(key)
        attempt.scenarios += 1
        return _simulate(s, placer, stmt, job, chunks, validate, attempt, move_all, replace_victims)

    # generator 1: node-local greedy: for each node of the newest victim, the victims on that node
    acc: list[list[TaskState]] = []
    local: dict[int, list[int]] = {}
    jobs_seen: set[int] = set()
    for v, chunk in (VictimOrder(s, victims, victim_heaps) if not _local_hopeless(s, victims, base_free, need_total)
                     else ()):
        if attempt.scenarios >= budget:
            break
        jobs_seen.add(v.job.index)
        if max_victim_jobs is not None and len(jobs_seen) > max_victim_jobs:
            break
        ci = len(acc)
        acc.append(chunk)
        nodes_of = sorted({t.node for t in chunk if t.node is not None})
        for node in nodes_of:
            local.setdefault(node, []).append(ci)
        for node in nodes_of:
            if run([acc[k] for k in local[node]]):
                attempt.ok = True
                return attempt
    # generator 2: multi-node gang (smallest node prefix by capacity after eviction, then growing)
    acc = []
    jobs_seen = set()
    freed = np.zeros(n_nodes)
    by_node: dict[int, list[int]] = {}
    need = sum(demand)
    for v, chunk in VictimOrder(s, victims, victim_heaps):
        if attempt.scenarios >= budget:
            break
        jobs_seen.add(v.job.index)
        if max_victim_jobs is not None and len(jobs_seen) > max_victim_jobs:
            break
        ci = len(acc)
        acc.append(chunk)
        for t in chunk:
            if t.node is not None:
                freed[t.node] += t.freed_gpus
                lst = by_node.setdefault(t.node, [])
                if not lst or lst[-1] != ci:
                    lst.append(ci)
        if not _greedy_gpu_fit(s, demand, freed, allowed):
            continue
        nodes = sorted(by_node, key=lambda i: (s.idle[i, GPU] + s.rel[i, GPU] + freed[i], s.nodes[i].name.encode()))
        size, have = 0, 0.0
        for i in nodes:
            size += 1
            have += s.idle[i, GPU] + s.rel[i, GPU] + freed[i]
            if have + _EPS >= need:
                break
        size = max(size, 1)
        while True:
            chosen = nodes[:size]
            idx = sorted({ci for i in chosen for ci in by_node[i]})
            if run([acc[k] for k in idx]):
                attempt.ok = True
                return attempt
            if size >= len(nodes) or attempt.scenarios >= budget:
                break
            size = min(len(nodes), size * 2)
    if not attempt.verdict:
        attempt.verdict = "no set of evictable jobs frees room for the whole gang"
    return attempt


# --------------------------------------------------------------------------------------------
# Common helpers


def within_preemption_delay(s: Session, job: JobState) -> bool:
    d = job.spec.preemption_delay_s
    if not d or d <= 0:
        return False
    start = max(job.spec.creation, job.spec.last_eviction or job.spec.creation)
    return s.now < start + d


def _triggers(s: Session) -> list[JobState]:
    out = []
    for j in s.jobs:
        if not (j.valid and j.has_pending() and j.ready() and not j.spec.deleting):
            continue
        if within_preemption_delay(s, j):
            d = j.spec.preemption_delay_s or 0.0
            end = max(j.spec.creation, j.spec.last_eviction or j.spec.creation) + d
            _note(s, j, m.Reason("preemption-delay", f"job may not evict others until its preemption delay of "
                                 f"{_fmt(d)}s has passed ({_fmt(end - s.now)}s left)", {"delay_s": d, "end": end}))
            continue
        out.append(j)
    return out


def _note(s: Session, job: JobState, why: m.Reason) -> None:
    """Add why evictions could not help to the job's pending reason."""
    base = s.pending_reasons.get(job.uid)
    if base is None:
        s.pending_reasons[job.uid] = why
        return
    details = dict(base.details)
    details.setdefault("evictions", []).append({"code": why.code, "message": why.message, **why.details})
    s.pending_reasons[job.uid] = m.Reason(base.code, f"{base.message}; {why.message}", details)


def _queue_numbers(q: QueueAttrs) -> dict[str, float | int | str]:
    return {"queue": q.name, "allocated_gpu": q.allocated[2], "fair_share_gpu": q.fair[2],
            "quota_gpu": q.deserved[2], "priority": q.priority}


def _commit(s: Session, stmt: Statement, job: JobState, attempt: Attempt, action: str,
            reason_for: Callable[[TaskState], m.Reason]) -> bool:
    """Keep a solved scenario, unless it would break a per-session cap (then discard it)."""
    delta = s.statement_delta(stmt)
    over = s.cap_problem(delta)
    if over is not None:
        stmt.discard()
        _note(s, job, over)
        return False
    s.add_counts(delta)
    touched = stmt.commit()
    for t in attempt.evicted:
        s.eviction_reasons[t.index] = (action, job.uid, reason_for(t))
        t.job.evicted_by = job.uid
    for t in touched:
        if t.status == m.PIPELINED and t.index >= 0:
            s.pipeline_actions[t.index] = action
    s.pending_reasons.pop(job.uid, None)
    return True


class _Signatures:
    """KAI's scheduling signatures (§2.10): per scope (a queue, or the whole cluster for
    consolidation), remember the smallest job that failed for each set of scheduling constraints;
    a later job with the same constraints is skipped unless it is "easier": fewer pending pods,
    or, comparing both jobs' pending-pod requests sorted ascending, some position where the new
    request is ≤ the remembered one in every resource and differs from it."""

    def __init__(self) -> None:
        self.failed: dict[Key, tuple[int, list[tuple[float, float, float]]]] = {}

    @staticmethod
    def _key(scope: str, job: JobState) -> Key:
        cons = []
        for t in job.tasks:
            if t.status != m.PENDING:
                continue
            r = t.spec.request
            sp = t.spec
            cons.append((r.gpu_kind, tuple(sorted(r.mig)), sp.node_affinity or (),
                         tuple(sorted(sp.node_selector.items())), repr(sp.tolerations),
                         repr(sp.required_node_affinity), sp.host_ports, repr(sp.pod_affinity),
                         repr(sp.pod_anti_affinity), tuple(sorted(r.extended.items()))))
        return (scope, job.priority, job.preemptible, tuple(sorted(cons)))

    @staticmethod
    def _requests(job: JobState) -> list[tuple[float, float, float]]:
        return sorted((t.req_qvec[0], t.req_qvec[1], t.req_qvec[2]) for t in job.tasks if t.status == m.PENDING)

    @staticmethod
    def _easier(new: tuple[int, list[Any]], old: tuple[int, list[Any]]) -> bool:
        if new[0] < old[0]:
            return True
        for a, b in zip(new[1], old[1]):
            if all(x <= y for x, y in zip(a, b)) and a != b:
                return True
        return False

    def skip(self, scope: str, job: JobState) -> bool:
        old = self.failed.get(self._key(scope, job))
        if old is None:
            return False
        reqs = self._requests(job)
        return not self._easier((len(reqs), reqs), old)

    def fail(self, scope: str, job: JobState) -> None:
        key = self._key(scope, job)
        reqs = self._requests(job)
        new = (len(reqs), reqs)
        old = self.failed.get(key)
        if old is None or self._easier(new, old):
            self.failed[key] = new


# --------------------------------------------------------------------------------------------
# Min runtime


def _protected(s: Session, victim: JobState, minrt: float) -> bool:
    return rc.is_min_runtime_protected(victim.last_start, s.now, minrt)


def _min_runtime_ok(s: Session, chunks: list[list[TaskState]], minrt_of: Callable[[JobState], float]) -> str | None:
    """Protected elastic victims must keep their minimum in every pod set (§4.4)."""
    lost: dict[int, dict[str, int]] = {}
    for c in chunks:
        for t in c:
            if t.pod_set is not None:
                d = lost.setdefault(t.job.index, {})
                d[t.pod_set.name] = d.get(t.pod_set.name, 0) + 1
    by_queue: dict[str, float] = {}
    for ji, per in lost.items():
        job = s.jobs[ji]
        minrt = by_queue.get(job.queue)
        if minrt is None:
            minrt = by_queue[job.queue] = minrt_of(job)
        if minrt <= 0 or not _protected(s, job, minrt):
            continue
        for name in per:
            ps = job.pod_sets[name]
            # counters already reflect the eviction: active_used still counts releasing pods
            if ps.active_allocated < ps.min_available:
                return (f"job {job.uid} has run less than its minimum runtime of {_fmt(minrt_of(job))}s and "
                        f"would drop below its minimum of {ps.min_available} pods")
    return None


# --------------------------------------------------------------------------------------------
# Reclaim (§3.7, §4.1)


class _PoolMinusQueue:
    """The jobs of the pool outside one queue, listed only if someone iterates them (reclaim's
    kept victim order and held totals need just whether there are any)."""

    __slots__ = ("pool", "queue", "nonempty")

    def __init__(self, pool: list[JobState], queue: str, nonempty: bool) -> None:
        self.pool, self.queue, self.nonempty = pool, queue, nonempty

    def __bool__(self) -> bool:
        return self.nonempty

    def __iter__(self) -> Iterator[JobState]:
        return iter([v for v in self.pool if v.queue != self.queue])


def _job_index(j: JobState) -> int:
    return j.index


def _held_gpus(v: JobState, cache: dict[int, float] | None) -> float:
    if cache is not None and v.index in cache:
        return cache[v.index]
    g = float(sum(t.qvec[GPU] for t in v.tasks if t.status in m.ACTIVE_ALLOCATED_STATES))
    if cache is not None:
        cache[v.index] = g
    return g


def _reclaim_bound(s: Session, job: JobState, req: list[float], victims: list[JobState],
                   held_cache: dict[int, float] | None = None,
                   leaf_totals: dict[str, tuple[float, float]] | None = None) -> str | None:
    """A definitive "cannot" before any search: the GPUs the victim queues may give up under the
    reclaim strategies (§3.7 d), plus every free GPU, are fewer than the job needs. None = maybe.

    A victim queue V* (the victim's queue below the common ancestor) gives chunks only while it
    holds more than its threshold (allocatable share, or its quota when the reclaimer stays within
    its own), so it can lose less than ``held − threshold + largest chunk``.

    ``leaf_totals``: per leaf queue of the victims, (GPUs held, largest held by one job), when the
    caller keeps them; only for whole-GPU amounts, whose sums do not depend on the order."""
    need = req[GPU]
    if need <= 0 or any(t.request.gpu_kind == m.GPU_MIG for t in job.tasks):
        return None  # MIG capacity is counted in instances, not in whole devices
    free = float(np.maximum(s.idle[:, GPU] + s.rel[:, GPU], 0).sum())
    free += s.n_groups
    held: dict[str, float] = {}
    largest: dict[str, float] = {}
    rstar: dict[str, str] = {}
    levels: dict[str, tuple[str, str]] = {}
    # Runs of victims of one leaf queue are summed in a local (the same additions in the same
    # order as one dictionary update per victim, without the lookups).
    cur_q: str | None = None
    v_name = ""
    acc = big = 0.0
    for q, (gsum, gbig) in (leaf_totals or {}).items():
        lv = levels.get(q)
        if lv is None:
            lv = levels[q] = rc.leveled_queues(s.queues, job.queue, q)
        r_name, v_name = lv
        rstar[v_name] = r_name
        held[v_name] = held.get(v_name, 0.0) + gsum
        largest[v_name] = max(largest.get(v_name, 0.0), gbig)
    for v in (victims if leaf_totals is None else ()):
        q = v.queue
        if q != cur_q:
            if cur_q is not None:
                held[v_name], largest[v_name] = acc, big
            lv = levels.get(q)
            if lv is None:
                lv = levels[q] = rc.leveled_queues(s.queues, job.queue, q)
            r_name, v_name = lv
            rstar[v_name] = r_name
            acc, big = held.get(v_name, 0.0), largest.get(v_name, 0.0)
            cur_q = q
        g = held_cache.get(v.index) if held_cache is not None else None
        if g is None:
            g = _held_gpus(v, held_cache)
        acc += g
        if g > big:
            big = g
    if cur_q is not None:
        held[v_name], largest[v_name] = acc, big
    bound = 0.0
    parts = []
    for v_name, gsum in sorted(held.items()):
        vq, rq = s.queues[v_name], s.queues[rstar[v_name]]
        alloc = allocatable_share(vq)
        within = rc.fits_deserved(rq, req)
        thr = []
        for r in range(3):
            a = math.inf if alloc[r] == m.UNLIMITED else alloc[r]
            d = math.inf if vq.deserved[r] == m.UNLIMITED else vq.deserved[r]
            thr.append(min(a, d) if within else a)
        if any(vq.allocated[r] > thr[r] for r in (0, 1)):
            give = gsum  # over in CPU or memory: every chunk passes the strategy check
        elif vq.allocated[GPU] <= thr[GPU]:
            give = 0.0
        else:
            give = min(gsum, vq.allocated[GPU] - thr[GPU] + largest[v_name] - 1e-6)
        bound += give
        parts.append(f"queue {v_name} may give up at most {_fmt(math.floor(give))} GPUs "
                     f"(holds {_fmt(vq.allocated[GPU])}, protected up to {_fmt(thr[GPU])})")
    if free + bound < need - 1e-9:
        return (f"cannot free {_fmt(need)} GPUs: {_fmt(free)} free and " + "; ".join(parts)
                if parts else f"cannot free {_fmt(need)} GPUs")
    return None



def _can_reclaim(s: Session, job: JobState, req: list[float]) -> rc.Verdict:
    """``rc.can_reclaim`` for a job's batch, through the session's memo when there is one; the
    key holds every input the verdict reads (see ``memo.py``)."""
    memo = s.memo if s.config.shortcuts else None
    if memo is None:
        return rc.can_reclaim(s.queues, job.queue, req, job.preemptible)
    q = s.queues[job.queue]
    key = ("can_reclaim", q.name, tuple(q.allocated), tuple(q.allocated_np), tuple(q.fair), tuple(q.deserved),
           tuple(req), job.preemptible)
    verdict: rc.Verdict = memo.verdict(key, lambda: rc.can_reclaim(s.queues, job.queue, req, job.preemptible))
    return verdict


def _reclaim_hopeless(s: Session, triggers: list[JobState]) -> bool:
    """Reclaim's no-op proof (``memo.py``): when every job the action would try fails the
    reclaimer check (its queue would exceed its fair share), nothing is evicted, no signature is
    recorded, and queue figures stay as they are; each job then gets exactly the note the full
    walk would give it, in any order. Writes those notes and returns True; returns False (and
    writes nothing) when some job passes the check, so the full walk must run."""
    notes: list[tuple[JobState, m.Reason]] = []
    seen: dict[Key, rc.Verdict] = {}
    for job in triggers:
        tasks = tasks_to_allocate(job)
        if not tasks:
            continue  # the walk skips it without a note
        req = batch_request(tasks)
        k = (job.queue, tuple(req), job.preemptible)
        verdict = seen.get(k)
        if verdict is None:
            verdict = seen[k] = _can_reclaim(s, job, req)
        if verdict.ok:
            return False
        notes.append((job, m.Reason("reclaim-" + verdict.code, "reclaim: " + verdict.reason, dict(verdict.numbers))))
    for job, why in notes:
        _note(s, job, why)
    return True


def run_reclaim(s: Session, placer: Placer) -> None:
    """Cross-queue eviction for pending jobs whose queue is below its fair share."""
    sigs = _Signatures()
    triggers = _triggers(s)
    if not triggers:
        return  # no pending job may reclaim: skip building the victim pool
    if s.config.shortcuts and _reclaim_hopeless(s, triggers):
        return
    order = JobsOrder(s, triggers)
    mult = s.config.saturation_multiplier
    # jobs that may lose pods, kept up to date after each commit (only touched jobs change)
    evictable = [j.valid and j.preemptible and _has_evictable(j) for j in s.jobs]
    pool = [j for j in s.jobs if evictable[j.index]]
    pool_queues: dict[str, int] = {}  # the queues of the pool and how many jobs each has there
    # the victim order's leaf heaps of the whole pool, as sorted lists, made when a search first
    # needs them and then kept up to date after each commit for the jobs it changed (victims are
    # then the pool minus the reclaimer's queue)
    leaf_heaps: dict[str, list[tuple[Key, int, JobState, list[TaskState]]]] = {}
    heaps_made = False
    entry_of: dict[int, tuple[Key, int, JobState, list[TaskState]]] = {}
    held: dict[int, float] = {}  # GPUs each job holds, dropped for jobs a commit touches
    dropped: list[JobState] = []  # jobs leaving the pool in one commit
    # per leaf queue of the pool: GPUs its jobs hold (as the held cache has them) and how many
    # jobs hold each amount; exact sums in any order while every amount is whole
    leaf_sum: dict[str, float] = {}
    leaf_vals: dict[str, dict[float, int]] = {}
    in_sum: dict[int, float] = {}
    fractional = 0

    def count_held(j: JobState, sign: int) -> None:
        nonlocal fractional
        if sign > 0:
            g = in_sum[j.index] = _held_gpus(j, held)
        else:
            g = in_sum.pop(j.index)
        if g != math.floor(g) or g > 2.0**40:
            fractional += sign
        leaf_sum[j.queue] = leaf_sum.get(j.queue, 0.0) + sign * g
        vals = leaf_vals.setdefault(j.queue, {})
        vals[g] = vals.get(g, 0) + sign
        if not vals[g]:
            del vals[g]

    for j in pool:
        pool_queues[j.queue] = pool_queues.get(j.queue, 0) + 1
        count_held(j, +1)
    while True:
        popped = order.pop()
        if popped is None:
            break
        job = popped
        if job.gang_satisfied() and not tasks_to_allocate(job):
            continue
        if sigs.skip(job.queue, job):
            _note(s, job, m.Reason("reclaim-skipped", "an identical job of this queue could not reclaim", {}))
            continue
        tasks = tasks_to_allocate(job)
        if not tasks:
            continue
        req = batch_request(tasks)
        verdict = _can_reclaim(s, job, req)
        if not verdict.ok:
            _note(s, job, m.Reason("reclaim-" + verdict.code, "reclaim: " + verdict.reason, dict(verdict.numbers)))
            continue
        start_queues = {k: copy.copy(q) for k, q in s.queues.items()}
        for q in start_queues.values():
            q.allocated, q.allocated_np = list(q.allocated), list(q.allocated_np)
        victims: list[JobState] = []
        refused = ""
        verdicts: dict[str, rc.Verdict] = {}
        minrts: dict[str, rc.MinRuntime] = {}
        # Both checks are per victim queue and pure: when every other queue passes the filter and
        # has no minimum runtime, the candidates are simply the pool minus the job's own queue.
        everyone = True
        for vq_name in pool_queues:
            if vq_name == job.queue:
                continue
            f = verdicts[vq_name] = rc.filter_victim_queue(s.queues, job.queue, vq_name, req)
            if not f.ok:
                everyone = False
                break
            minrt = minrts[vq_name] = rc.reclaim_min_runtime(s.queues, job.queue, vq_name,
                                                             s.config.default_reclaim_min_runtime_s)
            if minrt.seconds > 0:
                everyone = False
                break
        own = job.queue
        for v in (() if everyone else pool):
            if v.queue == job.queue:
                continue
            known = verdicts.get(v.queue)
            if known is None:
                known = verdicts[v.queue] = rc.filter_victim_queue(s.queues, job.queue, v.queue, req)
            if not known.ok:
                refused = known.reason
                continue
            runtime = minrts.get(v.queue)
            if runtime is None:
                runtime = minrts[v.queue] = rc.reclaim_min_runtime(s.queues, job.queue, v.queue,
                                                                   s.config.default_reclaim_min_runtime_s)
            if runtime.seconds > 0 and not v.is_elastic() and _protected(s, v, runtime.seconds):
                refused = f"job {v.uid} is within its minimum runtime of {_fmt(runtime.seconds)}s"
                continue
            victims.append(v)
        if everyone:
            victims = _PoolMinusQueue(pool, own, any(q != own for q in pool_queues))  # type: ignore[assignment]  # a list view of the pool
            if fractional:
                victims = list(victims)
        if not victims:
            _note(s, job, m.Reason("reclaim-no-victims",
                                   "reclaim: no other queue has evictable jobs above its share"
                                   + (f" ({refused})" if refused else ""), {}))
            sigs.fail(job.queue, job)
            continue
        totals = None
        if everyone and not fractional:
            totals = {q: (leaf_sum[q], max(vals)) for q, vals in leaf_vals.items() if q != own and vals}
        cannot = _reclaim_bound(s, job, req, victims, held, totals)
        if cannot:
            _note(s, job, m.Reason("reclaim-cannot", "reclaim: " + cannot, {}))
            sigs.fail(job.queue, job)
            continue
        checks: dict[int, str] = {}

        def validate(chunks: list[list[TaskState]], attempt: Attempt, job: JobState = job, req: list[float] = req,
                     start_queues: dict[str, QueueAttrs] = start_queues, checks: dict[int, str] = checks) -> bool:
            pairs = []
            for c in chunks:
                core = [t for t in c]
                pairs.append((c[0].job.queue, _vec(core)))
            verdict, outcome = rc.validate_reclaim(start_queues, job.queue, req, pairs, mult, job.preemptible)
            if not verdict.ok:
                attempt.verdict = verdict.reason
                return False
            why = _min_runtime_ok(s, chunks, lambda vj: rc.reclaim_min_runtime(
                s.queues, job.queue, vj.queue, s.config.default_reclaim_min_runtime_s).seconds)
            if why:
                attempt.verdict = why
                return False
            for c, chk in zip(chunks, outcome.chunks):
                for t in c:
                    checks[t.index] = chk.verdict.reason
            return True

        stmt = Statement(s)
        heaps = None
        if everyone:
            if not heaps_made:
                heaps_made = True
                for j in pool:
                    e = victim_entry(s, j)
                    if e is not None:
                        entry_of[j.index] = e
                        leaf_heaps.setdefault(j.queue, []).append(e)
                for h in leaf_heaps.values():
                    h.sort()
            heaps = {leaf: h for leaf, h in leaf_heaps.items() if leaf != own}
        attempt = solve(s, placer, stmt, job, victims, validate,
                        replace_victims=s.config.allow_consolidating_reclaim, victim_heaps=heaps)
        changed_jobs = {op[0].job.index for op in stmt.ops}
        if attempt.ok:
            rq = s.queues[job.queue]

            def reason(t: TaskState, job: JobState = job, rq: QueueAttrs = rq, checks: dict[int, str] = checks,
                       start_queues: dict[str, QueueAttrs] = start_queues) -> m.Reason:
                vq = start_queues[t.job.queue]
                return m.Reason(
                    "reclaim",
                    f"reclaimed for job {job.uid} of queue {rq.name} (allocated {_fmt(rq.allocated[2])} of fair share "
                    f"{_fmt(rq.fair[2])} GPUs, quota {_fmt(rq.deserved[2])}): {checks.get(t.index, '')}".rstrip(": "),
                    {"reclaimer": _queue_numbers(rq), "victim": _queue_numbers(vq),
                     "preemptor_priority": job.priority, "victim_priority": t.job.priority})

            # one attempt per job and cycle (KAI does not re-queue after a reclaim); an elastic job
            # grows further in later cycles, when its pipelined pods count as allocated
            if _commit(s, stmt, job, attempt, "reclaim", reason):
                touched = {job.index} | {t.job.index for t in attempt.evicted} | {t.job.index for t in attempt.moved}
                for ji in sorted(touched):
                    held.pop(ji, None)
                    j = s.jobs[ji]
                    if ji in in_sum:
                        count_held(j, -1)
                    now_ok = j.valid and j.preemptible and _has_evictable(j)
                    if now_ok:
                        count_held(j, +1)
                    if now_ok == evictable[ji]:
                        continue
                    evictable[ji] = now_ok
                    # the pool stays in job order (a job's index is its place in s.jobs)
                    if now_ok:
                        bisect.insort(pool, j, key=_job_index)
                        pool_queues[j.queue] = pool_queues.get(j.queue, 0) + 1
                    else:
                        dropped.append(j)
                        pool_queues[j.queue] -= 1
                        if not pool_queues[j.queue]:
                            del pool_queues[j.queue]
                # a few jobs leave by search, many (a large gang's victims) by one filtering pass
                if len(dropped) <= 8:
                    for j in dropped:
                        pool.remove(j)
                elif dropped:
                    pool = [j for j in pool if evictable[j.index]]
                dropped.clear()
                redo = sorted(changed_jobs | touched)
                gone: dict[str, dict[int, Key]] = {}  # per leaf: job index -> (key, index) of its old entry
                for ji in redo:
                    old_e = entry_of.pop(ji, None)
                    if old_e is not None:
                        gone.setdefault(s.jobs[ji].queue, {})[ji] = old_e[:2]
                for leaf_name, olds in gone.items():
                    h = leaf_heaps[leaf_name]
                    if len(olds) <= 8:
                        for head in olds.values():
                            del h[bisect.bisect_left(h, head)]
                    else:
                        h[:] = [e for e in h if e[1] not in olds]
                for ji in redo if heaps_made else ():
                    j = s.jobs[ji]
                    e = victim_entry(s, j) if evictable[ji] else None
                    if e is not None:
                        entry_of[ji] = e
                        bisect.insort(leaf_heaps.setdefault(j.queue, []), e)
        else:
            stmt.discard()
            _note(s, job, m.Reason("reclaim-failed", "reclaim: " + attempt.verdict, {"scenarios": attempt.scenarios}))
            sigs.fail(job.queue, job)


# --------------------------------------------------------------------------------------------
# Preempt (§4.1)


def _preempt_victim(s: Session, v: JobState, minrts: dict[str, float] | None = None) -> bool:
    """Whether a job may lose pods to a same-queue preemptor of higher priority. ``minrts``: the
    queues' minimum runtimes found so far (a pure function of the queue tree)."""
    if not v.valid or not v.preemptible or not _has_evictable(v):
        return False
    minrt = minrts.get(v.queue) if minrts is not None else None
    if minrt is None:
        minrt = rc.preempt_min_runtime(s.queues, v.queue, s.config.default_preempt_min_runtime_s).seconds
        if minrts is not None:
            minrts[v.queue] = minrt
    return v.is_elastic() or not _protected(s, v, minrt)


def _preempt_without_victims(s: Session, job: JobState, sigs: _Signatures) -> bool | None:
    """The steps of the preempt walk before its victims are listed: True when the job is done
    with (nothing to place, skipped by a signature, or a non-preemptible job over its quota,
    which is noted); None when the victims must be looked at."""
    tasks = tasks_to_allocate(job)
    if not tasks:
        return True
    if sigs.skip(job.queue, job):
        return True
    if not job.preemptible:
        req = batch_request(tasks)
        over = next((q for q in s.chain[job.queue] for r in range(3)
                     if req[r] > 0 and q.deserved[r] != m.UNLIMITED and q.allocated_np[r] + req[r] > q.deserved[r] + _EPS),
                    None)
        if over is not None:
            _note(s, job, m.Reason("preempt-non-preemptible-over-quota",
                                   f"preempt: a non-preemptible job may only use queue {over.name}'s quota", {}))
            return True
    return None


def _preempt_hopeless(s: Session, triggers: list[JobState], sigs: _Signatures) -> bool:
    """Preempt's no-op proof (``memo.py``): when no pending job has a same-queue victim of lower
    priority, the walk only writes notes and records signatures, and a signature's scope is the
    job's queue. The walk visits each leaf queue's jobs in job order (the queue interleaving
    does not matter, as nothing changes), so replaying each leaf in that order gives the same
    notes. Returns False without writing anything when some job has a victim."""
    floor: dict[str, int] = {}  # per queue: the lowest priority of a possible victim
    minrts: dict[str, float] = {}
    for v in s.jobs:
        if v.priority < floor.get(v.queue, v.priority + 1) and _preempt_victim(s, v, minrts):
            floor[v.queue] = v.priority
    by_leaf: dict[str, list[tuple[Key, int, JobState]]] = {}
    for k, job in enumerate(triggers):
        low = floor.get(job.queue)
        if low is not None and low < job.priority and tasks_to_allocate(job):
            return False
        by_leaf.setdefault(job.queue, []).append((job.order_key(), k, job))
    for leaf in sorted(by_leaf):
        for _, _, job in sorted(by_leaf[leaf], key=lambda e: (e[0], e[1])):
            if _preempt_without_victims(s, job, sigs) is not None:
                continue
            _note(s, job, m.Reason("preempt-no-victims",
                                   f"preempt: no preemptible job of queue {job.queue} has a priority below {job.priority}",
                                   {"priority": job.priority}))
            sigs.fail(job.queue, job)
    return True


def run_preempt(s: Session, placer: Placer) -> None:
    """Same-queue eviction of strictly lower-priority preemptible jobs."""
    sigs = _Signatures()
    triggers = _triggers(s)
    if s.config.shortcuts and triggers and _preempt_hopeless(s, triggers, sigs):
        return
    order = JobsOrder(s, triggers)
    while True:
        popped = order.pop()
        if popped is None:
            break
        job = popped
        if _preempt_without_victims(s, job, sigs) is not None:
            continue
        victims = []
        for v in s.jobs:
            if v.queue != job.queue or v.priority >= job.priority or not _preempt_victim(s, v):
                continue
            victims.append(v)
        if not victims:
            _note(s, job, m.Reason("preempt-no-victims",
                                   f"preempt: no preemptible job of queue {job.queue} has a priority below {job.priority}",
                                   {"priority": job.priority}))
            sigs.fail(job.queue, job)
            continue

        def validate(chunks: list[list[TaskState]], attempt: Attempt, job: JobState = job) -> bool:
            why = _min_runtime_ok(s, chunks, lambda vj: rc.preempt_min_runtime(
                s.queues, vj.queue, s.config.default_preempt_min_runtime_s).seconds)
            if why:
                attempt.verdict = why
                return False
            return True

        stmt = Statement(s)
        attempt = solve(s, placer, stmt, job, victims, validate)
        if attempt.ok:
            def reason(t: TaskState, job: JobState = job) -> m.Reason:
                return m.Reason("preempt", f"preempted by higher-priority job {job.uid} (priority {job.priority} > "
                                f"{t.job.priority}) in queue {job.queue}",
                                {"queue": job.queue, "preemptor_priority": job.priority,
                                 "victim_priority": t.job.priority})
            _commit(s, stmt, job, attempt, "preempt", reason)
        else:
            stmt.discard()
            _note(s, job, m.Reason("preempt-failed", "preempt: " + attempt.verdict, {}))
            sigs.fail(job.queue, job)


# --------------------------------------------------------------------------------------------
# Consolidation (§2.9)


def _gpu_need(s: Session, tasks: list[TaskState]) -> float:
    """GPUs a batch needs, fractions and GPU memory counted as parts of a device."""
    need = 0.0
    for t in tasks:
        r = t.request
        if r.gpu_kind == m.GPU_WHOLE:
            need += r.gpus
        elif r.gpu_kind == m.GPU_FRACTION:
            need += r.gpu_fraction * r.gpu_devices
        elif r.gpu_kind == m.GPU_MEMORY:
            need += r.gpu_memory_mib / s.max_gpu_mem * r.gpu_devices
    return need


def _cluster_free_gpus(s: Session, cache: list[float] | None = None) -> float:
    """Idle and releasing GPUs of the whole cluster, plus the free part of shared devices.
    ``cache``: [node version, free] of the last computation; node usage changes only with the
    session's node version, so the figure is reused while that version stays the same."""
    if cache is not None and cache[0] == s.node_version:
        return cache[1]
    free = float((s.idle[:, GPU] + s.rel[:, GPU]).sum())
    if s.n_groups:
        for ns in s.nodes:
            if not ns.groups:
                continue
            gmem = float(s.gpu_mem[ns.index])
            for g in ns.groups.values():
                if not g.fully_releasing:
                    free += max(0.0, gmem - g.mem_active) / gmem
    if cache is not None:
        cache[:] = [s.node_version, free]
    return free


def _enough_gpus_in_cluster(s: Session, tasks: list[TaskState], cache: list[float] | None = None) -> bool:
    need = _gpu_need(s, tasks)
    if need <= 0:
        return True
    return _cluster_free_gpus(s, cache) + _EPS >= need


def _consolidation_hopeless(s: Session, triggers: list[JobState], free_cache: list[float]) -> bool:
    """Whether consolidation cannot do anything for any of ``triggers``: each one's next batch
    needs more GPUs than the whole cluster has free (idle, releasing, free parts of shared
    devices). Moving pods never creates GPUs, and a job skipped by that check changes nothing
    (no statement, no note, no signature), so the cluster's free GPUs stay what they are for the
    whole action and every job in the order would be skipped in turn: the action is a no-op.
    A job with nothing to place or no GPU need defeats the shortcut (the search runs)."""
    free = _cluster_free_gpus(s, free_cache)
    for j in triggers:
        tasks = tasks_to_allocate(j)
        if not tasks:
            continue  # skipped by the loop without effect either
        need = _gpu_need(s, tasks)
        if need <= 0 or free + _EPS >= need:
            return False
    return True


def run_consolidation(s: Session, placer: Placer) -> None:
    """Move preemptible running pods (each must be re-placed) to open room for a pending job."""
    sigs = _Signatures()
    triggers = [j for j in _triggers(s) if j.preemptible]
    if not triggers:
        return
    free_cache: list[float] = [-1.0, 0.0]
    if s.config.shortcuts and _consolidation_hopeless(s, triggers, free_cache):
        return
    order = JobsOrder(s, triggers)
    cap = s.config.max_consolidation_preemptees
    max_jobs = None if cap < 0 else cap + 1  # KAI's check is "> max" (quirk Q6)
    while True:
        popped = order.pop()
        if popped is None:
            break
        job = popped
        tasks = tasks_to_allocate(job)
        if not tasks or sigs.skip("*", job):
            continue
        if not _enough_gpus_in_cluster(s, tasks, free_cache if s.config.shortcuts else None):
            continue
        victims = [v for v in s.jobs if v is not job and v.valid and v.preemptible and _has_evictable(v)]
        if not victims:
            continue

        def validate(chunks: list[list[TaskState]], attempt: Attempt) -> bool:
            if chunks:
                attempt.verdict = "some moved pod could not be re-placed"
                return False
            return True

        stmt = Statement(s)
        attempt = solve(s, placer, stmt, job, victims, validate, max_victim_jobs=max_jobs, move_all=True)
        if attempt.ok and attempt.moved:
            delta = s.statement_delta(stmt)
            over = s.cap_problem(delta)
            if over is not None:
                stmt.discard()
                _note(s, job, over)
                continue
            s.add_counts(delta)
            touched = stmt.commit()
            for t in attempt.moved:
                s.eviction_reasons[t.index] = ("consolidation", job.uid, m.Reason(
                    "consolidation", f"moved to node {s.nodes[t.node].name} to make room for job {job.uid}"
                    if t.node is not None else f"moved to make room for job {job.uid}", {"preemptor": job.uid}))
            for t in touched:
                if t.status == m.PIPELINED and t.index >= 0:
                    s.pipeline_actions[t.index] = "consolidation"
            s.pending_reasons.pop(job.uid, None)
        else:
            stmt.discard()
            if attempt.ok:
                continue  # it fits without moving anything: allocate places it in a later cycle
            sigs.fail("*", job)
            _note(s, job, m.Reason("consolidation-failed", "consolidation: " + (attempt.verdict or
                                   "running pods cannot be moved to open room"), {}))


# --------------------------------------------------------------------------------------------
# Stale gangs (§4.7)


def is_stale(job: JobState) -> bool:
    """No finished pod, some pod holding resources, and a pod set below its minimum (by active use)."""
    # the three conditions are independent; the cheapest (per pod set) are checked first
    sets = job.pod_sets.values()
    if not any(ps.active_used > 0 for ps in sets):
        return False
    if not any(ps.active_used < ps.min_available for ps in sets):
        return False
    return not any(t.status == m.SUCCEEDED for t in job.tasks)


def run_stale_gangs(s: Session, placer: Placer) -> None:
    """Evict every active pod of a job that has been below its gang minimum past its grace period."""
    for job in s.jobs:
        if not job.valid and job.queue not in s.queues:
            continue
        if not is_stale(job):
            job.stale_since = None
            continue
        if job.stale_since is None:
            job.stale_since = s.now
        grace = job.spec.staleness_grace_s
        if grace is None:
            grace = s.config.default_staleness_grace_s
        if grace < 0 or s.now - job.stale_since < grace:
            continue
        stmt = Statement(s)
        victims = [t for t in job.tasks if t.status in m.ACTIVE_ALLOCATED_STATES]
        short = [f"{ps.name}: {ps.active_used} of {ps.min_available}" for ps in job.pod_sets.values()
                 if ps.active_used < ps.min_available]
        for t in victims:
            stmt.evict(t)
        delta = s.statement_delta(stmt)
        over = s.cap_problem(delta)
        if over is not None:
            stmt.discard()
            continue
        s.add_counts(delta)
        for t in victims:
            s.eviction_reasons[t.index] = ("stalegangeviction", None, m.Reason(
                "stale-gang", f"job {job.uid} has been below its gang minimum ({', '.join(short)}) for "
                f"{_fmt(s.now - job.stale_since)}s, longer than its grace period of {_fmt(grace)}s",
                {"stale_for_s": s.now - job.stale_since, "grace_s": grace}))
        stmt.commit()


__all__ = ["run_reclaim", "run_preempt", "run_consolidation", "run_stale_gangs", "solve", "VictimOrder",
           "is_stale", "within_preemption_delay"]
