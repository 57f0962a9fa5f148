"""Models of the cluster app: clusters, scheduling shards, nodes and GPU devices as last observed."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from kaiweb.cluster.choices import DEFAULT_PARTITION_LABEL, BackendKind, PlacementStrategy
from kaiweb.core.models import TimeStampedModel


class Cluster(TimeStampedModel):
    """A cluster kaiweb schedules for, and how it is reached."""

    name = models.CharField(max_length=100, unique=True)
    backend = models.CharField(max_length=16, choices=BackendKind.choices, default=BackendKind.SIMULATED)
    settings = models.JSONField(
        default=dict, blank=True,
        help_text="Backend settings (e.g. kubeconfig context, namespace filters); never secrets.",
    )
    enabled = models.BooleanField(default=True)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class SchedulingShard(TimeStampedModel):
    """A node-label partition of a cluster scheduled on its own (KAI SchedulingShard)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="shards")
    name = models.CharField(max_length=100)
    partition_label_key = models.CharField(max_length=253, default=DEFAULT_PARTITION_LABEL)
    partition_label_value = models.CharField(
        max_length=63, blank=True, help_text="Empty: the shard sees objects without the partition label."
    )
    gpu_placement = models.CharField(
        max_length=16, choices=PlacementStrategy.choices, default=PlacementStrategy.BINPACK
    )
    cpu_placement = models.CharField(
        max_length=16, choices=PlacementStrategy.choices, default=PlacementStrategy.BINPACK
    )
    k_value = models.FloatField(
        default=1.0, validators=[MinValueValidator(0)], help_text="Time-based fair share strength (0 = off)."
    )
    usage_window_seconds = models.PositiveIntegerField(
        default=7 * 24 * 3600, help_text="Window of usage history for time-based fair share."
    )
    usage_half_life_seconds = models.PositiveIntegerField(
        default=0, help_text="Decay half-life of usage history; 0 = no decay."
    )
    preempt_min_runtime = models.DurationField(null=True, blank=True)
    reclaim_min_runtime = models.DurationField(null=True, blank=True)
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ("cluster__name", "name")
        constraints = [
            models.UniqueConstraint(fields=("cluster", "name"), name="%(app_label)s_%(class)s_unique_cluster_name"),
            models.UniqueConstraint(
                fields=("cluster", "partition_label_key", "partition_label_value"),
                name="%(app_label)s_%(class)s_unique_partition",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.name}"


class Node(models.Model):
    """A cluster node as last observed: capacity, labels, readiness."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    labels = models.JSONField(default=dict, blank=True)
    allocatable_cpu = models.FloatField(default=0, validators=[MinValueValidator(0)], help_text="Millicores.")
    allocatable_memory = models.BigIntegerField(default=0, validators=[MinValueValidator(0)], help_text="Bytes.")
    allocatable_gpu = models.FloatField(default=0, validators=[MinValueValidator(0)], help_text="Whole devices.")
    allocatable_pods = models.PositiveIntegerField(default=110)
    gpu_product = models.CharField(max_length=100, blank=True, help_text="nvidia.com/gpu.product")
    gpu_memory_mib = models.PositiveIntegerField(default=0, help_text="Memory of one GPU (MiB).")
    mig_enabled = models.BooleanField(default=False)
    topology = models.JSONField(
        default=dict, blank=True, help_text="Topology levels of this node, e.g. {'rack': 'r1', 'zone': 'a'}."
    )
    ready = models.BooleanField(default=True)
    unschedulable = models.BooleanField(default=False, help_text="Cordoned.")
    observed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("cluster__name", "name")
        constraints = [
            models.UniqueConstraint(fields=("cluster", "name"), name="%(app_label)s_%(class)s_unique_cluster_name"),
        ]

    def __str__(self) -> str:
        return self.name


class GpuDevice(models.Model):
    """One GPU (or MIG instance) of a node as last observed."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=100, blank=True)
    product = models.CharField(max_length=100, blank=True)
    memory_mib = models.PositiveIntegerField(default=0)
    mig_profile = models.CharField(max_length=32, blank=True, help_text="e.g. 3g.40gb; empty for a full GPU.")
    healthy = models.BooleanField(default=True)
    # Fraction of this device in use by shared (fractional) pods, as last observed.
    used_fraction = models.FloatField(default=0, validators=[MinValueValidator(0), MaxValueValidator(1)])

    class Meta:
        ordering = ("node__name", "index")
        constraints = [
            models.UniqueConstraint(fields=("node", "index"), name="%(app_label)s_%(class)s_unique_node_index"),
        ]

    def __str__(self) -> str:
        return f"{self.node}/gpu{self.index}"
