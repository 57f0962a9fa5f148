"""The database mirror of a Kubernetes cluster: filled from the cluster, written back to it.

The scheduling cycle decides from the database (Node, GpuDevice, Workload, Pod, Queue rows). This
module keeps those rows equal to what the cluster says:

* `sync_full(gateway, cluster)` lists everything (nodes, pods for our scheduler, the bound pods of
  other schedulers as `OtherPod` rows, PodGroups, Queues, PriorityClasses) and creates, updates and deletes rows so the mirror equals the
  cluster, in a fixed number of queries per kind whatever the cluster's size (bulk operations);
* `apply_event(event, cluster)` applies one `WatchEvent` of ``manage.py watch_cluster``
  incrementally, with the same result;
* `sync_queues(gateway, cluster)` is the two-way Queue CRD sync. Who wins when the two sides
  disagree is the one rule of `kaiweb.cluster.queue_sync` (a side that changed a queue since they
  last agreed wins; when both did, the cluster); this carries its plan out: writes to the cluster,
  imports through the control plane's import service, each overridden value logged and written to
  the audit log;
* `merge_stamps(cluster, groups)` takes KAI's stamps (last start, last eviction, stale since) from
  the PodGroups into the workloads, the later time winning (`kaiweb.cluster.stamps`): from each
  PodGroup the watcher sees added (its first listing: what KAI left) and from each full sync. From
  then on the cycle keeps them and writes them back (`kaiweb.scheduling.write_back`, which also
  tells the cluster what each cycle decided).

How pods become workloads (as KAI's podgrouper does): a pod naming a PodGroup (annotation
``pod-group-name``) belongs to that PodGroup's workload and queue; a pod without one and without an
owner is a workload of its own (``pg-<pod>-<uid>``, labelled `IMPLICIT_GROUP_LABEL`) in the queue of
its ``kai.scheduler/queue`` label; a pod with an owner but no PodGroup yet is in no workload (a problem
until the pod-grouper names its owner's PodGroup on it: scheduled alone, a gang's pod would be bound
before the rest of its gang exists).

Objects that cannot be used are recorded as `UnreadableObject` rows naming the field and the
rule, and everything else is still applied: unreadable objects (a malformed ``gpu-fraction``),
workloads on an unknown queue or on a queue with children, pods whose PodGroup does not exist.
A workload with such a problem is not mirrored, so it is never scheduled; the last two kinds are
*deferred*: the watcher keeps the object and applies it as soon as its queue or PodGroup appears.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import yaml
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from kaiweb.cluster import stamps
from kaiweb.cluster.backends.kubernetes.parsing import parse_pod, parse_pod_group
from kaiweb.cluster.backends.types import (
    POD_GROUP_ANNOTATION,
    Listing,
    ObservedNode,
    ObservedOtherPod,
    ObservedPod,
    ObservedPodGroup,
    ObservedPriorityClass,
    ObservedQueue,
    Unreadable,
)
from kaiweb.cluster.errors import ClusterError, ClusterRejected
from kaiweb.cluster.models import (
    Cluster,
    GpuDevice,
    MirrorState,
    Node,
    OtherPod,
    Topology,
    UnreadableObject,
)
from kaiweb.cluster.podgrouper import controller
from kaiweb.cluster.queue_sync import diff_queues
from kaiweb.cluster.watch import ADDED, DELETED, MODIFIED, SYNCED, WatchEvent
from kaiweb.core import clock
from kaiweb.core.queries import update_rows
from kaiweb.workloads.choices import ALLOCATED_POD_STATES, PodState, WorkloadState
from kaiweb.workloads.models import Pod, Workload
from scheduler_core import queue_crd
from scheduler_core.model import QueueSpec

log = logging.getLogger(__name__)

IMPLICIT_GROUP_LABEL = "kaiweb.io/implicit-pod-group"
# How recent a heartbeat of watch_cluster must be for the cycle to trust the mirror it keeps.
DEFAULT_HEARTBEAT_SECONDS = 30.0
BATCH = 500

_FINISHED = (PodState.SUCCEEDED, PodState.FAILED)
# What `workload_state` counts as running (the pod holds or is still releasing what it held).
_COUNTED = (*ALLOCATED_POD_STATES, PodState.RELEASING)
# Well-known node labels that place a node in the topology (zone, region).
_TOPOLOGY_LABELS = {"region": "topology.kubernetes.io/region", "zone": "topology.kubernetes.io/zone"}
_NODE_FIELDS = ("labels", "allocatable_cpu", "allocatable_memory", "allocatable_gpu", "allocatable_pods",
                "gpu_product", "gpu_memory_mib", "mig_enabled", "topology", "ready", "unschedulable", "taints",
                "mig_strategy", "extended_resources")
_WORKLOAD_FIELDS = ("uid", "queue_id", "priority_class_id", "preemptibility", "min_member", "min_subgroup",
                    "subgroups", "topology_constraint", "preemption_delay_seconds", "staleness_grace_seconds",
                    "labels", "submitted_at")
_POD_FIELDS = ("workload_id", "uid", "subgroup", "gpu", "gpu_fraction", "gpu_memory_mib", "gpu_devices",
               "mig_profile", "cpu", "memory", "task_priority", "state", "node_id", "gpu_groups", "constraints",
               "resource_version")
def lock_pods(pods: Any) -> Any:
    """Pod rows (a queryset) locked until the commit, in pk order, as the mirror and the record of a
    cycle's actions (`kaiweb.scheduling.write_back.record_actions`) lock them: FOR NO KEY UPDATE, so
    each waits for the other and a recorded bind is never overwritten from an older read. A cycle
    recording its decisions holds the same rows FOR KEY SHARE (`kaiweb.scheduling.adapters._hold`),
    which only a delete has to wait for: with FOR UPDATE here the watcher held up those records, and
    the two deadlocked (B14 at 500 nodes: a cycle failed three times with 40P01)."""
    return pods.select_for_update(of=("self",), no_key=True).order_by("pk")


# States in which a pod holds its node's resources (what the engine charges to the node).
_HOLDING = (*ALLOCATED_POD_STATES, PodState.RELEASING)


# ----------------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class Problem:
    """An object that is not mirrored (or not fully): which field, which rule."""

    kind: str
    namespace: str
    name: str
    uid: str
    field: str
    rule: str
    message: str
    deferred: bool = False
    raw: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, u: Unreadable, raw: Mapping[str, Any] | None = None) -> Problem:
        return cls(u.kind, u.namespace, u.name, u.uid, u.field, u.rule, u.message, False, raw)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.namespace, self.name)


def _problem(kind: str, namespace: str, name: str, uid: str, field_: str, rule: str, *, deferred: bool,
             what: str = "") -> Problem:
    ref = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
    tail = "it is applied as soon as that changes" if deferred else "it is skipped until fixed"
    return Problem(kind, namespace, name, uid, field_, rule, f"{ref}: {field_}{what} {rule}; {tail}", deferred)


@dataclass
class SyncReport:
    """What a sync did, for commands, logs and tests."""

    nodes: dict[str, int] = field(default_factory=lambda: {"created": 0, "updated": 0, "deleted": 0})
    workloads: dict[str, int] = field(default_factory=lambda: {"created": 0, "updated": 0, "deleted": 0})
    pods: dict[str, int] = field(default_factory=lambda: {"created": 0, "updated": 0, "deleted": 0})
    queues: list[str] = field(default_factory=list)  # one message per queue sync step
    problems: list[str] = field(default_factory=list)
    stale: int = 0  # pod observations older than their rows (`older_than_row`), not applied

    def as_json(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "workloads": self.workloads, "pods": self.pods, "queues": self.queues,
                "problems": self.problems, "stale": self.stale}


# ----------------------------------------------------------------------------------- rows from objects


def node_values(node: ObservedNode) -> dict[str, Any]:
    """The Node row fields of an observed node."""
    labels = dict(node.labels)
    return {
        "labels": labels,
        "allocatable_cpu": float(node.allocatable.cpu_millis),
        "allocatable_memory": int(node.allocatable.memory_bytes),
        "allocatable_gpu": float(int(node.allocatable.gpus)),
        "allocatable_pods": int(node.allocatable.pods or 110),
        "gpu_product": (node.gpu_product or "")[:100],
        "gpu_memory_mib": int(node.gpu_memory_mib or 0),
        "mig_enabled": bool(node.mig_enabled),
        "topology": {level: labels[key] for level, key in _TOPOLOGY_LABELS.items() if key in labels},
        "ready": bool(node.ready),
        "unschedulable": bool(node.unschedulable),
        "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.taints],
        "mig_strategy": (node.mig_strategy or "")[:16],
        # MIG instances under their resource names (as pods request them), then the other resources
        "extended_resources": {**{f"nvidia.com/{k}": int(v) for k, v in sorted(node.allocatable.mig.items())},
                               **{k: int(v) for k, v in sorted(node.allocatable.other.items())}},
    }


def pod_values(pod: ObservedPod) -> dict[str, Any]:
    """The Pod row fields of an observed pod (without workload and node)."""
    requests = pod.requests
    mig = sorted(requests.mig)
    return {
        "uid": pod.uid[:64],
        "subgroup": (pod.sub_group or "")[:63],
        "gpu": 0.0 if pod.is_fractional else float(requests.gpus),
        "gpu_fraction": pod.gpu_fraction,
        "gpu_memory_mib": pod.gpu_memory_mib,
        "gpu_devices": int(pod.gpu_fraction_num_devices or 1),
        "mig_profile": mig[0].removeprefix("mig-")[:32] if mig else "",
        "cpu": float(requests.cpu_millis),
        "memory": int(requests.memory_bytes),
        "task_priority": pod.task_priority,
        "state": pod.state if pod.state in PodState.values else PodState.UNKNOWN,
        "gpu_groups": list(pod.gpu_groups),
        "constraints": pod_constraints(pod),
        "resource_version": (pod.resource_version or "")[:32],
    }


def pod_constraints(pod: ObservedPod) -> dict[str, Any]:
    """Where a pod may run, for the Pod row's ``constraints``: only the keys it has."""
    requests = pod.requests
    values: dict[str, Any] = {
        "labels": dict(pod.labels),
        "nodeSelector": dict(pod.node_selector),
        "affinity": dict(pod.affinity),
        "tolerations": [{"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}
                        for t in pod.tolerations],
        "hostPorts": list(pod.host_ports),
        "mig": {f"nvidia.com/{k}": int(v) for k, v in sorted(requests.mig.items()) if v},
        "extended": {k: int(v) for k, v in sorted(requests.other.items()) if v},
        "resourceClaims": [list(c) for c in pod.resource_claims],
    }
    return {k: v for k, v in values.items() if v}


def implicit_group_name(pod: ObservedPod) -> str:
    """The workload of a pod not (yet) in a PodGroup.

    Named apart from the PodGroup the pod-grouper makes for it (``pg-<pod>-<uid>``), so the two
    never meet under one name: once the pod names its PodGroup, it moves there and this empty
    workload goes."""
    return (f"pod-{pod.name}-{pod.uid}" if pod.uid else f"pod-{pod.name}")[:253]


def workload_key(pod: ObservedPod) -> tuple[str, str]:
    return (pod.namespace, pod.pod_group or implicit_group_name(pod))


def _constraint_json(tc: Any) -> dict[str, Any]:
    """A topology constraint as the PodGroup spec spells it ({} for none)."""
    if tc is None:
        return {}
    return {"topology": tc.topology, "requiredTopologyLevel": tc.required_level,
            "preferredTopologyLevel": tc.preferred_level}


def _group_values(group: ObservedPodGroup) -> dict[str, Any]:
    return {
        "uid": group.uid[:64],
        "preemptibility": group.preemptibility or "",
        "min_member": group.min_member,
        "min_subgroup": group.min_sub_group,
        "subgroups": [{"name": sg.name, "minMember": sg.min_member, "parent": sg.parent,
                       "minSubGroup": sg.min_sub_group, "topologyConstraint": _constraint_json(sg.topology_constraint)}
                      for sg in group.sub_groups],
        "topology_constraint": _constraint_json(group.topology_constraint),
        "preemption_delay_seconds": group.preemption_delay_s,
        "staleness_grace_seconds": group.staleness_grace_s,
        "pod_group_said": dict(group.said),
    }


def _implicit_values(pod: ObservedPod) -> dict[str, Any]:
    return {"uid": "", "preemptibility": "", "min_member": 1, "min_subgroup": None, "subgroups": [],
            "topology_constraint": {}, "preemption_delay_seconds": None, "staleness_grace_seconds": None,
            "pod_group_said": {}}


def workload_state(pods: Sequence[Any], min_member: int | None) -> str:
    """A workload's state from its pods' states (KAI: running once the gang minimum is allocated)."""
    if pods and all(p.state == PodState.SUCCEEDED for p in pods):
        return WorkloadState.COMPLETED
    if pods and all(p.state in _FINISHED for p in pods):
        return WorkloadState.FAILED
    active = [p for p in pods if p.state not in _FINISHED]
    running = sum(1 for p in active if p.state in _COUNTED)
    if running == 0:
        return WorkloadState.PENDING
    needed = 1 if min_member is None else min_member
    return WorkloadState.RUNNING if running >= min(needed, len(active)) else WorkloadState.PARTIAL


class _QueueIndex:
    """Queue names → (id, has children), read in one query."""

    def __init__(self) -> None:
        from kaiweb.queues.models import Queue

        rows = list(Queue.objects.values_list("name", "pk", "parent_id"))
        parents = {parent for _, _, parent in rows if parent is not None}
        self.ids = {name: pk for name, pk, _ in rows}
        self.with_children = {name for name, pk, _ in rows if pk in parents}

    def check(self, kind: str, namespace: str, name: str, uid: str, queue: str | None, field_: str) -> Problem | None:
        """None if ``queue`` is a leaf queue; else the problem, deferred (the queue may appear or
        lose its children)."""
        if not queue:
            return _problem(kind, namespace, name, uid, field_, "is required: the name of a leaf queue",
                            deferred=False)
        if queue not in self.ids:
            return _problem(kind, namespace, name, uid, field_,
                            "must name an existing queue (no queue of that name in kaiweb or the cluster)",
                            deferred=True, what=f" = {queue!r}")
        if queue in self.with_children:
            return _problem(kind, namespace, name, uid, field_,
                            "must name a leaf queue: only leaf queues hold workloads, this one has child queues",
                            deferred=True, what=f" = {queue!r}")
        return None


def _class_ids() -> dict[str, int]:
    from kaiweb.queues.models import PriorityClass

    return dict(PriorityClass.objects.values_list("name", "pk"))


# ----------------------------------------------------------------------------------- state


def mirror_state(cluster: Cluster) -> MirrorState:
    state, _ = MirrorState.objects.get_or_create(cluster=cluster)
    return state


def record_heartbeat(cluster: Cluster) -> None:
    """Mark the watcher of ``cluster`` as alive now (watch_cluster calls it periodically)."""
    from kaiweb.core import heartbeat

    updated = MirrorState.objects.filter(cluster=cluster).update(watcher_heartbeat_at=timezone.now())
    if not updated:
        MirrorState.objects.get_or_create(cluster=cluster, defaults={"watcher_heartbeat_at": timezone.now()})
    heartbeat.beat("watcher")  # for the watcher pod's probes: the database answered just now


def heartbeat_seconds() -> float:
    return float(getattr(settings, "KAI_WATCH_HEARTBEAT_SECONDS", DEFAULT_HEARTBEAT_SECONDS))


def watcher_is_current(cluster: Cluster, max_age: float | None = None) -> bool:
    """Whether watch_cluster showed life recently enough for the cycle to trust the mirror."""
    at = MirrorState.objects.filter(cluster=cluster).values_list("watcher_heartbeat_at", flat=True).first()
    age = heartbeat_seconds() if max_age is None else max_age
    return at is not None and timezone.now() - at <= timedelta(seconds=age)


# ----------------------------------------------------------------------------------- problems in the DB


def _store_problems(cluster: Cluster, problems: Iterable[Problem], *, replace_kinds: Iterable[str] = (),
                    clear: Iterable[tuple[str, str, str]] = ()) -> None:
    """Upsert ``problems``; delete the other rows of ``replace_kinds`` (a full sync) and the rows
    of the ``clear`` keys (objects applied or deleted by an event)."""
    now = timezone.now()
    wanted = {p.key: p for p in problems}
    kinds = set(replace_kinds)
    qs = UnreadableObject.objects.filter(cluster=cluster)
    keys = set(wanted) | set(clear)
    if kinds:
        existing = list(qs.filter(kind__in=kinds | {k for k, _, _ in keys}))
    elif keys:
        existing = list(qs.filter(kind__in={k for k, _, _ in keys}, name__in={n for _, _, n in keys}))
    else:
        return
    by_key = {(r.kind, r.namespace, r.name): r for r in existing}
    doomed = [r.pk for k, r in by_key.items() if k not in wanted and (r.kind in kinds or k in set(clear))]
    create, update = [], []
    for key, p in wanted.items():
        row = by_key.get(key)
        values = {"uid": p.uid[:64], "field": p.field[:300], "rule": p.rule, "message": p.message,
                  "deferred": p.deferred, "raw": dict(p.raw) if p.raw is not None else None}
        if row is None:
            create.append(UnreadableObject(cluster=cluster, kind=p.kind, namespace=p.namespace[:63],
                                           name=p.name[:253], first_seen=now, last_seen=now, **values))
            log.warning("%s", p.message)
            continue
        if p.raw is None and row.raw is not None and p.deferred and row.deferred:
            values["raw"] = row.raw  # a full sync has no raw object: keep the watcher's
        for k, v in values.items():
            setattr(row, k, v)
        row.last_seen = now
        update.append(row)
    if doomed:
        UnreadableObject.objects.filter(pk__in=doomed).delete()
    UnreadableObject.objects.bulk_create(create, batch_size=BATCH)
    UnreadableObject.objects.bulk_update(update, ["uid", "field", "rule", "message", "deferred", "raw", "last_seen"],
                                         batch_size=BATCH)


# ----------------------------------------------------------------------------------- nodes


def _apply_nodes(cluster: Cluster, observed: Sequence[ObservedNode], *, unreadable: Iterable[str] = (),
                 deleted: Iterable[str] = (), full: bool, report: SyncReport) -> None:
    """Create/update the observed nodes; in a full sync delete the others. A node that became
    unreadable keeps its row (its pods still hold resources) but is marked not ready, so nothing
    new is placed on it until it can be read again."""
    now = timezone.now()
    names = {n.name for n in observed}
    bad = set(unreadable)
    qs = Node.objects.filter(cluster=cluster)
    rows = {n.name: n for n in (qs if full else qs.filter(name__in=names | bad | set(deleted)))}
    create, update = [], []
    for obs in observed:
        values = node_values(obs)
        row = rows.get(obs.name)
        if row is None:
            create.append(Node(cluster=cluster, name=obs.name[:253], observed_at=now, **values))
            continue
        if any(getattr(row, k) != v for k, v in values.items()):
            for k, v in values.items():
                setattr(row, k, v)
            update.append(row)
        row.observed_at = now
    for name in bad:
        row = rows.get(name)
        if row is not None and row.ready:
            row.ready = False
            update.append(row)
    gone = [r.pk for name, r in rows.items() if (full and name not in names and name not in bad)
            or name in set(deleted)]
    Node.objects.bulk_create(create, batch_size=BATCH)
    if create and create[0].pk is None:  # backends without RETURNING: read the ids back
        ids = dict(Node.objects.filter(cluster=cluster, name__in=[n.name for n in create]).values_list("name", "pk"))
        for n in create:
            n.pk = ids[n.name]
    Node.objects.bulk_update(update, [*_NODE_FIELDS, "observed_at"], batch_size=BATCH)
    if full:
        # Seen unchanged: only the observation time moves (one statement for all of them).
        qs.filter(name__in=names).update(observed_at=now)
    if gone:
        Node.objects.filter(pk__in=gone).delete()
    report.nodes["created"] += len(create)
    report.nodes["updated"] += len({r.pk for r in update})
    report.nodes["deleted"] += len(gone)
    _apply_devices(cluster, [*create, *(rows[n.name] for n in observed if n.name in rows)], observed)


def _apply_devices(cluster: Cluster, rows: Sequence[Node], observed: Sequence[ObservedNode]) -> None:
    """One GpuDevice per whole GPU of each observed node, with its product and memory."""
    by_name = {o.name: o for o in observed}
    node_ids = {r.name: r.pk for r in rows if r.pk is not None}
    existing: dict[int, dict[int, GpuDevice]] = {}
    for d in GpuDevice.objects.filter(node_id__in=node_ids.values()):
        existing.setdefault(d.node_id, {})[d.index] = d
    create, update, doomed = [], [], []
    for name, node_id in node_ids.items():
        obs = by_name[name]
        count = int(obs.allocatable.gpus)
        product, memory = (obs.gpu_product or "")[:100], int(obs.gpu_memory_mib or 0)
        have = existing.get(node_id, {})
        for index in range(count):
            device = have.get(index)
            if device is None:
                create.append(GpuDevice(node_id=node_id, index=index, product=product, memory_mib=memory))
            elif device.product != product or device.memory_mib != memory:
                device.product, device.memory_mib = product, memory
                update.append(device)
        doomed.extend(d.pk for i, d in have.items() if i >= count)
    GpuDevice.objects.bulk_create(create, batch_size=BATCH)
    GpuDevice.objects.bulk_update(update, ["product", "memory_mib"], batch_size=BATCH)
    if doomed:
        GpuDevice.objects.filter(pk__in=doomed).delete()


# ----------------------------------------------------------------------------------- workloads


@dataclass
class _Plan:
    """What the mirror of some workloads should be: rows by key, and the problems found."""

    workloads: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], tuple[tuple[str, str], dict[str, Any], str | None]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    raws: dict[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)  # pod key → raw (watch events)


