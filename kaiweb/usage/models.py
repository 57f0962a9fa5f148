"""Models of the usage app: usage buckets per queue and resource, and their retention."""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models

from kaiweb.core.choices import Resource


class UsageBucket(models.Model):
    """Resource-seconds a queue used in one time bucket (start, width)."""

    queue = models.ForeignKey("queues.Queue", on_delete=models.CASCADE, related_name="usage_buckets")
    resource = models.CharField(max_length=16, choices=Resource.choices)
    start = models.DateTimeField()
    width_seconds = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    # Allocated amount integrated over the bucket, in queue units × seconds (e.g. GPU-seconds).
    value = models.FloatField(default=0, validators=[MinValueValidator(0)])
    # The value per GPU model of the nodes it was held on (nvidia.com/gpu.product, "unknown" without one):
    # every GPU row, and the CPU and memory rows of leaf queues.
    by_gpu_model = models.JSONField(default=dict, blank=True)
    # GPU rows only, when utilization is known: the allocated GPU-seconds whose pods had a reading
    # (measured), those weighted by the pods' utilization (used), and GPU memory used in MiB-seconds.
    measured_value = models.FloatField(default=0, validators=[MinValueValidator(0)])
    used_value = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0)])
    gpu_memory_used_value = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0)])
    # Leaf queues only: the value split by the workloads' namespace and by their submitting user
    # (settings.KAI_USER_LABEL; "ns/<namespace>" when unlabelled), in the same units.
    by_namespace = models.JSONField(default=dict, blank=True)
    by_user = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ("-start", "queue", "resource")
        indexes = [models.Index(fields=("queue", "resource", "start"), name="usage_bucket_queue_res_start")]
        constraints = [
            models.UniqueConstraint(
                fields=("queue", "resource", "start", "width_seconds"), name="%(app_label)s_%(class)s_unique_bucket"
            ),
            models.CheckConstraint(condition=models.Q(value__gte=0), name="%(app_label)s_%(class)s_value_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.queue} {self.resource} {self.start:%Y-%m-%d %H:%M} +{self.width_seconds}s"


class UsageSettings(models.Model):
    """How usage is bucketed, rolled up and kept (a single row)."""

    raw_width_seconds = models.PositiveIntegerField(default=60, validators=[MinValueValidator(1)])
    raw_retention_days = models.PositiveIntegerField(default=7, validators=[MinValueValidator(1)])
    hourly_retention_days = models.PositiveIntegerField(default=90, validators=[MinValueValidator(1)])
    daily_retention_days = models.PositiveIntegerField(default=730, validators=[MinValueValidator(1)])

    class Meta:
        verbose_name_plural = "usage settings"
        constraints = [models.CheckConstraint(condition=models.Q(pk=1), name="%(app_label)s_%(class)s_singleton")]

    def __str__(self) -> str:
        return "usage settings"

    @classmethod
    def load(cls) -> UsageSettings:
        """The single settings row, created with defaults on first use."""
        obj, _ = cls.objects.get_or_create(pk=1)
        return obj


class PodUtilization(models.Model):
    """The latest GPU utilization reading of a pod holding GPUs, and how long it has stayed low."""

    pod = models.OneToOneField("workloads.Pod", on_delete=models.CASCADE, related_name="gpu_utilization")
    source = models.CharField(max_length=16, help_text="prometheus or simulated")
    sampled_at = models.DateTimeField()
    utilization = models.FloatField(help_text="Mean utilization of the pod's GPUs, percent (0–100).")
    devices = models.PositiveSmallIntegerField(default=1, help_text="GPU devices the reading covers.")
    memory_used_mib = models.FloatField(null=True, blank=True)
    memory_total_mib = models.FloatField(null=True, blank=True)
    # Since when every reading was under the idle threshold (empty: the latest was not), and the
    # readings of that stretch, for the idle finding's mean.
    low_since = models.DateTimeField(null=True, blank=True)
    low_samples = models.PositiveIntegerField(default=0)
    low_utilization_sum = models.FloatField(default=0)

    class Meta:
        indexes = [models.Index(fields=("low_since",), name="usage_podutil_low_since")]

    def __str__(self) -> str:
        return f"{self.pod} {self.utilization:.0f}%"

    @property
    def low_mean(self) -> float:
        return self.low_utilization_sum / self.low_samples if self.low_samples else self.utilization
