"""Celery beat's scheduler: django-celery-beat's database schedule, plus a heartbeat per tick.

Beat serves nothing a probe could ask, so each tick (every few seconds, once the schedule has been
read from the database) touches the `beat` heartbeat that the pod's liveness probe checks
(`kaiweb.core.heartbeat`). A beat stuck on its database stops beating and is restarted.
"""

from __future__ import annotations

from typing import Any

from django_celery_beat.schedulers import DatabaseScheduler

from kaiweb.core import heartbeat


class HeartbeatScheduler(DatabaseScheduler):
    def tick(self, *args: Any, **kwargs: Any) -> float:
        interval = super().tick(*args, **kwargs)
        heartbeat.beat("beat")
        return interval