def _plan(groups: Iterable[ObservedPodGroup], pods: Iterable[ObservedPod], queues: _QueueIndex,
          classes: Mapping[str, int], *, known_groups: Mapping[tuple[str, str], dict[str, Any]] | None = None,
          raws: Mapping[tuple[str, str, str], Mapping[str, Any]] | None = None) -> _Plan:
    """Workload and pod rows for the given PodGroups and pods (pure: no queries).

    ``known_groups`` are PodGroup workloads already in the mirror (for incremental events whose
    PodGroup is not part of the event); ``raws`` the raw objects of the event, kept on deferred
    problems so the watcher can apply them later."""
    raws = raws or {}
    plan = _Plan()
    blocked: dict[tuple[str, str], Problem] = {}
    for g in groups:
        key = (g.namespace, g.name)
        problem = queues.check("PodGroup", g.namespace, g.name, g.uid, g.queue, "spec.queue")
        if problem is not None:
            plan.problems.append(Problem(**{**problem.__dict__, "raw": raws.get(("PodGroup", *key))}))
            blocked[key] = problem
            continue
        values = _group_values(g)
        values.update(queue_id=queues.ids[g.queue], priority_class_id=classes.get(g.priority_class or ""),
                      labels=dict(g.labels), submitted_at=g.created_at or clock.now())
        plan.workloads[key] = values
    for p in sorted(pods, key=lambda p: (p.namespace, p.name)):
        key = workload_key(p)
        raw = raws.get(("Pod", p.namespace, p.name))
        if p.pod_group:
            if key in blocked:
                cause = blocked[key]
                plan.problems.append(Problem("Pod", p.namespace, p.name, p.uid, f"metadata.annotations"
                                             f"[{POD_GROUP_ANNOTATION}]", f"names PodGroup {p.pod_group}, which is "
                                             f"not scheduled: {cause.field} {cause.rule}",
                                             f"Pod {p.namespace}/{p.name}: its PodGroup {p.pod_group} is not "
                                             f"scheduled ({cause.field} {cause.rule}); it waits for that to change",
                                             True, raw))
                continue
            if key not in plan.workloads and key not in (known_groups or {}):
                plan.problems.append(_problem_with_raw(_problem(
                    "Pod", p.namespace, p.name, p.uid, f"metadata.annotations[{POD_GROUP_ANNOTATION}]",
                    "must name an existing PodGroup in the pod's namespace", deferred=True,
                    what=f" = {p.pod_group!r}"), raw))
                continue
        elif p.owned:
            # As KAI's scheduler, which takes only pods of a PodGroup: a pod with an owner waits for the
            # pod-grouper to name its owner's PodGroup (a one-pod workload of it would be a gang member
            # scheduled alone, bound before the rest of its gang exists).
            plan.problems.append(_problem_with_raw(_problem(
                "Pod", p.namespace, p.name, p.uid, f"metadata.annotations[{POD_GROUP_ANNOTATION}]",
                "is written by the pod-grouper on a pod with an owner (its owner's PodGroup), not yet",
                deferred=False), raw))
            continue
        elif key not in plan.workloads:
            problem = queues.check("Pod", p.namespace, p.name, p.uid, p.queue,
                                   "metadata.labels[kai.scheduler/queue]")
            if problem is not None:
                plan.problems.append(_problem_with_raw(problem, raw))
                continue
            values = _implicit_values(p)
            values.update(queue_id=queues.ids[p.queue or ""], priority_class_id=classes.get(p.priority_class or ""),
                          labels={**dict(p.labels), IMPLICIT_GROUP_LABEL: "true"},
                          submitted_at=p.created_at or clock.now())
            plan.workloads[key] = values
        plan.pods[(p.namespace, p.name)] = (key, pod_values(p), p.node)
        if raw is not None:
            plan.raws[(p.namespace, p.name)] = raw
    return plan


