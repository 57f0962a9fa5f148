"""Which job is tried next: the jobs-by-queues tree of KAI (§2.4) and the tasks of a job (§2.5).

Invariant: the queue order is evaluated on live accounting. After each pop, the queues on the
popped path are marked dirty and their choice is recomputed on the next pop (KAI's lazy
re-heapify), which gives the DRF-like round robin across queues. Ties are broken by names, so
the order is deterministic.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from typing import cast

from scheduler_core import model as m
from scheduler_core.model import Key
from scheduler_core.proportion import QueueAttrs, allocatable_share
from scheduler_core.session import Session
from scheduler_core.state import JobState, PodSet, SubGroupSet, TaskState


def is_candidate(t: TaskState, simulation: bool) -> bool:
    """A task that allocation may place: pending, or (in a simulation) evicted in this session."""
    if t.status == m.PENDING:
        return True
    return simulation and t.status == m.RELEASING and t.orig_status != m.RELEASING


def _member_order_key(x: PodSet | SubGroupSet) -> Key:
    """SubGroupOrder (§2.5): below threshold first, required before optional, less filled first."""
    if isinstance(x, PodSet):
        threshold, have = x.min_available, x.active_allocated
    else:
        threshold, have = x.need, sum(1 for y in x.members if y.satisfied)
    below = 0 if have < threshold else 1
    required = 0 if threshold > 0 else 1
    fill = have if threshold == 0 else have / threshold
    return (below, required, fill, x.name)


def _collect(x: PodSet | SubGroupSet, simulation: bool, elastic: bool) -> list[TaskState]:
    if isinstance(x, PodSet):
        cands = [t for t in x.tasks if is_candidate(t, simulation)]
        if elastic or x.satisfied:
            return cands[:1]
        return cands[: max(0, x.min_available - x.active_allocated)]
    members = sorted(x.members, key=_member_order_key)
    satisfied = sum(1 for y in members if y.satisfied)
    if satisfied < x.need and not elastic:
        out: list[TaskState] = []
        left = x.need - satisfied
        for y in members:
            if left <= 0:
                break
            if y.satisfied:
                continue
            out.extend(_collect(y, simulation, False))
            left -= 1
        return out
    for y in members:
        got = _collect(y, simulation, True)
        if got:
            return got
    return []


def tasks_to_allocate(job: JobState, simulation: bool = False) -> list[TaskState]:
    """The next batch of a job (§2.5): the gang minimum while unsatisfied, else one pod.

    It reads only the job's task states and pod-set counters, so outside simulations the batch
    is kept until the job's ``version`` moves. Callers read the list and never change it."""
    if simulation:
        return _batch(job, True)
    if job.batch_at != job.version:
        batch = _batch(job, False)
        if batch != job.batch:  # the same tasks: keep the list the job holds (nothing new to keep)
            job.batch = batch
        job.batch_at = job.version
    return job.batch


def _batch(job: JobState, simulation: bool) -> list[TaskState]:
    members = job.root.members
    if len(members) == 1 and isinstance(members[0], PodSet) and job.root.need == 1:
        # the common shape: one pod set (its tasks are kept in task order)
        ps = members[0]
        if not simulation and len(ps.tasks) == 1:  # a job of one pod: that pod while it is pending
            t = ps.tasks[0]
            return [t] if t.status == m.PENDING else []
        if ps.active_allocated >= ps.min_available:
            for t in ps.tasks:
                if t.status == m.PENDING or (simulation and t.status == m.RELEASING and t.orig_status != m.RELEASING):
                    return [t]
            return []
        want = ps.min_available - ps.active_allocated
        return [t for t in ps.tasks if t.status == m.PENDING
                or (simulation and t.status == m.RELEASING and t.orig_status != m.RELEASING)][:want]
    tasks = _collect(job.root, simulation, False)
    return sorted(tasks, key=lambda t: t.order_key) if len(tasks) > 1 else tasks


