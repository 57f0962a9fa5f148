"""Reads of the queues app: the tree with its latest status, listings, priority classes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.core.cache import cache
from django.db.models import OuterRef, Prefetch, QuerySet, Subquery

from kaiweb.core.changes import state_key
from kaiweb.core.choices import RESOURCES
from kaiweb.core.queries import related_count
from kaiweb.queues.choices import PRIORITY_NAMES
from kaiweb.queues.models import PriorityClass, Queue, QueueMembership
from kaiweb.scheduling.models import QueueStatus
from kaiweb.workloads.models import Workload


def queues() -> QuerySet[Queue]:
    """All queues with their parent and child names loaded (a fixed number of queries for any count)."""
    return (
        Queue.objects.select_related("parent")
        .prefetch_related(Prefetch("children", queryset=Queue.objects.only("id", "name", "parent_id").order_by("name")))
        .annotate(workload_count=related_count(Workload.objects.all(), "queue"))
        .order_by("name")
    )


def priority_classes() -> QuerySet[PriorityClass]:
    """All priority classes, highest value first."""
    return PriorityClass.objects.order_by("-value", "name")


def memberships() -> QuerySet[QueueMembership]:
    return QueueMembership.objects.select_related("user", "queue").order_by("queue__name", "user__username")


def latest_statuses(queue_ids: list[int] | None = None) -> dict[int, QueueStatus]:
    """The most recent recorded status of each queue (two queries, however long the history)."""
    latest = QueueStatus.objects.filter(queue=OuterRef("pk")).order_by("-recorded_at", "-id").values("id")[:1]
    base = Queue.objects.all() if queue_ids is None else Queue.objects.filter(pk__in=queue_ids)
    ids = [pk for pk in base.annotate(latest_id=Subquery(latest)).values_list("latest_id", flat=True) if pk]
    return {s.queue_id: s for s in QueueStatus.objects.filter(pk__in=ids)}


def _zero() -> dict[str, float]:
    return dict.fromkeys(RESOURCES, 0.0)


@dataclass(slots=True)
class TreeNode:
    """One queue of the tree with its figures and children, ready to serialise."""

    queue: Queue
    status: QueueStatus | None
    children: list[TreeNode] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        q = self.queue
        figures = self.status.figures() if self.status else {}
        return {
            "id": q.pk,
            "name": q.name,
            "display_name": q.display_name,
            "parent": q.parent.name if q.parent_id and q.parent else None,
            "priority": q.priority,
            "resources": {
                r: {
                    "quota": getattr(q, f"{r}_quota"),
                    "limit": getattr(q, f"{r}_limit"),
                    "over_quota_weight": getattr(q, f"{r}_over_quota_weight"),
                    "allocated": figures.get("allocated", {}).get(r, 0.0),
                    "fair_share": figures.get("fair_share", {}).get(r, 0.0),
                    "pending": figures.get("pending", {}).get(r, 0.0),
                }
                for r in RESOURCES
            },
            "pending_workloads": self.status.pending_workloads if self.status else 0,
            "running_workloads": self.status.running_workloads if self.status else 0,
            "status_recorded_at": self.status.recorded_at if self.status else None,
            "children": [c.as_dict() for c in self.children],
        }


def queue_tree() -> list[TreeNode]:
    """The whole tree (roots sorted by name, children too) with each queue's latest status."""
    all_queues = list(Queue.objects.select_related("parent").order_by("name"))
    statuses = latest_statuses()
    nodes = {q.pk: TreeNode(q, statuses.get(q.pk)) for q in all_queues}
    roots: list[TreeNode] = []
    for q in all_queues:
        node = nodes[q.pk]
        if q.parent_id in nodes:
            nodes[q.parent_id].children.append(node)
        else:
            roots.append(node)
    return roots


def queue_tree_data() -> list[dict[str, Any]]:
    """The tree as the API serves it (``TreeNode.as_dict``), computed once per committed change of
    the queues or their recorded status (``core.changes.state_key("queues", ...)``: once per
    cycle) and then served from the cache, whatever the number of requests."""
    key = state_key("queues", "tree")
    if key is None:
        return [node.as_dict() for node in queue_tree()]
    data: list[dict[str, Any]] | None = cache.get(key)
    if data is None:
        data = [node.as_dict() for node in queue_tree()]
        cache.set(key, data, timeout=3600)
    return data


def subtree_ids(queue: Queue) -> set[int]:
    """Ids of the queue and every queue below it."""
    children: dict[int | None, list[int]] = {}
    for pk, parent_id in Queue.objects.values_list("pk", "parent_id"):
        children.setdefault(parent_id, []).append(pk)
    ids: set[int] = set()
    stack = [queue.pk]
    while stack:
        pk = stack.pop()
        if pk not in ids:
            ids.add(pk)
            stack.extend(children.get(pk, ()))
    return ids


def priority_label(priority: int) -> str:
    """The listing name of a queue priority (low/medium/high), else the number."""
    return PRIORITY_NAMES.get(priority, str(priority))


def queue_listing() -> list[dict[str, str]]:
    """Rows like `kubectl get queues`: NAME, PRIORITY, PARENT, CHILDREN (one query)."""
    rows = list(Queue.objects.values_list("pk", "name", "priority", "parent_id").order_by("name"))
    names = {pk: name for pk, name, _, _ in rows}
    children: dict[int, list[str]] = {}
    for _pk, name, _prio, parent_id in rows:
        if parent_id is not None:
            children.setdefault(parent_id, []).append(name)
    return [
        {
            "name": name,
            "priority": priority_label(priority),
            "parent": names.get(parent_id, "") if parent_id else "",
            "children": ",".join(sorted(children.get(pk, []))),
        }
        for pk, name, priority, parent_id in rows
    ]


def format_listing(rows: list[dict[str, str]]) -> str:
    """The listing as an aligned text table, as kubectl prints it."""
    headers = ("NAME", "PRIORITY", "PARENT", "CHILDREN")
    keys = ("name", "priority", "parent", "children")
    table = [headers, *[tuple(row[k] for k in keys) for row in rows]]
    widths = [max(len(r[i]) for r in table) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in table]
    return "\n".join(lines) + "\n"
