"""Celery tasks of the what-if app: the replay, bounded by a time limit."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings


@shared_task(name="whatif.run", ignore_result=True,
             soft_time_limit=settings.KAI_WHATIF_TIME_LIMIT_S, time_limit=settings.KAI_WHATIF_TIME_LIMIT_S + 30)
def run_whatif_task(run_id: int) -> str:
    """Run the stored what-if `run_id` (see `kaiweb.whatif.runs`)."""
    from kaiweb.whatif.runs import execute

    return execute(run_id)
