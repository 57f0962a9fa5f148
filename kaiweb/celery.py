"""The Celery app: broker from REDIS_URL / CELERY_BROKER_URL (see settings), tasks found per app."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kaiweb.settings")

app = Celery("kaiweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
