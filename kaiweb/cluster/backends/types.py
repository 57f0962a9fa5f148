"""Neutral observed objects and actions shared by every cluster backend.

These frozen dataclasses are what the scheduling cycle reads from, and hands to, a
`ClusterGateway`. They carry no Kubernetes client types, so the simulated backend and the
Kubernetes backend produce the same shapes.

Units follow KAI (KAI-SEMANTICS §1.1): CPU in millicores, memory in bytes for pods and nodes,
GPUs in devices (fractions allowed). Queue specs are the engine's ``QueueSpec`` (memory in bytes,
-1 unlimited), read and written by ``scheduler_core.queue_crd``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from scheduler_core.model import PodState, QueueSpec, TopologyConstraint

# Observed pod states, topology constraints and queue specs are the engine's own types (one model,
# one unit per quantity); the backends convert the cluster's units at their border.
__all__ = ["PodState", "QueueSpec", "TopologyConstraint"]

T = TypeVar("T")

# Kubernetes names KAI uses (DESIGN.md "Kubernetes conventions", KAI-SEMANTICS §1.5, §5).
QUEUE_LABEL = "kai.scheduler/queue"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
POD_GROUP_ANNOTATION = "pod-group-name"
# KAI Resource Management's namespace annotation carrying its project's enforceKaiScheduler ("true": every
# pod of the namespace goes to our scheduler, whatever it asked for); read by the pod admission webhook.
ENFORCE_SCHEDULER_ANNOTATION = "kai.resources/enforce-scheduler-name"
# Where the org's assigner put a project's PodGroup and why (or why it waits), kept in the mirror with what
# kaiweb writes on PodGroups; a workload that fits none of its candidate node pools says the words below,
# and its why-pending says them too.
NODE_POOL_ASSIGNMENT_ANNOTATION = "kaiweb.io/node-pool-assignment"
UNSCHEDULABLE_ON_EVERY_POOL = "unschedulable on every candidate node pool"
GPU_FRACTION_ANNOTATION = "gpu-fraction"
GPU_MEMORY_ANNOTATION = "gpu-memory"
GPU_FRACTION_NUM_DEVICES_ANNOTATION = "gpu-fraction-num-devices"
GPU_GROUP_LABEL = "runai-gpu-group"
# A pod on several shared devices (gpu-fraction-num-devices > 1) has one label per device instead,
# ``runai-gpu-group/<group>: <group>`` (KAI's MultiGpuGroupLabelPrefix).
MULTI_GPU_GROUP_PREFIX = GPU_GROUP_LABEL + "/"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
MIG_ENABLED_LABEL = "node-role.kubernetes.io/mig-enabled"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
# Written by kaiweb on bind: which decision bound the pod, and the GPU share it was given.
BIND_KEY_ANNOTATION = "kaiweb.io/bind-key"
GPU_PORTION_ANNOTATION = "kaiweb.io/gpu-portion"
# KAI's stamps on a PodGroup (its pkg/common/constants), each with the Workload field that keeps it:
# when the gang last started (minimum runtime), was last evicted (re-arms the preemption delay) and
# became stale (staleness grace). KAI writes them as Go's time.RFC3339 of a UTC time, to the second.
LAST_START_ANNOTATION = "kai.scheduler/last-start-timestamp"
LAST_EVICTION_ANNOTATION = "kai.scheduler/last-eviction-timestamp"
STALE_SINCE_ANNOTATION = "kai.scheduler/stale-podgroup-timestamp"
# How many of a PodGroup's status.schedulingConditions are kept (KAI writes one per node pool).
MAX_SCHEDULING_CONDITIONS = 32
POD_GROUP_STAMPS = (("last_start_at", LAST_START_ANNOTATION), ("last_eviction_at", LAST_EVICTION_ANNOTATION),
                    ("stale_since", STALE_SINCE_ANNOTATION))
# Written by kaiweb on a waiting PodGroup, for kubectl users: its place in the engine's order (in its
# queue, in its shard) and, once estimated, when it may start (p50 and p80, RFC 3339 UTC to the minute)
# and why it waits. Annotations, not status fields: KAI's PodGroup CRD fixes the fields of its status
# and the API server prunes any other. Taken away once the PodGroup no longer waits.
QUEUE_POSITION_ANNOTATION = "kaiweb.io/queue-position"
SHARD_POSITION_ANNOTATION = "kaiweb.io/shard-position"
START_P50_ANNOTATION = "kaiweb.io/start-estimate-p50"
START_P80_ANNOTATION = "kaiweb.io/start-estimate-p80"
START_REASON_ANNOTATION = "kaiweb.io/start-estimate-reason"
LINE_ANNOTATIONS = (QUEUE_POSITION_ANNOTATION, SHARD_POSITION_ANNOTATION, START_P50_ANNOTATION,
                    START_P80_ANNOTATION, START_REASON_ANNOTATION)
# The longest text kaiweb writes in one of them (the reason is cut there).
LINE_ANNOTATION_MAX = 240
# A request header that marks reads made by an observer of the cluster (the invariant checks), not by
# the product: the fake API server neither logs them nor answers them with its injected faults.
OBSERVER_HEADER = "X-Kaiweb-Observer"


@dataclass(frozen=True)
class Unreadable:
    """A cluster object the gateway could not read; it is reported, not raised, and skipped."""

    kind: str  # "Pod", "Node", "PodGroup", "Queue", "PriorityClass"
    namespace: str  # "" for cluster-scoped objects
    name: str
    uid: str
    field: str  # e.g. "metadata.annotations[gpu-fraction]"
    rule: str  # e.g. "must be a number in (0, 1]"
    message: str  # one sentence naming the object, the field, the value and the rule

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


@dataclass(frozen=True)
class Listing(Generic[T]):
    """The answer of every ``list_*`` call: the readable objects, the unreadable ones, and the
    list's resourceVersion (where a watch can resume; "" for backends without one)."""

    items: tuple[T, ...]
    problems: tuple[Unreadable, ...] = ()
    resource_version: str = ""

    def __iter__(self) -> Iterator[T]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


