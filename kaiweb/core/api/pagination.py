"""Pagination of every API list: `?limit=` is capped, so one request reads a bounded number of rows;
a `limit` or `offset` that is not a whole number in range is a 400 naming it (not the default page).
A list counts at most KAI_LIST_WINDOW rows (`count_capped` says there are more) and an offset
past that window is a 400, so a page costs the same however large the table grows."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response

from kaiweb.core.queries import bounded_count


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """DRF's limit/offset pagination with `limit` at most KAI_API_MAX_PAGE_SIZE (a larger one is cut
    to it), `offset` at most KAI_LIST_WINDOW and the count bounded by it."""

    count_capped = False

    @property
    def max_limit(self) -> int:  # type: ignore[override]  # read from settings on each request, where DRF has a class attribute
        return int(settings.KAI_API_MAX_PAGE_SIZE)

    def get_limit(self, request: Any) -> int | None:
        value = _whole(request, self.limit_query_param, least=1)
        return self.default_limit if value is None else min(value, self.max_limit)

    def get_offset(self, request: Any) -> int:
        value = _whole(request, self.offset_query_param, least=0)
        window = int(settings.KAI_LIST_WINDOW)
        if value is not None and value > window:
            raise ValidationError({self.offset_query_param: [
                f"must be at most {window} (the rows a list reaches); narrow the list with filters"]})
        return 0 if value is None else value

    def get_count(self, queryset: Any) -> int:
        count, self.count_capped = bounded_count(queryset)
        return count

    def get_paginated_response(self, data: Any) -> Response:
        response = super().get_paginated_response(data)
        response.data["count_capped"] = self.count_capped
        return response

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        out = super().get_paginated_response_schema(schema)
        out["properties"]["count_capped"] = {
            "type": "boolean",
            "description": "true when the list has more rows than `count` (KAI_LIST_WINDOW): filter to reach them",
        }
        out["required"] = [*out.get("required", []), "count_capped"]
        return out


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
