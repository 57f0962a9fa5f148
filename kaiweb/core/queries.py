"""Query helpers shared by the apps' selectors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import connection
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


def update_rows(model: Any, rows: Sequence[Any], fields: Sequence[str]) -> int:
    """Write ``fields`` of each of ``rows`` (saved instances of ``model``) to the database: one
    ``UPDATE … WHERE pk = %s`` per row, sent together (``executemany``; psycopg pipelines them).

    What ``bulk_update`` does, without its one statement of a ``CASE`` per field over every row of
    the batch, whose building dominated the watcher's writes at thousands of pods. Values are
    prepared as ``save`` prepares them (JSON, times, foreign keys). Returns the rows sent."""
    rows = sorted((r for r in rows if r.pk is not None), key=lambda r: r.pk)  # one lock order
    if not rows or not fields:
        return 0
    meta = model._meta
    concrete = [meta.get_field(f) for f in fields]
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(f.column)} = %s" for f in concrete)
    sql = f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {quote(meta.pk.column)} = %s"
    params = [[*(f.get_db_prep_save(getattr(r, f.attname), connection) for f in concrete), r.pk] for r in rows]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
    return len(rows)
