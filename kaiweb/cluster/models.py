"""Models of the cluster app: clusters, scheduling shards, nodes and GPU devices as last observed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from kaiweb.cluster.choices import (
    DEFAULT_PARTITION_LABEL,
    BackendKind,
    EvictionMode,
    GpuPlacementStrategy,
    PlacementStrategy,
)
from kaiweb.core.models import TimeStampedModel
from scheduler_core import model as m

#: how many DRA devices a node keeps in `Node.dra_devices` (the rest are counted, not listed)
MAX_DRA_DEVICES = 256
#: the state of a shard's usage database reading (`usage_db_reading["state"]`)
USAGE_DB_OK, USAGE_DB_FAILED = "ok", "failed"
def redact_url(url: str) -> str:
    """A URL as kaiweb shows it: any user and password replaced by ***."""
    parts = urlsplit(str(url))
    if parts.username is None and parts.password is None:
        return str(url)
    host = parts.hostname or ""
    netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


#: extended resources with this prefix are MIG instances (nvidia.com/mig-1g.10gb)
MIG_PREFIX = "nvidia.com/mig-"


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


class SchedulingShardQuerySet(models.QuerySet["SchedulingShard"]):
    def default(self) -> SchedulingShard | None:
        """The shard a cycle, page or what-if uses when none is named: the first enabled shard (by
        cluster name, then the one holding what carries no partition label, such as the default node
        pool's, then shard name) of an enabled cluster of the configured backend."""
        from django.conf import settings

        partitioned = models.Case(models.When(partition_label_value="", then=0), default=1)
        return (self.select_related("cluster")
                .filter(enabled=True, cluster__enabled=True, cluster__backend=settings.KAI_CLUSTER_BACKEND)
                .order_by("cluster__name", partitioned, "name").first())


class SchedulingShard(TimeStampedModel):
    """A node-label partition of a cluster scheduled on its own (KAI SchedulingShard).

    Membership, as KAI selects it: a shard with a partition value holds the nodes, queues and
    workloads whose partition label equals it; the shard without one holds those that do not
    have the label at all (a label present but empty belongs to no shard without that value).
    `matches` decides it for labels in memory, `label_q` for rows in the database: the same rule.
    """

    objects = SchedulingShardQuerySet.as_manager()

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="shards")
    name = models.CharField(max_length=100)
    partition_label_key = models.CharField(max_length=253, default=DEFAULT_PARTITION_LABEL)
    partition_label_value = models.CharField(
        max_length=63, blank=True, help_text="Empty: the shard sees objects without the partition label."
    )
    gpu_placement = models.CharField(
        max_length=32, choices=GpuPlacementStrategy.choices, default=GpuPlacementStrategy.BINPACK,
        help_text="Fragmentation-aware: GPU pods go where they strand the least GPU capacity for the "
        "shard's typical pods.",
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
    args = models.JSONField(
        default=dict, blank=True,
        help_text="KAI's SchedulingShard spec.args, e.g. {\"restrict-node-scheduling\": \"true\"}.",
    )
    eviction_mode = models.CharField(
        max_length=16, choices=EvictionMode.choices, default=EvictionMode.DELETE,
        help_text="Delete: the victim pod is deleted, as KAI does; PodDisruptionBudgets do not stop a reclaim "
        "or preemption. Evict: the Eviction API; a budget may refuse, and the decision fails until it allows. "
        "A SchedulingShard object sets it with spec.args[kaiweb-eviction-mode].",
    )
    update_pod_eviction_condition = models.BooleanField(
        default=False,
        help_text="With delete: set the DisruptionTarget condition (reason PreemptionByScheduler, the "
        "eviction's message) before deleting, as KAI's --update-pod-eviction-condition does.",
    )
    queue_depth_per_action = models.JSONField(
        default=dict, blank=True,
        help_text="KAI's queueDepthPerAction, from the SchedulingShard object: action → the jobs of each queue "
        "the action tries per cycle, in its job order. Empty: every job.",
    )
    actions = models.JSONField(
        null=True, blank=True, default=None,
        help_text="The actions a cycle runs, in order, as the SchedulingShard object's spec.actions resolves "
        "(KAI's defaults with the object's enabled and priority overrides). Empty (null): KAI's default "
        "actions in their default order.",
    )
    unsupported_fields = models.JSONField(
        default=list, blank=True,
        help_text="The SchedulingShard object's fields kaiweb reads but does not apply, each with the reason "
        "([{\"field\": …, \"reason\": …}]); written by the cluster mirror.",
    )
    usage_db = models.JSONField(
        default=dict, blank=True,
        help_text="The Prometheus that time-based fair share reads past usage from (KAI's usageDBConfig, from the "
        "SchedulingShard object, as `UsageDbConfig.as_json`). Empty: kaiweb's own usage accounting.",
    )
    usage_db_reading = models.JSONField(
        default=dict, blank=True,
        help_text="The usage database's latest answer and how its fetch went (state, reason, times, the usage per "
        "queue); written by the usage app's fetch task, read by the cycle.",
    )
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

    def usage_db_answer(self, now: datetime | None = None) -> tuple[dict[str, tuple[float, float, float]] | None, str]:
        """The usage the cycle reads from the shard's usage database, and a sentence saying where the
        cycle's usage comes from; None (kaiweb's own accounting) when the shard names none, it has not
        answered yet with the shard's settings, or its last answer is older than stalenessPeriod."""
        config = self.usage_db if isinstance(self.usage_db, dict) else {}
        if not config:
            return None, "kaiweb's own usage accounting (the shard names no usage database)"
        reading = self.usage_db_reading if isinstance(self.usage_db_reading, dict) else {}
        where = reading.get("url") or redact_url(config.get("connection_string") or "") or "the usage database"
        failed = (f"; the last fetch, at {reading.get('attempted_at')}, failed: {reading.get('reason')}"
                  if reading.get("state") == USAGE_DB_FAILED else "")
        if reading.get("config") != config or not reading.get("succeeded_at"):
            return None, (f"kaiweb's own usage accounting: no answer yet from the Prometheus at {where} with the "
                          f"shard's settings{failed}")
        now = now or datetime.now(tz=UTC)
        age = (now - datetime.fromisoformat(reading["succeeded_at"])).total_seconds()
        staleness = float(config.get("staleness_s", 300.0))
        if age > staleness:
            return None, (f"kaiweb's own usage accounting: the last answer of the Prometheus at {where} is "
                          f"{age:.0f}s old, older than stalenessPeriod ({staleness:g}s){failed}")
        usage = {str(q): (float(v[0]), float(v[1]), float(v[2])) for q, v in (reading.get("usage") or {}).items()}
        return usage, f"the Prometheus at {where}, answered at {reading['succeeded_at']}{failed}"

    def matches(self, labels: Any) -> bool:
        """Whether an object with these labels belongs to this shard."""
        labels = labels if isinstance(labels, dict) else {}
        if self.partition_label_value:
            return str(labels.get(self.partition_label_key, "")) == self.partition_label_value
        return self.partition_label_key not in labels

    def holds(self, cluster_id: int | None, labels: Any) -> bool:
        """Whether an object of that cluster with these labels is this shard's."""
        return self.cluster_id == cluster_id and self.matches(labels)

    def label_q(self, field: str = "labels") -> models.Q:
        """`matches` as a filter on a JSON labels column (`field`, e.g. "labels" or "workload__labels")."""
        from django.db.models.fields.json import KeyTextTransform
        from django.db.models.lookups import Exact

        if self.partition_label_value:
            return models.Q(Exact(KeyTextTransform(self.partition_label_key, field), self.partition_label_value))
        return ~models.Q(**{f"{field}__has_key": self.partition_label_key})


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
    taints = models.JSONField(default=list, blank=True, help_text="[{key, value, effect}] as in spec.taints.")
    mig_strategy = models.CharField(max_length=16, blank=True, help_text="nvidia.com/mig.strategy: single or mixed.")
    extended_resources = models.JSONField(
        default=dict, blank=True,
        help_text="Other allocatable resources by name, e.g. {'nvidia.com/mig-1g.10gb': 7, 'ephemeral-storage': 1e11}.",
    )
    observed_at = models.DateTimeField(null=True, blank=True)
    # Dynamic Resource Allocation, as the last cycle that read the cluster's DRA objects found it: written
    # by that cycle (`scheduling.dra.record_devices`) only when it changed, so the cycle and time are those
    # of the read that last changed it.
    dra_devices = models.JSONField(
        default=list, blank=True,
        help_text="The node's DRA devices (ResourceSlices) and who holds them: [{driver, pool, device, gpu, claim "
        "('namespace/name' or ''), pods (['namespace/name', ...], the claim's reservedFor), admin_access}], "
        f"the first {MAX_DRA_DEVICES} in (driver, pool, device) order.")
    dra_devices_total = models.PositiveIntegerField(
        default=0, help_text="How many DRA devices the node has (more than dra_devices lists when it was cut).")
    dra_claimed = models.PositiveIntegerField(default=0, help_text="How many of its DRA devices a claim holds.")
    dra_read_at = models.DateTimeField(null=True, blank=True, help_text="When the DRA devices were read.")
    dra_read_cycle = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="The scheduling cycle that read the DRA devices (its id).")

    class Meta:
        ordering = ("cluster__name", "name")
        constraints = [
            models.UniqueConstraint(fields=("cluster", "name"), name="%(app_label)s_%(class)s_unique_cluster_name"),
        ]

    def __str__(self) -> str:
        return self.name

    def to_spec(self, other_use: m.OtherUse | None = None) -> m.NodeSpec:
        """This node as the engine's NodeSpec: capacity, labels, taints, cordon, MIG instances and
        the other extended resources; ``other_use``: what pods of other schedulers hold on it
        (`OtherPod.use_by_node`)."""
        extended = {str(k): v for k, v in (self.extended_resources or {}).items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)}
        return m.NodeSpec(
            name=self.name,
            cpu_millis=self.allocatable_cpu,
            memory_bytes=float(self.allocatable_memory),
            gpus=int(self.allocatable_gpu),
            gpu_memory_mib=self.gpu_memory_mib or 100,
            gpu_memory_synced=bool(self.gpu_memory_mib),
            max_pods=self.allocatable_pods,
            labels={str(k): str(v) for k, v in (self.labels or {}).items()},
            ready=self.ready,
            unschedulable=self.unschedulable,
            taints=tuple(m.Taint(str(t.get("key", "")), str(t.get("value", "") or ""), str(t.get("effect", "")))
                         for t in (self.taints or []) if isinstance(t, dict)),
            mig_strategy=self.mig_strategy or None,
            mig_instances={k: int(v) for k, v in extended.items() if k.startswith(MIG_PREFIX)},
            extended={k: float(v) for k, v in extended.items() if not k.startswith(MIG_PREFIX)},
            other_use=other_use,
        )

    @staticmethod
    def dra_device_held(row: Any) -> bool:
        """A stored DRA device (a row of `dra_devices`) is held: a claim has it, and not only for admin
        access (an ``adminAccess`` request neither needs a free device nor holds one)."""
        return isinstance(row, dict) and bool(row.get("claim")) and not row.get("admin_access")

    def dra_gpus(self) -> tuple[int, int]:
        """The node's DRA GPU devices as (held by a claim, free), from `dra_devices`: a held GPU device is
        one whole GPU in use, as KAI counts DRA-claimed GPUs."""
        gpus = [r for r in self.dra_devices or [] if isinstance(r, dict) and r.get("gpu")]
        held = sum(1 for r in gpus if self.dra_device_held(r))
        return held, len(gpus) - held

    @classmethod
    def from_spec(cls, spec: Any, cluster: Cluster) -> Node:
        """An unsaved Node of `cluster` from an engine NodeSpec (for snapshots replayed as a simulated cluster)."""
        return cls(
            cluster=cluster, name=spec.name, labels=dict(spec.labels), allocatable_cpu=spec.cpu_millis,
            allocatable_memory=int(spec.memory_bytes), allocatable_gpu=spec.whole_gpus,
            allocatable_pods=spec.max_pods, gpu_memory_mib=spec.gpu_memory_mib if spec.gpu_memory_synced else 0,
            mig_enabled=spec.mig_enabled, ready=spec.ready, unschedulable=spec.unschedulable,
            taints=[{"key": t.key, "value": t.value, "effect": t.effect} for t in spec.taints],
            mig_strategy=spec.mig_strategy or "",
            extended_resources={**dict(spec.mig_instances), **dict(spec.extended)},
        )


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


