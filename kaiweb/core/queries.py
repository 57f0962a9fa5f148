"""Query helpers shared by the apps' selectors."""

from __future__ import annotations

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
