"""Models of the core app: abstract bases shared by the domain apps."""

from __future__ import annotations

from django.db import models


class TimeStampedModel(models.Model):
    """Abstract base: when a row was created and last changed in kaiweb."""

    created = models.DateTimeField(auto_now_add=True, db_index=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
