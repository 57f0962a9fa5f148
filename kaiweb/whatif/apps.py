from django.apps import AppConfig


class WhatIfConfig(AppConfig):
    """What-if: the recorded workloads replayed under a changed queue tree, as a page at /what-if/,
    the API at /api/v1/what-if/ and a Celery task on the "whatif" queue."""

    name = "kaiweb.whatif"
    label = "whatif"
