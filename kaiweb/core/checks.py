"""System checks of a production install (`manage.py check --deploy`), beside Django's own."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Tags, Warning, register


@register(Tags.security, deploy=True)
def check_production_settings(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """A generated secret key, an open /metrics: fine on a laptop, wrong in production."""
    problems = []
    if getattr(settings, "SECRET_KEY_GENERATED", False):
        problems.append(Warning(
            "DJANGO_SECRET_KEY is not set: a key generated under KAI_VAR_DIR is used, so each replica "
            "signs sessions with a different key.",
            hint="Set DJANGO_SECRET_KEY (or DJANGO_SECRET_KEY_FILE) to one random key shared by every process.",
            id="kaiweb.W001",
        ))
    if settings.KAI_METRICS_PUBLIC:
        problems.append(Warning(
            "KAI_METRICS_PUBLIC is on: anyone who reaches the web service reads every queue's name and allocation "
            "at /metrics.",
            hint="Set KAI_METRICS_TOKEN and give it to the scraper as a bearer token instead.",
            id="kaiweb.W002",
        ))
    return problems