class OtherPod(models.Model):
    """A pod bound to a node of the cluster that no kai scheduler placed (another scheduler's, a
    DaemonSet's, a static pod): what it requests is held on its node, so the cycle does not give it
    again. Terminal pods are not kept. Reservation pods of shared GPUs are not others: their sharers
    count them."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="other_pods")
    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    node_name = models.CharField(max_length=253, db_index=True)
    scheduler_name = models.CharField(max_length=253, blank=True)
    cpu_millis = models.BigIntegerField(default=0)
    memory_bytes = models.BigIntegerField(default=0)
    gpus = models.FloatField(default=0, help_text="Whole devices.")
    mig = models.JSONField(default=dict, blank=True, help_text="MIG instances by resource name.")
    other = models.JSONField(default=dict, blank=True, help_text="Other extended resources by name.")
    resource_version = models.CharField(max_length=64, blank=True)
    observed_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("node_name", "namespace", "name")
        constraints = [
            models.UniqueConstraint(fields=("cluster", "namespace", "name"),
                                    name="%(app_label)s_%(class)s_unique_cluster_namespace_name"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} on {self.node_name}"

    @staticmethod
    def use_by_node(rows: Any) -> dict[tuple[int, str], m.OtherUse]:
        """The `OtherUse` of each (cluster id, node name) ``rows`` (OtherPod rows) name: their
        requests summed."""
        sums: dict[tuple[int, str], dict[str, Any]] = {}
        for row in rows:
            s = sums.setdefault((row.cluster_id, row.node_name), {"cpu": 0.0, "memory": 0.0, "gpus": 0.0, "pods": 0, "mig": {}, "other": {}})
            s["cpu"] += row.cpu_millis
            s["memory"] += row.memory_bytes
            s["gpus"] += row.gpus
            s["pods"] += 1
            for key, into in (("mig", s["mig"]), ("other", s["other"])):
                for name, amount in (getattr(row, key) or {}).items():
                    if isinstance(amount, (int, float)) and not isinstance(amount, bool):
                        into[str(name)] = into.get(str(name), 0.0) + float(amount)
        return {name: m.OtherUse(cpu_millis=s["cpu"], memory_bytes=s["memory"], gpus=s["gpus"], pods=s["pods"],
                                 mig_instances=s["mig"], extended=s["other"]) for name, s in sums.items()}


class UnreadableObject(models.Model):
    """A cluster object kaiweb could not read, or read but cannot schedule, and why.

    One row per object: the field and the rule it breaks (a malformed ``gpu-fraction``, an
    unknown queue label, a PodGroup on a queue with children, ...). The row disappears once
    the object is fixed or deleted. ``deferred`` objects are readable but wait for something
    that does not exist yet (their queue, their PodGroup); ``raw`` keeps them, so they are
    applied as soon as it appears.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="unreadable_objects")
    kind = models.CharField(max_length=32, help_text="Pod, Node, PodGroup, Queue, PriorityClass")
    namespace = models.CharField(max_length=63, blank=True)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    field = models.CharField(max_length=300, help_text="e.g. metadata.annotations[gpu-fraction]")
    rule = models.TextField(help_text="e.g. must be a number in (0, 1]")
    message = models.TextField()
    deferred = models.BooleanField(
        default=False, help_text="Readable, but waits for an object that does not exist yet (queue, PodGroup)."
    )
    raw = models.JSONField(null=True, blank=True, help_text="The object as last observed (deferred objects).")
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()

    class Meta:
        ordering = ("cluster__name", "kind", "namespace", "name")
        constraints = [
            models.UniqueConstraint(
                fields=("cluster", "kind", "namespace", "name"), name="%(app_label)s_%(class)s_unique_object"
            ),
        ]

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}: {self.field} {self.rule}"


