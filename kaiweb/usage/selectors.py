"""Reads of the usage app: buckets and per-queue totals over a window."""

from __future__ import annotations

import datetime as dt

from django.db.models import Count, QuerySet, Sum

from kaiweb.usage.models import UsageBucket


def buckets() -> QuerySet[UsageBucket]:
    return UsageBucket.objects.select_related("queue").order_by("-start", "queue__name", "resource")


def usage_totals(
    start: dt.datetime, end: dt.datetime, *, resource: str | None = None, queue_names: list[str] | None = None,
    queue_ids: list[int] | None = None,
) -> list[dict[str, object]]:
    """Resource-seconds per queue and resource for buckets starting in [start, end), one query.

    Each row: queue (and queue_id), resource, value (resource-seconds), hours (value / 3600, e.g. GPU-hours),
    average (value / window seconds: the mean allocated amount over the window), buckets.
    """
    qs = UsageBucket.objects.filter(start__gte=start, start__lt=end)
    if resource:
        qs = qs.filter(resource=resource)
    if queue_names:
        qs = qs.filter(queue__name__in=queue_names)
    if queue_ids is not None:
        qs = qs.filter(queue_id__in=queue_ids)
    window = max((end - start).total_seconds(), 1.0)
    rows = (
        qs.values("queue_id", "queue__name", "resource")
        .annotate(value=Sum("value"), buckets=Count("id"))
        .order_by("queue__name", "resource")
    )
    return [
        {
            "queue": row["queue__name"],
            "queue_id": row["queue_id"],
            "resource": row["resource"],
            "value": float(row["value"] or 0.0),
            "hours": float(row["value"] or 0.0) / 3600.0,
            "average": float(row["value"] or 0.0) / window,
            "buckets": row["buckets"],
        }
        for row in rows
    ]
