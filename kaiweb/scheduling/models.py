"""Models of the scheduling app: cycles, decisions, preemption events, why-pending records, queue status."""

from __future__ import annotations

from typing import Any

from django.db import models

from kaiweb.scheduling.choices import CycleStatus, DecisionKind, DecisionStatus, PreemptionAction


class SchedulingCycle(models.Model):
    """One scheduling session: when, how long per phase, what it did, how it ended."""

    shard = models.ForeignKey(
        "cluster.SchedulingShard", null=True, blank=True, on_delete=models.SET_NULL, related_name="cycles"
    )
    trigger = models.CharField(max_length=32, default="beat", help_text="beat, manual, dry-run, …")
    started_at = models.DateTimeField(db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=CycleStatus.choices, default=CycleStatus.RUNNING)
    # {"snapshot": seconds, "engine": …, "engine.allocate": …, "engine.consolidation": …, "apply": …, "record": …}
    phase_durations = models.JSONField(default=dict, blank=True)
    duration_seconds = models.FloatField(null=True, blank=True)
    jobs_considered = models.PositiveIntegerField(default=0)
    binds = models.PositiveIntegerField(default=0)
    pipelined = models.PositiveIntegerField(default=0)
    evictions = models.PositiveIntegerField(default=0)
    pending = models.PositiveIntegerField(default=0)
    free_gpus = models.FloatField(null=True, blank=True, help_text="Free GPUs of the shard's nodes after the cycle.")
    stranded_gpus = models.FloatField(
        null=True, blank=True, help_text="Of the free GPUs, those no typical pod of the shard can use (fragmentation).")
    error = models.TextField(blank=True)
    # On Kubernetes, what the write-back told the cluster after the cycle and what it left for the next
    # cycles within its budget: {"queue_statuses", "pending_reports", "pending_deferred",
    # "pod_group_statuses", "pod_group_events", "pod_group_deferred", ..., "errors"} (`WriteBackReport`).
    write_back = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ("-started_at", "-id")

    def __str__(self) -> str:
        return f"cycle {self.pk} at {self.started_at:%Y-%m-%d %H:%M:%S}"


