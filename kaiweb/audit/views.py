"""The audit log page: who changed what, when, before and after."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from kaiweb.audit.display import readable_changes
from kaiweb.audit.models import AuditEntry
from kaiweb.ui.pages import active_filters, filter_context, filter_queryset, paginate, render_page


def _filterset_class() -> Any:
    from kaiweb.audit.filtersets import AuditEntryFilterSet

    return AuditEntryFilterSet


def audit_list(request: HttpRequest) -> HttpResponse:
    filterset, qs = filter_queryset(request, _filterset_class(), AuditEntry.objects.select_related("actor").order_by("-at", "-id"))
    page = paginate(request, qs)
    context = {
        "filterset": filterset,
        **filter_context(request, filterset, ["actor", "action", "source", "object_type", "object_repr", "since",
                                              "until"],
                         labels={"object_repr": "Object", "object_type": "Type", "since": "Since (ISO time)"}),
        "filtered": active_filters(filterset),
        "page_obj": page,
        "entries": list(zip(page.object_list, readable_changes(page.object_list), strict=True)),
        "any": AuditEntry.objects.exists(),
    }
    return render_page(request, "audit/list.html", context)