@dataclass(frozen=True)
class ResourceAmounts:
    """A request or capacity: CPU millicores, memory bytes, whole GPU devices, MIG slices by profile."""

    cpu_millis: int = 0
    memory_bytes: int = 0
    gpus: float = 0.0
    pods: int = 0
    mig: Mapping[str, int] = field(default_factory=dict)  # "mig-3g.40gb" → count
    other: Mapping[str, int] = field(default_factory=dict)  # other extended resources (integral)


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str  # NoSchedule / PreferNoSchedule / NoExecute


@dataclass(frozen=True)
class Toleration:
    key: str = ""  # "" with operator Exists tolerates every taint
    operator: str = "Equal"  # Equal / Exists
    value: str = ""
    effect: str = ""  # "" matches every effect


@dataclass(frozen=True)
class ObservedNode:
    name: str
    allocatable: ResourceAmounts
    gpu_product: str | None  # label nvidia.com/gpu.product
    gpu_memory_mib: int | None  # label nvidia.com/gpu.memory (bytes-looking values converted)
    mig_enabled: bool
    mig_strategy: str | None  # label nvidia.com/mig.strategy ("single" / "mixed")
    labels: Mapping[str, str]
    ready: bool
    unschedulable: bool
    taints: tuple[Taint, ...]
    resource_version: str
    uid: str = ""

    @property
    def cpu_millis(self) -> int:
        return self.allocatable.cpu_millis

    @property
    def memory_bytes(self) -> int:
        return self.allocatable.memory_bytes

    @property
    def gpus(self) -> int:
        return int(self.allocatable.gpus)

    @property
    def max_pods(self) -> int:
        return self.allocatable.pods


