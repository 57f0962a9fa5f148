"""Choices shared by several apps (resources, units)."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

# -1 is KAI's "unlimited" sentinel for a queue's quota and limit (Queue CRD scheduling.run.ai/v2).
UNLIMITED = -1


class Resource(models.TextChoices):
    """The three resources KAI's fair share divides. Queue figures use the Queue CRD's units."""

    CPU = "cpu", _("CPU (millicores)")
    MEMORY = "memory", _("Memory (MB)")
    GPU = "gpu", _("GPU (devices)")


RESOURCES: tuple[str, ...] = tuple(Resource.values)

# Units of queue-level figures (quota, limit, status, usage): as in the Queue CRD.
RESOURCE_UNITS = {Resource.CPU: "millicores", Resource.MEMORY: "MB", Resource.GPU: "devices"}
