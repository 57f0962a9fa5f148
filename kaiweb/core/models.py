"""Models of the core app: abstract bases shared by the domain apps."""

from __future__ import annotations

from django.db import models


class TimeStampedModel(models.Model):
    """Abstract base: when a row was created and last changed in kaiweb."""

    created = models.DateTimeField(auto_now_add=True, db_index=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class ChangeCounter(models.Model):
    """How many transactions have changed what a listing shows (``kaiweb.core.changes``).

    On Postgres, triggers on the listed tables move ``value`` once per committing transaction;
    ``epoch`` is new whenever the row is made again (after a flush), so a value never names two
    states of the data."""

    name = models.CharField(max_length=32, primary_key=True)
    value = models.BigIntegerField(default=0)
    epoch = models.UUIDField()

    def __str__(self) -> str:
        return f"{self.name}: {self.value}"
