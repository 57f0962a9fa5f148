"""Scheduled usage reports: periods, the numbers of a line, the UI, the beat entry, stored runs, e-mail."""

from __future__ import annotations

import csv
import io
import json
import socket
from datetime import UTC, datetime, timedelta
from email import message_from_bytes
from email import policy as email_policy

import pytest
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler

from kaiweb.celery import app as celery_app
from kaiweb.reports import services, tasks  # noqa: F401  (tasks: registers the beat's task by name)
from kaiweb.reports.compute import compute_lines, period_window
from kaiweb.reports.models import ReportDefinition, ReportRun
from kaiweb.scheduling.models import Decision
from kaiweb.usage.models import UsageBucket
from kaiweb.usage.views import compute_report
from tests.factories import (
    DecisionFactory,
    PreemptionEventFactory,
    SchedulingCycleFactory,
    UsageBucketFactory,
    WorkloadFactory,
)

WEEK = datetime(2026, 3, 2, tzinfo=UTC)  # a Monday
MINUTE = 60


def test_periods_are_the_last_complete_week_or_month():
    at = datetime(2026, 3, 4, 15, 30, tzinfo=UTC)  # a Wednesday
    assert period_window("weekly", at) == (datetime(2026, 2, 23, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC))
    assert period_window("monthly", at) == (datetime(2026, 2, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC))
    assert period_window("monthly", datetime(2026, 1, 1, 6, tzinfo=UTC)) == (
        datetime(2025, 12, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(ValueError, match="period"):
        period_window("daily", at)


@pytest.fixture
def usage_week(queue_tree):
    """team-training: 12 GPUs for 2 hours (quota 8: 4 over), half H100 half A100, 50 % used;
    team-research-b: 2 GPUs for 1 hour, utilization unknown. Minute buckets, as accounting writes them."""
    start = WEEK - timedelta(days=7) + timedelta(hours=10)
    for m in range(120):
        UsageBucketFactory(queue=queue_tree["team-training"], start=start + timedelta(minutes=m), width_seconds=60,
                           value=12 * MINUTE, measured_value=12 * MINUTE, used_value=6 * MINUTE,
                           by_gpu_model={"H100": 6 * MINUTE, "A100": 6 * MINUTE})
    for m in range(60):
        UsageBucketFactory(queue=queue_tree["team-research-b"], start=start + timedelta(minutes=m), width_seconds=60,
                           value=2 * MINUTE, by_gpu_model={"H100": 2 * MINUTE})
    # Outside the week: must not count.
    UsageBucketFactory(queue=queue_tree["team-training"], start=WEEK + timedelta(hours=1), width_seconds=60,
                       value=100 * MINUTE)
    return start


def _definition(queue_tree, **kw):
    fields = {"name": "dept-b weekly", "period": "weekly", "scope": "department", "queue": queue_tree["department-b"],
              "recipients": ["lead@example.com"], "formats": ["csv", "json", "pdf"],
              "prices": {"H100": 3.0, "*": 1.0}, "currency": "EUR"}
    fields.update(kw)
    return ReportDefinition.objects.create(**fields)


def test_a_department_report_has_a_line_per_leaf_with_every_number(queue_tree, usage_week):
    definition = _definition(queue_tree)
    run = services.run_report(definition, WEEK - timedelta(days=7), WEEK, now=WEEK, send=False)
    assert run.status == "succeeded", run.error
    lines = {line["name"]: line for line in run.lines["lines"]}
    assert set(lines) == {"team-training", "team-research-b"}
    t = lines["team-training"]
    assert t["gpu_hours_allocated"] == pytest.approx(24.0)
    assert t["gpu_hours_deserved"] == pytest.approx(8 * 168)
    assert t["gpu_hours_over_quota"] == pytest.approx(8.0)  # (12 − 8) GPUs × 2 h
    assert t["gpu_hours_by_model"] == {"A100": pytest.approx(12.0), "H100": pytest.approx(12.0)}
    assert t["gpu_hours_used"] == pytest.approx(12.0)
    assert t["utilization_percent"] == pytest.approx(50.0)
    assert t["cost"] == pytest.approx(12 * 3.0 + 12 * 1.0)
    r = lines["team-research-b"]
    assert r["gpu_hours_allocated"] == pytest.approx(2.0)
    assert r["gpu_hours_over_quota"] == 0
    assert r["gpu_hours_used"] is None
    assert r["utilization_percent"] is None
    total = run.lines["total"]
    assert total["gpu_hours_allocated"] == pytest.approx(26.0)
    assert total["gpu_hours_deserved"] == pytest.approx(16 * 168)
    assert total["gpu_hours_by_model"]["H100"] == pytest.approx(14.0)


def test_the_lines_equal_the_usage_page_for_the_same_window(queue_tree, usage_week):
    start, end = WEEK - timedelta(days=7), WEEK
    run = services.run_report(_definition(queue_tree, scope="cluster", queue=None), start, end, now=end, send=False)
    page = compute_report({"since": start, "until": end, "resource": "gpu", "group": "department", "queue": None})
    page_hours = {row["name"]: row["hours"] for row in page["table"]}
    report_hours = {line["name"]: line["gpu_hours_allocated"] for line in run.lines["lines"] if
                    line["gpu_hours_allocated"]}
    assert report_hours == pytest.approx(page_hours)
    assert run.lines["total"]["gpu_hours_allocated"] == pytest.approx(page["grand"])


def test_queueing_delay_and_job_counts_come_from_the_period(queue_tree, usage_week):
    q = queue_tree["team-training"]
    start = WEEK - timedelta(days=7)
    cycle = SchedulingCycleFactory(started_at=start + timedelta(hours=1))
    waits = [60, 120, 180, 240, 600]
    for i, wait in enumerate(waits):
        submitted = start + timedelta(hours=1 + i)
        w = WorkloadFactory(name=f"job-{i}", queue=q, submitted_at=submitted,
                            finished_at=submitted + timedelta(hours=1) if i < 2 else None)
        DecisionFactory(cycle=cycle, kind="bind", status="applied", workload=w,
                        applied_at=submitted + timedelta(seconds=wait))
    before = WorkloadFactory(name="old", queue=q, submitted_at=start - timedelta(days=3),
                             last_start_at=start - timedelta(days=2))
    PreemptionEventFactory(cycle=cycle, victim=before, victim_ref="team/old", at=start + timedelta(days=1))
    run = services.run_report(_definition(queue_tree), start, WEEK, now=WEEK, send=False)
    line = next(line for line in run.lines["lines"] if line["name"] == "team-training")
    assert Decision.objects.count() == 5
    assert line["jobs_started"] == 5
    assert line["jobs_finished"] == 2
    assert line["jobs_preempted"] == 1
    assert line["queueing_delay_avg_seconds"] == pytest.approx(sum(waits) / 5)
    assert line["queueing_delay_p90_seconds"] == pytest.approx(456.0)  # linear interpolation, numpy's default


def test_a_stored_run_reproduces_its_numbers_after_the_data_changed(client, viewer, queue_tree, usage_week):
    run = services.run_report(_definition(queue_tree), WEEK - timedelta(days=7), WEEK, now=WEEK, send=False)
    first_csv = run.csv_content
    UsageBucket.objects.filter(queue=queue_tree["team-training"]).update(value=0)
    client.force_login(viewer)
    again = client.get(f"/reports/runs/{run.pk}/csv/")
    assert again.status_code == 200
    assert again.content.decode() == first_csv
    rows = {r["line"]: r for r in csv.DictReader(io.StringIO(first_csv))}
    assert float(rows["team-training"]["gpu_hours_allocated"]) == pytest.approx(24.0)
    assert float(rows["team-training"]["gpu_hours[H100]"]) == pytest.approx(12.0)
    stored = ReportRun.objects.get(pk=run.pk)
    assert compute_lines(stored.inputs) == stored.lines  # the inputs alone give the same lines
    # A format the run did not store is rendered from its stored lines, with the same numbers.
    stored.json_content = ""
    stored.save()
    doc = json.loads(client.get(f"/reports/runs/{run.pk}/json/").content)
    assert doc["total"]["gpu_hours_allocated"] == pytest.approx(26.0)
    pdf = client.get(f"/reports/runs/{run.pk}/pdf/")
    assert pdf["Content-Type"] == "application/pdf"
    assert pdf.content.startswith(b"%PDF")
    assert client.get(f"/reports/runs/{run.pk}/xls/").status_code == 404


def test_the_form_names_the_field_of_each_error(client, platform_admin, queue_tree):
    client.force_login(platform_admin)
    response = client.post("/reports/new/", {
        "name": "x", "period": "weekly", "scope": "department", "queue": "team-training",
        "recipients": "ok@example.com, not-an-address", "prices": "H100 = cheap", "currency": "USD"})
    assert response.status_code == 400
    form = response.context["form"]
    assert "not-an-address" in form.errors["recipients"][0]
    assert "choose at least one" in form.errors["formats"][0]
    assert "'cheap' is not a number" in form.errors["prices"][0]
    assert not ReportDefinition.objects.exists()
    response = client.post("/reports/new/", {
        "name": "x", "period": "weekly", "scope": "department", "queue": "team-training", "formats": ["csv"],
        "recipients": "", "prices": "", "currency": "USD"})
    assert "has a parent" in response.context["form"].errors["queue"][0]


def test_a_viewer_may_read_but_not_define_reports(client, viewer, queue_tree):
    client.force_login(viewer)
    assert client.get("/reports/").status_code == 200
    assert client.get("/reports/new/").status_code == 403
    assert client.post("/reports/new/", {"name": "x"}).status_code == 403


def test_a_definition_made_in_the_page_gets_a_beat_entry_that_runs_it(client, platform_admin, queue_tree,
                                                                       usage_week):
    client.force_login(platform_admin)
    response = client.post("/reports/new/", {
        "name": "cluster monthly", "period": "monthly", "scope": "cluster", "queue": "",
        "recipients": "a@example.com\nb@example.com", "formats": ["csv", "pdf"], "prices": "* = 2",
        "currency": "USD", "enabled": "on"})
    assert response.status_code == 302, response.context["form"].errors if response.context else ""
    definition = ReportDefinition.objects.get(name="cluster monthly")
    assert definition.recipients == ["a@example.com", "b@example.com"]
    task = PeriodicTask.objects.get(pk=definition.periodic_task_id)
    assert task.task == "reports.run_definition"
    assert json.loads(task.args) == [definition.pk]
    assert task.enabled
    assert (task.crontab.minute, task.crontab.hour, task.crontab.day_of_month) == ("0", "6", "1")
    # The beat's database scheduler reads it like any other entry: on the 1st at 06:00 UTC.
    entry = DatabaseScheduler.Entry(task, app=celery_app)
    assert entry.task == "reports.run_definition"
    assert list(entry.args) == [definition.pk]
    assert entry.schedule.hour == {6}
    assert entry.schedule.minute == {0}
    assert entry.schedule.day_of_month == {1}
    # Editing the definition moves its entry (weekly: Mondays); disabling turns it off.
    client.post(f"/reports/{definition.pk}/edit/", {
        "name": "cluster monthly", "period": "weekly", "scope": "cluster", "queue": "", "recipients": "a@example.com",
        "formats": ["csv"], "prices": "", "currency": "USD"})
    task.refresh_from_db()
    assert task.crontab.day_of_week == "1"
    assert not task.enabled
    definition.refresh_from_db()
    definition.enabled = True
    definition.save()
    # What the beat sends: the task by name with the entry's arguments.
    task.refresh_from_db()
    result = celery_app.tasks[task.task].apply(args=json.loads(task.args))
    run = ReportRun.objects.get(pk=result.get())
    assert run.trigger == "schedule"
    assert run.status == "succeeded"
    assert run.period_end - run.period_start == timedelta(days=7)
    assert run.csv_content
    assert not run.pdf_content
    # Sending again for the same period does nothing twice.
    assert celery_app.tasks[task.task].apply(args=json.loads(task.args)).get() == 0
    page = client.get(f"/reports/{definition.pk}/").content.decode()
    assert f"/reports/runs/{run.pk}/csv/" in page
    definition.delete()
    assert not PeriodicTask.objects.filter(name=task.name).exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_run_is_emailed_through_a_real_smtp_server(queue_tree, usage_week, settings):
    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Sink

    class Keep(Sink):
        def __init__(self) -> None:
            self.messages: list[tuple[str, list[str], bytes]] = []

        async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's hook name)
            self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
            return "250 OK"

    handler = Keep()
    port = _free_port()
    controller = Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
        settings.EMAIL_USE_TLS = False
        settings.KAI_REPORTS_FROM_EMAIL = "reports@kaiweb.test"
        definition = _definition(queue_tree, recipients=["lead@example.com", "finance@example.com"])
        run = services.run_report(definition, WEEK - timedelta(days=7), WEEK, now=WEEK)
    finally:
        controller.stop()
    assert run.emailed_to == ["lead@example.com", "finance@example.com"]
    [(sender, rcpts, content)] = handler.messages
    assert sender == "reports@kaiweb.test"
    assert rcpts == ["lead@example.com", "finance@example.com"]
    message = message_from_bytes(content, policy=email_policy.default)
    assert "dept-b weekly" in message["Subject"]
    parts = {p.get_filename(): p for p in message.walk() if p.get_filename()}
    assert set(parts) == {"dept-b-weekly-20260223-20260302.csv", "dept-b-weekly-20260223-20260302.json",
                          "dept-b-weekly-20260223-20260302.pdf"}
    attached = parts["dept-b-weekly-20260223-20260302.csv"].get_payload(decode=True).decode()
    assert attached.replace("\r\n", "\n") == run.csv_content  # SMTP carries text lines as CRLF
    assert parts["dept-b-weekly-20260223-20260302.pdf"].get_payload(decode=True).startswith(b"%PDF")
    body = next(p for p in message.walk() if p.get_content_type() == "text/plain" and not p.get_filename())
    assert "GPU-hours allocated: 26.0" in body.get_payload(decode=True).decode()


def test_an_unreachable_mail_server_is_recorded_on_the_run(queue_tree, usage_week, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", _free_port()
    run = services.run_report(_definition(queue_tree), WEEK - timedelta(days=7), WEEK, now=WEEK)
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert run.emailed_to == []
    assert run.error.startswith("e-mail:")
