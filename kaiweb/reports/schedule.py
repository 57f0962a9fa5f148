"""Each report definition's beat entry: one django-celery-beat PeriodicTask, kept in step here only.

Weekly reports run on Monday at 06:00 UTC, monthly ones on the 1st at 06:00 UTC, each for the
period that has just ended. The entry is editable in the admin like any other beat entry;
saving the definition again puts its task, arguments and enabled flag back.
"""

from __future__ import annotations

import json
from typing import Any

from django_celery_beat.models import CrontabSchedule, PeriodicTask

from kaiweb.reports.choices import ReportPeriod

TASK = "reports.run_definition"
CRONTABS = {
    ReportPeriod.WEEKLY: {"minute": "0", "hour": "6", "day_of_week": "1", "day_of_month": "*", "month_of_year": "*"},
    ReportPeriod.MONTHLY: {"minute": "0", "hour": "6", "day_of_week": "*", "day_of_month": "1", "month_of_year": "*"},
}


def task_name(definition: Any) -> str:
    return f"usage-report-{definition.pk}"


def sync_periodic_task(definition: Any) -> PeriodicTask:
    """Create or update the definition's PeriodicTask (and link it); returns it."""
    crontab, _ = CrontabSchedule.objects.get_or_create(timezone="UTC", **CRONTABS[definition.period])
    task = definition.periodic_task
    if task is None:
        task = PeriodicTask.objects.filter(name=task_name(definition)).first() or PeriodicTask(name=task_name(definition))
    task.task = TASK
    task.crontab = crontab
    task.interval = task.solar = task.clocked = None
    task.args = json.dumps([definition.pk])
    task.kwargs = json.dumps({})
    task.enabled = bool(definition.enabled)
    task.description = f"Usage report {definition.name!r} ({definition.period}, {definition.scope})"
    task.save()
    if definition.periodic_task_id != task.pk:
        type(definition).objects.filter(pk=definition.pk).update(periodic_task=task)
        definition.periodic_task = task
    return task


def drop_periodic_task(definition: Any) -> None:
    PeriodicTask.objects.filter(name=task_name(definition)).delete()
