"""Reads of the queues app: queues with their parent and children, listings, priority classes, memberships.

The tree with each queue's latest recorded status is read by ``kaiweb.scheduling.selectors``."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from kaiweb.core.queries import related_count
from kaiweb.queues.choices import PRIORITY_NAMES
from kaiweb.queues.models import PriorityClass, Queue, QueueMembership
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
