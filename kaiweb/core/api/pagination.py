"""Pagination of every API list: `?limit=` is capped, so one request reads a bounded number of rows."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.pagination import LimitOffsetPagination

#: The largest offset honoured (past it a page is empty anyway; a huge one would overflow the database).
MAX_OFFSET = 2**31 - 1


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """DRF's limit/offset pagination with `limit` at most KAI_API_MAX_PAGE_SIZE (a larger one is cut to it)."""

    @property
    def max_limit(self) -> int:  # type: ignore[override]  # read from settings on each request, where DRF has a class attribute
        return int(settings.KAI_API_MAX_PAGE_SIZE)

    def get_offset(self, request: Any) -> int:
        return min(super().get_offset(request), MAX_OFFSET)
