"""Query helpers shared by the apps' selectors."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce


def related_count(related: QuerySet, field: str) -> Coalesce:
    """Count of `related` rows whose `field` points at the outer row, as a correlated subquery.

    Unlike `annotate(n=Count("rel"))` this needs no GROUP BY over the whole outer table, so a
    paginated list costs one small subquery per row on the page instead of an aggregate of every row.
    """
    counted = (
        related.filter(**{field: OuterRef("pk")}).order_by().values(field).annotate(n=Count("pk")).values("n")[:1]
    )
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


def bounded_count(rows: Any, window: int | None = None) -> tuple[int, bool]:
    """How many rows a list has, counting at most `window` (KAI_LIST_WINDOW) of them: (the count,
    whether there are more). A query counts over `LIMIT window + 1`, so the cost does not grow
    with the table."""
    window = int(settings.KAI_LIST_WINDOW) if window is None else window
    n = rows.order_by().values("pk")[: window + 1].count() if isinstance(rows, QuerySet) else len(rows)
    return (window, True) if n > window else (n, False)
