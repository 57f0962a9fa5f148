"""Celery tasks of the reports app: the run a definition's beat entry starts."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="reports.run_definition", acks_late=True, ignore_result=True)
def run_definition_task(definition_id: int) -> int:
    """Run the definition for the period that has just ended and send it; returns the run id (0: none)."""
    from kaiweb.reports import services
    from kaiweb.reports.models import ReportDefinition

    definition = ReportDefinition.objects.filter(pk=definition_id, enabled=True).first()
    if definition is None:
        return 0
    run = services.run_scheduled(definition)
    return run.pk if run else 0
