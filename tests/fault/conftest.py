"""The fault tests use the real-worker harness of the celery tests."""

from tests.celery.conftest import celery_harness  # noqa: F401
