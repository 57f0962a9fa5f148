"""Pagination of every API list: `?limit=` is capped, so one request reads a bounded number of rows;
a `limit` or `offset` that is not a whole number in range is a 400 naming it (not the default page).
A list counts at most KAI_LIST_WINDOW rows (`count_capped` says there are more) and an offset
past that window is a 400, so a page costs the same however large the table grows.

The append-only histories (a view with ``keyset_paging = True``: audit, cycles, decisions,
preemptions, pending reasons, queue statuses) also page by cursor, to read them whole whatever
their size: each page in their default order carries `next_cursor`, the position after its last
row (its ordering fields' values), and `?cursor=` continues from there with a `WHERE` on those
fields, so a page deep in a history costs what the first one costs. A row added meanwhile is
never shown twice and never makes another one be skipped. A cursor that is not one, a cursor
with `offset`, or a cursor with an `ordering` other than the list's own is a 400 naming it.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from django.conf import settings
from django.core.exceptions import FieldDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Q
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.utils.urls import remove_query_param, replace_query_param

from kaiweb.core.queries import bounded_count


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """DRF's limit/offset pagination with `limit` at most KAI_API_MAX_PAGE_SIZE (a larger one is cut
    to it), `offset` at most KAI_LIST_WINDOW and the count bounded by it."""

    count_capped = False
    cursor_query_param = "cursor"
    keyset: tuple[str, ...] = ()  # the ordering a cursor follows on this request (empty: none)
    cursor_mode = False
    next_cursor: str | None = None

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> Any:
        self.keyset = _keyset(request, view)
        raw = request.query_params.get(self.cursor_query_param)
        self.cursor_mode = raw is not None
        self.next_cursor = None
        if raw is not None:
            if not getattr(view, "keyset_paging", False):
                raise ValidationError({self.cursor_query_param: ["this list does not page by cursor; use offset"]})
            if not self.keyset:
                raise ValidationError({self.cursor_query_param: [
                    "a cursor follows the list's own order: drop `ordering` (or give its default)"]})
            if self.offset_query_param in request.query_params:
                raise ValidationError({self.cursor_query_param: ["give either cursor or offset, not both"]})
            queryset = queryset.filter(_after(queryset.model, self.keyset, _decode(raw, queryset.model, self.keyset)))
        page = super().paginate_queryset(queryset, request, view)
        if self.keyset and page:
            last = page[-1]
            if self.offset + len(page) < self.count or self.count_capped:
                self.next_cursor = _encode(last, self.keyset)
        return page

    def get_next_link(self) -> str | None:
        link: str | None
        if not self.cursor_mode:
            link = super().get_next_link()
        elif self.next_cursor is None:
            link = None
        else:
            url = remove_query_param(self.request.build_absolute_uri(), self.offset_query_param)
            link = replace_query_param(url, self.cursor_query_param, self.next_cursor)
        return link

    def get_previous_link(self) -> str | None:
        link: str | None = None if self.cursor_mode else super().get_previous_link()
        return link

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
        if self.keyset or self.cursor_mode:
            response.data["next_cursor"] = self.next_cursor
        return response

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        out = super().get_paginated_response_schema(schema)
        out["properties"]["count_capped"] = {
            "type": "boolean",
            "description": "true when the list has more rows than `count` (KAI_LIST_WINDOW): filter to reach them",
        }
        out["properties"]["next_cursor"] = {
            "type": "string", "nullable": True,
            "description": "append-only histories in their own order: pass as `cursor` for the rows after this page "
                           "(null on the last page); with `cursor`, `count` counts the rows from there on",
        }
        out["required"] = [*out.get("required", []), "count_capped"]
        return out

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        params: list[dict[str, Any]] = super().get_schema_operation_parameters(view)
        if getattr(view, "keyset_paging", False):
            params.append({
                "name": self.cursor_query_param, "required": False, "in": "query",
                "description": "Continue after a page: the `next_cursor` it gave (not with `offset` or another `ordering`).",
                "schema": {"type": "string"},
            })
        return params


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


def _keyset(request: Any, view: Any) -> tuple[str, ...]:
    """The ordering a cursor follows for this request: the view's own (``ordering``) when it pages by
    cursor and the request asks for no other order; else empty."""
    if not getattr(view, "keyset_paging", False):
        return ()
    own = tuple(getattr(view, "ordering", ()) or ())
    asked = request.query_params.get(api_settings.ORDERING_PARAM)  # the OrderingFilter's parameter
    if asked is not None and tuple(f.strip() for f in asked.split(",") if f.strip()) != own:
        return ()
    return own


def _encode(row: Any, keyset: tuple[str, ...]) -> str:
    values = []
    for term in keyset:
        value = getattr(row, term.lstrip("-"))
        values.append(value.isoformat() if hasattr(value, "isoformat") else value)
    return base64.urlsafe_b64encode(json.dumps(values, separators=(",", ":")).encode()).decode().rstrip("=")


def _decode(raw: str, model: Any, keyset: tuple[str, ...]) -> list[Any]:
    """The values a cursor holds, each as its field's type; a 400 naming `cursor` if it is not one."""
    bad = ValidationError({"cursor": ["not a cursor of this list: pass the `next_cursor` a page gave"]})
    if len(raw) > 512:
        raise bad
    try:
        values = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        if not isinstance(values, list) or len(values) != len(keyset):
            raise bad
        return [model._meta.get_field(term.lstrip("-")).to_python(v) for term, v in zip(keyset, values, strict=True)]
    except (ValueError, TypeError, binascii.Error, DjangoValidationError, FieldDoesNotExist):
        raise bad from None


def _after(model: Any, keyset: tuple[str, ...], values: list[Any]) -> Q:
    """Rows strictly after ``values`` in the order ``keyset``: (a, b) after (x, y) is a beyond x, or
    a = x and b beyond y (beyond: less for a descending field, greater for an ascending one)."""
    out: Q | None = None
    equal = Q()
    for term, value in zip(keyset, values, strict=True):
        name = term.lstrip("-")
        beyond = equal & Q(**{f"{name}__lt" if term.startswith("-") else f"{name}__gt": value})
        out = beyond if out is None else out | beyond
        equal &= Q(**{name: value})
    return out if out is not None else Q()
