"""/metrics: the scheduler's figures in Prometheus text format, read from the database."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def collectors() -> list:
    """Collectors registered by the apps (each returns prometheus_client metric families)."""
    return []


def render() -> tuple[bytes, str]:
    registry = CollectorRegistry()
    for collector in collectors():
        registry.register(collector)
    return generate_latest(registry), CONTENT_TYPE_LATEST