@dataclass(frozen=True)
class ObservedOtherPod:
    """A pod no kai scheduler places (``spec.schedulerName`` is another's), read only for what it
    holds on its node: its requests, while it is bound and not finished."""

    namespace: str
    name: str
    uid: str
    node: str | None
    scheduler_name: str
    phase: str
    requests: ResourceAmounts
    resource_version: str

    @property
    def holds(self) -> bool:
        """Bound, and not Succeeded or Failed: its node's resources are taken."""
        return bool(self.node) and self.phase not in ("Succeeded", "Failed")


@dataclass(frozen=True)
class ObservedPod:
    namespace: str
    name: str
    uid: str
    node: str | None
    phase: str  # Kubernetes phase as written ("Pending", "Running", ...)
    state: str  # a `PodState` value (the engine's vocabulary)
    queue: str | None  # label kai.scheduler/queue; None only when the pod group names the queue
    pod_group: str | None  # annotation pod-group-name
    sub_group: str | None  # label kai.scheduler/subgroup-name
    priority_class: str | None
    priority: int | None  # spec.priority, when admission resolved it
    requests: ResourceAmounts
    gpu_fraction: float | None  # annotation gpu-fraction, 0 < f <= 1
    gpu_memory_mib: int | None  # annotation gpu-memory, > 0
    gpu_fraction_num_devices: int  # annotation gpu-fraction-num-devices, default 1
    gpu_groups: tuple[str, ...]  # the shared devices it was given (`gpu_sharing.groups_of` its labels)
    labels: Mapping[str, str]
    node_selector: Mapping[str, str]
    created_at: datetime | None
    deleted_at: datetime | None  # metadata.deletionTimestamp
    resource_version: str
    tolerations: tuple[Toleration, ...] = ()
    # spec.affinity as Kubernetes spells it, checked and reduced to the fields the scheduler
    # reads: nodeAffinity / podAffinity / podAntiAffinity, each with required... and preferred...
    affinity: Mapping[str, Any] = field(default_factory=dict)
    host_ports: tuple[str, ...] = ()  # "TCP/8080", or "TCP/8080/10.0.0.1" when bound to one address
    # What must exist before the pod can run: (field, ConfigMap name) it needs (not optional), and
    # (field, PersistentVolumeClaim name) it mounts.
    task_priority: int | None = None  # label kai.scheduler/task-priority (None: absent or not a number)
    config_maps: tuple[tuple[str, str], ...] = ()
    claims: tuple[tuple[str, str], ...] = ()
    # metadata.ownerReferences is not empty: the pod-grouper gives the pod its owner's PodGroup
    # (annotation pod-group-name); until then it belongs to no workload.
    owned: bool = False
    # spec.resourceClaims (DRA): (entry name, ResourceClaim name, ResourceClaimTemplate name), the claim's
    # name of a template entry read from status.resourceClaimStatuses ("" until the controller made it).
    resource_claims: tuple[tuple[str, str, str], ...] = ()

    @property
    def ref(self) -> PodRef:
        return PodRef(self.namespace, self.name, self.uid)

    @property
    def is_fractional(self) -> bool:
        return self.gpu_fraction is not None or self.gpu_memory_mib is not None


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str = ""


@dataclass(frozen=True)
class SubGroup:
    name: str
    min_member: int | None
    parent: str | None
    min_sub_group: int | None = None
    topology_constraint: TopologyConstraint | None = None


