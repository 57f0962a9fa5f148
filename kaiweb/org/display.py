"""What the org pages show: the tree of departments and projects per node pool, the pools, and the preview of
a department's or project's change (every queue's fair share per pool now and after, and what a lowered
quota makes reclaimable).

The preview derives the queues as the save will (`rules.derive_queues`) and divides each pool's shard's
next snapshot with the engine (`scheduler_core.fair_share.divide` on `cycle.next_snapshot`), as the queue
edit's preview does for one queue (`kaiweb.scheduling.fairshare.preview`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from kaiweb.core.choices import RESOURCES, UNLIMITED
from kaiweb.org import rules, services, status
from kaiweb.org.choices import NODE_POOL_LABEL, OwnerKind
from kaiweb.org.models import Department, NodePool, OwnerQueue, Project
from kaiweb.queues.models import Queue
from kaiweb.scheduling.cycle import next_snapshot
from kaiweb.scheduling.fairshare import compare_divisions
from kaiweb.workloads.choices import ALLOCATED_POD_STATES, WorkloadState
from kaiweb.workloads.models import Workload
from scheduler_core import fair_share
from scheduler_core.model import DEFAULT_JOB_PRIORITY
from scheduler_core.units import bytes_to_mb

# ------------------------------------------------------------------------------------------ the tree


@dataclass
class PoolLine:
    """One owner's queue in one pool, read as "h100: 4 guaranteed, 8 at most, 6 in use" (GPUs)."""

    pool: str
    queue: str
    deserved: float
    limit: float
    in_use: float
    requested: float

    @property
    def text(self) -> str:
        most = "no ceiling" if self.limit == UNLIMITED else f"{_n(self.limit)} at most"
        return f"{self.pool}: {_n(self.deserved)} guaranteed, {most}, {_n(self.in_use)} in use"

    @property
    def over(self) -> bool:
        return self.in_use > self.deserved + 1e-9


@dataclass
class OwnerRow:
    kind: str
    obj: Department | Project
    lines: list[PoolLine] = field(default_factory=list)
    children: list[OwnerRow] = field(default_factory=list)


def _n(x: float) -> str:
    return f"{x:g}" if float(x).is_integer() else f"{x:.2f}".rstrip("0").rstrip(".")


def org_tree() -> tuple[list[OwnerRow], list[OwnerRow]]:
    """Departments (each with its projects) and the projects without a department, each with a line per
    pool. A fixed number of queries: the owners, their queues, one grouped query for what is in use."""
    links = list(OwnerQueue.objects.select_related("queue", "node_pool").order_by("node_pool__name"))
    figures = status.queue_figures(oq.queue_id for oq in links)
    children_of: dict[int, list[int]] = {}
    for oq in links:
        if oq.queue.parent_id:
            children_of.setdefault(oq.queue.parent_id, []).append(oq.queue_id)
    lines: dict[tuple[str, int], list[PoolLine]] = {}
    for oq in links:
        q = oq.queue
        own = [q.pk, *children_of.get(q.pk, ())] if oq.department_id else [q.pk]
        in_use = sum(figures[pk]["allocated"]["gpu"] for pk in own if pk in figures)
        requested = sum(figures[pk]["requested"]["gpu"] for pk in own if pk in figures)
        key = ("department", oq.department_id) if oq.department_id else ("project", oq.project_id)
        lines.setdefault(key, []).append(PoolLine(oq.node_pool.name, q.name, q.gpu_quota, q.gpu_limit, in_use,
                                                  requested))
    departments = []
    for d in Department.objects.order_by("name"):
        departments.append(OwnerRow(OwnerKind.DEPARTMENT, d, lines.get(("department", d.pk), [])))
    by_pk = {row.obj.pk: row for row in departments}
    loose = []
    for p in Project.objects.order_by("name"):
        row = OwnerRow(OwnerKind.PROJECT, p, lines.get(("project", p.pk), []))
        (by_pk[p.department_id].children if p.department_id in by_pk else loose).append(row)
    return departments, loose