def batch_request(tasks: Iterable[TaskState]) -> list[float]:
    """Queue-accounting vector of a batch (GPU memory via the smallest node GPU memory)."""
    out = [0.0, 0.0, 0.0]
    for t in tasks:
        v = t.req_qvec
        out[0] += v[0]
        out[1] += v[1]
        out[2] += v[2]
    return out


_UNL = -1.0
_ZERO_SHARE_PENALTY = 1000.0


def _dominant(q: QueueAttrs, alloc: list[float], total: list[float], add: list[float] | None) -> float:
    best = 0.0
    a = q.allocated
    for r in (0, 1, 2):
        used = a[r] + add[r] if add is not None else a[r]
        cap = total[r] if alloc[r] == _UNL else alloc[r]
        term = used * _ZERO_SHARE_PENALTY if cap == 0 else used / cap
        if term > best:
            best = term
    return best


def _dom3(u0: float, u1: float, u2: float, cap: tuple[float, float, float]) -> float:
    """Dominant share of a usage vector against per-resource caps (0 cap: × penalty)."""
    c0, c1, c2 = cap
    a = u0 * _ZERO_SHARE_PENALTY if c0 == 0 else u0 / c0
    b = u1 * _ZERO_SHARE_PENALTY if c1 == 0 else u1 / c1
    c = u2 * _ZERO_SHARE_PENALTY if c2 == 0 else u2 / c2
    best = a if a > b else b
    best = best if best > c else c
    return best if best > 0.0 else 0.0


def _smaller_share(lal: list[float], ral: list[float]) -> int:
    """Rule 7 of QueueOrder: -1 when the left allocatable share is ≤ everywhere and < somewhere,
    1 for the mirror case, 0 otherwise (-1 = unlimited counts as infinite)."""
    li = [math.inf if x == _UNL else x for x in lal]
    ri = [math.inf if x == _UNL else x for x in ral]
    if all(x <= y for x, y in zip(li, ri)) and any(x < y for x, y in zip(li, ri)):
        return -1
    if all(y <= x for x, y in zip(li, ri)) and any(y < x for x, y in zip(li, ri)):
        return 1
    return 0


def _le_cap(v: float, cap: float) -> bool:
    return cap == _UNL or v <= cap


