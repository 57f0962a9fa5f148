"""The gateway to a cluster: one protocol, two backends (`simulated`, `kubernetes`)."""

from __future__ import annotations

from django.conf import settings


def get_gateway():  # type: ignore[no-untyped-def]
    """The gateway of the configured backend (KAI_CLUSTER_BACKEND)."""
    raise NotImplementedError(f"cluster backend {settings.KAI_CLUSTER_BACKEND!r} is not available yet")