class Decision(models.Model):
    """One bind, pipeline or eviction decided by the engine, with its reason and numbers."""

    cycle = models.ForeignKey(SchedulingCycle, on_delete=models.CASCADE, related_name="decisions")
    kind = models.CharField(max_length=16, choices=DecisionKind.choices)
    status = models.CharField(max_length=16, choices=DecisionStatus.choices, default=DecisionStatus.PLANNED)
    workload = models.ForeignKey(
        "workloads.Workload", null=True, blank=True, on_delete=models.SET_NULL, related_name="decisions"
    )
    pod = models.ForeignKey("workloads.Pod", null=True, blank=True, on_delete=models.SET_NULL, related_name="decisions")
    node = models.ForeignKey("cluster.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="decisions")
    # Names kept as text so history survives the deletion of the objects.
    workload_ref = models.CharField(max_length=320, help_text="namespace/name")
    namespace = models.CharField(max_length=63, blank=True, help_text="The pod's namespace.")
    pod_name = models.CharField(max_length=253, blank=True)
    pod_uid = models.CharField(max_length=64, blank=True, help_text="The pod incarnation the action is for.")
    node_name = models.CharField(max_length=253, blank=True)
    gpu_groups = models.JSONField(default=list, blank=True,
                                  help_text="A shared-GPU bind's device groups, one per device, in the engine's order.")
    reason = models.CharField(max_length=64, help_text="The engine's machine-readable reason code.")
    message = models.TextField(blank=True)
    numbers = models.JSONField(default=dict, blank=True, help_text="The figures behind the decision.")
    idempotency_key = models.CharField(max_length=128, unique=True)
    applied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("cycle", "id")
        indexes = [models.Index(fields=("kind", "reason"), name="sched_decision_kind_reason")]

    def __str__(self) -> str:
        return f"{self.kind} {self.pod_name or self.workload_ref}"


class PreemptionEvent(models.Model):
    """A victim evicted for a preemptor, with the action, reason and both queues' figures."""

    cycle = models.ForeignKey(SchedulingCycle, on_delete=models.CASCADE, related_name="preemptions")
    decision = models.OneToOneField(
        Decision, null=True, blank=True, on_delete=models.SET_NULL, related_name="preemption"
    )
    at = models.DateTimeField(db_index=True)
    action = models.CharField(max_length=32, choices=PreemptionAction.choices)
    preemptor = models.ForeignKey(
        "workloads.Workload", null=True, blank=True, on_delete=models.SET_NULL, related_name="preemptions_caused"
    )
    victim = models.ForeignKey(
        "workloads.Workload", null=True, blank=True, on_delete=models.SET_NULL, related_name="preemptions_suffered"
    )
    preemptor_ref = models.CharField(max_length=320, blank=True, help_text="namespace/name; empty for stalegangeviction")
    victim_ref = models.CharField(max_length=320)
    preemptor_queue = models.ForeignKey(
        "queues.Queue", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    victim_queue = models.ForeignKey("queues.Queue", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    reason = models.CharField(max_length=64)
    message = models.TextField(blank=True)
    # {"allocated": {...}, "fair_share": {...}, "quota": {...}} for each side, in queue units.
    preemptor_queue_figures = models.JSONField(default=dict, blank=True)
    victim_queue_figures = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ("-at", "-id")

    def __str__(self) -> str:
        return f"{self.action}: {self.victim_ref} for {self.preemptor_ref or '-'}"


class PendingReasonQuerySet(models.QuerySet["PendingReason"]):
    def current_of(self, shard: Any) -> PendingReasonQuerySet:
        """The current why-pending of the shard's workloads: what its latest cycle holds."""
        return self.filter(shard.label_q("workload__labels"), is_current=True, workload__cluster_id=shard.cluster_id)


class PendingReason(models.Model):
    """Why a workload stays pending, since ``recorded_at`` (given by ``cycle``); the row marked
    current holds as of the latest cycle of the workload's shard, the others are its history.
    A row is written only when the reason or its words change, not by every cycle that finds it so."""

    workload = models.ForeignKey("workloads.Workload", on_delete=models.CASCADE, related_name="pending_reasons")
    cycle = models.ForeignKey(
        SchedulingCycle, null=True, blank=True, on_delete=models.CASCADE, related_name="pending_reasons"
    )
    recorded_at = models.DateTimeField(db_index=True)
    reason = models.CharField(max_length=64, help_text="A code of the engine's vocabulary (scheduler_core.reasons), e.g. queue-over-limit.")
    message = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)
    is_current = models.BooleanField(default=True)

    objects = PendingReasonQuerySet.as_manager()

    class Meta:
        ordering = ("-recorded_at", "-id")
        # the listing's order: one cycle writes thousands of rows at the same instant
        indexes = [models.Index(fields=("-recorded_at", "-id"), name="scheduling_reason_newest_first")]
        constraints = [
            models.UniqueConstraint(
                fields=("workload",), condition=models.Q(is_current=True),
                name="%(app_label)s_%(class)s_one_current_per_workload",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workload}: {self.reason}"


class QueueStatus(models.Model):
    """A queue's figures as recorded by one scheduling cycle (the latest row is current)."""

    queue = models.ForeignKey("queues.Queue", on_delete=models.CASCADE, related_name="statuses")
    cycle = models.ForeignKey(
        SchedulingCycle, null=True, blank=True, on_delete=models.CASCADE, related_name="queue_statuses"
    )
    recorded_at = models.DateTimeField(db_index=True)
    # Each is {"cpu": millicores, "memory": MB, "gpu": devices}, the units of the queue's quota.
    allocated = models.JSONField(default=dict)
    allocated_non_preemptible = models.JSONField(default=dict)
    requested = models.JSONField(default=dict)
    fair_share = models.JSONField(default=dict)
    pending = models.JSONField(default=dict, help_text="Requested but not allocated.")
    pending_workloads = models.PositiveIntegerField(default=0)
    running_workloads = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ("-recorded_at", "-id")
        verbose_name_plural = "queue statuses"
        indexes = [models.Index(fields=("queue", "-recorded_at"), name="sched_qstatus_queue_recent")]
        constraints = [
            models.UniqueConstraint(fields=("queue", "cycle"), name="%(app_label)s_%(class)s_unique_queue_cycle"),
        ]

    def __str__(self) -> str:
        return f"{self.queue} at {self.recorded_at:%Y-%m-%d %H:%M:%S}"

    def figures(self) -> dict[str, Any]:
        """All figures keyed by name, for the API and the UI."""
        return {
            "allocated": self.allocated,
            "allocated_non_preemptible": self.allocated_non_preemptible,
            "requested": self.requested,
            "fair_share": self.fair_share,
            "pending": self.pending,
        }


def line_key(workload_id: int) -> str:
    """A workload's key in ``WaitingLine.positions``: not a bare number, which a JSON key lookup
    would read as a list index."""
    return f"w{workload_id}"


class WaitingLine(models.Model):
    """A shard's pending workloads in the order its latest cycle tried them (the engine's
    ``CycleResult.positions``) and its queue depth, one row per shard, replaced by every cycle. Kept whole in one
    row: the places change every cycle, so a row per workload would be thousands of writes."""

    shard = models.OneToOneField("cluster.SchedulingShard", on_delete=models.CASCADE, related_name="waiting_line")
    cycle = models.ForeignKey(SchedulingCycle, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    recorded_at = models.DateTimeField(null=True, blank=True)
    # line_key(workload id) -> [place in the shard, place in its queue], from 1
    positions = models.JSONField(default=dict, blank=True)
    # per leaf queue and priority: {"queue", "priority", "jobs", "gpus", "oldest_wait_seconds" (as of the cycle),
    # "next_workload" (id of the first in the engine's order, or null)}, as scheduler_core.waiting counts it
    depth = models.JSONField(default=list, blank=True)
    # Start-time estimates (``scheduler_core.eta``), refreshed by a worker every few cycles, not by the cycle:
    # line_key(workload id) -> {"p50", "p80" (epoch seconds or null: not within the horizon), "code", "ahead",
    # "queue", "pods", "gpus", "per_pod", "whole_node", "frees_at", "node", "said" (the PodGroup's annotation
    # texts: p50, p80, reason; status_writer.annotation_texts)}
    estimates = models.JSONField(default=dict, blank=True)
    # per leaf queue and priority: {"queue", "priority", "workload" (the next in the engine's order), "p50_wait_seconds",
    # "p80_wait_seconds"} (waits from estimated_at; null: not within the horizon)
    queue_estimates = models.JSONField(default=list, blank=True)
    estimated_at = models.DateTimeField(null=True, blank=True)
    # the snapshot's clock when estimated (epoch seconds), the samples drawn and the worker's seconds
    estimated_now = models.FloatField(null=True, blank=True)
    estimate_samples = models.PositiveIntegerField(default=0)
    estimate_seconds = models.FloatField(null=True, blank=True)

    def __str__(self) -> str:
        return f"waiting line of {self.shard_id}"
