"""Writes of the reports app: run a report over a period, store it, send it by e-mail."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from django.conf import settings
from django.core.mail import EmailMessage

from kaiweb.reports.choices import CONTENT_TYPES, ReportFormat, RunStatus
from kaiweb.reports.compute import collect_inputs, compute_lines, period_window
from kaiweb.reports.models import ReportDefinition, ReportRun
from kaiweb.reports.render import render

log = logging.getLogger(__name__)


def filename(run: ReportRun, fmt: str) -> str:
    slug = "".join(c if c.isalnum() or c in "-_" else "-" for c in run.definition.name.lower()).strip("-") or "report"
    return f"{slug}-{run.period_start:%Y%m%d}-{run.period_end:%Y%m%d}.{fmt}"


def file_for(run: ReportRun, fmt: str) -> tuple[bytes, str, str]:
    """(content, file name, content type) of a run's file: as stored, else rendered from its stored lines."""
    if fmt not in ReportFormat.values:
        raise ValueError(f"format: must be csv, json or pdf, not {fmt!r}")
    stored = {"csv": run.csv_content.encode() if run.csv_content else b"",
              "json": run.json_content.encode() if run.json_content else b"",
              "pdf": bytes(run.pdf_content or b"")}[fmt]
    content = stored or render(fmt, run.lines, run.inputs, run.pk)
    return content, filename(run, fmt), CONTENT_TYPES[fmt]


def run_report(definition: ReportDefinition, start: datetime, end: datetime, *, trigger: str = "manual",
               now: datetime | None = None, send: bool = True) -> ReportRun:
    """Read the inputs, compute the lines, produce the files, store the run and e-mail it.

    A failure is recorded on the run (status failed, the error) rather than raised.
    """
    now = now or datetime.now(tz=UTC)
    run = ReportRun.objects.create(definition=definition, period_start=start, period_end=end, trigger=trigger,
                                   started_at=now)
    try:
        run.inputs = collect_inputs(definition, start, end, now=now)
        run.lines = compute_lines(run.inputs)
        formats = set(definition.formats or [])
        if "csv" in formats:
            run.csv_content = render("csv", run.lines, run.inputs, run.pk).decode()
        if "json" in formats:
            run.json_content = render("json", run.lines, run.inputs, run.pk).decode()
        if "pdf" in formats:
            run.pdf_content = render("pdf", run.lines, run.inputs, run.pk)
        run.status = RunStatus.SUCCEEDED
    except Exception as exc:  # a run that fails is recorded and shown, never lost
        log.exception("report %s: run %s failed", definition.name, run.pk)
        run.status = RunStatus.FAILED
        run.error = f"{exc.__class__.__name__}: {exc}"
    run.finished_at = datetime.now(tz=UTC)
    run.save()
    if send and run.status == RunStatus.SUCCEEDED and definition.recipients:
        send_run(run)
    return run


def send_run(run: ReportRun) -> int:
    """E-mail the run's files to the definition's recipients through Django's e-mail backend."""
    definition = run.definition
    total = run.lines.get("total", {})
    body = [f"Usage report {definition.name!r} for {run.period_start:%Y-%m-%d} to {run.period_end:%Y-%m-%d} (UTC).",
            "",
            f"GPU-hours allocated: {total.get('gpu_hours_allocated', 0.0):.1f}"]
    if total.get("gpu_hours_used") is not None:
        body.append(f"GPU-hours used: {total['gpu_hours_used']:.1f}")
    if total.get("cost") is not None:
        body.append(f"Showback cost: {total['cost']:.2f} {run.lines.get('currency', '')}")
    idle = run.inputs.get("idle") or []
    if idle:
        body.append(f"Jobs holding idle GPUs when the report ran: {len(idle)}")
    message = EmailMessage(subject=f"[kaiweb] {definition.name}: {run.period_start:%Y-%m-%d} – {run.period_end:%Y-%m-%d}",
                           body="\n".join(body) + "\n", from_email=settings.KAI_REPORTS_FROM_EMAIL,
                           to=list(definition.recipients))
    for fmt in definition.formats or []:
        content, name, content_type = file_for(run, fmt)
        message.attach(name, content, content_type.split(";")[0])
    try:
        sent = message.send()
    except OSError as exc:
        run.error = f"e-mail: could not be sent ({exc})"
        run.save(update_fields=["error"])
        log.warning("report %s: %s", definition.name, run.error)
        return 0
    run.emailed_to = list(definition.recipients)
    run.save(update_fields=["emailed_to"])
    return sent


def run_scheduled(definition: ReportDefinition, now: datetime | None = None) -> ReportRun | None:
    """The beat's run: the period that has just ended, once (a repeated trigger sends nothing twice)."""
    now = now or datetime.now(tz=UTC)
    start, end = period_window(definition.period, now)
    if definition.runs.filter(period_start=start, period_end=end, status=RunStatus.SUCCEEDED).exists():
        return None
    return run_report(definition, start, end, trigger="schedule", now=now)
