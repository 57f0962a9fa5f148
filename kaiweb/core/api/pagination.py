"""Pagination of every API list: `?limit=` is capped, so one request reads a bounded number of rows;
a `limit` or `offset` that is not a whole number in range is a 400 naming it (not the default page)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination

#: The largest offset honoured (past it a page is empty anyway; a huge one would overflow the database).
MAX_OFFSET = 2**31 - 1


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """DRF's limit/offset pagination with `limit` at most KAI_API_MAX_PAGE_SIZE (a larger one is cut to it)."""

    @property
    def max_limit(self) -> int:  # type: ignore[override]  # read from settings on each request, where DRF has a class attribute
        return int(settings.KAI_API_MAX_PAGE_SIZE)

    def get_limit(self, request: Any) -> int | None:
        value = _whole(request, self.limit_query_param, least=1)
        return self.default_limit if value is None else min(value, self.max_limit)

    def get_offset(self, request: Any) -> int:
        value = _whole(request, self.offset_query_param, least=0)
        return 0 if value is None else min(value, MAX_OFFSET)


def _whole(request: Any, name: str, *, least: int) -> int | None:
    """The query parameter `name` as a whole number ≥ `least`; None when it is not given."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = least - 1
    if value < least:
        raise ValidationError({name: [f"must be a whole number of at least {least}, not {raw[:40]!r}"]})
    return value
