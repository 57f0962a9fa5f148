"""Celery tasks of the what-if app: the replay, bounded by a time limit, and how a run is sent to it."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings

from kaiweb.whatif import runs
from kaiweb.whatif.models import WhatIfRun


@shared_task(name="whatif.run", ignore_result=True,
             soft_time_limit=settings.KAI_WHATIF_TIME_LIMIT_S, time_limit=settings.KAI_WHATIF_TIME_LIMIT_S + 30)
def run_whatif_task(run_id: int) -> str:
    """Run the stored what-if `run_id` (see `kaiweb.whatif.runs`)."""
    return runs.execute(run_id)


def submit(user: Any, **inputs: Any) -> WhatIfRun:
    """Check and store a what-if (`runs.submit`), then send it to a worker on the "whatif" queue."""
    run = runs.submit(user, **inputs)
    run_whatif_task.delay(run.pk)
    return run