class QueueComparator:
    """KAI's QueueOrder (§2.4), the same cascade as ``proportion.compare_queues``, with each
    queue's allocatable share cached for the cycle (it depends only on deserved, limit and fair
    share, which do not change inside a cycle). The ordering hot path calls this thousands of
    times per cycle; ``test_ordering`` checks it agrees with ``proportion.compare_queues``."""

    def __init__(self, total: list[float]) -> None:
        self.total = total
        self._alloc: dict[str, list[float]] = {}
        self._cap: dict[str, tuple[float, float, float]] = {}
        self._share_cmp: dict[tuple[str, str], int] = {}

    def _caps(self, q: QueueAttrs, alloc: list[float], total: list[float]) -> tuple[float, float, float]:
        got = self._cap.get(q.name)
        if got is None or total is not self.total:
            got = (total[0] if alloc[0] == _UNL else alloc[0], total[1] if alloc[1] == _UNL else alloc[1],
                   total[2] if alloc[2] == _UNL else alloc[2])
            if total is self.total:
                self._cap[q.name] = got
        return got

    def allocatable(self, q: QueueAttrs) -> list[float]:
        got = self._alloc.get(q.name)
        if got is None:
            got = self._alloc[q.name] = allocatable_share(q)
        return got

    def key(self, q: QueueAttrs, req: list[float]) -> Key:
        """Rules 1–6 of ``__call__`` as one sortable tuple for queue ``q`` with batch ``req``.
        Each of those rules compares one value per queue, so comparing two keys decides exactly
        what the cascade decides; equal keys fall through to ``tie`` (rules 7–8)."""
        a, f, d = q.allocated, q.fair, q.deserved
        u0, u1, u2 = a[0] + req[0], a[1] + req[1], a[2] + req[2]
        over = f[0] < a[0] and f[1] < a[1] and f[2] < a[2]
        starved = (d[0] == _UNL or u0 <= d[0]) and (d[1] == _UNL or u1 <= d[1]) and (d[2] == _UNL or u2 <= d[2])
        al = self.allocatable(q)
        zero = (al[0] == 0 and u0 > 0) or (al[1] == 0 and u1 > 0) or (al[2] == 0 and u2 > 0)
        caps = self._caps(q, al, self.total)
        return (over, not starved, -q.priority, zero, _dom3(u0, u1, u2, caps), _dom3(a[0], a[1], a[2], caps))

    def tie(self, left: QueueAttrs, right: QueueAttrs) -> int:
        """Rules 7–8 of ``__call__``, for queues whose ``key`` is equal."""
        pair = (left.name, right.name)
        got = self._share_cmp.get(pair)
        if got is None:
            got = self._share_cmp[pair] = _smaller_share(self.allocatable(left), self.allocatable(right))
        if got:
            return got
        if left.creation != right.creation:
            return -1 if left.creation < right.creation else 1
        return -1 if left.name < right.name else (1 if left.name > right.name else 0)

    def __call__(self, left: QueueAttrs, right: QueueAttrs, lreq: list[float] | None, rreq: list[float] | None,
                 total: list[float] | None = None) -> int:
        total = total or self.total
        zero = [0.0, 0.0, 0.0]
        lreq = lreq if lreq is not None else zero
        rreq = rreq if rreq is not None else zero
        la, ra = left.allocated, right.allocated
        lf, rf = left.fair, right.fair
        # 1. not over-utilized first
        lo = lf[0] < la[0] and lf[1] < la[1] and lf[2] < la[2]
        ro = rf[0] < ra[0] and rf[1] < ra[1] and rf[2] < ra[2]
        if lo != ro:
            return 1 if lo else -1
        # 2. starved first
        ld, rd = left.deserved, right.deserved
        ls = ((ld[0] == _UNL or la[0] + lreq[0] <= ld[0]) and (ld[1] == _UNL or la[1] + lreq[1] <= ld[1])
              and (ld[2] == _UNL or la[2] + lreq[2] <= ld[2]))
        rs = ((rd[0] == _UNL or ra[0] + rreq[0] <= rd[0]) and (rd[1] == _UNL or ra[1] + rreq[1] <= rd[1])
              and (rd[2] == _UNL or ra[2] + rreq[2] <= rd[2]))
        if ls != rs:
            return -1 if ls else 1
        # 3. higher priority first
        if left.priority != right.priority:
            return -1 if left.priority > right.priority else 1
        lal, ral = self.allocatable(left), self.allocatable(right)
        # 4. zero-share penalty
        lz = ((lal[0] == 0 and la[0] + lreq[0] > 0) or (lal[1] == 0 and la[1] + lreq[1] > 0)
              or (lal[2] == 0 and la[2] + lreq[2] > 0))
        rz = ((ral[0] == 0 and ra[0] + rreq[0] > 0) or (ral[1] == 0 and ra[1] + rreq[1] > 0)
              or (ral[2] == 0 and ra[2] + rreq[2] > 0))
        if lz != rz:
            return 1 if lz else -1
        # 5. dominant share with the job, 6. without
        lc, rc = self._caps(left, lal, total), self._caps(right, ral, total)
        a = _dom3(la[0] + lreq[0], la[1] + lreq[1], la[2] + lreq[2], lc)
        b = _dom3(ra[0] + rreq[0], ra[1] + rreq[1], ra[2] + rreq[2], rc)
        if a != b:
            return -1 if a < b else 1
        a = _dom3(la[0], la[1], la[2], lc)
        b = _dom3(ra[0], ra[1], ra[2], rc)
        if a != b:
            return -1 if a < b else 1
        # 7. smaller allocatable share (≤ everywhere, < somewhere): static for the cycle, so the
        # answer is kept per pair of queues (equal shares make this rule decide most pops)
        pair = (left.name, right.name)
        got = self._share_cmp.get(pair)
        if got is None:
            got = self._share_cmp[pair] = _smaller_share(lal, ral)
        if got:
            return got
        # 8. older queue, then name
        if left.creation != right.creation:
            return -1 if left.creation < right.creation else 1
        return -1 if left.name < right.name else (1 if left.name > right.name else 0)


