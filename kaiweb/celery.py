"""The Celery app: broker from REDIS_URL / CELERY_BROKER_URL (see settings), tasks found per app.

Every worker runs the database gate of `kaiweb.core.workerhealth`: while its database does not
answer, it takes no tasks (they wait for a healthy worker) and `/readyz` says so.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, bootsteps

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kaiweb.settings")

app = Celery("kaiweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class DatabaseGateStep(bootsteps.StartStopStep):
    """Checks the worker's database every KAI_WORKER_HEALTH_SECONDS (after the task consumer exists)."""

    requires = {"celery.worker.consumer.tasks:Tasks"}

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.tref: Any = None
        self.gate: Any = None

    def start(self, parent: Any) -> None:
        from django.conf import settings

        from kaiweb.core.workerhealth import DatabaseGate

        self.gate = DatabaseGate(parent)
        self.gate.check()
        self.tref = parent.timer.call_repeatedly(float(settings.KAI_WORKER_HEALTH_SECONDS), self.gate.check,
                                                 priority=10)

    def stop(self, parent: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None
        if self.gate is not None:
            from kaiweb.core.workerhealth import forget

            forget(self.gate.worker)


app.steps["consumer"].add(DatabaseGateStep)
