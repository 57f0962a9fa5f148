"""Models of the queues app: the queue tree, memberships and priority classes."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

from kaiweb.core.choices import RESOURCES, UNLIMITED
from kaiweb.core.models import TimeStampedModel
from kaiweb.queues.choices import DEFAULT_QUEUE_PRIORITY, NON_PREEMPTIBLE_FROM, MembershipRole
from scheduler_core import model as m
from scheduler_core import queue_crd
from scheduler_core.units import to_engine_units

# Queue memory is in MB (10^6 bytes) as in the Queue CRD; the engine counts bytes (scheduler_core.units converts).

# Kubernetes object names (RFC 1123 subdomain, as used by cluster-scoped CRDs).
k8s_name_validator = RegexValidator(
    r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$",
    "must be a Kubernetes name: lowercase letters, digits, '-' and '.', starting and ending alphanumeric",
    code="invalid_name",
)


def _amount_field(default: float, help_text: str) -> models.FloatField:
    # A quota or limit is a non-negative amount, or -1 for unlimited: checked, with the value in the
    # message, by Queue.clean (validators.quota_errors), the one place of that rule.
    return models.FloatField(default=default, help_text=help_text)


class Queue(TimeStampedModel):
    """A node in the queue tree; only leaf queues admit workloads."""

    name = models.CharField(max_length=253, unique=True, validators=[k8s_name_validator])
    display_name = models.CharField(max_length=200, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children",
        help_text="Empty for a top-level queue.",
    )
    priority = models.IntegerField(
        default=DEFAULT_QUEUE_PRIORITY,
        help_text="Queue priority: orders over-quota distribution and queue order (higher first).",
    )
    # Per resource, in the Queue CRD's units: CPU millicores, memory MB, GPU devices (fractions allowed).
    # -1 means unlimited, matching KAI's Queue CRD; a limit of 0 means "none of it at all".
    cpu_quota = _amount_field(0, "Guaranteed CPU (millicores); -1 = unlimited.")
    cpu_limit = _amount_field(UNLIMITED, "CPU cap (millicores); -1 = no cap, 0 = none.")
    cpu_over_quota_weight = models.FloatField(default=1)
    memory_quota = _amount_field(0, "Guaranteed memory (MB); -1 = unlimited.")
    memory_limit = _amount_field(UNLIMITED, "Memory cap (MB); -1 = no cap, 0 = none.")
    memory_over_quota_weight = models.FloatField(default=1)
    gpu_quota = _amount_field(0, "Guaranteed GPUs (devices, fractions allowed); -1 = unlimited.")
    gpu_limit = _amount_field(UNLIMITED, "GPU cap (devices); -1 = no cap, 0 = none.")
    gpu_over_quota_weight = models.FloatField(default=1)
    preempt_min_runtime = models.DurationField(
        null=True, blank=True, help_text="Minimum runtime before preemption; empty = inherit."
    )
    reclaim_min_runtime = models.DurationField(
        null=True, blank=True, help_text="Minimum runtime before reclaim; empty = inherit."
    )
    labels = models.JSONField(default=dict, blank=True, help_text="Kubernetes labels (e.g. the node pool).")
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="QueueMembership", related_name="queues", blank=True
    )

    class Meta:
        ordering = ("name",)
        constraints = [
            models.CheckConstraint(
                condition=models.Q(parent__isnull=True) | ~models.Q(parent=models.F("pk")),
                name="%(app_label)s_%(class)s_not_own_parent",
            ),
            *[
                models.CheckConstraint(
                    condition=models.Q(**{f"{r}_over_quota_weight__gte": 0}),
                    name=f"%(app_label)s_%(class)s_{r}_weight_not_negative",
                )
                for r in RESOURCES
            ],
            *[
                models.CheckConstraint(
                    condition=models.Q(**{f"{r}_limit": UNLIMITED})
                    | models.Q(**{f"{r}_limit__gte": models.F(f"{r}_quota")}, **{f"{r}_quota__gte": 0}),
                    name=f"%(app_label)s_%(class)s_{r}_limit_not_below_quota",
                )
                for r in RESOURCES
            ],
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        from kaiweb.queues.validators import validate_queue_fields

        validate_queue_fields(self)

    def to_spec(self, parent_name: str | None) -> m.QueueSpec:
        """This queue as the engine's QueueSpec (memory MB → bytes; -1, unlimited, kept as -1), under
        the parent named (callers converting many queues know the names without a query each)."""

        def res(r: str) -> m.QueueResource:
            return m.QueueResource(
                quota=to_engine_units(r, getattr(self, f"{r}_quota")),
                limit=to_engine_units(r, getattr(self, f"{r}_limit")),
                over_quota_weight=getattr(self, f"{r}_over_quota_weight"),
            )

        def seconds(value: dt.timedelta | None) -> float | None:
            return None if value is None else value.total_seconds()

        return m.QueueSpec(
            name=self.name,
            parent=parent_name,
            priority=self.priority,
            creation=self.created.timestamp() if self.created else 0.0,
            gpu=res("gpu"),
            cpu=res("cpu"),
            memory=res("memory"),
            reclaim_min_runtime_s=seconds(self.reclaim_min_runtime),
            preempt_min_runtime_s=seconds(self.preempt_min_runtime),
            display_name=self.display_name or None,
        )

    @staticmethod
    def spec_values(spec: m.QueueSpec) -> dict[str, Any]:
        """The model's field values of an engine QueueSpec (memory bytes → MB; durations as
        timedeltas), without the parent, which is a name in the spec and a row here."""
        values: dict[str, Any] = {"name": spec.name, "priority": spec.priority, "display_name": spec.display_name or ""}
        for r in RESOURCES:
            res = getattr(spec, r)
            for attr in ("quota", "limit"):
                values[f"{r}_{attr}"] = float(queue_crd.crd_amount(r, getattr(res, attr)))
            values[f"{r}_over_quota_weight"] = res.over_quota_weight
        for attr in ("preempt_min_runtime", "reclaim_min_runtime"):
            seconds = getattr(spec, f"{attr}_s")
            values[attr] = None if seconds is None else dt.timedelta(seconds=seconds)
        return values

    @classmethod
    def from_spec(cls, spec: m.QueueSpec) -> Queue:
        """An unsaved Queue from an engine QueueSpec (the parent is looked up by name)."""
        queue = cls(**cls.spec_values(spec))
        if spec.parent:
            queue.parent = cls.objects.filter(name=spec.parent).first()
        return queue


class QueueMembership(models.Model):
    """A user's role on a queue, inherited by the queue's whole subtree."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="queue_memberships")
    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=MembershipRole.choices, default=MembershipRole.ADMIN)

    class Meta:
        ordering = ("queue__name", "user__username")
        constraints = [
            models.UniqueConstraint(fields=("user", "queue"), name="%(app_label)s_%(class)s_unique_user_queue"),
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.role} of {self.queue}"