class _QNode:
    __slots__ = ("attrs", "children", "heap", "parent", "dirty", "best", "size", "key")

    def __init__(self, attrs: QueueAttrs | None, parent: _QNode | None) -> None:
        self.attrs = attrs
        self.children: list[_QNode] = []
        self.heap: list[tuple[Key, int, JobState]] = []
        self.parent = parent
        self.dirty = True
        self.best: tuple[JobState, list[float], _QNode] | None = None
        self.size = 0
        self.key: Key | None = None  # queue-order key of this queue with its best batch (see JobsOrder)


def _moved(leaf: _QNode, count: int) -> None:
    """``count`` jobs came into (or, below 0, left) a leaf's heap: the sizes on its path change
    and the path's best jobs and order keys must be found again."""
    node: _QNode | None = leaf
    while node is not None:
        node.size += count
        node.dirty = True
        node.key = None
        node = node.parent


def within_queue_depth(jobs: list[JobState], depth: int | None) -> tuple[list[JobState], list[JobState]]:
    """KAI's queueDepthPerAction: of the jobs an action may try, each leaf queue keeps its first
    ``depth`` in JobOrder (ties by position in ``jobs``, as `JobsOrder` breaks them); returns
    (kept, cut), each in the order of ``jobs``. ``depth`` None keeps every job (the same list).

    KAI caps each leaf's job heap at that size when the action builds its order; a job the
    action pushes back after a partial success stays in (it was one of the kept)."""
    if depth is None:
        return jobs, []
    by_queue: dict[str, list[tuple[Key, int]]] = {}
    for i, j in enumerate(jobs):
        by_queue.setdefault(j.queue, []).append((j.order_key(), i))
    kept: set[int] = set()
    for entries in by_queue.values():
        kept.update(i for _, i in heapq.nsmallest(max(depth, 0), entries))
    return ([j for i, j in enumerate(jobs) if i in kept], [j for i, j in enumerate(jobs) if i not in kept])


