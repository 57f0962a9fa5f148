"""Which job is tried next: the jobs-by-queues tree of KAI (§2.4) and the tasks of a job (§2.5).

Invariant: the queue order is evaluated on live accounting. After each pop, the queues on the
popped path are marked dirty and their choice is recomputed on the next pop (KAI's lazy
re-heapify), which gives the DRF-like round robin across queues. Ties are broken by names, so
the order is deterministic.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from scheduler_core import model as m
from scheduler_core.proportion import QueueAttrs, compare_queues
from scheduler_core.session import JobState, PodSet, Session, SubGroupSet, TaskState


def is_candidate(t: TaskState, simulation: bool) -> bool:
    """A task that allocation may place: pending, or (in a simulation) evicted in this session."""
    if t.status == m.PENDING:
        return True
    return simulation and t.status == m.RELEASING and t.orig_status != m.RELEASING


def _member_order_key(x: PodSet | SubGroupSet) -> tuple:
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
    """The next batch of a job (§2.5): the gang minimum while unsatisfied, else one pod."""
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


class _QNode:
    __slots__ = ("attrs", "children", "heap", "parent", "dirty", "best", "size")

    def __init__(self, attrs: QueueAttrs | None, parent: _QNode | None) -> None:
        self.attrs = attrs
        self.children: list[_QNode] = []
        self.heap: list[tuple[tuple, int, JobState]] = []
        self.parent = parent
        self.dirty = True
        self.best: tuple[JobState, list[float], _QNode] | None = None
        self.size = 0


class JobsOrder:
    """Pending jobs ordered by the queue tree (QueueOrder at every level) and JobOrder in leaves."""

    def __init__(self, session: Session, jobs: Iterable[JobState], simulation: bool = False,
                 compare: Callable[..., int] = compare_queues) -> None:
        self.session = session
        self.simulation = simulation
        self.compare = compare
        self.root = _QNode(None, None)
        self.nodes: dict[str, _QNode] = {}
        self._seq = 0
        for j in jobs:
            self.push(j)

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
        node: _QNode | None = leaf
        while node is not None:
            node.size += 1
            node.dirty = True
            node = node.parent

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
        for child in node.children:
            if child.size == 0:
                continue
            cb = self._best(child)
            if cb is None:
                continue
            if best is None or self.compare(child.attrs, best_child.attrs, cb[1], best[1], total) < 0:  # type: ignore[union-attr]
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
        cur: _QNode | None = node
        while cur is not None:
            cur.size -= 1
            cur.dirty = True
            cur = cur.parent
        return job
