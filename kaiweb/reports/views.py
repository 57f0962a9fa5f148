"""Report pages: the definitions, a create/edit form, each definition's run history, a past run's files."""

from __future__ import annotations

from datetime import UTC, datetime

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Max
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from kaiweb.accounts import roles
from kaiweb.reports import services
from kaiweb.reports.choices import RUN_STATUS_BADGE, ReportFormat
from kaiweb.reports.compute import period_window
from kaiweb.reports.forms import ReportDefinitionForm
from kaiweb.reports.models import ReportDefinition, ReportRun
from kaiweb.ui.pages import paginate, render_page


def _require_admin(request: HttpRequest) -> None:
    if not roles.can_manage_platform(request.user):
        raise PermissionDenied("Only a platform admin may change report definitions or run them.")


def report_list(request: HttpRequest) -> HttpResponse:
    definitions = (ReportDefinition.objects.select_related("queue", "periodic_task")
                   .annotate(run_count=Count("runs"), last_run=Max("runs__started_at")))
    return render_page(request, "reports/list.html", {
        "definitions": definitions, "can_edit": roles.can_manage_platform(request.user)})


def report_edit(request: HttpRequest, pk: int | None = None) -> HttpResponse:
    _require_admin(request)
    instance = get_object_or_404(ReportDefinition, pk=pk) if pk else None
    form = ReportDefinitionForm(request.POST or None, instance=instance)
    if request.method == "POST" and form.is_valid():
        definition = form.save()
        messages.success(request, f"Report {definition.name!r} saved; it runs {definition.period}.")
        return redirect("reports:detail", pk=definition.pk)
    status = 400 if request.method == "POST" else 200
    return render_page(request, "reports/edit.html", {"form": form, "definition": instance}, status=status)


def report_detail(request: HttpRequest, pk: int) -> HttpResponse:
    definition = get_object_or_404(ReportDefinition.objects.select_related("queue", "periodic_task"), pk=pk)
    runs = paginate(request, definition.runs.only(
        "id", "period_start", "period_end", "status", "trigger", "started_at", "finished_at", "emailed_to", "error",
        "definition_id"), default=25)
    start, end = period_window(definition.period, datetime.now(tz=UTC))
    return render_page(request, "reports/detail.html", {
        "definition": definition, "runs": runs, "badge": RUN_STATUS_BADGE, "formats": ReportFormat.values,
        "next_period": (start, end), "can_edit": roles.can_manage_platform(request.user)})


@require_POST
def report_run_now(request: HttpRequest, pk: int) -> HttpResponse:
    """Run the definition now for the period that has just ended (or the current one with ?current=1)."""
    _require_admin(request)
    definition = get_object_or_404(ReportDefinition, pk=pk)
    now = datetime.now(tz=UTC)
    start, end = period_window(definition.period, now)
    if request.POST.get("current"):
        start, end = end, now
    run = services.run_report(definition, start, end, trigger="manual", now=now,
                              send=bool(request.POST.get("send")))
    if run.error:
        messages.error(request, f"Run {run.pk}: {run.error}")
    else:
        messages.success(request, f"Run {run.pk} done.")
    return redirect("reports:run_detail", pk=run.pk)


def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(ReportRun.objects.select_related("definition"), pk=pk)
    return render_page(request, "reports/run.html", {"run": run, "badge": RUN_STATUS_BADGE,
                                                     "formats": ReportFormat.values})


def run_download(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
    """A past run's file again, with the numbers it had (rendered from the run's stored lines)."""
    run = get_object_or_404(ReportRun.objects.select_related("definition"), pk=pk)
    if fmt not in ReportFormat.values or not run.lines:
        raise Http404("format: must be csv, json or pdf, of a run that succeeded")
    content, name, content_type = services.file_for(run, fmt)
    response = HttpResponse(content, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
