"""The webhook endpoints the API server calls, and the page of namespace→queue bindings."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from kaiweb.accounts import roles
from kaiweb.admission import review, selectors, services
from kaiweb.admission.forms import BindingForm
from kaiweb.admission.models import NamespaceQueueBinding
from kaiweb.audit.choices import AuditSource

logger = logging.getLogger(__name__)


def _answer(request: HttpRequest, verdict: Callable[[dict[str, Any]], dict[str, Any]]) -> JsonResponse:
    """Read the AdmissionReview within the size limit (never past it), answer the verdict, or a 4xx."""
    limit = int(settings.KAI_ADMISSION_MAX_BYTES)
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    try:
        if declared > limit:
            raise review.BadReview(413, f"the AdmissionReview is larger than {limit} bytes (KAI_ADMISSION_MAX_BYTES)")
        body = request.read(limit + 1)  # request.body would apply the forms' limit, not ours
        admission_request = review.read_review(body, content_type=request.content_type or "", limit=limit)
    except review.BadReview as bad:
        logger.warning("admission: %s %s: %s", request.method, request.path, bad)
        return JsonResponse({"detail": str(bad)}, status=bad.status)
    return JsonResponse(verdict(admission_request))


@csrf_exempt
@login_not_required
@require_http_methods(["POST"])
def mutate(request: HttpRequest) -> JsonResponse:
    """The mutating webhook (pods, on create)."""
    return _answer(request, services.mutate)


@csrf_exempt
@login_not_required
@require_http_methods(["POST"])
def validate(request: HttpRequest) -> JsonResponse:
    """The validating webhook (pods and PodGroups, on create and update)."""
    return _answer(request, services.validate)


def bindings(request: HttpRequest) -> HttpResponse:
    """Which queues each namespace may use; platform admins add and remove bindings here."""
    from kaiweb.ui.pages import render_page

    can_edit = roles.is_platform_admin(request.user)
    form = BindingForm()
    if request.method == "POST":
        if not can_edit:
            raise PermissionDenied("only platform admins change namespace bindings")
        if request.POST.get("remove"):
            found = NamespaceQueueBinding.objects.filter(pk=str(request.POST["remove"])[:18]).first()
            if found is not None:
                services.unbind(found, actor=request.user, source=AuditSource.UI)
            return redirect("admission:bindings")
        form = BindingForm(request.POST)
        if form.is_valid():
            try:
                services.bind(form.cleaned_data["namespace"], form.cleaned_data["queue"],
                              actor=request.user, source=AuditSource.UI)
            except ValidationError as exc:
                for field, messages in exc.message_dict.items():
                    form.add_error(field if field in form.fields else None, messages)
            else:
                return redirect("admission:bindings")
    rows = list(selectors.bindings())
    namespaces: dict[str, list[NamespaceQueueBinding]] = {}
    for row in rows:
        namespaces.setdefault(row.namespace, []).append(row)
    return render_page(request, "admission/bindings.html",
                       {"namespaces": namespaces, "form": form, "can_edit": can_edit, "count": len(rows)},
                       status=400 if form.errors else 200)
