"""What every HTML view shares: htmx partials, pagination and filtering through the API's FilterSets."""

from __future__ import annotations

from typing import Any

from django.core.paginator import EmptyPage, PageNotAnInteger, Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

PER_PAGE_CHOICES = (25, 50, 100, 250)
DEFAULT_PER_PAGE = 50


def render_page(request: HttpRequest, template: str, context: dict[str, Any], partial: str | None = None,
                status: int = 200) -> HttpResponse:
    """The whole page, or only `partial` when htmx asks for a refresh of one panel (STYLE §11).

    A boosted navigation (hx-boost) wants the whole page, so only non-boosted htmx requests get
    the fragment.
    """
    htmx = getattr(request, "htmx", None)
    if partial and htmx and not htmx.boosted:
        return render(request, partial, context, status=status)
    return render(request, template, context, status=status)


def paginate(request: HttpRequest, object_list: Any, default: int = DEFAULT_PER_PAGE) -> Any:
    """A page of `object_list` from ?page= and ?per_page= (bad values fall back, never a 404/500)."""
    try:
        per_page = int(request.GET.get("per_page", default))
    except ValueError:
        per_page = default
    if per_page not in PER_PAGE_CHOICES:
        per_page = default
    paginator = Paginator(object_list, per_page)
    try:
        page = paginator.page(request.GET.get("page", 1))
    except PageNotAnInteger:
        page = paginator.page(1)
    except EmptyPage:
        page = paginator.page(paginator.num_pages)
    page.per_page_choices = PER_PAGE_CHOICES
    return page


def filter_queryset(request: HttpRequest, filterset_class: Any, queryset: Any) -> tuple[Any, Any]:
    """Apply the app's FilterSet (the same class the API uses) to the query string.

    Invalid filter values do not raise: the list is empty and the filter form shows the error
    next to the field, as the API answers 400 naming the field.
    """
    data = request.GET.copy()
    for key in ("page", "per_page", "sort"):
        data.pop(key, None)
    fs = filterset_class(data=data, queryset=queryset, request=request)
    if fs.is_valid():
        return fs, fs.qs
    return fs, queryset.none()


def active_filters(filterset: Any) -> bool:
    """True when any filter field has a value (the empty state then says "clear the filters")."""
    return any(v not in (None, "", [], ()) for k, v in getattr(filterset, "data", {}).items()
               if k in getattr(filterset, "filters", {}))


def configure_table(request: HttpRequest, table: Any, default: int = DEFAULT_PER_PAGE) -> dict[str, Any]:
    """Sort and paginate a django-tables2 table from the query string; the context the list templates use."""
    from django_tables2 import RequestConfig

    try:
        per_page = int(request.GET.get("per_page", default))
    except ValueError:
        per_page = default
    if per_page not in PER_PAGE_CHOICES:
        per_page = default
    try:
        page = max(1, int(request.GET.get("page", 1)))
    except ValueError:
        page = 1
    RequestConfig(request, paginate=False).configure(table)
    try:
        table.paginate(page=page, per_page=per_page)
    except EmptyPage:
        table.paginate(page=table.paginator.num_pages, per_page=per_page)
    table.page.per_page_choices = PER_PAGE_CHOICES
    return {"table": table, "page_obj": table.page, "per_page_choices": PER_PAGE_CHOICES}