class JobsOrder:
    """Pending jobs ordered by the queue tree (QueueOrder at every level) and JobOrder in leaves."""

    def __init__(self, session: Session, jobs: Iterable[JobState], simulation: bool = False,
                 compare: Callable[..., int] | None = None, local_changes: bool = False) -> None:
        """``local_changes``: the caller promises that queue accounting changes only for the
        queues of jobs it popped or pushed (whose paths are marked dirty), as in the allocate
        action. Then a clean queue keeps its order key between pops instead of re-evaluating it;
        evictions, which change other queues' accounting, must leave this off."""
        self.session = session
        self.simulation = simulation
        chosen = compare or session.queue_comparator
        if chosen is None:
            raise ValueError("JobsOrder: the session has no queue comparator (open it with cycle.open_session)")
        self.compare: Callable[..., int] = chosen
        cmp = self.compare
        self._keyed = isinstance(cmp, QueueComparator) and cmp.total is session.total
        self._keep_keys = local_changes and self._keyed
        self.root = _QNode(None, None)
        self.nodes: dict[str, _QNode] = {}
        self._seq = 0
        # the first jobs in bulk: each leaf's heap made at once (the entries and so the pop order
        # are those of one push per job: the sequence number breaks every tie)
        seq = 0
        leaves: dict[str, list[tuple[Key, int, JobState]]] = {}
        for j in jobs:
            heap = leaves.get(j.queue)
            if heap is None:
                heap = leaves[j.queue] = self._node(j.queue).heap
            seq += 1
            heap.append((j.order_key(), seq, j))
        self._seq = seq
        for node in self.nodes.values():
            if node.heap:
                heapq.heapify(node.heap)
                _moved(node, len(node.heap))

    def _node(self, name: str) -> _QNode:
        node = self.nodes.get(name)
        if node is not None:
            return node
        attrs = self.session.queues[name]
        parent = self.root if attrs.parent is None else self._node(attrs.parent)
        node = _QNode(attrs, parent)
        parent.children.append(node)
        self.nodes[name] = node
        return node

    def push(self, job: JobState) -> None:
        leaf = self._node(job.queue)
        self._seq += 1
        heapq.heappush(leaf.heap, (job.order_key(), self._seq, job))
        _moved(leaf, 1)

    def __len__(self) -> int:
        return self.root.size

    def _best(self, node: _QNode) -> tuple[JobState, list[float], _QNode] | None:
        if not node.dirty:
            return node.best
        node.dirty = False
        if node.heap:
            job = node.heap[0][2]
            node.best = (job, batch_request(tasks_to_allocate(job, self.simulation)), node)
            return node.best
        best: tuple[JobState, list[float], _QNode] | None = None
        best_child: _QNode | None = None
        total = self.session.total
        if self._keyed:
            # one key per child (rules 1–6) instead of one cascade per comparison; the scan and
            # its replacement rule are those of the pairwise loop below
            cmp = cast(QueueComparator, self.compare)  # _keyed: it is one
            keep = self._keep_keys
            best_key: Key = ()
            for child in node.children:
                if child.size == 0:
                    continue
                cb = self._best(child)
                if cb is None:
                    continue
                k = child.key if keep else None
                if k is None:
                    k = cmp.key(child.attrs, cb[1])  # type: ignore[arg-type]  # only the root has no attrs
                    if keep:
                        child.key = k
                if best is None or best_child is None or k < best_key or (
                        k == best_key and cmp.tie(child.attrs, best_child.attrs) < 0):  # type: ignore[arg-type]  # only the root has no attrs
                    best, best_child, best_key = (cb[0], cb[1], child), child, k
            node.best = best
            return best
        for child in node.children:
            if child.size == 0:
                continue
            cb = self._best(child)
            if cb is None:
                continue
            if best is None or best_child is None or self.compare(child.attrs, best_child.attrs, cb[1], best[1], total) < 0:
                best, best_child = (cb[0], cb[1], child), child
        node.best = best
        return best

    def pop(self) -> JobState | None:
        """The next job, removed from the order; None when empty."""
        if self.root.size == 0:
            return None
        node = self.root
        while not node.heap:
            b = self._best(node)
            if b is None:
                return None
            node = b[2]
        _, _, job = heapq.heappop(node.heap)
        _moved(node, -1)
        return job

    def drain(self) -> list[JobState]:
        """Every job left, in the order ``pop`` would give them, for a caller that changes no
        queue's accounting between pops (each job's attempt fails and gives back what it took).

        Then a queue's place in the order depends only on its accounting and on the request of
        its next job's batch: when the leaf that won has next a job whose batch asks for the same,
        that job wins as well, at every level. So a run of alike jobs leaves a leaf at once instead
        of one ``pop`` each (one-GPU jobs are most of a deep backlog)."""
        out: list[JobState] = []
        for leaf in self.nodes.values():
            leaf.heap.sort()  # a sorted list is a heap, and its runs come off the front in pop order
        while self.root.size:
            node = self.root
            while not node.heap:
                b = self._best(node)
                if b is None:
                    return out
                node = b[2]
            best = self._best(node)  # the leaf's own: its first job and that job's request
            heap = node.heap
            taken = 1
            if best is not None:
                req = best[1]
                alone = tuple(req)  # a pending job of one pod: its batch is that pod, its request the pod's
                while taken < len(heap):
                    nxt = heap[taken][2]
                    if nxt.one_shape >= 0 and nxt.n_pending and not self.simulation:
                        if nxt.tasks[0].req_qvec != alone:
                            break
                    elif batch_request(tasks_to_allocate(nxt, self.simulation)) != req:
                        break
                    taken += 1
            out.extend(entry[2] for entry in heap[:taken])
            del heap[:taken]
            _moved(node, -taken)
        return out