def _problem_with_raw(problem: Problem, raw: Mapping[str, Any] | None) -> Problem:
    return Problem(**{**problem.__dict__, "raw": raw})


def _apply_plan(cluster: Cluster, plan: _Plan, *, full: bool, report: SyncReport,
                delete_pods: Iterable[tuple[str, str]] = (), delete_workloads: Iterable[tuple[str, str]] = (),
                touched_workloads: Iterable[tuple[str, str]] = ()) -> list[Problem]:
    """Write a plan: workloads and pods created/updated, states recomputed; in a full sync the
    rows not in the plan are deleted. A bounded number of queries whatever the plan's size.

    Returns the pods left out because the node they are bound to is not in the mirror (yet):
    they wait for it, so that a pod is never counted without the node it uses."""
    now = clock.now()
    wqs = Workload.objects.filter(cluster=cluster)
    pqs = Pod.objects.filter(workload__cluster=cluster)
    pod_keys = set(plan.pods) | set(delete_pods)
    work_keys = set(plan.workloads) | set(delete_workloads) | set(touched_workloads) | {w for w, _, _ in
                                                                                         plan.pods.values()}
    if full:
        workloads = {(w.namespace, w.name): w for w in wqs}
        pods = {(p.workload.namespace, p.name): p for p in pqs.select_related("workload")}
    else:
        # Locked until the commit, in one order: the cycle records binds and evictions on these rows
        # (`record_actions`) at any moment, and a write from what was read before it would undo it.
        pods = {(p.workload.namespace, p.name): p for p in lock_pods(pqs.filter(name__in={n for _, n in pod_keys})
                                                                     .select_related("workload"))
                if (p.workload.namespace, p.name) in pod_keys}
        work_keys |= {(p.workload.namespace, p.workload.name) for p in pods.values()}
        workloads = {(w.namespace, w.name): w for w in wqs.filter(name__in={n for _, n in work_keys})
                     if (w.namespace, w.name) in work_keys}
    wanted_nodes = {node for _, _, node in plan.pods.values() if node}
    node_ids = dict(Node.objects.filter(cluster=cluster, name__in=wanted_nodes).values_list("name", "pk")
                    ) if wanted_nodes else {}

    # Workloads.
    w_create, w_update = [], []
    for key, values in plan.workloads.items():
        row = workloads.get(key)
        if row is None:
            row = Workload(cluster=cluster, namespace=key[0][:63], name=key[1][:253], **values)
            w_create.append(row)
            workloads[key] = row
            continue
        changed = [k for k, v in values.items() if getattr(row, k) != v]
        if any(k != "submitted_at" for k in changed):
            for k, v in values.items():
                setattr(row, k, v)
            w_update.append((row, changed))
    Workload.objects.bulk_create(w_create, batch_size=BATCH)
    if w_create and w_create[0].pk is None:
        ids = {(ns, n): pk for ns, n, pk in wqs.filter(name__in=[w.name for w in w_create])
               .values_list("namespace", "name", "pk")}
        for w in w_create:
            w.pk = ids[(w.namespace, w.name)]

    # Pods.
    p_create, p_update = [], []
    waiting: list[Problem] = []
    for key, (wkey, values, node_name) in plan.pods.items():
        owner = workloads.get(wkey)
        if owner is None:  # a known PodGroup workload that is not in the mirror after all
            continue
        if node_name and node_name not in node_ids:
            waiting.append(_problem_with_raw(_problem(
                "Pod", key[0], key[1], values.get("uid", ""), "spec.nodeName",
                "must name a node of the cluster (the node is not known yet)", deferred=True,
                what=f" = {node_name!r}"), plan.raws.get(key)))
            continue
        values = dict(values, workload_id=owner.pk, node_id=node_ids.get(node_name) if node_name else None)
        row = pods.get(key)
        if row is not None and older_than_row(row, values):
            report.stale += 1
            continue
        if row is None:
            row = Pod(name=key[1][:253], **values)
            row.workload = owner
            _stamp_times(row, now)
            p_create.append(row)
            pods[key] = row
            continue
        changed = [k for k, v in values.items() if getattr(row, k) != v]
        if changed:
            for k, v in values.items():
                setattr(row, k, v)
            row.workload = owner
        started, finished = row.started_at, row.finished_at
        if _stamp_times(row, now) or changed:
            stamped = [f for f, was in (("started_at", started), ("finished_at", finished)) if getattr(row, f) != was]
            p_update.append((row, [*changed, *stamped]))
    plan_pods = set(plan.pods) - {(w.namespace, w.name) for w in waiting}
    left_out = {(w.namespace, w.name) for w in waiting}
    p_gone = [p.pk for key, p in pods.items()
              if (full and key not in plan_pods) or key in set(delete_pods) or key in left_out]
    # Workloads only touched (an unreadable pod that still holds resources) are kept as they are.
    planned = set(plan.workloads) | set(touched_workloads)
    w_gone_keys = {key for key in workloads if (full and key not in planned) or key in set(delete_workloads)}

    with transaction.atomic():
        Pod.objects.bulk_create(p_create, batch_size=BATCH)
        _bulk_update_changed(Pod, p_update)
        if p_gone:
            Pod.objects.filter(pk__in=p_gone).delete()
        gone_ids = {pods[k].workload_id for k in pods if pods[k].pk in set(p_gone)}
        # Implicit workloads live only as long as their pod.
        for key, row in workloads.items():
            if row.pk in gone_ids and (row.labels or {}).get(IMPLICIT_GROUP_LABEL) and key not in planned:
                w_gone_keys.add(key)
        w_gone = [workloads[k].pk for k in w_gone_keys if workloads[k].pk is not None]
        if w_gone:
            Workload.objects.filter(pk__in=w_gone).delete()
        # Workload states from their pods (one query for the pods of the affected workloads).
        alive = {k: w for k, w in workloads.items() if k not in w_gone_keys}
        _bulk_update_changed(Workload, w_update)
        _refresh_states(alive if full else {k: w for k, w in alive.items() if k in work_keys}, now)
    report.workloads["created"] += len(w_create)
    report.workloads["updated"] += len(w_update)
    report.workloads["deleted"] += len(w_gone)
    report.pods["created"] += len(p_create)
    report.pods["updated"] += len(p_update)
    report.pods["deleted"] += len(p_gone)
    return waiting


def _bulk_update_changed(model: Any, rows: Sequence[tuple[Any, Sequence[str]]]) -> None:
    """Each row's changed fields only (rows with the same changed fields together): the rows were
    read in this transaction (locked, for pods), so the fields left out already hold these values in
    the database; the statements are a fraction of an update of every field."""
    by_fields: dict[tuple[str, ...], list[Any]] = {}
    for row, fields in rows:
        by_fields.setdefault(tuple(sorted(set(fields))), []).append(row)
    for fields, same in sorted(by_fields.items()):
        if fields:
            update_rows(model, same, fields)