@dataclass(frozen=True)
class ObservedPodGroup:
    namespace: str
    name: str
    uid: str
    min_member: int  # nil → 1 (KAI-SEMANTICS §1.3); 0 = fully elastic
    min_sub_group: int | None
    queue: str
    priority_class: str | None
    preemptibility: str | None  # "preemptible" / "non-preemptible" / None (derived from priority)
    sub_groups: tuple[SubGroup, ...]
    topology_constraint: TopologyConstraint | None
    mark_unschedulable: bool
    created_at: datetime | None
    resource_version: str
    labels: Mapping[str, str] = field(default_factory=dict)  # e.g. the node-pool label that places it in a shard
    preemption_delay_s: float | None = None  # spec.preemptionDelay
    staleness_grace_s: float | None = None  # spec.stalenessGracePeriod
    owner: Mapping[str, str] | None = None  # the controlling ownerReference (kind, name, uid), if any
    # KAI's stamps (`POD_GROUP_STAMPS`), None when absent; a value that is not an RFC 3339 time is
    # ignored, as KAI ignores it, and said in ``notes``.
    last_start_at: datetime | None = None
    last_eviction_at: datetime | None = None
    stale_since: datetime | None = None
    notes: tuple[str, ...] = ()
    # What kaiweb itself writes on the PodGroup, as this observation shows it: the stamp annotations'
    # texts and status.schedulingConditions (at most `MAX_SCHEDULING_CONDITIONS`), so the write-back
    # judges what to write without listing every PodGroup again.
    said: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ObservedQueue:
    spec: QueueSpec
    uid: str
    resource_version: str
    status: Mapping[str, object] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class ObservedPriorityClass:
    name: str
    value: int
    global_default: bool
    preemption_policy: str | None
    resource_version: str = ""


@dataclass(frozen=True)
class QueueStatusUpdate:
    """What kaiweb writes to a Queue's status (KAI's fields, KAI-SEMANTICS §7.2)."""

    name: str
    allocated: ResourceAmounts = ResourceAmounts()
    allocated_non_preemptible: ResourceAmounts = ResourceAmounts()
    requested: ResourceAmounts = ResourceAmounts()
    child_queues: tuple[str, ...] = ()


@dataclass(frozen=True)
class BindAction:
    namespace: str
    name: str
    uid: str
    node: str
    gpu_groups: tuple[str, ...] = ()  # for fractional GPUs: one shared device group per device
    gpu_portion: float | None = None  # for fractional GPUs: the accepted share of one device
    idempotency_key: str = ""
    node_pool: str = ""  # the shard that decided it, for the Scheduled event
    # The pod's resourceVersion when the mirror last saw it unbound ("" unknown): a shared-GPU bind
    # writes its group label guarded by it, without reading the pod first; a pod changed since is read.
    resource_version: str = ""


# How an eviction is carried out (a shard's ``eviction_mode``, `kaiweb.cluster.choices.EvictionMode`):
# KAI deletes the pod (`pkg/scheduler/cache/evictor`), so PodDisruptionBudgets never stop it; the
# Eviction API lets a budget refuse (429), and the decision fails until the budget allows it.
EVICT_BY_DELETE = "delete"
EVICT_BY_EVICTION_API = "evict"
EVICTION_MODES = (EVICT_BY_DELETE, EVICT_BY_EVICTION_API)
EVICTION_MODE_RULE = ("must be delete (the pod is deleted, as KAI does: PodDisruptionBudgets do not apply) or evict "
                      "(the Eviction API: a budget may refuse)")
# The condition KAI's --update-pod-eviction-condition sets before deleting (k8s.io/api core/v1
# `DisruptionTarget`, `PodReasonPreemptionByScheduler`), its message the eviction's.
DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"


@dataclass(frozen=True)
class EvictAction:
    namespace: str
    name: str
    uid: str
    grace_seconds: int | None = None  # None = the pod's own terminationGracePeriodSeconds
    reason: str = "Evicted"
    message: str = ""
    idempotency_key: str = ""
    # EVICT_BY_EVICTION_API unless told otherwise; the cycle passes its shard's mode.
    mode: str = EVICT_BY_EVICTION_API
    # With EVICT_BY_DELETE: set DisruptionTarget=True (PreemptionByScheduler, the message) through the
    # pod's status first, as KAI does with --update-pod-eviction-condition.
    disruption_target: bool = False


class ActionOutcome:
    BOUND = "bound"
    ALREADY_BOUND = "already-bound"  # bound to that node before (a retried action)
    EVICTED = "evicted"
    ALREADY_GONE = "already-gone"  # the pod (or that incarnation of it) no longer exists


@dataclass(frozen=True)
class ActionResult:
    outcome: str  # an `ActionOutcome` value
    message: str = ""


