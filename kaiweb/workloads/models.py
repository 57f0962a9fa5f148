"""Models of the workloads app: PodGroups (jobs) and their pods as last observed."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from kaiweb.core.models import TimeStampedModel
from kaiweb.queues.choices import Preemptibility
from kaiweb.workloads.choices import PodState, WorkloadState


class Workload(TimeStampedModel):
    """A PodGroup (job): the unit KAI schedules, gang-style, in a leaf queue."""

    cluster = models.ForeignKey("cluster.Cluster", on_delete=models.CASCADE, related_name="workloads")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    queue = models.ForeignKey("queues.Queue", on_delete=models.PROTECT, related_name="workloads")
    priority_class = models.ForeignKey(
        "queues.PriorityClass", null=True, blank=True, on_delete=models.PROTECT, related_name="workloads",
        help_text="Empty: the global default class, else priority 50.",
    )
    preemptibility = models.CharField(
        max_length=16, choices=Preemptibility.choices, blank=True, default=Preemptibility.DEFAULT
    )
    min_member = models.PositiveIntegerField(
        null=True, blank=True, help_text="Gang size; empty means 1, 0 means fully elastic."
    )
    min_subgroup = models.PositiveIntegerField(null=True, blank=True)
    subgroups = models.JSONField(
        default=list, blank=True, help_text="[{name, minMember, parent}] as in the PodGroup spec."
    )
    topology_constraint = models.JSONField(default=dict, blank=True)
    preemption_delay_seconds = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0)],
        help_text="PodGroup spec.preemptionDelay: how long after it starts the workload cannot be preempted.",
    )
    staleness_grace_seconds = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0)],
        help_text="PodGroup spec.stalenessGracePeriod: how long a gang may run below its minimum before eviction.",
    )
    labels = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=WorkloadState.choices, default=WorkloadState.PENDING)
    submitted_at = models.DateTimeField(db_index=True, help_text="Creation time in the cluster.")
    last_start_at = models.DateTimeField(null=True, blank=True)
    last_eviction_at = models.DateTimeField(null=True, blank=True)
    stale_since = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    pod_group_said = models.JSONField(
        default=dict, blank=True,
        help_text="What the PodGroup object says of what kaiweb writes on it (KAI's stamp annotations, "
                  "status.schedulingConditions): as the watcher saw it, then as the write-back wrote it.",
    )
    pod_group_event = models.JSONField(
        default=list, blank=True,
        help_text="The last event the write-back said on the PodGroup, [digest, epoch seconds], so an "
                  "unchanged one is not sent every cycle (the mirror never writes it).")

    class Meta:
        ordering = ("-submitted_at", "namespace", "name")
        indexes = [
            models.Index(fields=("queue", "state"), name="workloads_queue_state"),
            # the listing's order: its first page is read from the index, not sorted out of every row
            models.Index(fields=("-submitted_at", "namespace", "name"), name="workloads_newest_first"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=("cluster", "namespace", "name"), name="%(app_label)s_%(class)s_unique_cluster_ns_name"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Pod(models.Model):
    """One pod of a workload as last observed: requests, state, placement."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="pods")
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    subgroup = models.CharField(max_length=63, blank=True, help_text="kai.scheduler/subgroup-name")
    # Requests. GPU: whole devices, or a fraction of one (annotation gpu-fraction) or an
    # amount of GPU memory (annotation gpu-memory), never two of these at once.
    gpu = models.FloatField(default=0, validators=[MinValueValidator(0)], help_text="Whole GPUs.")
    gpu_fraction = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="gpu-fraction annotation, 0 < f ≤ 1.",
    )
    gpu_memory_mib = models.PositiveIntegerField(null=True, blank=True, help_text="gpu-memory annotation (MiB).")
    gpu_devices = models.PositiveSmallIntegerField(default=1, help_text="gpu-fraction-num-devices.")
    mig_profile = models.CharField(max_length=32, blank=True)
    cpu = models.FloatField(default=0, validators=[MinValueValidator(0)], help_text="Millicores.")
    memory = models.BigIntegerField(default=0, validators=[MinValueValidator(0)], help_text="Bytes.")
    task_priority = models.IntegerField(
        null=True, blank=True, help_text="Label kai.scheduler/task-priority: order inside the job (higher first; "
        "a pod with it before one without).",
    )
    state = models.CharField(max_length=16, choices=PodState.choices, default=PodState.PENDING)
    node = models.ForeignKey(
        "cluster.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="pods"
    )
    gpu_groups = models.JSONField(
        default=list, blank=True,
        help_text="The shared-GPU groups of a fractional pod, one per device it was given, as the engine names them.",
    )
    constraints = models.JSONField(
        default=dict, blank=True,
        help_text="Where the pod may run, as its spec says: nodeSelector, affinity, tolerations, hostPorts, "
                  "its labels (for others' pod affinity), MIG and other extended resource requests.",
    )
    duration_seconds = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0)],
        help_text="Simulated cluster only: how long the pod runs once started.",
    )
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    resource_version = models.CharField(
        max_length=32, blank=True,
        help_text="Kubernetes: the resourceVersion of the pod as last applied; an older observation never "
                  "overwrites the row.",
    )

    class Meta:
        ordering = ("workload", "name")
        constraints = [
            models.UniqueConstraint(fields=("workload", "name"), name="%(app_label)s_%(class)s_unique_workload_name"),
            models.CheckConstraint(
                condition=models.Q(gpu_fraction__isnull=True)
                | models.Q(gpu_fraction__gt=0, gpu_fraction__lte=1, gpu=0),
                name="%(app_label)s_%(class)s_fraction_in_range_alone",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def gpu_request(self) -> float:
        """GPU devices this pod asks for, counting a fraction as part of a device."""
        if self.gpu_fraction is not None:
            return self.gpu_fraction * self.gpu_devices
        return self.gpu
