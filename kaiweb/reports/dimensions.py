"""Where a queue's usage is charged beyond the queue itself: its node pool, department and project.

One rule for every report (the usage page, its CSV and JSON, the scheduled reports):

* pool: the pool the org layer made the queue for (`OwnerQueue`), else the queue's
  `kai.scheduler/node-pool` label, else `default` (as KAI Resource Management reads it);
* project: the project owning the queue or the nearest ancestor a project owns (`OwnerQueue`, else
  the `project` label KRM puts on a project's queues), else none;
* department: the org's department owning the queue or an ancestor (a project's department counts),
  else KRM's `kai.resources/department-name` label on the queue or an ancestor, else, as reports read
  a department before the org layer, the queue's top-level ancestor. So a tree made by hand keeps the
  departments its old reports showed, and an org-made tree is charged to the org's departments.

Two queries, whatever the size of the tree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kaiweb.org.choices import DEPARTMENT_LABEL, PROJECT_LABEL
from kaiweb.org.rules import labelled_pool

#: The project and department of usage no project or department holds.
NO_PROJECT = "(no project)"
NO_DEPARTMENT = "(no department)"
#: The GPU type of usage on a node whose GPU product is not known (as accounting records it).
UNKNOWN_GPU = "unknown"
#: The report's groupings read from these places, by the name the form and the URLs use.
PLACE_GROUPS = ("pool", "department", "project")


@dataclass(frozen=True, slots=True)
class QueuePlace:
    """Where a queue's usage is charged."""

    pool: str
    department: str
    project: str


@dataclass(frozen=True, slots=True)
class _Row:
    pk: int
    name: str
    parent_id: int | None
    labels: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Owner:
    pool: str
    project: str
    department: str


def _label(labels: Any, key: str) -> str:
    value = labels.get(key) if isinstance(labels, dict) else None
    return str(value) if value else ""


def places(rows: Iterable[Any] | None = None) -> dict[int, QueuePlace]:
    """Every queue's place, by queue id (`rows`: queues with id, name, parent_id and labels, else all)."""
    from kaiweb.org.models import OwnerQueue
    from kaiweb.queues.models import Queue

    if rows is None:
        rows = Queue.objects.only("id", "name", "parent_id", "labels")
    queues = {q.pk: _Row(q.pk, q.name, q.parent_id, q.labels if isinstance(q.labels, dict) else {}) for q in rows}
    owned: dict[int, _Owner] = {
        row["queue_id"]: _Owner(pool=row["node_pool__name"], project=row["project__name"] or "",
                                department=row["department__name"] or row["project__department__name"] or "")
        for row in OwnerQueue.objects.values("queue_id", "node_pool__name", "department__name", "project__name",
                                             "project__department__name")
    }

    def chain(pk: int) -> list[_Row]:
        out, seen, cur = [], set(), queues.get(pk)
        while cur is not None and cur.pk not in seen:  # the tree has no cycles, but never loop
            seen.add(cur.pk)
            out.append(cur)
            cur = queues.get(cur.parent_id) if cur.parent_id else None
        return out

    result: dict[int, QueuePlace] = {}
    for pk, q in queues.items():
        up = chain(pk)
        own = owned.get(pk)
        pool = own.pool if own else labelled_pool(q.labels)
        project = department = ""
        for anc in up:
            o = owned.get(anc.pk)
            project = project or (o.project if o else "") or _label(anc.labels, PROJECT_LABEL)
            department = department or (o.department if o else "") or _label(anc.labels, DEPARTMENT_LABEL)
            if o and o.project and not department:
                department = NO_DEPARTMENT  # an org project outside any department
            if project and department:
                break
        result[pk] = QueuePlace(pool=pool, department=department or up[-1].name, project=project or NO_PROJECT)
    return result


def place_of(place: QueuePlace, group: str) -> str:
    """The name a queue's usage is charged to under a grouping of PLACE_GROUPS."""
    if group not in PLACE_GROUPS:
        raise ValueError(f"group: must be one of {', '.join(PLACE_GROUPS)}, not {group!r}")
    return str(getattr(place, group))
