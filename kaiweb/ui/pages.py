"""What every HTML view shares: htmx partials, pagination and filtering through the API's FilterSets."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.paginator import EmptyPage, PageNotAnInteger, Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.functional import cached_property

from kaiweb.core.queries import bounded_count

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


def per_page_of(request: HttpRequest, default: int = DEFAULT_PER_PAGE) -> int:
    """?per_page= when it is one of PER_PAGE_CHOICES, else `default` (never an error)."""
    try:
        per_page = int(request.GET.get("per_page", default))
    except ValueError:
        return default
    return per_page if per_page in PER_PAGE_CHOICES else default


class BoundedPaginator(Paginator):
    """Django's paginator over at most KAI_LIST_WINDOW rows (``core.queries.bounded_count``):
    counting never reads past them, pages past them are not offered, and ``capped`` says the
    list has more (the page shows "10000+", and filters narrow it)."""

    @cached_property
    def count(self) -> int:
        rows = self.object_list
        # a django-tables2 table pages its rows, which wrap the queryset: count that
        data = getattr(getattr(rows, "data", None), "data", None)
        n, self.capped = bounded_count(data if isinstance(data, QuerySet) else rows)
        return n

    capped = False


def paginate(request: HttpRequest, object_list: Any, default: int = DEFAULT_PER_PAGE) -> Any:
    """A page of `object_list` from ?page= and ?per_page= (bad values fall back, never a 404/500)."""
    per_page = per_page_of(request, default)
    paginator = BoundedPaginator(object_list, per_page)
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

    per_page = per_page_of(request, default)
    try:
        page = max(1, int(request.GET.get("page", 1)))
    except ValueError:
        page = 1
    RequestConfig(request, paginate=False).configure(table)
    try:
        table.paginate(paginator_class=BoundedPaginator, page=page, per_page=per_page)
    except EmptyPage:
        table.paginate(paginator_class=BoundedPaginator, page=table.paginator.num_pages, per_page=per_page)
    table.page.per_page_choices = PER_PAGE_CHOICES
    return {"table": table, "page_obj": table.page, "per_page_choices": PER_PAGE_CHOICES}


class ListSelect(forms.Select):
    """A one-line select that submits a list, for MultipleChoiceFilters in a compact filter bar."""

    allow_multiple_selected = False

    def value_from_datadict(self, data: Any, files: Any, name: str) -> Any:
        getter = getattr(data, "getlist", None)
        values = getter(name) if getter else ([data[name]] if name in data else [])
        return [v for v in values if v not in ("", None)]

    def format_value(self, value: Any) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, (list, tuple)):
            value = [value]
        return [str(v) for v in value]


def filter_fields(filterset: Any, shown: list[str], choices: dict[str, list[tuple[str, str]]] | None = None,
                  labels: dict[str, str] | None = None) -> list[Any]:
    """The bound fields of `shown`, with selects for fields that have a known set of values.

    Multiple-choice filters become a one-line select (still submitting a list, so the API's
    `?state=pending&state=running` form keeps working); `choices` turns a text filter (a queue
    name, a priority class) into a select of the existing values.
    """
    form = filterset.form
    out = []
    for name in shown:
        if name not in form.fields:
            continue
        field = form.fields[name]
        if name in (choices or {}):
            field.widget = forms.Select(choices=[("", "any"), *choices[name]])
        elif isinstance(field, forms.NullBooleanField):
            # "Unknown" reads like a value; an unset filter is "any".
            field.widget = forms.Select(choices=[("", "any"), ("true", "yes"), ("false", "no")])
        elif isinstance(field, forms.MultipleChoiceField):
            field.widget = ListSelect(choices=[("", "any"), *field.choices])
        if isinstance(field, forms.ChoiceField) and not isinstance(field, forms.MultipleChoiceField) \
                and name not in (choices or {}):
            # django-filter's ChoiceField adds its own "---------" choice: show "any" instead.
            field.widget = forms.Select(choices=[("", "any"), *[c for c in field.choices if c[0] not in ("", None)]])
        if labels and name in labels:
            field.label = labels[name]
        # Bound fields are cached with the label they had when the form was validated.
        form._bound_fields_cache.pop(name, None)
        out.append(form[name])
    return out


def filter_context(request: HttpRequest, filterset: Any, shown: list[str],
                   choices: dict[str, list[tuple[str, str]]] | None = None,
                   labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Context for includes/filter_form.html: the visible filters, and the other query parameters
    (filters the page does not show, e.g. `queue_tree` from a link) carried as hidden inputs."""
    fields = filter_fields(filterset, shown, choices, labels)
    names = {f.name for f in fields} | {"page"}
    hidden = [(k, v) for k in request.GET for v in request.GET.getlist(k) if k not in names]
    return {"filters": fields, "hidden_params": hidden}
