"""Choices of the queues app."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class MembershipRole(models.TextChoices):
    """A user's role on a queue; it applies to the queue's whole subtree."""

    ADMIN = "admin", _("Queue admin")
    MEMBER = "member", _("Member")


class Preemptibility(models.TextChoices):
    """A workload's explicit preemptibility; empty means "from the priority" (value < 100)."""

    DEFAULT = "", _("From priority")
    PREEMPTIBLE = "preemptible", _("Preemptible")
    NON_PREEMPTIBLE = "non-preemptible", _("Non-preemptible")


# Queue priority names used in listings (the CRD stores the integer).
PRIORITY_NAMES = {50: "low", 100: "medium", 200: "high"}
DEFAULT_QUEUE_PRIORITY = 100
# A priority class at or above this value is non-preemptible unless told otherwise (KAI).
NON_PREEMPTIBLE_FROM = 100
# KAI's installed priority classes: name -> (value, preemptible).
DEFAULT_PRIORITY_CLASSES = {
    "train": (50, True),
    "build-preemptible": (75, True),
    "build": (100, False),
    "inference": (125, False),
}