@dataclass
class PoolSummary:
    pool: NodePool
    node_count: int
    ready: int
    gpus: float
    products: list[str]


def pool_nodes(pool: NodePool) -> Any:
    """The pool's nodes as their pool label says (the default pool: the nodes without one)."""
    nodes = pool.cluster.nodes.all()
    if pool.is_default:
        return nodes.exclude(labels__has_key=NODE_POOL_LABEL)
    return nodes.filter(labels__contains={NODE_POOL_LABEL: pool.name})


def pool_summaries() -> list[PoolSummary]:
    out = []
    for pool in NodePool.objects.select_related("cluster", "shard").order_by("name"):
        rows = list(pool_nodes(pool).values_list("gpu_product", "allocatable_gpu", "ready")[:10_000])
        out.append(PoolSummary(pool, len(rows), sum(1 for r in rows if r[2]), sum(r[1] or 0 for r in rows),
                               sorted({r[0] for r in rows if r[0]})))
    return out


# ------------------------------------------------------------------------------------------ the preview


@dataclass
class Reclaimable:
    """A queue whose quota goes below what it uses: by how much, and the running workloads then over it."""

    queue: str
    pool: str
    resource: str
    in_use: float
    new_quota: float
    workloads: list[str]

    @property
    def amount(self) -> float:
        return self.in_use - self.new_quota


@dataclass
class PoolPreview:
    pool: str
    rows: list[dict[str, Any]]
    problems: list[str]


@dataclass
class Preview:
    pools: list[PoolPreview]
    reclaimable: list[Reclaimable]
    problems: list[str]


def _spec_of(owner: Department | Project, entries: tuple[rules.QueueEntry, ...] | None = None) -> rules.OwnerSpec:
    entries = services.entries_of(owner) if entries is None else entries
    if isinstance(owner, Department):
        return rules.OwnerSpec(OwnerKind.DEPARTMENT, owner.name, entries)
    return rules.OwnerSpec(OwnerKind.PROJECT, owner.name, entries,
                           department=owner.department.name if owner.department_id else "", uid=str(owner.uid))


def _queue_for(derived: rules.DerivedQueue, existing: Queue | None) -> Queue:
    queue = Queue(name=derived.name)
    if existing is not None:
        queue.preempt_min_runtime = existing.preempt_min_runtime
        queue.reclaim_min_runtime = existing.reclaim_min_runtime
    services.set_numbers(queue, derived)
    return queue


def preview(owner: Department | Project) -> Preview:
    """Every queue's fair share per pool now and with `owner`'s unsaved values (its fields and
    ``owner._proposed_entries``), and what a quota lowered below use makes reclaimable."""
    entries: tuple[rules.QueueEntry, ...] = getattr(owner, "_proposed_entries", services.entries_of(owner)
                                                    if owner.pk else ())
    # the owners whose queues the change can touch: the department and its projects
    if isinstance(owner, Department):
        department: Department | None = owner
        owners = [_spec_of(owner, entries)] + [
            _spec_of(p) for p in Project.objects.filter(department_id=owner.pk).select_related("department")
        ] if owner.pk else [_spec_of(owner, entries)]
    else:
        department = owner.department if owner.department_id else None
        others = Project.objects.filter(department=department).exclude(pk=owner.pk) if department else []
        owners = ([_spec_of(department)] if department else []) + [_spec_of(owner, entries)] + [
            _spec_of(p) for p in others]
    links = {oq.queue.name: oq for oq in OwnerQueue.objects.select_related("queue", "department", "project",
                                                                           "node_pool")}
    held: dict[str, tuple[str, str] | None] = {n: None for n in Queue.objects.values_list("name", flat=True)}
    held.update({name: (oq.owner_kind, oq.owner_name) for name, oq in links.items()})
    derived = rules.derive_queues(owners, held)
    mine_now = {name for name, oq in links.items() if oq.owner_name == owner.name and oq.owner_kind == (
        OwnerKind.DEPARTMENT if isinstance(owner, Department) else OwnerKind.PROJECT)}
    mine_after = {d.name for d in derived if d.owner_name == owner.name}
    existing = {q.name: q for q in Queue.objects.filter(name__in=[d.name for d in derived])}
    pools = {p.name: p for p in NodePool.objects.select_related("shard", "cluster")}
    touched = sorted({d.pool for d in derived if d.owner_name == owner.name}
                     | {links[n].node_pool.name for n in mine_now})
    result = Preview([], [], [])
    for pool_name in touched:
        pool = pools.get(pool_name)
        if pool is None or pool.shard is None:
            continue
        try:
            result.pools.append(_pool_preview(pool, [d for d in derived if d.pool == pool_name], existing,
                                              gone={n for n in mine_now - mine_after
                                                    if links[n].node_pool.name == pool_name}))
        except Exception as exc:  # noqa: BLE001 - a preview failure is shown, never a 500
            result.problems.append(f"{pool_name}: the engine could not compute the preview: {exc}")
    result.reclaimable = _reclaimable([d for d in derived if d.owner_name == owner.name], existing)
    return result