class PriorityClass(TimeStampedModel):
    """A workload priority class: orders jobs, decides who may preempt whom."""

    name = models.CharField(max_length=253, unique=True, validators=[k8s_name_validator])
    value = models.IntegerField(help_text="Higher runs first and may preempt strictly lower priorities.")
    preemptible = models.BooleanField(
        default=True, help_text="Workloads of this class can be preempted (KAI: value below 100)."
    )
    global_default = models.BooleanField(
        default=False, help_text="Used for workloads that name no (or an unknown) priority class."
    )
    description = models.TextField(blank=True)

    class Meta:
        ordering = ("-value", "name")
        verbose_name_plural = "priority classes"
        constraints = [
            models.UniqueConstraint(
                fields=("global_default",), condition=models.Q(global_default=True),
                name="%(app_label)s_%(class)s_single_global_default",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.value})"

    @staticmethod
    def default_preemptible(value: int) -> bool:
        """KAI's default: a priority below 100 is preemptible."""
        return value < NON_PREEMPTIBLE_FROM

    def to_spec(self) -> Any:
        """The engine's PriorityClass."""
        from scheduler_core.model import PriorityClass as PriorityClassSpec

        return PriorityClassSpec(name=self.name, value=self.value, preemptible=self.preemptible)

    @classmethod
    def from_spec(cls, spec: Any) -> PriorityClass:
        """An unsaved PriorityClass; an unset preemptibility follows KAI's rule (value below 100)."""
        preemptible = cls.default_preemptible(spec.value) if spec.preemptible is None else spec.preemptible
        return cls(name=spec.name, value=spec.value, preemptible=preemptible)


class QueueBounds(models.Model):
    """What queue admins may set on the queues they administer (a single row, edited by platform admins).

    Platform admins and the cluster mirror are not bound. A bound applies to the value being set: a
    queue admin may keep a value a platform admin set above it, but not raise one past it. An
    unlimited quota or limit (-1) counts as above any bound of that field."""

    max_priority = models.IntegerField(default=1000, help_text="Highest queue priority a queue admin may set.")
    max_gpu_quota = models.FloatField(default=1024, validators=[MinValueValidator(0)],
                                      help_text="GPUs (devices).")
    max_gpu_limit = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0)],
                                      help_text="GPUs (devices); empty: any limit, unlimited included.")
    max_cpu_quota = models.FloatField(default=100_000_000, validators=[MinValueValidator(0)],
                                      help_text="Millicores (100,000 cores by default).")
    max_memory_quota = models.FloatField(default=1_000_000_000, validators=[MinValueValidator(0)],
                                         help_text="MB (1 PB by default).")
    max_over_quota_weight = models.FloatField(default=100, validators=[MinValueValidator(0)],
                                              help_text="Over-quota weight, for every resource.")

    class Meta:
        verbose_name_plural = "queue bounds"
        constraints = [models.CheckConstraint(condition=models.Q(pk=1), name="%(app_label)s_%(class)s_singleton")]

    def __str__(self) -> str:
        return "bounds for queue admins"

    @classmethod
    def load(cls) -> QueueBounds:
        """The single row, created with the defaults on first use."""
        obj, _ = cls.objects.get_or_create(pk=1)
        return obj

    def limits(self) -> dict[str, float | None]:
        """Field of a queue → the highest value a queue admin may give it (None: no bound)."""
        out: dict[str, float | None] = {
            "priority": self.max_priority, "gpu_quota": self.max_gpu_quota, "gpu_limit": self.max_gpu_limit,
            "cpu_quota": self.max_cpu_quota, "memory_quota": self.max_memory_quota,
        }
        for r in RESOURCES:
            out[f"{r}_over_quota_weight"] = self.max_over_quota_weight
        return out