@dataclass(frozen=True)
class QueueSyncAction:
    """One step of the Queue CRD sync (`kaiweb.cluster.queue_sync.diff_queues`, whose rule says which
    side wins)."""

    op: str  # "create" / "update" / "delete" (written to the cluster) or "import" (into the database)
    name: str
    spec: QueueSpec | None  # the spec that wins: the database's, or the cluster's for an import (None for delete)
    message: str  # what changes, and for updates which cluster values the database overrides
    resource_version: str = ""  # the observed CRD's version, for an optimistic replace


@dataclass(frozen=True)
class ObservedTopology:
    """A Topology object (``kai.scheduler/v1alpha1``): node label keys, outermost first, and each
    level's alias ("" for none; a constraint may name a level by either)."""

    name: str
    levels: tuple[str, ...]
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class UsageDbConfig:
    """spec.usageDBConfig of a SchedulingShard, as kaiweb applies it: the Prometheus that time-based
    fair share reads the queues' past usage from, and how (KAI's `usagedb/prometheus` client).

    `connection_string` "" with `connection_string_env_var` "": the one Prometheus kaiweb is given
    (KAI_PROMETHEUS_URL), as KAI then uses the Prometheus its operator runs. Durations in seconds;
    metric names as KAI's extraParams set them (KAI's defaults otherwise)."""

    client_type: str
    connection_string: str = ""
    connection_string_env_var: str = ""
    window_type: str = "sliding"
    tumbling_start: str = ""  # RFC 3339, with windowType tumbling
    cron: str = ""  # five fields, with windowType cron
    fetch_interval_s: float = 60.0
    staleness_s: float = 300.0
    query_timeout_s: float = 10.0
    query_resolution_s: float = 60.0
    allocation_metrics: tuple[tuple[str, str], ...] = ()  # (resource, metric or PromQL), cpu/memory/gpu
    capacity_metrics: tuple[tuple[str, str], ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {"client_type": self.client_type, "connection_string": self.connection_string,
                "connection_string_env_var": self.connection_string_env_var, "window_type": self.window_type,
                "tumbling_start": self.tumbling_start, "cron": self.cron,
                "fetch_interval_s": self.fetch_interval_s, "staleness_s": self.staleness_s,
                "query_timeout_s": self.query_timeout_s, "query_resolution_s": self.query_resolution_s,
                "allocation_metrics": dict(self.allocation_metrics),
                "capacity_metrics": dict(self.capacity_metrics)}


@dataclass(frozen=True)
class ObservedShard:
    """A SchedulingShard object (``kai.scheduler/v1``), KAI's per-partition scheduler configuration."""

    name: str
    partition_label_value: str
    gpu_placement: str | None
    cpu_placement: str | None
    args: Mapping[str, str]
    k_value: float | None = None
    preempt_min_runtime_s: float | None = None
    reclaim_min_runtime_s: float | None = None
    # spec.args[kaiweb-eviction-mode] (kaiweb's; KAI's operator passes on only its scheduler's flags)
    # and spec.args[update-pod-eviction-condition] (KAI's flag); absent, KAI's behaviour.
    eviction_mode: str = EVICT_BY_DELETE
    update_pod_eviction_condition: bool = False
    # spec.queueDepthPerAction: (action, jobs per queue) pairs, KAI's action names
    queue_depth_per_action: tuple[tuple[str, int], ...] = ()
    # spec.usageDBConfig.usageParams windowSize and halfLifePeriod, in seconds (None: not set)
    usage_window_s: float | None = None
    usage_half_life_s: float | None = None
    # spec.usageDBConfig when it names a Prometheus kaiweb reads (None: kaiweb's own accounting)
    usage_db: UsageDbConfig | None = None
    # spec.actions resolved as KAI's operator resolves it: the actions to run, in order (None: the
    # object overrides none, KAI's default order)
    actions: tuple[str, ...] | None = None
    # what the object sets that kaiweb reads but does not apply: (field, why), in field order
    unsupported: tuple[tuple[str, str], ...] = ()