def _pool_preview(pool: NodePool, derived: list[rules.DerivedQueue], existing: dict[str, Queue],
                  gone: set[str]) -> PoolPreview:
    snapshot, config, _ = next_snapshot(pool.shard)
    before = fair_share.divide(snapshot, config)
    specs = {d.name: _queue_for(d, existing.get(d.name)).to_spec(d.parent) for d in derived}
    queues = [specs.pop(q.name, q) for q in snapshot.queues if q.name not in gone]
    queues.extend(specs.values())
    after = fair_share.divide(dataclasses.replace(snapshot, queues=tuple(queues)), config)
    rows, problems = compare_divisions(before, after)
    for row in rows:  # a queue made or removed by the change is one of its changes
        row["changed"] = row["changed"] or row["new"] or row["gone"]
    return PoolPreview(pool.name, rows, problems)


def _reclaimable(derived: list[rules.DerivedQueue], existing: dict[str, Queue]) -> list[Reclaimable]:
    """For each queue whose quota is lowered below what it (with its children) uses now: the amount, and
    its running workloads beyond the new quota, the lowest priority and the latest started first (the
    ones a reclaim takes first)."""
    queues = [existing[d.name] for d in derived if d.name in existing]
    subtree = {q.pk: [q.pk, *Queue.objects.filter(parent=q).values_list("pk", flat=True)] for q in queues}
    figures = status.queue_figures({pk for ids in subtree.values() for pk in ids})
    out = []
    for d in derived:
        queue = existing.get(d.name)
        if queue is None:
            continue
        for r in RESOURCES:
            new_quota = getattr(d, r).deserved
            in_use = sum(figures[pk]["allocated"][r] for pk in subtree[queue.pk])
            if new_quota >= getattr(queue, f"{r}_quota") or in_use <= new_quota + 1e-9:
                continue
            out.append(Reclaimable(queue.name, d.pool, r, in_use, new_quota,
                                   _over_quota_workloads(subtree[queue.pk], r, in_use - new_quota)))
    return out


def _over_quota_workloads(queue_ids: list[int], resource: str, excess: float) -> list[str]:
    running = (Workload.objects.filter(queue_id__in=queue_ids, state__in=(WorkloadState.RUNNING,
                                                                          WorkloadState.PARTIAL))
               .select_related("priority_class").prefetch_related("pods").order_by("-last_start_at", "-pk")[:500])
    ordered = sorted(running, key=lambda w: w.priority_class.value if w.priority_class_id else DEFAULT_JOB_PRIORITY)
    names, covered = [], 0.0
    for w in ordered:
        if covered >= excess - 1e-9:
            break
        held = sum(_pod_amount(p, resource) for p in w.pods.all() if p.state in ALLOCATED_POD_STATES)
        if held > 0:
            names.append(f"{w.namespace}/{w.name}")
            covered += held
    return names


def _pod_amount(pod: Any, resource: str) -> float:
    if resource == "gpu":
        return pod.gpu_request
    if resource == "cpu":
        return float(pod.cpu)
    return bytes_to_mb(pod.memory)