def _version(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def older_than_row(row: Pod, values: Mapping[str, Any]) -> bool:
    """Whether an observation of a pod is older than what its row already says, so it must not
    overwrite it. Watch events of one pod can come after the cycle recorded a bind or an eviction
    of it (`record_actions`): the watcher may be seconds behind, and the pod-grouper's own patch
    makes an event that shows the pod before its bind. Three rules, for the same incarnation (uid):

    - a resourceVersion not newer than the row's is old news (the API server's versions of one
      object only grow; they are compared as numbers when both are, as every etcd-backed server
      writes them);
    - a pod that holds a node never loses it: ``spec.nodeName`` cannot be unset, so an observation
      without a node, not finished, predates the bind the row holds;
    - a pod being released (evicted or deleted) cannot come back: a deletionTimestamp cannot be
      removed, so an observation that shows it running again predates the eviction.

    A new incarnation (another uid under the same name) always wins."""
    if row.uid and values.get("uid") and row.uid != values["uid"]:
        return False
    new, old = _version(values.get("resource_version")), _version(row.resource_version)
    if new is not None and old is not None and new <= old:
        return True
    state = values.get("state")
    if state in _FINISHED:
        return False
    if row.node_id is not None and row.state in _HOLDING and values.get("node_id") is None:
        return True
    return row.state == PodState.RELEASING and state != PodState.RELEASING


def _stamp_times(pod: Pod, now: datetime) -> bool:
    """started_at when first seen holding resources, finished_at when first seen finished."""
    changed = False
    if pod.state in (*ALLOCATED_POD_STATES, PodState.RELEASING) and pod.started_at is None:
        pod.started_at, changed = now, True
    if pod.state in _FINISHED and pod.finished_at is None:
        pod.finished_at, changed = now, True
    return changed


def _refresh_states(workloads: Mapping[tuple[str, str], Workload], now: datetime) -> None:
    ids = [w.pk for w in workloads.values() if w.pk is not None]
    if not ids:
        return
    by_workload: dict[int, list[tuple[str, datetime | None]]] = {}
    for wid, state, finished in Pod.objects.filter(workload_id__in=ids).values_list("workload_id", "state",
                                                                                     "finished_at"):
        by_workload.setdefault(wid, []).append((state, finished))
    changed = []
    for w in workloads.values():
        pods = [_StateOnly(s) for s, _ in by_workload.get(w.pk, [])]
        new = workload_state(pods, w.min_member)
        if new == w.state:
            continue
        if w.state == WorkloadState.PENDING and new in (WorkloadState.RUNNING, WorkloadState.PARTIAL):
            w.last_start_at = now
        if new in (WorkloadState.COMPLETED, WorkloadState.FAILED):
            w.finished_at = max((f for _, f in by_workload.get(w.pk, []) if f), default=now)
        elif w.finished_at is not None:
            w.finished_at = None
        w.state = new
        changed.append(w)
    update_rows(Workload, changed, ["state", "last_start_at", "finished_at"])


@dataclass(frozen=True)
class _StateOnly:
    state: str


# ----------------------------------------------------------------------------------- priority classes


def _import_priority_classes(classes: Iterable[ObservedPriorityClass], report: SyncReport) -> None:
    """PriorityClasses of the cluster that kaiweb does not know are added (KAI reads them from
    the cluster); those it knows keep kaiweb's values, which decide."""
    from kaiweb.audit.choices import AuditSource
    from kaiweb.queues.models import PriorityClass
    from kaiweb.queues.services import create_priority_class

    known = set(PriorityClass.objects.values_list("name", flat=True))
    has_default = PriorityClass.objects.filter(global_default=True).exists()
    for pc in sorted(classes, key=lambda c: c.name):
        if pc.name in known:
            continue
        try:
            create_priority_class({"name": pc.name, "value": pc.value,
                                   "global_default": pc.global_default and not has_default},
                                  source=AuditSource.SYSTEM)
            has_default = has_default or pc.global_default
        except Exception as exc:  # noqa: BLE001 - a rule of kaiweb's; reported, the rest goes on
            report.problems.append(f"PriorityClass {pc.name}: not imported: {exc}")


# ----------------------------------------------------------------------------------- queues


def _crd_yaml(specs: Iterable[QueueSpec]) -> str:
    return yaml.safe_dump_all([queue_crd.write(s) for s in specs], sort_keys=False)


def import_queues(specs: Sequence[QueueSpec]) -> tuple[list[str], list[Problem]]:
    """Import CRD-only queues through the control plane's YAML import (all its rules apply).

    All at once first; if the batch is refused, one at a time (parents first), so one bad
    queue does not keep the others out. Returns the imported names and the refused ones."""
    from kaiweb.audit.choices import AuditSource
    from kaiweb.queues.yaml_io import QueueImportError
    from kaiweb.queues.yaml_io import import_queues as import_yaml

    if not specs:
        return [], []
    try:
        result = import_yaml(_crd_yaml(specs), source=AuditSource.SYSTEM)
        return [*result.created, *result.updated, *result.unchanged], []
    except QueueImportError:
        pass
    done: list[str] = []
    problems: list[Problem] = []
    pending = list(specs)
    while pending:
        progressed, left = False, []
        for spec in pending:
            try:
                import_yaml(_crd_yaml([spec]), source=AuditSource.SYSTEM)
                done.append(spec.name)
                progressed = True
            except QueueImportError as exc:
                left.append((spec, exc))
        if not progressed:
            for spec, exc in left:
                for p in exc.problems:
                    problems.append(_problem("Queue", "", spec.name, "", p.field or "spec",
                                             f"{p.message} (not imported into kaiweb)", deferred=False))
            break
        pending = [s for s, _ in left]
    return done, problems


def _audit_override(name: str, changes: Mapping[str, tuple[Any, Any]]) -> None:
    """An audit entry on the queue: the cluster's values (before) replaced by the database's (after)."""
    from kaiweb.audit import services as audit
    from kaiweb.audit.choices import AuditAction, AuditSource
    from kaiweb.queues.models import Queue

    queue = Queue.objects.filter(name=name).first()
    if queue is None:
        return
    audit.record(queue, AuditAction.UPDATE, actor=None, source=AuditSource.SYSTEM,
                 before={f"cluster {k}": v[0] for k, v in changes.items()},
                 after={f"cluster {k}": v[1] for k, v in changes.items()})


def _database_specs() -> dict[str, QueueSpec]:
    from kaiweb.queues.models import Queue

    rows = list(Queue.objects.all())
    names = {q.pk: q.name for q in rows}
    return {q.name: q.to_spec(names.get(q.parent_id)) for q in rows}


def sync_queues(gateway: Any, cluster: Cluster, listing: Listing[ObservedQueue] | None = None) -> tuple[
        list[str], list[Problem]]:
    """The two-way Queue CRD sync (see the module docstring). Returns one message per step and
    the problems (unreadable CRDs, imports refused by kaiweb's rules, writes the cluster refused)."""

    if listing is None:
        listing = gateway.list_queues()
    problems = [Problem.of(u) for u in listing.problems]
    state = mirror_state(cluster)
    db = _database_specs()
    deleted = set(state.synced_queues) - set(db)
    unreadable = {p.name for p in problems}
    actions = diff_queues(db.values(), listing.items, deleted_in_database=deleted, base=_agreed_specs(state))
    observed = {q.name: q for q in listing.items}
    messages: list[str] = []
    imports = [a.spec for a in actions if a.op == "import" and a.spec is not None]
    imported, refused = import_queues(imports)
    problems.extend(refused)
    for action in actions:
        if action.op == "import":
            if action.name in imported:
                messages.append(action.message)
                if action.name in db:
                    log.warning("%s", action.message)
            continue
        if action.op == "create" and action.name in unreadable:
            messages.append(f"Queue {action.name}: the cluster's CRD is unreadable; the database's spec replaces it.")
        try:
            if action.op in ("create", "update") and action.spec is not None:
                gateway.upsert_queue(action.spec)
            elif action.op == "delete":
                gateway.delete_queue(action.name)
        except ClusterError as exc:
            problems.append(_problem("Queue", "", action.name, "", "spec", f"could not be written to the cluster: "
                                     f"{exc}", deferred=False))
            continue
        if action.op == "update" and action.spec is not None:
            changes = queue_crd.differences(observed[action.name].spec, action.spec)  # (cluster, database)
            for path, (was, now) in changes.items():
                log.warning("Queue %s: %s %r in the cluster overridden by the database's %r", action.name, path, was,
                            now)
            _audit_override(action.name, changes)
        messages.append(action.message)
    # Queues present on both sides now, with the spec both agree on: a later disappearance from the
    # database is a deletion, and a later difference is judged against this spec.
    in_cluster = (set(observed) | {a.name for a in actions if a.op == "create"}) - {
        a.name for a in actions if a.op == "delete"}
    failed = {p.name for p in problems}
    agreed = _database_specs() if imported else db
    previous = _agreed_specs(state)
    state.synced_queues = {name: _spec_json(agreed[name] if name not in failed else previous.get(name, agreed[name]))
                           for name in sorted(set(agreed) & in_cluster)}
    state.save(update_fields=["synced_queues"])
    return messages, problems


def _spec_json(spec: QueueSpec) -> dict[str, Any]:
    return queue_crd.write_spec(spec)


def _agreed_specs(state: MirrorState) -> dict[str, QueueSpec]:
    """The spec of each queue as the database and the cluster last agreed on it (none recorded yet: {})."""

    recorded = state.synced_queues if isinstance(state.synced_queues, dict) else {}
    out = {}
    for name, spec in recorded.items():
        reading = queue_crd.read({"metadata": {"name": name}, "spec": spec}, strict=False)
        if reading.spec is not None:  # an unreadable record is as good as none
            out[name] = reading.spec
    return out


# ----------------------------------------------------------------------------------- full sync


def _list_optional(operation: Any) -> Listing[Any]:
    """A listing of a CRD that may not be installed (404): empty, with a log line."""
    try:
        return operation()
    except ClusterRejected as err:
        if err.status == 404:
            log.warning("%s; treating it as empty", err)
            return Listing(())
        raise


def sync_full(gateway: Any, cluster: Cluster) -> SyncReport:
    """List the whole cluster and make the mirror equal to it (see the module docstring)."""
    report = SyncReport()
    nodes = gateway.list_nodes()
    pods = gateway.list_pods()
    others = gateway.list_other_pods() if hasattr(gateway, "list_other_pods") else None
    groups = _list_optional(gateway.list_pod_groups)
    queues = _list_optional(gateway.list_queues)
    classes = gateway.list_priority_classes()
    problems: list[Problem] = [Problem.of(u) for u in (*nodes.problems, *pods.problems, *groups.problems,
                                                        *classes.problems)]
    messages, queue_problems = sync_queues(gateway, cluster, queues)
    report.queues = messages
    problems.extend(queue_problems)
    _import_priority_classes(classes.items, report)
    topologies = _list_optional(gateway.list_topologies)
    shards = _list_optional(gateway.list_shards)
    problems.extend(Problem.of(u) for u in (*topologies.problems, *shards.problems))
    _apply_topologies(cluster, topologies.items)
    _apply_shards(cluster, shards.items)

    # A pending pod whose ConfigMap or volume cannot be had waits out of the mirror, explained.
    missing = gateway.missing_volume_sources(pods.items)
    if missing:
        problems.extend(_problem("Pod", p.namespace, p.name, p.uid, missing[(p.namespace, p.name)][0],
                                 f"cannot be scheduled: {missing[(p.namespace, p.name)][1]}", deferred=True)
                        for p in pods.items if (p.namespace, p.name) in missing)
        pods = Listing(tuple(p for p in pods.items if (p.namespace, p.name) not in missing), pods.problems,
                       pods.resource_version)
    with transaction.atomic():
        _apply_nodes(cluster, nodes.items, unreadable=[p.name for p in problems if p.kind == "Node"], full=True,
                     report=report)
        if others is not None:
            problems.extend(Problem.of(u) for u in others.problems)
            # An unreadable one keeps its row: what it held is still held, as far as we know.
            _replace_other_pods(cluster, others.items, keep={(u.namespace, u.name) for u in others.problems})
        plan = _plan(groups.items, pods.items, _QueueIndex(), _class_ids())
        problems.extend(plan.problems)
        unreadable_pods = {(p.namespace, p.name) for p in problems if p.kind == "Pod"}
        # An unreadable pod that still holds resources keeps its last row (its node is in use);
        # a pending one leaves the mirror, so it is not scheduled until it can be read.
        kept = _holding_resources(cluster, unreadable_pods)
        for key, (wkey, values, node) in kept.items():
            plan.pods[key] = (wkey, values, node)
        problems.extend(_apply_plan(cluster, plan, full=True, report=report,
                                    touched_workloads={w for w, _, _ in kept.values()}))
        merge_stamps(cluster, groups.items)
        _store_problems(cluster, problems, replace_kinds=("Node", "Pod", "PodGroup", "Queue", "PriorityClass", "Topology",
                                                            "SchedulingShard"))
        state = mirror_state(cluster)
        state.last_full_sync_at = timezone.now()
        report.problems.extend(p.message for p in problems)
        state.last_full_sync = {"nodes": len(nodes), "pods": len(pods), "pod_groups": len(groups),
                                "queues": len(queues), "problems": len(problems)}
        state.save(update_fields=["last_full_sync_at", "last_full_sync"])
    return report


def _apply_topologies(cluster: Cluster, observed: Sequence[Any]) -> None:
    """The cluster's Topology objects replace the mirrored ones (their levels and the levels' aliases)."""
    wanted = {t.name: (list(t.levels), list(t.aliases)) for t in observed}
    current = {t.name: t for t in Topology.objects.filter(cluster=cluster)}
    Topology.objects.filter(cluster=cluster).exclude(name__in=list(wanted)).delete()
    for name, (levels, aliases) in wanted.items():
        row = current.get(name)
        if row is None:
            Topology.objects.create(cluster=cluster, name=name, levels=levels, aliases=aliases)
        elif (row.levels, row.aliases) != (levels, aliases):
            row.levels, row.aliases = levels, aliases
            row.save(update_fields=["levels", "aliases"])


def _apply_shards(cluster: Cluster, observed: Sequence[Any]) -> None:
    """KAI's SchedulingShard objects configure the shard of the same name (created when missing).

    The eviction mode and condition come from the object's spec.args as KAI would run it (absent:
    delete, no condition; `parse_shard`), the queue depths from spec.queueDepthPerAction, the usage
    window and half-life from spec.usageDBConfig.usageParams, the Prometheus time-based fair share reads
    (the rest of spec.usageDBConfig, `usage_db`), and what the object sets that kaiweb
    does not apply is kept, with the reasons, in `unsupported_fields`. A shard the cluster does not
    describe keeps its configuration from the database."""
    from kaiweb.cluster.models import SchedulingShard

    for shard in observed:
        row = SchedulingShard.objects.filter(cluster=cluster, name=shard.name).first()
        if row is None:
            row = SchedulingShard(cluster=cluster, name=shard.name)
        values = {"partition_label_value": shard.partition_label_value,
                  "gpu_placement": shard.gpu_placement or "binpack", "cpu_placement": shard.cpu_placement or "binpack",
                  "args": dict(shard.args), "eviction_mode": shard.eviction_mode,
                  "update_pod_eviction_condition": shard.update_pod_eviction_condition,
                  "queue_depth_per_action": dict(shard.queue_depth_per_action),
                  "actions": list(shard.actions) if shard.actions is not None else None,
                  "usage_db": shard.usage_db.as_json() if shard.usage_db is not None else {},
                  "unsupported_fields": [{"field": f, "reason": why} for f, why in shard.unsupported]}
        if shard.usage_window_s is not None:
            values["usage_window_seconds"] = round(shard.usage_window_s)
        if shard.usage_half_life_s is not None:
            values["usage_half_life_seconds"] = round(shard.usage_half_life_s)
        if shard.k_value is not None:
            values["k_value"] = shard.k_value
        if shard.preempt_min_runtime_s is not None:
            values["preempt_min_runtime"] = timedelta(seconds=shard.preempt_min_runtime_s)
        if shard.reclaim_min_runtime_s is not None:
            values["reclaim_min_runtime"] = timedelta(seconds=shard.reclaim_min_runtime_s)
        if row.pk is not None and all(getattr(row, k) == v for k, v in values.items()):
            continue
        for key, value in values.items():
            setattr(row, key, value)
        # Only the object's fields: the usage database's reading is written meanwhile by the fetch task.
        row.save(update_fields=[*values, "updated"] if row.pk is not None else None)


def _holding_resources(cluster: Cluster, keys: set[tuple[str, str]]) -> dict[tuple[str, str], Any]:
    if not keys:
        return {}
    out = {}
    # Locked, like `_apply_plan`'s rows: a bind recorded meanwhile must not be deleted unseen.
    rows = lock_pods(Pod.objects.filter(workload__cluster=cluster, name__in={n for _, n in keys},
                                        state__in=(*ALLOCATED_POD_STATES, PodState.RELEASING))
                     .select_related("workload", "node"))
    for p in rows:
        key = (p.workload.namespace, p.name)
        if key in keys:
            values = {f: getattr(p, f) for f in _POD_FIELDS if f not in ("workload_id", "node_id")}
            out[key] = ((p.workload.namespace, p.workload.name), values, p.node.name if p.node else None)
    return out


def observe(gateway: Any, cluster: Cluster) -> dict[str, Any]:
    """The cycle's observe step on a mirrored cluster: reservation pods of shared GPUs nobody uses
    any more are released, the pod-grouper makes its pass (unless the watcher groups pods as their
    events arrive), then `sync_into`."""
    if watcher_is_current(cluster):
        out = sync_into(gateway, cluster)
    else:
        grouped = controller.group_pods(gateway)
        out = {**sync_into(gateway, cluster), "pod_grouper": grouped.as_json()}
    return {**out, "reservations": _release_reservations(gateway)}


def _release_reservations(gateway: Any) -> dict[str, Any]:
    """Housekeeping after the sync: a refusal is reported in the observe step, never fails the cycle
    (the shared GPU stays held one cycle longer)."""
    try:
        return {"released": gateway.collect_reservations()}
    except ClusterError as exc:
        log.warning("reservation pods not collected: %s", exc)
        return {"released": [], "error": str(exc)}


def sync_into(gateway: Any, cluster: Cluster) -> dict[str, Any]:
    """The cycle's observe step: a full sync unless watch_cluster keeps the mirror current, in
    which case only the Queue CRDs are synced (database changes reach the cluster every cycle),
    and the Topology and SchedulingShard objects, which the watcher does not watch (a few small
    cluster-scoped objects: without this they would never reach the mirror while it watches)."""
    if watcher_is_current(cluster):
        messages, problems = sync_queues(gateway, cluster)
        topologies = _list_optional(gateway.list_topologies)
        shards = _list_optional(gateway.list_shards)
        _apply_topologies(cluster, topologies.items)
        _apply_shards(cluster, shards.items)
        kinds = ("Queue", "Topology", "SchedulingShard")
        problems = [*(p for p in problems if p.kind == "Queue"),
                    *(Problem.of(u) for u in (*topologies.problems, *shards.problems))]
        # These listings are complete: their problems replace the recorded ones (fixed objects drop out).
        _store_problems(cluster, problems, replace_kinds=kinds)
        return {"mode": "queues", "queues": messages}
    return {"mode": "full", **sync_full(gateway, cluster).as_json()}


def merge_stamps(cluster: Cluster, groups: Iterable[ObservedPodGroup]) -> int:
    """KAI's stamps on these PodGroups (last start, last eviction, stale since) into their workloads'
    rows, where the later time wins (`stamps.merged`). Each change is one statement that holds only
    while the row's time is still earlier, so a time the watcher or a cycle wrote meanwhile is never
    replaced by an earlier one. A stamp that cannot be read was ignored by the parser, as KAI ignores
    it; its note is logged here. Returns how many fields changed."""
    stamped: dict[tuple[str, str], ObservedPodGroup] = {}
    for g in groups:
        for note in g.notes:
            log.warning("%s", note)
        if any(getattr(g, f) is not None for f in stamps.FIELDS):
            stamped[(g.namespace, g.name)] = g
    if not stamped:
        return 0
    changed = 0
    rows = Workload.objects.filter(cluster=cluster, name__in={n for _, n in stamped}).values_list(
        "pk", "namespace", "name", "uid", *stamps.FIELDS)
    for pk, namespace, name, uid, *times in rows:
        group = stamped.get((namespace, name))
        if group is None or (uid and group.uid and uid != group.uid[:64]):
            continue  # another namespace's, or another incarnation of the PodGroup
        for f, at in stamps.merged(dict(zip(stamps.FIELDS, times, strict=True)), group).items():
            changed += Workload.objects.filter(Q(**{f"{f}__isnull": True}) | Q(**{f"{f}__lt": at}), pk=pk).update(
                **{f: at})
    return changed


# ----------------------------------------------------------------------------------- watch events


def apply_event(event: Any, cluster: Cluster, gateway: Any = None) -> None:
    """Apply one `WatchEvent` to the mirror (the same result as a full sync would give).

    With a ``gateway``, a changed Queue CRD runs the queue sync at once (`sync_queues`, by the rule of
    `kaiweb.cluster.queue_sync`); without one the next cycle's queue sync does it."""

    if event.type == SYNCED:
        if event.kind == "OtherPod" and isinstance(event.obj, frozenset):
            with transaction.atomic():  # a watcher started afresh drops what it kept from before
                _replace_other_pods(cluster, (), keep=event.obj)
        record_heartbeat(cluster)
        return
    # One event, one transaction: a failure leaves the mirror as it was, and the watcher
    # hands the same event again.
    with transaction.atomic():
        _apply_event(event, cluster, gateway)


def _apply_event(event: Any, cluster: Cluster, gateway: Any) -> None:

    report = SyncReport()
    key = (event.kind, event.namespace, event.name)
    raw = dict(event.raw) if event.raw else None
    if event.problem is not None and event.type != DELETED:
        problem = Problem.of(event.problem)
        if event.kind == "OtherPod":
            pass  # its row, if any, stays: what it held is still held, as far as we know
        elif event.kind == "Node":
            _apply_nodes(cluster, [], unreadable=[event.name], full=False, report=report)
        elif event.kind == "Pod":
            # A pod the cluster has bound stays counted on its node, unreadable or not.
            if not (_raw_holds_node(raw) or _holding_resources(cluster, {(event.namespace, event.name)})):
                _apply_plan(cluster, _Plan(), full=False, report=report,
                            delete_pods=[(event.namespace, event.name)])
        elif event.kind == "PodGroup":
            _apply_plan(cluster, _Plan(), full=False, report=report,
                        delete_workloads=[(event.namespace, event.name)])
        _store_problems(cluster, [problem])
        return
    if event.kind == "Node":
        if event.type == DELETED:
            _apply_nodes(cluster, [], deleted=[event.name], full=False, report=report)
        else:
            _apply_nodes(cluster, [event.obj], full=False, report=report)
        _store_problems(cluster, [], clear=[key])
        if event.type != DELETED:
            _retry_deferred(cluster, lambda p: p.kind == "Pod"
                            and ((p.raw or {}).get("spec") or {}).get("nodeName") == event.name)
    elif event.kind == "Pod":
        _apply_pod_event(cluster, event, raw, report)
    elif event.kind == "OtherPod":
        if event.type == DELETED or not event.obj.holds:
            OtherPod.objects.filter(cluster=cluster, namespace=event.namespace, name=event.name).delete()
        else:
            _write_other_pods(cluster, [event.obj])
        _store_problems(cluster, [], clear=[("Pod", event.namespace, event.name)])
    elif event.kind == "PodGroup":
        _apply_group_event(cluster, event, raw, report)
        if event.type == ADDED:
            merge_stamps(cluster, [event.obj])
    elif event.kind == "Queue":
        _apply_queue_event(cluster, event, gateway)


_OTHER_POD_FIELDS = ("uid", "node_name", "scheduler_name", "cpu_millis", "memory_bytes", "gpus", "mig", "other",
                     "resource_version", "observed_at")


def _other_pod_values(pod: ObservedOtherPod) -> dict[str, Any]:
    r = pod.requests
    return {"uid": pod.uid, "node_name": pod.node or "", "scheduler_name": pod.scheduler_name[:253],
            "cpu_millis": r.cpu_millis, "memory_bytes": r.memory_bytes, "gpus": float(r.gpus),
            "mig": {f"nvidia.com/{k}": int(v) for k, v in sorted(r.mig.items()) if v},
            "other": {k: int(v) for k, v in sorted(r.other.items()) if v},
            "resource_version": pod.resource_version[:64]}


def _write_other_pods(cluster: Cluster, pods: Iterable[ObservedOtherPod]) -> None:
    """Create or update the `OtherPod` row of each pod that holds resources on a node."""
    rows = [OtherPod(cluster=cluster, namespace=p.namespace, name=p.name, **_other_pod_values(p))
            for p in pods if p.holds]
    if rows:
        OtherPod.objects.bulk_create(rows, update_conflicts=True, unique_fields=("cluster", "namespace", "name"),
                                     update_fields=_OTHER_POD_FIELDS)


def _replace_other_pods(cluster: Cluster, pods: Iterable[ObservedOtherPod], *, keep: Iterable[tuple[str, str]] = ()
                        ) -> None:
    """Make the `OtherPod` rows equal to ``pods`` (those that hold), leaving the rows named in ``keep``."""
    pods = list(pods)
    wanted = {(p.namespace, p.name) for p in pods if p.holds} | set(keep)
    stale = [pk for pk, ns, name in OtherPod.objects.filter(cluster=cluster).values_list("pk", "namespace", "name")
             if (ns, name) not in wanted]
    if stale:
        OtherPod.objects.filter(pk__in=stale).delete()
    _write_other_pods(cluster, pods)


def _known_groups(cluster: Cluster, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
    wanted = set(keys)
    if not wanted:
        return {}
    rows = Workload.objects.filter(cluster=cluster, name__in={n for _, n in wanted}).values("namespace", "name",
                                                                                            "labels")
    return {(r["namespace"], r["name"]): r for r in rows if (r["namespace"], r["name"]) in wanted
            and not (r["labels"] or {}).get(IMPLICIT_GROUP_LABEL)}


def _apply_pod_event(cluster: Cluster, event: Any, raw: dict[str, Any] | None, report: SyncReport) -> None:

    key = ("Pod", event.namespace, event.name)
    if event.type == DELETED:
        _apply_plan(cluster, _Plan(), full=False, report=report, delete_pods=[(event.namespace, event.name)])
        _store_problems(cluster, [], clear=[key])
        return
    pod: ObservedPod = event.obj
    groups = _known_groups(cluster, [workload_key(pod)] if pod.pod_group else [])
    plan = _plan([], [pod], _QueueIndex(), _class_ids(), known_groups=groups, raws={key: raw} if raw else None)
    if plan.problems:
        # Not schedulable now: out of the mirror (unless it holds resources, by its row or by what the
        # cluster says now), recorded with the reason.
        if not (_raw_holds_node(raw) or _holding_resources(cluster, {(pod.namespace, pod.name)})):
            _apply_plan(cluster, _Plan(), full=False, report=report, delete_pods=[(pod.namespace, pod.name)])
        _store_problems(cluster, plan.problems)
        return
    # A pod that moved to another workload leaves the old one (its state is recomputed too).
    previous = {(w_ns, w_name) for w_ns, w_name in Pod.objects.filter(
        workload__cluster=cluster, workload__namespace=pod.namespace, name=pod.name).values_list(
        "workload__namespace", "workload__name")}
    waiting = _apply_plan(cluster, plan, full=False, report=report, touched_workloads=previous)
    _drop_empty_implicit(cluster, previous - {workload_key(pod)})
    _store_problems(cluster, waiting, clear=[] if waiting else [key])


def apply_events(events: Sequence[Any], cluster: Cluster, gateway: Any = None) -> None:
    """Apply watch events in order, with the same result as `apply_event` on each in turn.

    A run of events that add or change readable pods and PodGroups, or delete pods, is written
    together: one plan and one transaction for the run, so the watcher keeps up with thousands of new
    (or evicted) pods a second.
    A pod's several events in a run (its ADDED, the pod-grouper's mark, its bind, Running) become
    its last one when that is provably the same result (`_coalesced`); otherwise the run ends at
    an object's second event, as it does at a PodGroup's. Any other event is applied on its own,
    between the runs, so the order of what depends on what is kept. Proven equal to the
    event-by-event path by a property test."""
    run: list[Any] = []
    groups: set[tuple[str, str]] = set()
    for event in events:
        if not _in_runs(event):
            _apply_runs(cluster, run, gateway)
            run, groups = [], set()
            apply_event(event, cluster, gateway)
            continue
        if event.kind == "PodGroup":
            if (event.namespace, event.name) in groups:
                _apply_runs(cluster, run, gateway)
                run, groups = [], set()
            groups.add((event.namespace, event.name))
        run.append(event)
    _apply_runs(cluster, run, gateway)


def _in_runs(event: Any) -> bool:
    """Readable pods and PodGroups added or changed, and pods deleted, are written in runs."""
    if event.kind == "Pod" and event.type == DELETED:
        return True
    return event.kind in ("Pod", "PodGroup") and event.type in (ADDED, MODIFIED) and event.problem is None


def _apply_runs(cluster: Cluster, events: list[Any], gateway: Any) -> None:
    """Write a run whose pods may come more than once: coalesced into one run when `_apply_run`
    proves it the same, else cut at each object's second event (each part with one event per object).
    Either way the run is first cut before a pod's event that follows the PodGroup its deferred row
    waits for (`_deferred_cut`)."""
    while events:
        cut = _deferred_cut(cluster, events)
        part, events = events[:cut], events[cut:]
        keys = [(e.kind, e.namespace, e.name) for e in part]
        if len(set(keys)) == len(keys):
            _apply_run(cluster, part, gateway)
            continue
        if _apply_run(cluster, part, gateway, repeated=True):
            continue
        run: dict[tuple[str, str, str], Any] = {}
        for key, event in zip(keys, part, strict=True):
            if key in run:
                # An object's second event in a run: what the first one leaves decides how the second is
                # applied (a row that holds resources is kept through a problem), so the run ends here.
                _apply_runs(cluster, list(run.values()), gateway)
                run = {}
            run[key] = event
        _apply_runs(cluster, list(run.values()), gateway)


def _deferred_cut(cluster: Cluster, events: list[Any]) -> int:
    """Where a run must end so that it gives what its events give one by one: at the first PodGroup
    whose coming, one by one, applies a pod that waited for it before a later event of that pod.

    - A pod deferred earlier (its row) waits for a PodGroup of the run, and an event of that pod
      follows the PodGroup: one by one, the PodGroup applies the deferred pod as it was (and stamps
      what it says: a start) before the newer event; a run retries the deferred rows after its pods,
      when the newer event has made them stale. The run ends before that pod event.
    - Such a pod's event comes before the PodGroup: one by one, the PodGroup retries what that event
      left (another PodGroup, a problem); a run may apply an event with a problem after its
      PodGroups' retries. The run ends before that PodGroup.
    - A pod event names a PodGroup the mirror does not know that comes later in the run, and the
      pod's row carries a start or an end and holds nothing: one by one, the pod waits (its row and the
      stamps with it are deleted) and comes back fresh with the PodGroup; a run would keep the row.
      The run ends before that PodGroup.

    ``len(events)`` when there is none (no query for a run without PodGroups, at most three else)."""
    groups = {(e.namespace, e.name) for e in events if e.kind == "PodGroup"}
    if not groups:
        return len(events)
    rows = UnreadableObject.objects.filter(cluster=cluster, deferred=True, raw__isnull=False, kind="Pod",
                                           namespace__in={ns for ns, _ in groups}).only("namespace", "name", "raw")
    waiting = {(r.namespace, r.name): (r.namespace, _annotation(r.raw, POD_GROUP_ANNOTATION)) for r in rows}
    seen: set[tuple[str, str]] = set()
    awaited: set[tuple[str, str]] = set()  # PodGroups a deferred pod waits for, that pod's event come
    early: dict[tuple[str, str], set[tuple[str, str]]] = {}  # PodGroup → the pods naming it before it comes
    cut = len(events)
    for i, e in enumerate(events):
        wanted = waiting.get((e.namespace, e.name)) if e.kind == "Pod" else None
        if e.kind == "PodGroup":
            if (e.namespace, e.name) in awaited:
                cut = i
                break
            seen.add((e.namespace, e.name))
        elif wanted in seen:
            cut = i
            break
        elif wanted is not None:
            awaited.add(wanted)
        elif e.type != DELETED and e.obj is not None and e.obj.pod_group \
                and (e.namespace, e.obj.pod_group) in groups - seen and not _raw_holds_node(e.raw):
            early.setdefault((e.namespace, e.obj.pod_group), set()).add((e.namespace, e.name))
    if not early:
        return cut
    unknown = set(early) - set(_known_groups(cluster, early))
    pods = {p for g in unknown for p in early[g]}
    if not pods:
        return cut
    stamped = {(ns, name) for ns, name in Pod.objects.filter(
        workload__cluster=cluster, name__in={n for _, n in pods}).exclude(state__in=_HOLDING).exclude(
        started_at__isnull=True, finished_at__isnull=True).values_list("workload__namespace", "name")}
    for i, e in enumerate(events[:cut]):
        if e.kind == "PodGroup" and (e.namespace, e.name) in unknown and early[(e.namespace, e.name)] & stamped:
            return i
    return cut


def _content(event: Any) -> Any:
    """What the mirror takes from a readable PodGroup or Node ADDED or MODIFIED event: all it says but
    its resourceVersion, and for a PodGroup KAI's stamps (`merge_stamps` reads those only from a
    PodGroup first seen) and what kaiweb writes on it (``said``: its own writes, which the write-back
    keeps on the row as it writes them). None for anything else (a DELETED, an unreadable object, a
    SYNCED)."""
    if event.type not in (ADDED, MODIFIED) or event.problem is not None or event.obj is None:
        return None
    if event.kind == "Node":
        return dataclasses.replace(event.obj, resource_version="")
    return dataclasses.replace(event.obj, resource_version="", last_start_at=None, last_eviction_at=None,
                               stale_since=None, notes=(), said={})


class EventWriter(threading.Thread):
    """Writes the watch's events to the mirror on a thread of its own, in the order they were handed
    over, as many as are waiting at once (`apply_events`, up to ``batch``): the watch threads only
    hand events over, so a burst of thousands of new pods costs a few transactions, not one each.

    A batch whose write fails is written again after a pause, so no event is lost or reordered;
    the queue is bounded (``limit``), so a slow database holds the watch back instead of memory.
    ``flush`` waits until everything handed over is written (the watcher's ``--once`` and tests)."""

    def __init__(self, cluster: Cluster, gateway: Any = None, *, batch: int = 1000, limit: int = 100_000,
                 pause: float = 1.0, before: Any = None) -> None:
        super().__init__(name="mirror-writer", daemon=True)
        self.cluster, self.gateway, self.batch, self.pause = cluster, gateway, batch, pause
        self.before = before  # called before each write (the command refreshes its connection)
        self.events: queue.Queue[Any] = queue.Queue(maxsize=limit)
        self.stopping = threading.Event()
        self.written = 0
        self.batches = 0
        self.failures = 0
        self.echoes = 0
        self._last: dict[tuple[str, str, str], Any] = {}  # what the last PodGroup or Node event handed over said

    def put(self, event: Any) -> bool:
        """Hand an event over; False when it was dropped as an echo (`_content`): a PodGroup or Node
        MODIFIED that says nothing new to the mirror since the last one of that object handed over.
        Our own writes to PodGroups (status, stamps) come back as such, thousands after a fill of
        thousands, and so does every node's status heartbeat (2,000 nodes: about a hundred a second).
        A node's ``observed_at`` is therefore when the mirror last took a change of it; the watcher's
        heartbeat says the mirror is current."""
        if event.kind in ("PodGroup", "Node"):
            key = (event.kind, event.namespace, event.name)
            content = _content(event)
            if event.type == MODIFIED and content is not None and self._last.get(key) == content:
                self.echoes += 1
                return False
            if content is None:
                self._last.pop(key, None)
            else:
                self._last[key] = content
        self.events.put(event)
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event handed over is written; False if ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.events.all_tasks_done:
            while self.events.unfinished_tasks:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self.events.all_tasks_done.wait(left)
        return True

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        while not (self.stopping.is_set() and self.events.empty()):
            try:
                first = self.events.get(timeout=0.2)
            except queue.Empty:
                continue
            batch = [first]
            while len(batch) < self.batch:
                try:
                    batch.append(self.events.get_nowait())
                except queue.Empty:
                    break
            self._write(batch)
            for _ in batch:
                self.events.task_done()

    def _write(self, batch: list[Any]) -> None:
        while True:
            try:
                if self.before is not None:
                    self.before()
                apply_events(batch, self.cluster, self.gateway)
                self.written += len(batch)
                self.batches += 1
                return
            except Exception:  # noqa: BLE001 - the database may be away for a moment: the same batch again
                self.failures += 1
                log.exception("mirror: %d watch events not written; trying again in %.1fs", len(batch), self.pause)
                if self.stopping.wait(self.pause) and self.failures > 3:
                    log.error("mirror: stopping with %d events not written", len(batch))
                    return


def _apply_run(cluster: Cluster, events: list[Any], gateway: Any, *, repeated: bool = False) -> bool:
    """Readable pods and PodGroups, and pods deleted, one event each, in one transaction. What has a problem (a queue or
    PodGroup unknown, a PodGroup not scheduled) goes through `apply_event` on its own afterwards, in
    the order of the events; pods deferred until one of the run's PodGroups came are tried again, as
    `apply_event` does for a PodGroup.

    ``repeated``: a pod may have several events in ``events``; they are coalesced into its last one
    (`_coalesced`, under the locks of the pods' rows) or, when that is not provably the same result
    as applying them in turn, nothing is written and False is returned."""
    with transaction.atomic():
        queues, classes = _QueueIndex(), _class_ids()
        if repeated:
            coalesced = _coalesced(cluster, events, queues, classes)
            if coalesced is None:
                return False
            events = coalesced
        gone = [(e.namespace, e.name) for e in events if e.kind == "Pod" and e.type == DELETED]
        events = [e for e in events if e.type != DELETED]
        pods: list[ObservedPod] = [e.obj for e in events if e.kind == "Pod"]
        groups: list[ObservedPodGroup] = [e.obj for e in events if e.kind == "PodGroup"]
        raws = {(e.kind, e.namespace, e.name): dict(e.raw) for e in events if e.raw}
        report = SyncReport()
        in_run = {(g.namespace, g.name) for g in groups}
        known = _known_groups(cluster, {workload_key(p) for p in pods if p.pod_group} - in_run)
        plan = _plan(groups, pods, queues, classes, known_groups=known, raws=raws)
        troubled = {(p.kind, p.namespace, p.name) for p in plan.problems}
        alone = [e for e in events if (e.kind, e.namespace, e.name) in troubled]
        names = {p.name for p in pods}
        previous: dict[tuple[str, str], set[tuple[str, str]]] = {}
        for ns, name, w_ns, w_name in Pod.objects.filter(workload__cluster=cluster, name__in=names).values_list(
                "workload__namespace", "name", "workload__namespace", "workload__name"):
            if (ns, name) in plan.pods:
                previous.setdefault((ns, name), set()).add((w_ns, w_name))
        touched = set().union(*previous.values()) if previous else set()
        waiting = _apply_plan(cluster, plan, full=False, report=report, touched_workloads=touched, delete_pods=gone)
        moved = {w for key, ws in previous.items() for w in ws if w != plan.pods[key][0]}
        _drop_empty_implicit(cluster, moved)
        left_out = {(w.namespace, w.name) for w in waiting}
        applied_groups = [g for g in groups if ("PodGroup", g.namespace, g.name) not in troubled]
        merge_stamps(cluster, [e.obj for e in events if e.kind == "PodGroup" and e.type == ADDED
                               and ("PodGroup", e.namespace, e.name) not in troubled])
        _store_problems(cluster, waiting, clear=[*(("Pod", ns, n) for ns, n in plan.pods if (ns, n) not in left_out),
                                                 *(("Pod", ns, n) for ns, n in gone),
                                                 *(("PodGroup", g.namespace, g.name) for g in applied_groups)])
        # The pods deferred until one of these PodGroups came, read once for them all (what is applied
        # for one PodGroup changes only its own pods' rows).
        deferred = list(UnreadableObject.objects.filter(
            cluster=cluster, deferred=True, raw__isnull=False, kind="Pod",
            namespace__in={g.namespace for g in applied_groups})) if applied_groups else []
        for g in applied_groups:
            _retry_deferred(cluster, lambda p, g=g: p.kind == "Pod" and p.namespace == g.namespace
                            and _annotation(p.raw, POD_GROUP_ANNOTATION) == g.name, rows=deferred)
    for event in alone:
        apply_event(event, cluster, gateway)
    return True


def _coalesced(cluster: Cluster, events: list[Any], queues: _QueueIndex, classes: Mapping[str, int]
               ) -> list[Any] | None:
    """The run with each pod's several events replaced by its last one, or None when that might not
    give what applying them in turn gives. Called in the run's transaction: the rows of the run's pods
    are locked first (in pk order, as `_apply_plan` locks them), so what they say holds until the commit.

    A pod's events e1..en coalesce when each, applied in turn, is written as it is and leaves nothing
    the next one does not overwrite:

    - one incarnation: the same uid, numeric resourceVersions that grow, and a row (if any) of that
      uid older than e1 that neither holds a node nor is released or finished; so no event is older
      than what the one before left (`older_than_row`) and the row's stamps are not set;
    - none has a problem (its queue, its PodGroup are there) and the node of each, if any, is known:
      each is written, none kept aside or deleted through a problem;
    - e1..e(n-1) are pending or hold resources without having finished; once one names a node, all
      later ones name the same node and the last one holds it (the started_at it stamps, en stamps);
    - e1..e(n-1) are in en's workload or in their own implicit one (which en's move would empty and drop).

    A pod deleted at the end of its events (an evicted pod: marked for deletion, then gone) coalesces
    into its DELETED when each earlier event would leave its row as it is for the workload: a row
    of that uid older than e1, and each earlier event readable, without a problem, in the row's
    workload, on the row's node, in the row's state or, like the row, in one the workload's state
    counts as running (allocated or being released). The earlier writes then change nothing that
    outlives the row, and the workload's state is the same throughout until the pod is gone."""
    by_key: dict[tuple[str, str, str], list[Any]] = {}
    for e in events:
        by_key.setdefault((e.kind, e.namespace, e.name), []).append(e)
    if any(k[0] != "Pod" for k, es in by_key.items() if len(es) > 1):
        return None
    ended = {k for k, es in by_key.items() if len(es) > 1 and es[-1].type == DELETED}
    if any(e.type == DELETED for k, es in by_key.items() if len(es) > 1 and k not in ended for e in es):
        return None
    repeated = {k: [e.obj for e in es] for k, es in by_key.items() if len(es) > 1 and k not in ended}
    rows = {(p.workload.namespace, p.name): p for p in lock_pods(Pod.objects.filter(
        workload__cluster=cluster, name__in={e.name for e in events if e.kind == "Pod"}).select_related(
        "workload"))}
    if ended and not _deletion_coalesces(cluster, [by_key[k] for k in ended], rows, events, queues, classes):
        return None
    groups = [e.obj for e in events if e.kind == "PodGroup"]
    in_run = {(g.namespace, g.name) for g in groups}
    # PodGroup workloads in the mirror under the pods' workload keys, and under their implicit ones
    # (a PodGroup of that name would be written over by an implicit workload, not only dropped).
    known = _known_groups(cluster, {k for ps in repeated.values() for p in ps
                                    for k in (workload_key(p), (p.namespace, implicit_group_name(p)))})
    node_ids = dict(Node.objects.filter(cluster=cluster, name__in={p.node for ps in repeated.values()
                                                                   for p in ps if p.node}).values_list("name", "pk"))
    steady = (PodState.PENDING, *ALLOCATED_POD_STATES)
    for (_, ns, name), pods in repeated.items():
        last, earlier = pods[-1], pods[:-1]
        versions = [_version(p.resource_version) for p in pods]
        if not last.uid or any(p.uid != last.uid for p in pods) or any(v is None for v in versions) \
                or any(a >= b for a, b in zip(versions, versions[1:], strict=False)):
            return None
        if any(p.state not in steady for p in earlier) or any(p.node and p.node not in node_ids for p in pods):
            return None
        if any(p.pod_group and workload_key(p) != workload_key(last) for p in earlier) \
                or any(not p.pod_group and (p.namespace, implicit_group_name(p)) in known for p in earlier):
            return None
        if any(_plan(groups, [p], queues, classes, known_groups=known).problems for p in pods):
            return None
        row = rows.get((ns, name))
        holds = row is not None and row.node_id is not None
        if row is not None:
            old = _version(row.resource_version)
            if row.uid != last.uid or old is None or old >= versions[0] or row.state not in steady:
                return None
            # One of the events may wait for a PodGroup of the run (deferred, then applied again when
            # it comes): the row is deleted meanwhile unless it holds a node, and its stamps with it.
            may_wait = any(p.pod_group and workload_key(p) in in_run and workload_key(p) not in known for p in pods)
            if may_wait and (row.started_at is not None or row.finished_at is not None):
                return None
        # What holds (a node, an allocated state) before the last event, the last one holds too: no
        # event is older than its predecessor's row (a bound pod never loses its node), and the
        # started_at an earlier one stamps, the last one stamps.
        first = -1 if holds else next((i for i, p in enumerate(pods) if p.node), None)
        if first is not None:
            if not last.node or any(p.node != last.node for p in pods[max(first, 0):]) \
                    or (holds and row.node_id != node_ids.get(last.node)):
                return None
        if (holds or first is not None or any(p.state in ALLOCATED_POD_STATES for p in earlier)) \
                and last.state not in ALLOCATED_POD_STATES:
            return None
    return list({(e.kind, e.namespace, e.name): e for e in events}.values())


def _deletion_coalesces(cluster: Cluster, histories: list[list[Any]], rows: Mapping[tuple[str, str], Pod],
                        events: list[Any], queues: _QueueIndex, classes: Mapping[str, int]) -> bool:
    """Whether each pod's events, ending with its DELETED, may be applied as that DELETED alone (the
    rule in `_coalesced`; ``rows`` are the run's pod rows, locked)."""
    groups = [e.obj for e in events if e.kind == "PodGroup" and e.type != DELETED]
    earlier = [e.obj for history in histories for e in history[:-1]]
    if any(p is None for p in earlier):
        return False
    known = _known_groups(cluster, {workload_key(p) for p in earlier})
    node_names = dict(Node.objects.filter(cluster=cluster, pk__in={r.node_id for r in rows.values() if r.node_id})
                      .values_list("pk", "name"))
    for history in histories:
        ns, name = history[-1].namespace, history[-1].name
        row = rows.get((ns, name))
        pods = [e.obj for e in history[:-1]]
        if row is None or any(e.type == DELETED for e in history[:-1]):
            return False
        versions = [_version(row.resource_version), *(_version(p.resource_version) for p in pods)]
        if any(v is None for v in versions) or any(a >= b for a, b in zip(versions, versions[1:], strict=False)):
            return False
        here = (row.workload.namespace, row.workload.name)
        node = node_names.get(row.node_id) if row.node_id else None
        for p in pods:
            same_state = p.state == row.state or (p.state in _COUNTED and row.state in _COUNTED)
            if p.uid != row.uid or workload_key(p) != here or not same_state or (p.node or None) != node:
                return False
            if _plan(groups, [p], queues, classes, known_groups=known).problems:
                return False
    return True


def _raw_holds_node(raw: Mapping[str, Any] | None) -> bool:
    """Whether the cluster says this pod is on a node and not finished (it uses the node's resources)."""
    return bool(((raw or {}).get("spec") or {}).get("nodeName")) and \
        ((raw or {}).get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _drop_empty_implicit(cluster: Cluster, keys: Iterable[tuple[str, str]]) -> None:
    wanted = set(keys)
    if not wanted:
        return
    empty = Workload.objects.filter(cluster=cluster, name__in={n for _, n in wanted}, pods__isnull=True,
                                    labels__has_key=IMPLICIT_GROUP_LABEL).values_list("pk", "namespace", "name")
    doomed = [pk for pk, ns, name in empty if (ns, name) in wanted]
    if doomed:
        Workload.objects.filter(pk__in=doomed).delete()


def _apply_group_event(cluster: Cluster, event: Any, raw: dict[str, Any] | None, report: SyncReport) -> None:

    key = ("PodGroup", event.namespace, event.name)
    if event.type == DELETED:
        _apply_plan(cluster, _Plan(), full=False, report=report, delete_workloads=[(event.namespace, event.name)])
        _store_problems(cluster, [], clear=[key])
        return
    group: ObservedPodGroup = event.obj
    plan = _plan([group], [], _QueueIndex(), _class_ids(), raws={key: raw} if raw else None)
    if plan.problems:
        _apply_plan(cluster, _Plan(), full=False, report=report, delete_workloads=[(group.namespace, group.name)])
        _store_problems(cluster, plan.problems)
        return
    _apply_plan(cluster, plan, full=False, report=report)
    _store_problems(cluster, [], clear=[key])
    _retry_deferred(cluster, lambda p: p.kind == "Pod" and p.namespace == group.namespace
                    and _annotation(p.raw, POD_GROUP_ANNOTATION) == group.name)


def _apply_queue_event(cluster: Cluster, event: Any, gateway: Any) -> None:

    db = _database_specs()
    name = event.name
    if event.type == DELETED:
        if name in db and gateway is not None:
            # A queue the database still has is put back (`kaiweb.cluster.queue_sync`'s rule).
            try:
                gateway.upsert_queue(db[name])
                log.warning("Queue %s was deleted in the cluster but exists in kaiweb: recreated", name)
            except ClusterError as exc:
                log.warning("Queue %s: could not be recreated in the cluster: %s", name, exc)
        _store_problems(cluster, [], clear=[("Queue", "", name)])
        return
    if gateway is not None:
        # One rule for who wins (`kaiweb.cluster.queue_sync`): a changed Queue re-runs the queue sync.
        _messages, problems = sync_queues(gateway, cluster)
        _store_problems(cluster, [p for p in problems if p.kind == "Queue"], replace_kinds=("Queue",))
        _retry_deferred(cluster, lambda p: p.kind in ("Pod", "PodGroup"))
        return
    observed: ObservedQueue = event.obj
    if name not in db:
        imported, refused = import_queues([observed.spec])
        _store_problems(cluster, refused, clear=[("Queue", "", name)] if imported else [])
        if imported:
            log.info("Queue %s exists only in the cluster: imported into kaiweb", name)
            _retry_deferred(cluster, lambda p: p.kind in ("Pod", "PodGroup"))
        return
    # Without a gateway nothing can be written to the cluster: the next sync settles the difference.
    _store_problems(cluster, [], clear=[("Queue", "", name)])


def _annotation(raw: Mapping[str, Any] | None, key: str) -> str | None:
    meta = (raw or {}).get("metadata") or {}
    return (meta.get("annotations") or {}).get(key)


def _retry_deferred(cluster: Cluster, wanted: Any, rows: Iterable[UnreadableObject] | None = None) -> None:
    """Apply again the deferred objects kept from the watcher that ``wanted`` selects
    (PodGroups first, so their pods find them); ``rows``: those rows read already."""

    if rows is None:
        rows = UnreadableObject.objects.filter(cluster=cluster, deferred=True, raw__isnull=False)
    rows = [r for r in rows if wanted(r)]
    for row in sorted(rows, key=lambda r: (r.kind != "PodGroup", r.namespace, r.name)):
        parse = parse_pod_group if row.kind == "PodGroup" else parse_pod
        parsed = parse(row.raw)
        if isinstance(parsed, Unreadable):
            continue
        # A PodGroup deferred is not in the mirror: applied now, it is seen for the first time (its
        # stamps are taken, as from one the watcher sees added).
        event = WatchEvent(row.kind, ADDED if row.kind == "PodGroup" else MODIFIED, row.namespace, row.name,
                           str(((row.raw or {}).get("metadata") or {}).get("resourceVersion", "")), parsed, None,
                           row.raw or {})
        apply_event(event, cluster)


def kubernetes_cluster(name: str | None = None) -> Cluster:
    """The Cluster row a Kubernetes cluster is mirrored into.

    By name (created if missing); without a name, the only enabled Kubernetes cluster, or a new
    one called ``kubernetes`` with a default shard (all nodes) when there is none."""
    from kaiweb.cluster.choices import BackendKind
    from kaiweb.cluster.models import SchedulingShard

    if name:
        cluster, _ = Cluster.objects.get_or_create(name=name, defaults={"backend": BackendKind.KUBERNETES})
        if cluster.backend != BackendKind.KUBERNETES:
            raise ValueError(f"cluster: {name!r} is a {cluster.backend} cluster; the mirror needs a kubernetes one")
    else:
        found = list(Cluster.objects.filter(backend=BackendKind.KUBERNETES, enabled=True).order_by("name")[:2])
        if len(found) > 1:
            raise ValueError("cluster: several Kubernetes clusters exist; name one ("
                             + ", ".join(Cluster.objects.filter(backend=BackendKind.KUBERNETES)
                                         .values_list("name", flat=True)) + ")")
        if found:
            cluster = found[0]
        else:
            cluster = Cluster.objects.create(name="kubernetes", backend=BackendKind.KUBERNETES,
                                             description="Mirrored from the Kubernetes API server.")
    SchedulingShard.objects.get_or_create(cluster=cluster, name="default", defaults={"partition_label_value": ""})
    return cluster
