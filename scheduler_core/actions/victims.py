"""The victim search shared by reclaim, preempt and consolidation (KAI-SEMANTICS §2.10, §4, §8.11–22).

Invariants:
* evictions are committed only when a full simulation places the pending job's whole gang
  (pipelined) and every validator passes; otherwise nothing changes (no speculative evictions);
* a victim loses one elastic surplus pod at a time, or its whole remaining gang;
* non-preemptible jobs are never reclaim / preempt / consolidation victims;
* the search is bounded by a scenario count (``CycleConfig.max_victim_scenarios``), never by
  wall-clock time, so the answer depends only on the input.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from scheduler_core import model as m
from scheduler_core import reasons
from scheduler_core import reclaimable as rc
from scheduler_core.allocate import Placer, allocate_job, constraint_levels, queue_capacity_problem
from scheduler_core.model import Key
from scheduler_core.ordering import JobsOrder, tasks_to_allocate
from scheduler_core.proportion import QueueAttrs, compare_victim_queues
from scheduler_core.session import Session
from scheduler_core.state import GPU, JobState, PodSet, SubGroupSet, TaskState
from scheduler_core.statement import Statement
from scheduler_core.units import number

EPS = 1e-9

def _evictable(t: TaskState) -> bool:
    """A pod an eviction may take: active (allocated, bound, running or pipelined), including
    pods placed earlier in this cycle, as in KAI."""
    return t.status in m.ACTIVE_ALLOCATED_STATES

def has_evictable(job: JobState) -> bool:
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

def demand_vector(tasks: list[TaskState]) -> list[float]:
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
            return v, demand_vector(v.next_chunk())
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
            vec = demand_vector(chunk)
            for q in self.s.chain[v.job.queue]:
                acc = self.removed.setdefault(q.name, [0.0, 0.0, 0.0])
                for r in range(3):
                    acc[r] += vec[r]
            yield v, chunk

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
    if cap.sum() + EPS < sum(demand):
        return False
    if demand[0] == demand[-1]:
        # all pods alike: each node hosts floor(room / d) of them
        return int(np.floor((cap + EPS) / demand[0]).sum()) >= len(demand)
    cap = np.sort(cap)[::-1].copy()
    for d in demand:
        idx = np.nonzero(cap + EPS >= d)[0]
        if len(idx) == 0:
            return False
        # best fit: the node with the least room that still fits
        k = idx[-1]
        cap[k] -= d
        cap[: k + 1] = np.sort(cap[: k + 1])[::-1]
    return True

def _required_domains(s: Session, job: JobState, tasks: list[TaskState]) -> list[tuple[np.ndarray, list[float]]]:
    """KAI's topology-aware idle-GPU filter input (``accumulated_scenario_filters/idle_gpus/
    topology_aware_idle_gpus.go``): per required topology level of the job's gang tree, the node →
    domain index map (-1 = no domain) and the GPUs each constrained subgroup of ``tasks`` needs,
    largest first. Only constraints placement can honour (a known topology and level, named by its
    node label or alias) are kept: placement keeps the pods of the others pending."""
    by_level: dict[str, list[float]] = {}

    def walk(x: PodSet | SubGroupSet) -> list[TaskState]:
        if isinstance(x, PodSet):
            mine = [t for t in tasks if t.pod_set is x]
        else:
            mine = [t for y in x.members for t in walk(y)]
        tc = x.topology
        if tc is not None and tc.required_level:
            got = constraint_levels(s, tc)
            if not isinstance(got, m.Reason) and got[1] is not None:
                need = sum(float(t.request.gpus) for t in mine if t.request.gpu_kind == m.GPU_WHOLE)
                if need > 0:
                    by_level.setdefault(got[1], []).append(need)
        return mine

    walk(job.root)
    out = []
    for level, needs in sorted(by_level.items()):
        names: dict[str, int] = {}
        dom = np.full(len(s.nodes), -1, dtype=np.int64)
        for ns in s.nodes:
            v = ns.spec.labels.get(level)
            if v is not None:
                dom[ns.index] = names.setdefault(v, len(names))
        out.append((dom, sorted(needs, reverse=True)))
    return out

def _domains_fit(s: Session, required: list[tuple[np.ndarray, list[float]]], freed: np.ndarray) -> bool:
    """Whether each constrained subgroup finds a domain of its required level whose idle, releasing
    and freed GPUs cover it, matched largest first into the roomiest domain that still fits it
    (KAI's ``greedyMatchRequirements``)."""
    if not required:
        return True
    room = np.maximum(s.idle[:, GPU] + s.rel[:, GPU], 0) + freed
    for dom, needs in required:
        inside = dom >= 0
        cap = np.sort(np.bincount(dom[inside], weights=room[inside]))[::-1].copy() if inside.any() else np.zeros(0)
        for need in needs:
            idx = np.nonzero(cap + EPS >= need)[0]
            if len(idx) == 0:
                return False
            cap[idx[0]] -= need
    return True

def _local_hopeless(s: Session, victims: list[JobState], base_free: float, need_total: float) -> bool:
    """Whether every node-local scenario of ``solve`` would fail its quick GPU count: true when
    each victim's evictable pods sit on one node and, on every node, the free GPUs plus all that
    its victims could free stay below the demand. Then the node-local pass is skipped (it would
    only walk the whole victim order to reject each scenario)."""
    if need_total <= 0 or len(s.nodes) == 0 or need_total <= base_free + float(s.cap[:, GPU].max()) + EPS:
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
    return all(base_free + f + EPS < need_total for f in per_node.values())

def _put_back(s: Session, placer: Placer, stmt: Statement, jobs: list[JobState], done: set[int]) -> None:
    """Once the preemptor is placed, every victim job (in job order) whose next batch (the one
    its turn in the simulation would try) consists of evicted pods that all still fit on their
    own nodes, within its queue's limits, is put back there (un-evicted) before any victim is
    re-placed elsewhere; that was its one attempt (``done``). KAI re-places the victims by plain
    node order, so one victim may take the room another left on its own node, and both are then
    moved, i.e. evicted; the preemptor's placement is the same either way. (Consolidation too: a
    victim put back was not moved and needs no re-placement.)"""
    for vj in jobs:
        batch = tasks_to_allocate(vj, simulation=True)
        if not batch or any(t.status != m.RELEASING or t.orig_status == m.RELEASING or t.node is None or t.shared
                            for t in batch):
            continue
        if queue_capacity_problem(s, vj, batch) is not None:
            continue
        cp = stmt.checkpoint()
        for t in batch:
            node = t.node
            if not placer.place(stmt, t, np.array([node], dtype=np.int64), True) or t.node != node \
                    or t.status == m.PIPELINED:
                stmt.rollback(cp)
                break
        else:
            done.add(vj.index)

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
    tried_jobs: set[int] = set()  # victim jobs that had their attempt
    put_back: set[int] = set()  # victim jobs put back onto their own nodes (``_put_back``)
    while True:
        j = order.pop()
        if j is None:
            break
        if j.index in put_back:
            continue
        tried_jobs.add(j.index)
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
        elif j is job:
            _put_back(s, placer, stmt, [v for v in replace if v.index not in tried_jobs], put_back)
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
    required = _required_domains(s, job, tasks) if job.has_topology else []

    def run(chunks: list[list[TaskState]], freed: np.ndarray | None = None) -> bool:
        if demand and freed is None:
            # quick reject: all free GPUs plus what these victims free cannot cover the demand
            total = base_free
            for c in chunks:
                for t in c:
                    total += t.freed_gpus
            if total + EPS < need_total:
                return False
        if freed is None:
            freed = freed_of(chunks)
        if not _greedy_gpu_fit(s, demand, freed, allowed):
            return False
        if required and not _domains_fit(s, required, freed):
            # KAI's topology-aware idle-GPU filter on this scenario's own victims: a sub-scenario
            # (a prefix of the accumulated nodes) whose room covers no required domain is not
            # simulated (a hero gang that needs a whole zone would otherwise simulate every prefix
            # that grows towards one, each re-placing every victim)
            return False
        key = frozenset(t.index for c in chunks for t in c)
        if not key or key in tried:
            return False
        tried.add(key)
        attempt.scenarios += 1
        return _simulate(s, placer, stmt, job, chunks, validate, attempt, move_all, replace_victims)

    def collect(acc: list[list[TaskState]], order: Iterable[tuple[VictimJob, list[TaskState]]]) -> Iterator[int]:
        """Victim chunks in eviction order, appended to ``acc`` (each one's index yielded), while
        the scenario budget and the cap on victim jobs allow."""
        jobs_seen: set[int] = set()
        for v, chunk in order:
            if attempt.scenarios >= budget:
                return
            jobs_seen.add(v.job.index)
            if max_victim_jobs is not None and len(jobs_seen) > max_victim_jobs:
                return
            acc.append(chunk)
            yield len(acc) - 1

    # generator 1: node-local greedy: for each node of the newest victim, the victims on that node
    acc: list[list[TaskState]] = []
    local: dict[int, list[int]] = {}
    hopeless = _local_hopeless(s, victims, base_free, need_total)
    acc_freed = np.zeros(n_nodes)
    for ci in collect(acc, () if hopeless else VictimOrder(s, victims, victim_heaps)):
        chunk = acc[ci]
        nodes_of = sorted({t.node for t in chunk if t.node is not None})
        for node in nodes_of:
            local.setdefault(node, []).append(ci)
        if required:
            for t in chunk:
                if t.node is not None:
                    acc_freed[t.node] += t.freed_gpus
            if not _domains_fit(s, required, acc_freed):
                continue  # KAI's accumulated-scenario filter: no required domain has room yet
        for node in nodes_of:
            if run([acc[k] for k in local[node]]):
                attempt.ok = True
                return attempt
    # generator 2: multi-node gang (KAI's sub-scenario emitter, ``sub_scenario_emitter.go``): the
    # nodes bearing accumulated victims whose room after eviction can host the smallest pending
    # pod, roomiest last (ties: the node whose first victim came first), starting with the
    # smallest prefix that covers the demand beyond the room of the other free nodes, and growing
    # one node at a time. A node freed too little to host any pending pod is never picked, so its
    # victims are not evicted for nothing.
    acc = []
    freed = np.zeros(n_nodes)
    by_node: dict[int, list[int]] = {}
    first_seen: dict[int, int] = {}
    room = np.maximum(s.idle[:, GPU] + s.rel[:, GPU], 0)
    min_task = demand[-1] if demand else 0.0
    for ci in collect(acc, VictimOrder(s, victims, victim_heaps)):
        for t in acc[ci]:
            if t.node is not None:
                freed[t.node] += t.freed_gpus
                first_seen.setdefault(t.node, len(first_seen))
                lst = by_node.setdefault(t.node, [])
                if not lst or lst[-1] != ci:
                    lst.append(ci)
        if required and not _domains_fit(s, required, freed):
            continue
        if not _greedy_gpu_fit(s, demand, freed, allowed):
            continue
        nodes = sorted((i for i in by_node if min_task <= 0 or room[i] + freed[i] + EPS >= min_task),
                       key=lambda i: (room[i] + freed[i], first_seen[i]))
        # the room of free nodes without accumulated victims is there in every sub-scenario
        baseline = float(room.sum() - sum(room[i] for i in by_node))
        size, have = 0, baseline
        for i in nodes:
            if have + EPS >= need_total:
                break
            size += 1
            have += room[i] + freed[i]
        if have + EPS < need_total:
            continue  # no prefix covers the demand
        size = max(size, 1)
        while size <= len(nodes):
            chosen = nodes[:size]
            idx = sorted({ci for i in chosen for ci in by_node[i]})
            if run([acc[k] for k in idx]):
                attempt.ok = True
                return attempt
            if attempt.scenarios >= budget:
                break
            size += 1
    if not attempt.verdict:
        attempt.verdict = "no set of evictable jobs frees room for the whole gang"
    return attempt

def within_preemption_delay(s: Session, job: JobState) -> bool:
    d = job.spec.preemption_delay_s
    if not d or d <= 0:
        return False
    start = max(job.spec.creation, job.spec.last_eviction or job.spec.creation)
    return s.before(start + d)

def trigger_jobs(s: Session) -> list[JobState]:
    """The jobs an eviction action tries for: valid, ready, not being deleted, with pods to place
    and past their preemption delay (a job still within it gets a note saying so). The answer
    reads only the jobs' states, which change only with ``Session.changes``, so it is kept until
    that moves; the notes are written again on every call, as the walk would write them."""
    got = s.triggers
    if got is None or got[0] != s.changes:
        out, delayed = [], []
        for j in s.jobs:
            if not (j.n_pending and j.valid and j.ready() and not j.spec.deleting):  # n_pending: has_pending()
                continue
            if j.spec.preemption_delay_s and within_preemption_delay(s, j):
                d = j.spec.preemption_delay_s or 0.0
                end = max(j.spec.creation, j.spec.last_eviction or j.spec.creation) + d
                delayed.append((j, m.Reason(reasons.PREEMPTION_DELAY, f"job may not evict others until its "
                                            f"preemption delay of {number(d)}s has passed ({number(end - s.now)}s left)",
                                            {"delay_s": d, "end": end})))
                continue
            out.append(j)
        got = s.triggers = (s.changes, out, delayed)
    for j, why in got[2]:
        s.reads_clock()  # the reason says how long is left
        note_attempt(s, j, why)
    return list(got[1])

def note_attempt(s: Session, job: JobState, why: m.Reason) -> None:
    """Add why evictions could not help to the job's pending reason.

    Reasons are never changed once made, so many jobs may hold the same one (the no-op passes
    give every job of one kind the same object); the combination of two given reasons is then
    made once per session (``_with_note``)."""
    base = s.pending_reasons.get(job.uid)
    s.pending_reasons[job.uid] = why if base is None else _with_note(s, base, why)

def note_attempts(s: Session, notes: Iterable[tuple[JobState, m.Reason]]) -> None:
    """``note_attempt`` for each (job, note) in turn, the combination of a reason and a note
    looked up once per call while the notes repeat."""
    reasons_of = s.pending_reasons
    combined: dict[int, tuple[m.Reason, m.Reason, m.Reason]] = {}  # by id of the reason: (it, note, both)
    for job, why in notes:
        base = reasons_of.get(job.uid)
        if base is None:
            reasons_of[job.uid] = why
            continue
        got = combined.get(id(base))  # the tuple keeps ``base`` alive, so its id is not reused
        if got is None or got[1] is not why:
            got = combined[id(base)] = (base, why, _with_note(s, base, why))
        reasons_of[job.uid] = got[2]

def _with_note(s: Session, base: m.Reason, why: m.Reason) -> m.Reason:
    """A pending reason with a note added, made once per session per pair of objects
    (``Session.notes``, keyed on both, which it keeps alive)."""
    key = (id(base), id(why))
    got = s.notes.get(key)
    if got is None:
        details = dict(base.details)
        details["evictions"] = [*base.details.get("evictions", ()),
                                {"code": why.code, "message": why.message, **why.details}]
        got = s.notes[key] = (base, why, m.Reason(base.code, f"{base.message}; {why.message}", details))
    return got[2]

def queue_numbers(q: QueueAttrs) -> dict[str, float | int | str]:
    return {"queue": q.name, "allocated_gpu": q.allocated[2], "fair_share_gpu": q.fair[2],
            "quota_gpu": q.deserved[2], "priority": q.priority}

def commit_attempt(s: Session, stmt: Statement, job: JobState, attempt: Attempt, action: str,
            reason_for: Callable[[TaskState], m.Reason]) -> bool:
    """Keep a solved scenario, unless it would break a per-session cap (then discard it)."""
    delta = s.statement_delta(stmt)
    over = s.cap_problem(delta)
    if over is not None:
        stmt.discard()
        note_attempt(s, job, over)
        return False
    s.add_counts(delta)
    touched = stmt.commit()
    for t in attempt.evicted:
        s.eviction_reasons[t.index] = (action, job.uid, reason_for(t))
    # A victim the simulation re-placed on another node is moved: it leaves its node (KAI evicts it;
    # its pod comes back through its owner), so its eviction is decided too. One put back on its own
    # node is not evicted.
    names = s.nodes
    for t in attempt.moved:
        if (t.orig_status in m.ACTIVE_USED_STATES and t.orig_status != m.PIPELINED and t.node is not None
                and names[t.node].name != t.spec.node):
            s.eviction_reasons[t.index] = (action, job.uid, reason_for(t))
    for t in touched:
        if t.status == m.PIPELINED and t.index >= 0:
            s.pipeline_actions[t.index] = action
    s.pending_reasons.pop(job.uid, None)
    return True

class Signatures:
    """KAI's scheduling signatures (§2.10): per scope (a queue, or the whole cluster for
    consolidation), remember the smallest job that failed for each set of scheduling constraints;
    a later job with the same constraints is skipped unless it is "easier": fewer pending pods,
    or, comparing both jobs' pending-pod requests sorted ascending, some position where the new
    request is ≤ the remembered one in every resource and differs from it."""

    def __init__(self) -> None:
        self.failed: dict[Key, tuple[int, list[tuple[float, float, float]]]] = {}
        self.constraints: dict[int, Key] = {}  # per pod shape id: the constraints of the key
        self.changes = 0  # bumped whenever ``failed`` changes
        # a pending job of one pod: its answer per (scope, priority, preemptible, pod shape), with
        # ``changes`` when it was given (the shape fixes the constraints and the request)
        self.one: dict[Key, tuple[int, bool]] = {}

    def _constraints(self, t: TaskState) -> Key:
        # a pod's constraints are part of its placement shape, so equal shapes share them
        known = self.constraints
        c = known.get(t.shape_id)
        if c is None:
            r = t.spec.request
            sp = t.spec
            c = (r.gpu_kind, tuple(sorted(r.mig)), sp.node_affinity or (),
                 tuple(sorted(sp.node_selector.items())), repr(sp.tolerations),
                 repr(sp.required_node_affinity), sp.host_ports, repr(sp.pod_affinity),
                 repr(sp.pod_anti_affinity), tuple(sorted(r.extended.items())))
            known[t.shape_id] = c
        return c

    def _key(self, scope: str, job: JobState) -> Key:
        if len(job.tasks) == 1:  # the common job of one pod
            t = job.tasks[0]
            cons: Key = (self._constraints(t),) if t.status == m.PENDING else ()
        else:
            cons = tuple(sorted(self._constraints(t) for t in job.tasks if t.status == m.PENDING))
        return (scope, job.priority, job.preemptible, cons)

    @staticmethod
    def _requests(job: JobState) -> list[tuple[float, float, float]]:
        # ``req_qvec`` is a (cpu, memory, GPU) tuple
        if len(job.tasks) == 1:
            t = job.tasks[0]
            return [t.req_qvec] if t.status == m.PENDING else []
        return sorted(t.req_qvec for t in job.tasks if t.status == m.PENDING)

    @staticmethod
    def _easier(new: tuple[int, list[Any]], old: tuple[int, list[Any]]) -> bool:
        if new[0] < old[0]:
            return True
        for a, b in zip(new[1], old[1]):
            if a != b and all(x <= y for x, y in zip(a, b)):
                return True
        return False

    def skip(self, scope: str, job: JobState) -> bool:
        one = None
        if job.one_shape >= 0 and job.n_pending:  # its one pod is pending
            one = (scope, job.priority, job.preemptible, job.one_shape)
            got = self.one.get(one)
            if got is not None and got[0] == self.changes:
                return got[1]
        old = self.failed.get(self._key(scope, job))
        if old is None:
            answer = False
        else:
            reqs = self._requests(job)
            answer = not self._easier((len(reqs), reqs), old)
        if one is not None:
            self.one[one] = (self.changes, answer)
        return answer

    def fail(self, scope: str, job: JobState) -> None:
        key = self._key(scope, job)
        reqs = self._requests(job)
        new = (len(reqs), reqs)
        old = self.failed.get(key)
        if old is None or self._easier(new, old):
            self.failed[key] = new
            self.changes += 1

def is_protected(s: Session, victim: JobState, minrt: float) -> bool:
    end = rc.min_runtime_end(victim.last_start, minrt)
    return end is not None and s.before(end)

def min_runtime_violation(s: Session, chunks: list[list[TaskState]], minrt_of: Callable[[JobState], float]) -> str | None:
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
        if minrt <= 0 or not is_protected(s, job, minrt):
            continue
        for name in per:
            ps = job.pod_sets[name]
            # counters already reflect the eviction: active_used still counts releasing pods
            if ps.active_allocated < ps.min_available:
                return (f"job {job.uid} has run less than its minimum runtime of {number(minrt_of(job))}s and "
                        f"would drop below its minimum of {ps.min_available} pods")
    return None

class PoolMinusQueue:
    """The jobs of the pool outside one queue, listed only if someone iterates them (reclaim's
    kept victim order and held totals need just whether there are any)."""

    __slots__ = ("pool", "queue", "nonempty")

    def __init__(self, pool: list[JobState], queue: str, nonempty: bool) -> None:
        self.pool, self.queue, self.nonempty = pool, queue, nonempty

    def __bool__(self) -> bool:
        return self.nonempty

    def __iter__(self) -> Iterator[JobState]:
        return iter([v for v in self.pool if v.queue != self.queue])

def job_index(j: JobState) -> int:
    return j.index

def held_gpus(v: JobState, cache: dict[int, float] | None) -> float:
    if cache is not None and v.index in cache:
        return cache[v.index]
    g = float(sum(t.qvec[GPU] for t in v.tasks if t.status in m.ACTIVE_ALLOCATED_STATES))
    if cache is not None:
        cache[v.index] = g
    return g