class MirrorState(models.Model):
    """How current the database mirror of a Kubernetes cluster is, and what was last written back."""

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="mirror_state")
    watcher_heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="Last sign of life of manage.py watch_cluster for this cluster."
    )
    last_full_sync_at = models.DateTimeField(null=True, blank=True)
    last_full_sync = models.JSONField(default=dict, blank=True, help_text="Counts of the last full sync.")
    synced_queues = models.JSONField(
        default=list, blank=True, help_text="Queues present in both the database and the cluster at the last sync."
    )
    queue_status_digests = models.JSONField(
        default=dict, blank=True, help_text="Queue name → digest of the status last written to its CRD."
    )

    def __str__(self) -> str:
        return f"mirror of {self.cluster}"


class PendingReport(models.Model):
    """The why-pending explanation last written to a pod, so an unchanged one is not written again."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="pending_reports")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    reason = models.CharField(max_length=64)
    digest = models.CharField(max_length=64, help_text="Of the pod uid, the reason and the message.")
    reported_at = models.DateTimeField()

    class Meta:
        ordering = ("cluster__name", "namespace", "name")
        constraints = [
            models.UniqueConstraint(
                fields=("cluster", "namespace", "name"), name="%(app_label)s_%(class)s_unique_pod"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}: {self.reason}"


class Topology(models.Model):
    """A Topology object of the cluster (``kai.scheduler/v1alpha1``): node label keys, outermost first,
    and the levels' aliases (a topology constraint may name a level by either)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="topologies")
    name = models.CharField(max_length=253)
    levels = models.JSONField(default=list, help_text="Node label keys, outermost level first.")
    aliases = models.JSONField(default=list, blank=True,
                               help_text="Each level's alias, in the order of the levels ('' for none).")

    class Meta:
        ordering = ("cluster", "name")
        constraints = [
            models.UniqueConstraint(fields=("cluster", "name"), name="%(app_label)s_%(class)s_unique_cluster_name"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"

    @property
    def level_rows(self) -> list[dict[str, str]]:
        """Each level, outermost first: its node label key and its alias ('' for none)."""
        aliases = [str(a or "") for a in self.aliases or []]
        return [{"node_label": str(label), "alias": aliases[i] if i < len(aliases) else ""}
                for i, label in enumerate(self.levels or [])]

    def to_spec(self) -> m.TopologySpec:
        """The engine's TopologySpec (a constraint's level is resolved there, by node label or alias)."""
        rows = self.level_rows
        return m.TopologySpec(self.name, tuple(r["node_label"] for r in rows), tuple(r["alias"] for r in rows))
