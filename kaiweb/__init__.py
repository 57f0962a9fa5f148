"""kaiweb: the Django project around the scheduling engine."""

from kaiweb.celery import app as celery_app

__all__ = ["celery_app"]
