"""The adapter between the database and the engine: ORM rows → ClusterSnapshot, CycleResult → rows.

Only this module (and the models' conversions) knows both worlds. `build_snapshot` reads queues,
priority classes, nodes and active workloads of one shard in a fixed number of queries and
returns the engine's immutable snapshot plus an index from engine names back to database ids;
`persist_result` writes everything one cycle decided in one transaction with bulk operations,
so the number of queries does not grow with the number of workloads.

The objects of a shard's last build are kept in the process (``_BUILT``) and reused only for rows
and a context equal to those they were made of: which worker built last never changes a snapshot
(``scheduling.cycle``, "Per-process memory").

Units: the engine counts memory in bytes, queue figures (quota, status, usage) are in the Queue
CRD's MB (10^6 bytes, as KAI's proportion plugin converts them), converted by ``scheduler_core.units``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import FloatField, Func, TextField
from django.db.models.functions import Cast

from kaiweb.cluster.backends.types import NODE_POOL_ASSIGNMENT_ANNOTATION, UNSCHEDULABLE_ON_EVERY_POOL
from kaiweb.cluster.models import MIG_PREFIX, Node, OtherPod, SchedulingShard, Topology
from kaiweb.core.changes import listing_version
from kaiweb.queues.models import PriorityClass, Queue
from kaiweb.scheduling.choices import DecisionKind, DecisionStatus
from kaiweb.scheduling.models import (
    Decision,
    PendingReason,
    PreemptionEvent,
    QueueStatus,
    SchedulingCycle,
    WaitingLine,
    line_key,
)
from kaiweb.workloads.choices import PodState, WorkloadState
from kaiweb.workloads.models import Pod, Workload
from scheduler_core import model as m
from scheduler_core import reasons as reason_codes
from scheduler_core.units import recorded_queue_units
from scheduler_core.waiting import queue_depth

RESOURCE_NAMES = ("cpu", "memory", "gpu")

# Pod states as the engine names them.
POD_STATE_TO_ENGINE = {
    PodState.PENDING: m.PENDING,
    PodState.GATED: m.GATED,
    PodState.BINDING: m.BINDING,
    PodState.BOUND: m.BOUND,
    PodState.RUNNING: m.RUNNING,
    PodState.RELEASING: m.RELEASING,
    PodState.SUCCEEDED: m.SUCCEEDED,
    PodState.FAILED: m.FAILED,
}
ACTIVE_WORKLOAD_STATES = (WorkloadState.PENDING, WorkloadState.RUNNING, WorkloadState.PARTIAL)


@dataclasses.dataclass(slots=True)
class SnapshotIndex:
    """Engine names → database rows of one snapshot, so results can be written back by id."""

    shard_id: int | None = None
    workloads: dict[str, int] = dataclasses.field(default_factory=dict)  # job uid -> workload id
    workload_queue: dict[str, int] = dataclasses.field(default_factory=dict)  # job uid -> queue id
    pods: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)  # (job uid, task) -> pod id
    pod_uids: dict[int, str] = dataclasses.field(default_factory=dict)  # pod id -> pod uid (incarnation)
    nodes: dict[str, int] = dataclasses.field(default_factory=dict)  # node name -> node id
    queues: dict[str, int] = dataclasses.field(default_factory=dict)  # queue name -> queue id
    queue_spec: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)  # quotas in queue units
    pending_workloads: dict[str, int] = dataclasses.field(default_factory=dict)  # leaf queue -> count
    running_workloads: dict[str, int] = dataclasses.field(default_factory=dict)  # (after the cycle)
    parents: dict[str, str | None] = dataclasses.field(default_factory=dict)  # queue -> parent queue
    # job uid -> why a pod of it cannot have its ResourceClaims (`scheduling.dra.prepare`)
    claim_problems: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Recorded:
    """What `persist_result` recorded of one cycle, kept in memory for the steps after it (apply, the
    write-back), which so read none of it back: the decisions to apply (binds and evictions, in engine
    order), each queue's status row by queue name, and each workload's why-pending as this cycle says
    it (workload id → (reason code, message))."""

    decisions: list[Decision]
    queue_statuses: dict[str, QueueStatus] = dataclasses.field(default_factory=dict)
    why_pending: dict[int, tuple[str, str]] = dataclasses.field(default_factory=dict)
    # the shard's waiting line as recorded (``WaitingLine.positions``: line key → [place in the shard, in its
    # queue]); None when the cycle recorded none
    positions: dict[str, list[int]] | None = None


def to_epoch(value: datetime | float | None) -> float | None:
    """Epoch seconds of a timestamp (one read as epoch seconds already is returned as it is)."""
    return value.timestamp() if isinstance(value, datetime) else value


def from_epoch(value: float) -> datetime:
    return datetime.fromtimestamp(value, tz=UTC)


def request_from(pod: dict[str, Any]) -> m.TaskRequest:
    """The engine's request of a pod row; MIG wins over a fraction, which wins over GPU memory,
    as in KAI. MIG instances and other extended resources come from ``constraints``."""
    cpu, memory = float(pod["cpu"]), float(pod["memory"])
    constraints = pod.get("constraints") or {}
    extended = {str(k): float(v) for k, v in _mapping(constraints.get("extended")).items() if _amount(v)}
    mig = {str(k): int(v) for k, v in _mapping(constraints.get("mig")).items() if _amount(v)}
    if not mig and pod.get("mig_profile"):
        mig = {f"{MIG_PREFIX}{pod['mig_profile']}": 1}
    if mig:
        return m.TaskRequest(cpu_millis=cpu, memory_bytes=memory, gpu_kind=m.GPU_MIG, mig=mig, extended=extended)
    if extended:
        plain = request_from({**pod, "constraints": {}, "mig_profile": ""})
        return dataclasses.replace(plain, extended=extended)
    if pod["gpu_fraction"] is not None:
        return m.TaskRequest(cpu_millis=cpu, memory_bytes=memory, gpu_kind=m.GPU_FRACTION,
                             gpu_fraction=pod["gpu_fraction"], gpu_devices=pod["gpu_devices"])
    if pod["gpu_memory_mib"]:
        return m.TaskRequest(cpu_millis=cpu, memory_bytes=memory, gpu_kind=m.GPU_MEMORY,
                             gpu_memory_mib=pod["gpu_memory_mib"], gpu_devices=pod["gpu_devices"])
    if pod["gpu"] > 0:
        return m.TaskRequest(cpu_millis=cpu, memory_bytes=memory, gpu_kind=m.GPU_WHOLE, gpus=pod["gpu"])
    return m.TaskRequest(cpu_millis=cpu, memory_bytes=memory)


def pod_to_request(pod: Pod) -> m.TaskRequest:
    """The engine's request of a Pod row."""
    fields = ("cpu", "memory", "gpu", "gpu_fraction", "gpu_memory_mib", "gpu_devices", "mig_profile", "constraints")
    return request_from({f: getattr(pod, f) for f in fields})


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _amount(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _requirement(raw: Any) -> m.NodeSelectorRequirement | None:
    if not isinstance(raw, dict) or not raw.get("key") or raw.get("operator") not in m.SELECTOR_OPERATORS:
        return None
    return m.NodeSelectorRequirement(str(raw["key"]), str(raw["operator"]),
                                     tuple(str(v) for v in raw.get("values") or ()))


def _node_term(raw: Any) -> m.NodeSelectorTerm:
    raw = _mapping(raw)
    exprs = [_requirement(r) for r in raw.get("matchExpressions") or ()]
    fields = [_requirement(r) for r in raw.get("matchFields") or ()]
    if None in exprs or None in fields:
        # an unreadable requirement matches nothing, rather than everything
        return m.NodeSelectorTerm()
    return m.NodeSelectorTerm(tuple(exprs), tuple(fields))  # type: ignore[arg-type]  # None entries were filtered out above


def _pod_term(raw: Any) -> m.PodAffinityTerm:
    raw = _mapping(raw)
    sel = raw.get("labelSelector")
    labels: tuple[tuple[str, str], ...] | None = None
    exprs: tuple[m.NodeSelectorRequirement, ...] = ()
    if isinstance(sel, dict):
        labels = tuple(sorted((str(k), str(v)) for k, v in _mapping(sel.get("matchLabels")).items()))
        reqs = [_requirement(r) for r in sel.get("matchExpressions") or ()]
        if None in reqs:
            labels = None  # selects nothing
        else:
            exprs = tuple(reqs)  # type: ignore[arg-type]  # None entries were filtered out above
    return m.PodAffinityTerm(str(raw.get("topologyKey", "")), labels, exprs,
                             tuple(str(n) for n in raw.get("namespaces") or ()))


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


# KAI's restrict-node-scheduling (SchedulingShard spec.args): GPU pods only on nodes labelled as GPU
# workers, other pods only on nodes labelled as CPU workers; nodes with neither label are left out.
RESTRICT_NODE_SCHEDULING_ARG = "restrict-node-scheduling"
GPU_WORKER_LABEL = "node-role.kubernetes.io/gpu-worker"
CPU_WORKER_LABEL = "node-role.kubernetes.io/cpu-worker"


def restricts_nodes(shard: SchedulingShard | None) -> bool:
    return shard is not None and str((shard.args or {}).get(RESTRICT_NODE_SCHEDULING_ARG, "")).lower() == "true"


def worker_role_constraint(constraints: dict[str, Any], request: m.TaskRequest) -> dict[str, Any]:
    """``constraints`` with the worker-role label required too (ANDed into every affinity term)."""
    label = GPU_WORKER_LABEL if request.gpu_kind != m.GPU_NONE or request.mig else CPU_WORKER_LABEL
    need = m.NodeSelectorRequirement(label, "Exists")
    current = constraints.get("required_node_affinity")
    if current is None:
        terms: tuple[m.NodeSelectorTerm, ...] = (m.NodeSelectorTerm(match_expressions=(need,)),)
    else:  # an empty term (constraints that could not be read) still matches no node
        terms = tuple(m.NodeSelectorTerm(match_expressions=(*t.match_expressions, need), match_fields=t.match_fields)
                      if (t.match_expressions or t.match_fields) else t for t in current)
    return {**constraints, "required_node_affinity": terms}


def task_constraints(constraints: dict[str, Any] | None) -> dict[str, Any]:
    """TaskSpec fields from a Pod row's ``constraints`` (the pod's nodeSelector, affinity,
    tolerations, host ports and labels, as the mirror stored them). Constraints that cannot be
    read keep the pod off every node rather than letting it anywhere."""
    c = _mapping(constraints)
    if not c:
        return {}
    try:
        return _task_constraints(c)
    except (AttributeError, TypeError, ValueError):
        return {"required_node_affinity": (m.NodeSelectorTerm(),)}


def _task_constraints(c: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if c.get("nodeSelector"):
        out["node_selector"] = {str(k): str(v) for k, v in _mapping(c["nodeSelector"]).items()}
    if c.get("labels"):
        out["labels"] = {str(k): str(v) for k, v in _mapping(c["labels"]).items()}
    if c.get("hostPorts"):
        out["host_ports"] = tuple(str(p) for p in c["hostPorts"])
    if c.get("tolerations"):
        out["tolerations"] = tuple(
            m.Toleration(str(t.get("key", "")), str(t.get("operator") or "Equal"), str(t.get("value", "")),
                         str(t.get("effect", "")))
            for t in c["tolerations"] if isinstance(t, dict))
    aff = _mapping(c.get("affinity"))
    node_aff = _mapping(aff.get("nodeAffinity"))
    if REQUIRED in node_aff:
        out["required_node_affinity"] = tuple(_node_term(t) for t in
                                              _mapping(node_aff[REQUIRED]).get("nodeSelectorTerms") or ())
    if node_aff.get(PREFERRED):
        out["preferred_node_affinity"] = tuple(
            m.PreferredSchedulingTerm(int(p.get("weight") or 0), _node_term(p.get("preference")))
            for p in node_aff[PREFERRED] if isinstance(p, dict))
    for key, required, preferred in (("podAffinity", "pod_affinity", "preferred_pod_affinity"),
                                     ("podAntiAffinity", "pod_anti_affinity", "preferred_pod_anti_affinity")):
        part = _mapping(aff.get(key))
        if part.get(REQUIRED):
            out[required] = tuple(_pod_term(t) for t in part[REQUIRED])
        if part.get(PREFERRED):
            out[preferred] = tuple(
                m.WeightedPodAffinityTerm(int(p.get("weight") or 0), _pod_term(p.get("podAffinityTerm")))
                for p in part[PREFERRED] if isinstance(p, dict))
    return out


def topology_constraint(value: dict[str, Any] | None) -> m.TopologyConstraint | None:
    """A PodGroup's (or subgroup's) ``topologyConstraint`` as the engine's."""
    if not value or not value.get("topology"):
        return None
    return m.TopologyConstraint(value["topology"], value.get("requiredTopologyLevel") or None,
                                value.get("preferredTopologyLevel") or None)


def gang_tree(subgroups: list[dict[str, Any]] | None, min_subgroup: int | None,
              constraint: dict[str, Any] | None) -> m.SubGroupSpec | None:
    """A PodGroup's gang structure as the engine's tree.

    ``subGroups`` is a flat list whose entries name their ``parent``: a subgroup that is nobody's
    parent is a pod set (pods name it with the subgroup label; ``minMember`` of them are needed);
    the others are inner nodes (``minSubGroup`` of their children are needed, all when unset). The
    PodGroup's own ``minSubGroup`` and topology constraint belong to the root. Without subgroups
    (and without a topology constraint) the job is a plain gang: None."""
    root_tc = topology_constraint(constraint)
    entries = [sg for sg in subgroups or [] if isinstance(sg, dict) and sg.get("name")]
    if not entries:
        if root_tc is None:
            return None
        return m.SubGroupSpec(name="", min_subgroups=None, topology_constraint=root_tc)
    children: dict[str | None, list[dict[str, Any]]] = {}
    for sg in entries:
        children.setdefault(sg.get("parent") or None, []).append(sg)

    def node(name: str, sg: dict[str, Any] | None, depth: int) -> m.SubGroupSpec:
        kids = children.get(name or None, []) if depth < 32 else []
        return m.SubGroupSpec(
            name=name,
            min_subgroups=min_subgroup if sg is None else sg.get("minSubGroup"),
            topology_constraint=root_tc if sg is None else topology_constraint(sg.get("topologyConstraint")),
            pod_sets=tuple(m.PodSetSpec(k["name"], int(k.get("minMember") or 0),
                                        topology_constraint(k.get("topologyConstraint")))
                           for k in kids if k["name"] not in children),
            subgroups=tuple(node(k["name"], k, depth + 1) for k in kids if k["name"] in children),
        )

    return node("", None, 0)


def workload_uid(workload: Workload) -> str:
    return f"{workload.namespace}/{workload.name}" if workload.namespace else workload.name


# JSON columns are read as their text and decoded once per distinct text: across thousands of pods
# and workloads the same few values repeat ({} and a handful of labels, constraints and gang
# shapes), and decoding every row every cycle was most of the snapshot's time. What these return
# is shared between rows and cycles, and read only.
@functools.lru_cache(maxsize=4096)
def _json_text(text: str | None) -> Any:
    return None if text is None else json.loads(text)


@functools.lru_cache(maxsize=4096)
def _constraints_text(text: str | None) -> dict[str, Any]:
    return task_constraints(_json_text(text))


@functools.lru_cache(maxsize=4096)
def _gang_text(subgroups: str | None, min_subgroup: int | None, constraint: str | None) -> m.SubGroupSpec | None:
    return gang_tree(_json_text(subgroups), min_subgroup, _json_text(constraint))


class _Epoch(Func):
    """A timestamp as epoch seconds, computed by Postgres (exactly: numeric, then the nearest double,
    as ``datetime.timestamp()`` rounds): turning thousands of datetimes into floats in Python every
    cycle cost more than reading the rest of the row."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)::double precision"
    output_field = FloatField()


POD_COLUMNS = ("id", "workload_id", "name", "uid", "gpu", "gpu_fraction", "gpu_memory_mib", "gpu_devices", "cpu",
               "memory", "state", "node_id", "gpu_groups", "subgroup", "task_priority", "mig_profile",
               "constraints_text")
WORKLOAD_COLUMNS = ("id", "namespace", "name", "labels_text", "queue_id", "queue__name", "priority_class__name",
                    "preemptibility", "min_member", "submitted_at", "last_start_at", "last_eviction_at",
                    "stale_since", "min_subgroup", "subgroups_text", "topology_text", "preemption_delay_seconds",
                    "staleness_grace_seconds")
_WORKLOAD_TIMES = ("submitted_at", "last_start_at", "last_eviction_at", "stale_since")


@dataclasses.dataclass(slots=True)
class _Built:
    """What the last build of a shard made of each pod and workload row, with the row it was made of.

    A TaskSpec is a function of its pod row and the build's context (the node names, whether the
    shard restricts nodes by role); a JobSpec of its workload row, its place in the order, its
    tasks and the context (the priority classes). A row read again with equal values, in an equal
    context, gives the object made last time (the same object: the engine's memo then sees an
    unchanged job by identity), so a cycle builds only what changed since the last one.

    When no transaction changed a workload or a pod since the last build read them (Postgres'
    "workloads" change counter, ``core.changes``, read before any row, is the same), and the
    context is the same, that build's jobs and index entries stand as they are: no row is read
    (a busy cluster's quiet cycles). The property tests in
    ``tests/kaiweb/scheduling/test_snapshot_reuse.py`` compare both with a plain build over random
    sequences of changes, the second with every change committed."""

    context: tuple[Any, ...]
    tasks: dict[int, tuple[tuple[Any, ...], m.TaskSpec]]
    jobs: dict[int, tuple[tuple[Any, ...], m.JobSpec]]
    # the committed state of workloads and pods it read (``core.changes.listing_version``; None:
    # unknown) and what it made of them: the jobs in order and the index entries
    listing: str | None = None
    made: _Made | None = None


#: the entries of a ``SnapshotIndex`` a build makes from workload and pod rows
_ROW_INDEX_FIELDS = ("workloads", "workload_queue", "pods", "pod_uids")


@dataclasses.dataclass(frozen=True, slots=True)
class _Made:
    """What a build made of its workload and pod rows: the jobs in order and copies of the index
    entries (``_ROW_INDEX_FIELDS``), so a later build with nothing changed can give them again."""

    jobs: tuple[m.JobSpec, ...]
    index: dict[str, dict[Any, Any]]

    @classmethod
    def of(cls, jobs: list[m.JobSpec], index: SnapshotIndex) -> _Made:
        return cls(tuple(jobs), {f: dict(getattr(index, f)) for f in _ROW_INDEX_FIELDS})

    def restore(self, index: SnapshotIndex) -> list[m.JobSpec]:
        """Fill ``index`` with copies of the entries (the caller may change them); the jobs."""
        for f in _ROW_INDEX_FIELDS:
            setattr(index, f, dict(self.index[f]))
        return list(self.jobs)


#: Per shard id, the objects of its last build in this process (one entry per shard, each holding
#: only the rows of that build). What changed since, whoever ran the cycles in between, only makes it miss.
_BUILT: dict[int | None, _Built] = {}


def forget_built_snapshots() -> None:
    """Drop what earlier builds made (the next build makes every object anew)."""
    _BUILT.clear()


def _task_spec(row: tuple[Any, ...], restricted: bool, node_names: dict[int, str]) -> m.TaskSpec:
    p = dict(zip(POD_COLUMNS, row, strict=True))
    request = request_from(p)
    constraints = _constraints_text(p["constraints_text"])
    if restricted:
        constraints = worker_role_constraint(constraints, request)
    return m.TaskSpec(
        name=p["name"],
        request=request,
        state=POD_STATE_TO_ENGINE.get(p["state"], m.PENDING),
        node=node_names.get(p["node_id"]) if p["node_id"] else None,
        gpu_groups=tuple(p["gpu_groups"] or ()),
        subgroup=p["subgroup"] or None,
        task_order_priority=p["task_priority"],
        **constraints,
    )


def _job_spec(row: tuple[Any, ...], order: int, tasks: tuple[m.TaskSpec, ...],
              classes: dict[str, m.PriorityClass], default_class: str | None) -> m.JobSpec:
    w = dict(zip(WORKLOAD_COLUMNS, row, strict=True))
    class_name = w["priority_class__name"] or default_class
    try:
        priority, preemptible = m.resolve_priority(class_name, classes, w["preemptibility"] or None)
    except ValueError:
        priority, preemptible = m.resolve_priority(class_name, classes)
    return m.JobSpec(
        name=w["name"],
        namespace=w["namespace"],
        queue=w["queue__name"],
        tasks=tasks,
        priority=priority,
        preemptible=preemptible,
        creation=to_epoch(w["submitted_at"]) or 0.0,
        build_order=order,
        min_available=1 if w["min_member"] is None else w["min_member"],  # more than exist: not ready or stale
        subgroups=_gang_text(w["subgroups_text"], w["min_subgroup"], w["topology_text"]),
        preemption_delay_s=w["preemption_delay_seconds"],
        staleness_grace_s=w["staleness_grace_seconds"],
        last_start=to_epoch(w["last_start_at"]),
        last_eviction=to_epoch(w["last_eviction_at"]),
        stale_since=to_epoch(w["stale_since"]),
    )


def build_snapshot(
    shard: SchedulingShard | None, now: float, usage: dict[str, tuple[float, float, float]] | None = None,
    *, reuse: bool = True,
) -> tuple[m.ClusterSnapshot, SnapshotIndex]:
    """Read one shard's queues, nodes and active workloads into an engine snapshot.

    `now` is the cluster's clock (the simulated clock for the simulated backend) in epoch
    seconds; `usage` is the normalised historical usage per queue (see usage.accounting).
    Six queries whatever the size of the cluster, all reading the database at one moment
    (`consistent_reads`). With `reuse` (the default) the pods and workloads whose rows are as the
    last build of this shard read them keep the objects made then (see ``_Built``); without it
    every object is made anew, and nothing is remembered.
    """
    with consistent_reads():
        return _build_snapshot(shard, now, usage, reuse=reuse)


@contextlib.contextmanager
def consistent_reads() -> Iterator[None]:
    """The queries inside see the database as it was at their first one (Postgres: one REPEATABLE
    READ transaction). The watcher commits while a snapshot is read: with each query at its own
    moment, a pod read with its old workload (a pod moving from its own workload to its PodGroup's,
    the old one deleted) finds that workload gone by the workload query, drops out of the snapshot
    and leaves its node looking free. Inside a transaction already open, that transaction's reads."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield


def _build_snapshot(
    shard: SchedulingShard | None, now: float, usage: dict[str, tuple[float, float, float]] | None,
    *, reuse: bool,
) -> tuple[m.ClusterSnapshot, SnapshotIndex]:
    index = SnapshotIndex(shard_id=shard.pk if shard else None)
    classes = {
        pc.name: m.PriorityClass(name=pc.name, value=pc.value, preemptible=pc.preemptible)
        for pc in PriorityClass.objects.all()
    }
    default_class = next((pc.name for pc in PriorityClass.objects.filter(global_default=True)), None)

    queue_rows = list(Queue.objects.select_related("parent").order_by("name"))
    names = {q.pk: q.name for q in queue_rows}
    queues: list[m.QueueSpec] = []
    for q in queue_rows:
        if shard is not None and not shard.matches(q.labels):
            continue
        queues.append(q.to_spec(names.get(q.parent_id)))
        index.queues[q.name] = q.pk
        index.parents[q.name] = names.get(q.parent_id)
        index.queue_spec[q.name] = {f"{r}_{f}": getattr(q, f"{r}_{f}") for r in RESOURCE_NAMES for f in ("quota", "limit")}

    node_qs = Node.objects.order_by("name")
    if shard is not None:
        node_qs = node_qs.filter(cluster_id=shard.cluster_id)
    restricted = restricts_nodes(shard)
    # What other schedulers' pods hold on each node is not free (`OtherPod`).
    other_rows = OtherPod.objects.all() if shard is None else OtherPod.objects.filter(cluster_id=shard.cluster_id)
    other_use = OtherPod.use_by_node(other_rows)
    nodes: list[m.NodeSpec] = []
    for n in node_qs:
        if restricted and not ({GPU_WORKER_LABEL, CPU_WORKER_LABEL} & set(n.labels or {})):
            continue  # KAI's restrict-node-scheduling: a node marked neither way is not scheduled on
        if shard is None or shard.matches(n.labels):
            nodes.append(n.to_spec(other_use.get((n.cluster_id, n.name))))
            index.nodes[n.name] = n.pk
    node_names = {pk: name for name, pk in index.nodes.items()}

    key = shard.pk if shard is not None else None
    partition = (shard.partition_label_key, shard.partition_label_value) if shard is not None else None
    context = (restricted, node_names, classes, default_class, partition)
    # read before any workload or pod row: a later change moves it (``_Built``)
    listing = listing_version("workloads") if reuse else None
    last = _BUILT.get(key) if reuse else None
    if last is not None and last.context != context:
        last = None
    if last is not None and listing is not None and last.listing == listing and last.made is not None:
        return _finish(shard, index, nodes, queues, last.made.restore(index), now, usage)
    built = _Built(context, {}, {}, listing)

    # Plain rows, not model instances: thousands of workloads and pods are read every cycle.
    workload_qs = Workload.objects.filter(state__in=ACTIVE_WORKLOAD_STATES).order_by("submitted_at", "namespace", "name")
    pod_qs = (Pod.objects.filter(workload__state__in=ACTIVE_WORKLOAD_STATES)
              .exclude(state__in=(PodState.SUCCEEDED, PodState.FAILED)).order_by("workload_id", "name"))
    if shard is not None:
        workload_qs = workload_qs.filter(cluster_id=shard.cluster_id)
        pod_qs = pod_qs.filter(workload__cluster_id=shard.cluster_id)
    tasks_of: dict[int, list[m.TaskSpec]] = {}
    pod_refs: dict[int, list[tuple[str, int, str]]] = {}
    old_tasks = last.tasks if last is not None else {}
    for row in pod_qs.annotate(constraints_text=Cast("constraints", TextField())).values_list(*POD_COLUMNS):
        pod_id = row[0]
        seen = old_tasks.get(pod_id)
        task = seen[1] if seen is not None and seen[0] == row else _task_spec(row, restricted, node_names)
        built.tasks[pod_id] = (row, task)
        tasks_of.setdefault(row[1], []).append(task)
        pod_refs.setdefault(row[1], []).append((row[2], pod_id, row[3]))

    times: dict[str, Any] = ({f"{f}_epoch": _Epoch(f) for f in _WORKLOAD_TIMES}
                             if connection.vendor == "postgresql" else {})
    columns = tuple(f"{c}_epoch" if times and c in _WORKLOAD_TIMES else c for c in WORKLOAD_COLUMNS)
    rows = workload_qs.annotate(
        labels_text=Cast("labels", TextField()), subgroups_text=Cast("subgroups", TextField()),
        topology_text=Cast("topology_constraint", TextField()), **times,
    ).values_list(*columns)
    jobs: list[m.JobSpec] = []
    old_jobs = last.jobs if last is not None else {}
    for order, row in enumerate(rows):
        wid, namespace, name, labels_text = row[0], row[1], row[2], row[3]
        if shard is not None and not shard.matches(_json_text(labels_text)):
            continue
        tasks = tuple(tasks_of.get(wid, ()))
        if not tasks:
            continue
        uid = f"{namespace}/{name}" if namespace else name
        seen_job = old_jobs.get(wid)
        if (seen_job is not None and seen_job[0] == (row, order) and len(seen_job[1].tasks) == len(tasks)
                and all(a is b for a, b in zip(seen_job[1].tasks, tasks))):
            job = seen_job[1]
        else:
            job = _job_spec(row, order, tasks, classes, default_class)
        built.jobs[wid] = ((row, order), job)
        jobs.append(job)
        for task_name, pod_id, pod_uid in pod_refs[wid]:
            index.pods[(uid, task_name)] = pod_id
            index.pod_uids[pod_id] = pod_uid
        index.workloads[uid] = wid
        index.workload_queue[uid] = row[4]
    if reuse:
        built.made = _Made.of(jobs, index)
        _BUILT[key] = built
    return _finish(shard, index, nodes, queues, jobs, now, usage)


def _finish(shard: SchedulingShard | None, index: SnapshotIndex, nodes: list[m.NodeSpec], queues: list[m.QueueSpec],
            jobs: list[m.JobSpec], now: float, usage: dict[str, tuple[float, float, float]] | None,
            ) -> tuple[m.ClusterSnapshot, SnapshotIndex]:
    """The snapshot of a build: its nodes, queues and jobs, with the topologies and usage."""
    topologies = Topology.objects.order_by("name")
    if shard is not None:
        topologies = topologies.filter(cluster_id=shard.cluster_id)
    snapshot = m.ClusterSnapshot(
        nodes=tuple(nodes), queues=tuple(queues), jobs=tuple(jobs), now=now,
        topologies=tuple(t.to_spec() for t in topologies),
        usage={q: tuple(v) for q, v in (usage or {}).items() if q in index.queues},  # type: ignore[misc]  # three numbers per queue, as usage_for_engine returns
    )
    return snapshot, index


# ------------------------------------------------------------------------------------ idempotency


_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def gpu_group_name(group: str, cycle_id: int | None) -> str:
    """The name a shared GPU's group is known by in the cluster (the ``runai-gpu-group`` label).

    A group read from the cluster keeps its name. One the engine opened in this cycle (its own
    names are not valid label values) is named from the cycle and the engine's name, so every pod
    the cycle puts on that GPU gets the same label and no other cycle's group can share it."""
    if _LABEL_VALUE.match(group):
        return group
    digest = hashlib.sha256(f"{cycle_id}:{group}".encode()).hexdigest()[:20]
    return f"gpu-group-{digest}"


def bind_key(pod_uid: str, node: str) -> str:
    """A bind is identified by the pod incarnation and the node: binding it twice is one bind."""
    return f"bind:{pod_uid}:{node}"[:128]


def evict_key(pod_uid: str) -> str:
    """An eviction is identified by the pod incarnation: a recreated pod has a new uid."""
    return f"evict:{pod_uid}"[:128]


def pipeline_key(cycle_id: int, pod_uid: str, node: str) -> str:
    # Pipelining changes nothing in the cluster; one row per cycle that decided it.
    return f"pipeline:{cycle_id}:{pod_uid}:{node}"[:128]


# ------------------------------------------------------------------------------------ persist


def queue_figures(result: m.CycleResult, queue: str | None, index: SnapshotIndex) -> dict[str, Any]:
    """A queue's allocated, fair share, quota and limit in queue units (for preemption events)."""
    if not queue or queue not in result.queues:
        return {}
    st = result.queues[queue]
    return {
        "queue": queue,
        "allocated": recorded_queue_units(st.allocated),
        "fair_share": recorded_queue_units(st.fair_share),
        "quota": recorded_queue_units(st.deserved),
        "limit": recorded_queue_units(st.limit),
    }


def _job_queue(snapshot: m.ClusterSnapshot) -> dict[str, str]:
    return {j.uid: j.queue for j in snapshot.jobs}


def persist_result(
    cycle: SchedulingCycle,
    result: m.CycleResult,
    snapshot: m.ClusterSnapshot,
    index: SnapshotIndex,
    *,
    dry_run: bool = False,
    at: datetime | None = None,
    repeats: int | None = None,
) -> Recorded:
    """Record everything `result` decided, in one transaction, with a bounded number of queries.

    Decisions are written as PLANNED (DRY_RUN for a dry run) with their idempotency keys before
    anything is applied, so that a worker that dies while applying leaves an intent log the next
    cycle reconciles. Returns what it recorded (`Recorded`): the Decision rows to apply (binds and
    evictions, in engine order), the queue status rows and the why-pending it holds.

    ``repeats``: the id of the cycle that recorded this very result for the same workloads (the
    engine reused a quiet result and nothing was recorded since; the caller checks both). The
    current why-pending rows then say what this cycle would write, and are not read back.
    """
    at = at or datetime.now(tz=UTC)
    job_queue = _job_queue(snapshot)
    status = DecisionStatus.DRY_RUN if dry_run else DecisionStatus.PLANNED
    rows: list[Decision] = []
    queue_statuses: dict[str, QueueStatus] = {}
    reasons: dict[int, m.Reason] = {}
    positions: dict[str, list[int]] | None = None

    def pod_ref(job: str, task: str) -> tuple[int | None, str]:
        pod_id = index.pods.get((job, task))
        return pod_id, index.pod_uids.get(pod_id, "") if pod_id else ""

    namespaces = {j.uid: j.namespace for j in snapshot.jobs}

    def groups(names: tuple[str, ...]) -> list[str]:
        return [gpu_group_name(g, cycle.pk) for g in names]

    def incarnation(pod_id: int | None, uid: str, job: str, task: str) -> str:
        # What names the pod in a key: its uid; a pod without one, its row; never its name alone.
        return uid or (f"pod{pod_id}" if pod_id else f"{cycle.pk}:{job}/{task}")

    for b in result.binds:
        pod_id, uid = pod_ref(b.job, b.task)
        rows.append(Decision(
            cycle=cycle, kind=DecisionKind.BIND, status=status, workload_id=index.workloads.get(b.job),
            pod_id=pod_id, node_id=index.nodes.get(b.node), workload_ref=b.job, pod_name=b.task,
            node_name=b.node, gpu_groups=groups(b.gpu_groups), reason="Allocated",
            message=f"{b.task} bound to {b.node}", namespace=namespaces.get(b.job, ""), pod_uid=uid,
            numbers={"gpu_portion": b.gpu_portion} if b.gpu_portion else {},
            idempotency_key=bind_key(incarnation(pod_id, uid, b.job, b.task), b.node),
        ))
    for p in result.pipelined:
        pod_id, uid = pod_ref(p.job, p.task)
        rows.append(Decision(
            cycle=cycle, kind=DecisionKind.PIPELINE, status=status, workload_id=index.workloads.get(p.job),
            pod_id=pod_id, node_id=index.nodes.get(p.node), workload_ref=p.job, pod_name=p.task,
            node_name=p.node, gpu_groups=groups(p.gpu_groups), reason=f"Pipelined:{p.action}"[:64],
            message=f"{p.task} waits for resources being released on {p.node} ({p.action})",
            namespace=namespaces.get(p.job, ""), pod_uid=uid,
            numbers={"moved_from": p.moved_from} if p.moved_from else {},
            idempotency_key=pipeline_key(cycle.pk, incarnation(pod_id, uid, p.job, p.task), p.node),
        ))
    evict_rows: list[tuple[Decision, m.EvictionDecision]] = []
    running = {(j.uid, t.name) for j in snapshot.jobs for t in j.tasks if t.state in m.ACTIVE_USED_STATES}
    for e in result.evictions:
        if (e.job, e.task) not in running:
            # Only a pod that holds resources in the cluster can be evicted; an eviction of a
            # task placed earlier in this same cycle changes nothing there and is not recorded.
            continue
        pod_id, uid = pod_ref(e.job, e.task)
        row = Decision(
            cycle=cycle, kind=DecisionKind.EVICT, status=status, workload_id=index.workloads.get(e.job),
            pod_id=pod_id, node_id=index.nodes.get(e.node), workload_ref=e.job, pod_name=e.task,
            node_name=e.node, reason=e.reason.code[:64], message=e.reason.message,
            namespace=namespaces.get(e.job, ""), pod_uid=uid,
            numbers=dict(e.reason.details, action=e.action, preemptor=e.preemptor),
            idempotency_key=evict_key(incarnation(pod_id, uid, e.job, e.task)),
        )
        rows.append(row)
        evict_rows.append((row, e))
    if dry_run:
        # A dry run must never collide with (or block) the keys of real decisions.
        for row in rows:
            row.idempotency_key = f"dry:{cycle.pk}:{row.idempotency_key}"[:128]

    with transaction.atomic():
        # The watcher writes the mirror while the cycle runs: a workload, pod or node the snapshot
        # read may be gone by now. What the records point at is held until they commit, and what is
        # gone is recorded by name only (its reference is null), so the cycle never fails on it.
        present = _hold(Workload, [r.workload_id for r in rows])
        pods_present = _hold(Pod, [r.pod_id for r in rows])
        nodes_present = _hold(Node, [r.node_id for r in rows])
        for r in rows:
            if r.workload_id is not None and r.workload_id not in present:
                r.workload_id = None
            if r.pod_id is not None and r.pod_id not in pods_present:
                r.pod_id = None
            if r.node_id is not None and r.node_id not in nodes_present:
                r.node_id = None
        # A key already recorded means this exact action was decided before (a retried task or
        # a decision the cluster has not reflected yet): never record or apply it twice.
        keys = [r.idempotency_key for r in rows]
        existing = _existing_keys(keys)
        seen: set[str] = set()
        fresh: list[Decision] = []
        for r in rows:
            if existing.get(r.idempotency_key) == DecisionStatus.FAILED:
                # The same action failed before (never reached the cluster): this is a new attempt.
                r.idempotency_key = f"{r.idempotency_key}#c{cycle.pk}"[:128]
            if r.idempotency_key in existing or r.idempotency_key in seen:
                continue
            seen.add(r.idempotency_key)
            fresh.append(r)
        created = Decision.objects.bulk_create(fresh)
        if created and created[0].pk is None:  # backends without RETURNING: read the ids back
            by_key = dict(Decision.objects.filter(cycle=cycle).values_list("idempotency_key", "pk"))
            for r in created:
                r.pk = by_key.get(r.idempotency_key)

        events = []
        for row, e in evict_rows:
            if row.pk is None:
                continue
            victim_queue = job_queue.get(e.job)
            preemptor_queue = job_queue.get(e.preemptor) if e.preemptor else None
            preemptor_id = index.workloads.get(e.preemptor) if e.preemptor else None
            events.append(PreemptionEvent(
                cycle=cycle, decision_id=row.pk, at=at,
                action=e.action,  # stored in the engine's spelling (PreemptionAction is built from it)
                preemptor_id=preemptor_id if preemptor_id in present else None,
                victim_id=row.workload_id, preemptor_ref=e.preemptor or "", victim_ref=e.job,
                preemptor_queue_id=index.queues.get(preemptor_queue) if preemptor_queue else None,
                victim_queue_id=index.queues.get(victim_queue) if victim_queue else None,
                reason=e.reason.code[:64], message=e.reason.message,
                preemptor_queue_figures=queue_figures(result, preemptor_queue, index),
                victim_queue_figures=queue_figures(result, victim_queue, index),
            ))
        PreemptionEvent.objects.bulk_create(events)

        if not dry_run:
            # Per-leaf counts after the cycle: a job the engine left pending is pending, others run.
            index.pending_workloads, index.running_workloads = {}, {}
            for job in snapshot.jobs:
                bucket = index.pending_workloads if job.uid in result.pending else index.running_workloads
                bucket[job.queue] = bucket.get(job.queue, 0) + 1
            queue_statuses = _record_queue_status(cycle, result, index, at)
            reasons = why_pending(result, index)
            if repeats is None:
                _record_pending_reasons(cycle, reasons, index, at)
            _record_staleness(result, snapshot, index)
            positions = _record_waiting_line(cycle, result, snapshot, index, at)

        cycle.jobs_considered = len(snapshot.jobs)
        cycle.binds = len(result.binds)
        cycle.pipelined = len(result.pipelined)
        cycle.evictions = sum(1 for _, e in evict_rows)
        cycle.pending = len(result.pending)
        problems = [f"{e.kind} {e.name}: {e.field}: {e.message}" for e in result.errors]
        if problems:
            cycle.error = "Skipped unreadable objects:\n" + "\n".join(problems)
        cycle.save(update_fields=["jobs_considered", "binds", "pipelined", "evictions", "pending", "error"])
    return Recorded(decisions=[r for r in created if r.kind != DecisionKind.PIPELINE and r.pk is not None],
                    queue_statuses=queue_statuses,
                    why_pending={wid: (reason.code[:64], reason.message) for wid, reason in reasons.items()},
                    positions=positions)


def _record_staleness(result: m.CycleResult, snapshot: m.ClusterSnapshot, index: SnapshotIndex) -> None:
    """Since when each gang has been below its minimum (or no longer is): the engine's clock of
    staleness runs across cycles, so what it says is kept on the workload. Only changes are written."""
    before = {j.uid: j.stale_since for j in snapshot.jobs}
    changed = [(index.workloads[uid], since) for uid, since in (result.stale_since or {}).items()
               if uid in index.workloads and before.get(uid) != since]
    if not changed:
        return
    rows = Workload.objects.in_bulk([pk for pk, _ in changed])
    for pk, since in changed:
        if pk in rows:
            rows[pk].stale_since = None if since is None else from_epoch(since)
    Workload.objects.bulk_update(list(rows.values()), ["stale_since"])


def _record_waiting_line(cycle: SchedulingCycle, result: m.CycleResult, snapshot: m.ClusterSnapshot,
                         index: SnapshotIndex, at: datetime) -> dict[str, list[int]] | None:
    """The shard's pending workloads at their places in the engine's order (``result.positions``)
    and its queue depth, replacing what the shard's previous cycle recorded; the places recorded (None:
    no shard, no line)."""
    if index.shard_id is None:
        return None
    positions = {line_key(wid): [shard_place, queue_place] for uid, (shard_place, queue_place) in result.positions.items()
                 if (wid := index.workloads.get(uid)) is not None}
    depth = [{"queue": d.queue, "priority": d.priority, "jobs": d.jobs, "gpus": round(d.gpus, 4),
              "oldest_wait_seconds": round(max(0.0, snapshot.now - d.oldest_submitted), 3),
              "next_workload": index.workloads.get(d.next_job) if d.next_job else None}
             for d in queue_depth(snapshot, result)]
    # one statement whether or not the shard has a line yet
    WaitingLine.objects.bulk_create(
        [WaitingLine(shard_id=index.shard_id, cycle=cycle, recorded_at=at, positions=positions, depth=depth)],
        update_conflicts=True, unique_fields=["shard"], update_fields=["cycle", "recorded_at", "positions", "depth"])
    return positions


def _hold(model: Any, ids: Iterable[int | None]) -> set[int]:
    """Which of these rows still exist, each held (Postgres: ``FOR KEY SHARE``) until the
    transaction ends, so rows written now may point at them: a concurrent delete waits for the commit
    instead of breaking it. Other databases lock the whole database for a write anyway."""
    wanted = sorted({i for i in ids if i is not None})
    if not wanted:
        return set()
    if connection.vendor != "postgresql":
        return set(model.objects.filter(pk__in=wanted).values_list("pk", flat=True))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id FROM {model._meta.db_table} WHERE id = ANY(%s) ORDER BY id FOR KEY SHARE",
                       [wanted])
        return {row[0] for row in cursor.fetchall()}


def _existing_keys(keys: list[str]) -> dict[str, str]:
    """Status of the decisions already recorded under these keys (in chunks: keys can be many)."""
    found: dict[str, str] = {}
    for i in range(0, len(keys), 10_000):
        found.update(Decision.objects.filter(idempotency_key__in=keys[i:i + 10_000])
                     .values_list("idempotency_key", "status"))
    return found


def _record_queue_status(cycle: SchedulingCycle, result: m.CycleResult, index: SnapshotIndex,
                         at: datetime) -> dict[str, QueueStatus]:
    """Each queue's status after the cycle, written; returned by queue name."""
    rows: dict[str, QueueStatus] = {}
    for name, st in sorted(result.queues.items()):
        queue_id = index.queues.get(name)
        if queue_id is None:
            continue
        allocated = recorded_queue_units(st.allocated)
        requested = recorded_queue_units(st.request)
        rows[name] = QueueStatus(
            queue_id=queue_id, cycle=cycle, recorded_at=at,
            allocated=allocated,
            allocated_non_preemptible=recorded_queue_units(st.allocated_non_preemptible),
            requested=requested,
            fair_share=recorded_queue_units(st.fair_share),
            pending={r: round(max(0.0, requested[r] - allocated[r]), 4) for r in RESOURCE_NAMES},
            pending_workloads=_subtree_count(name, index.pending_workloads, index),
            running_workloads=_subtree_count(name, index.running_workloads, index),
        )
    QueueStatus.objects.bulk_create(list(rows.values()))
    return rows


def _subtree_count(queue: str, counts: dict[str, int], index: SnapshotIndex) -> int:
    """Counts are per leaf; a parent shows the sum over its subtree (the queue tree is small)."""
    total = 0
    for leaf, count in counts.items():
        cur: str | None = leaf
        while cur is not None:
            if cur == queue:
                total += count
                break
            cur = index.parents.get(cur)
    return total


def why_pending(result: m.CycleResult, index: SnapshotIndex) -> dict[int, m.Reason]:
    """Why each workload the cycle left pending stays so, by workload id: the engine's reason, or the
    field the engine could not read."""
    reasons: dict[int, m.Reason] = {}
    for job, reason in result.pending.items():
        wid = index.workloads.get(job)
        if wid is not None:
            reasons[wid] = reason
    # A workload that fitted none of its candidate node pools says so (the org's assigner wrote it on the
    # PodGroup, `kaiweb.org.assigner`) beside the reason of the pool it waits in now.
    marked = Workload.objects.filter(pk__in=list(reasons), pod_group_said__annotations__has_key=(
        NODE_POOL_ASSIGNMENT_ANNOTATION)).values_list("pk", "pod_group_said") if reasons else []
    for wid, said in marked:
        note = str(((said or {}).get("annotations") or {}).get(NODE_POOL_ASSIGNMENT_ANNOTATION) or "")
        if UNSCHEDULABLE_ON_EVERY_POOL in note:
            reason = reasons[wid]
            reasons[wid] = dataclasses.replace(reason, message=f"{reason.message}; {note}")
    for job, problem in index.claim_problems.items():
        # A pod whose ResourceClaim cannot be had was offered no node: its why-pending names the claim.
        wid = index.workloads.get(job)
        if wid is not None and wid in reasons:
            reasons[wid] = m.Reason(code=reason_codes.NO_NODE_MATCHES, message=problem,
                                    details={"resource_claims": problem})
    for err in result.errors:
        # An object the engine could not read is marked on that object: its why-pending says so.
        if err.kind == "job":
            wid = index.workloads.get(err.name)
            if wid is not None:
                reasons[wid] = m.Reason(code=reason_codes.INVALID, message=f"{err.field}: {err.message}",
                                        details={"field": err.field})
    return reasons


def _record_pending_reasons(cycle: SchedulingCycle, reasons: dict[int, m.Reason], index: SnapshotIndex,
                            at: datetime) -> None:
    """The current why-pending per workload (`why_pending`), written only where it changed: a new row
    (and the old one retired to history) when the reason changes, the words and numbers updated in
    place when only they change, nothing when they are the same. A row's ``cycle`` and ``recorded_at``
    say since when it is so; the current rows of a shard hold as of its latest cycle."""
    # Plain rows: with thousands of pending workloads, model instances would cost more than the query.
    current = {
        row["workload_id"]: row
        for row in PendingReason.objects.filter(is_current=True, workload_id__in=list(index.workloads.values()))
        .values("id", "workload_id", "reason", "message", "details")
    }
    to_update: list[PendingReason] = []
    to_retire: list[int] = []
    to_create: list[PendingReason] = []
    for wid, reason in reasons.items():
        old = current.get(wid)
        if old is not None and old["reason"] == reason.code[:64]:
            details = _jsonable(reason.details)
            if old["message"] != reason.message or old["details"] != details:
                to_update.append(PendingReason(pk=old["id"], message=reason.message, details=details, cycle=cycle,
                                               recorded_at=at))
            continue
        if old is not None:
            to_retire.append(old["id"])
        to_create.append(PendingReason(workload_id=wid, cycle=cycle, recorded_at=at, reason=reason.code[:64],
                                       message=reason.message, details=_jsonable(reason.details), is_current=True))
    # A workload the watcher has removed since the snapshot gets no new reason (it has no pods left).
    present = _hold(Workload, [r.workload_id for r in to_create])
    to_create = [r for r in to_create if r.workload_id in present]
    # Workloads of this snapshot that are no longer pending have no current reason any more.
    to_retire.extend(row["id"] for wid, row in current.items() if wid not in reasons)
    if to_retire:
        PendingReason.objects.filter(pk__in=to_retire).update(is_current=False)
    if to_update:
        PendingReason.objects.bulk_update(to_update, ["message", "details", "cycle", "recorded_at"], batch_size=500)
    PendingReason.objects.bulk_create(to_create)


def _jsonable(value: Any) -> Any:
    return m.to_dict(value)
