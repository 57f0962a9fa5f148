"""Saving a report definition anywhere (the page, the admin, the shell) keeps its beat entry in step."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from kaiweb.reports.models import ReportDefinition
from kaiweb.reports.schedule import drop_periodic_task, sync_periodic_task


@receiver(post_save, sender=ReportDefinition, dispatch_uid="reports-sync-beat")
def _sync(sender: Any, instance: ReportDefinition, raw: bool = False, **kwargs: Any) -> None:
    if not raw:
        sync_periodic_task(instance)


@receiver(post_delete, sender=ReportDefinition, dispatch_uid="reports-drop-beat")
def _drop(sender: Any, instance: ReportDefinition, **kwargs: Any) -> None:
    drop_periodic_task(instance)
