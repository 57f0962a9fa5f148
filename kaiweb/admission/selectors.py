"""Reads of the admission checks and of the bindings pages."""

from __future__ import annotations

from typing import Any

from kaiweb.admission.models import NamespaceQueueBinding
from kaiweb.admission.rules import QueueFacts
from kaiweb.queues.models import Queue

#: child queues named in a refusal at most (one query, bounded)
MAX_CHILDREN = 6


def queue_facts(queue: str, namespace: str) -> QueueFacts:
    """Whether ``queue`` exists, its first child queues, and the queues bound to ``namespace`` (three
    small queries whatever the size of the tree)."""
    found = Queue.objects.filter(name=queue[:253]).values_list("pk", flat=True).first()
    bound = tuple(NamespaceQueueBinding.objects.filter(namespace=namespace[:63])
                  .order_by("queue__name").values_list("queue__name", flat=True))
    if found is None:
        return QueueFacts(exists=False, bound=bound)
    children = tuple(Queue.objects.filter(parent_id=found).order_by("name").values_list("name", flat=True)[:MAX_CHILDREN])
    return QueueFacts(exists=True, children=children, bound=bound)


def bindings() -> Any:
    return NamespaceQueueBinding.objects.select_related("queue").order_by("namespace", "queue__name")
