"""The pod-group assigner: each workload of a project charged to the project and to one node pool.

For every PodGroup in a project's namespace (the namespace labelled ``kai/project``, or the project's
namespace by name) this decides, by KRM's rules (`rules.candidate_pools`, `rules.choose_pool`,
`rules.next_pool`), which node pool it goes to and which of the project's queues it is charged to,
and writes both on it: the pool label (``kai.scheduler/node-pool``, taken away for the default pool;
`UNASSIGNED_POOL` while no candidate accepts it, so no shard takes it), the queue label and
``spec.queue``. A pool in which the project has no queue is no candidate (it would be charged nowhere).

An assigned PodGroup carries the queue label equal to ``spec.queue``, and that queue is the project's
queue of the pool its pool label names; it stays where it is until the shard of its pool marks it
``UnschedulableOnNodePool`` (the status writer, after a cycle). Then it moves to the next accepting
candidate, round-robin; going past the last, it is marked unschedulable (an event says so) and goes
on from the first. A workload with any pod bound is never moved.

Where it runs: at the start of every scheduling cycle of every shard, after the observe step and before
the snapshot (`kaiweb.scheduling.cycle`). The pod-grouper makes a project's PodGroup with `UNASSIGNED_POOL`
already (KRM's PodGroup admission, `kaiweb.cluster.podgrouper.core`), so whether the watcher or the cycle
saw it first, no shard takes it before it is assigned, and since a workload's pool is one label value, no
two shards ever take the same workload. On the Kubernetes path it picks what to look at from the mirror
(no listing), reads those PodGroups again and writes them through the gateway and the mirror's rows at
once; on the simulated path (no PodGroup objects) the mirror's rows are the workloads. The decision itself
(`decide`) is pure.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q
from django.db.models.fields.json import KeyTextTransform
from django.db.models.lookups import Exact

from kaiweb.cluster.backends.types import NODE_POOL_ASSIGNMENT_ANNOTATION as ASSIGNMENT_ANNOTATION
from kaiweb.cluster.backends.types import POD_GROUP_ANNOTATION, UNSCHEDULABLE_ON_EVERY_POOL
from kaiweb.cluster.errors import ClusterError
from kaiweb.cluster.models import Cluster, Node
from kaiweb.org import rules
from kaiweb.org.choices import (
    DEFAULT_POOL,
    NAMESPACE_PROJECT_LABEL,
    NODE_POOL_LABEL,
    NODE_POOLS_ANNOTATION,
    UNASSIGNED_POOL,
)
from kaiweb.org.models import NodePool, OwnerQueue, Project
from kaiweb.queues.models import Queue
from kaiweb.workloads.choices import ACTIVE_WORKLOAD_STATES, ALLOCATED_POD_STATES
from kaiweb.workloads.models import Pod, Workload

log = logging.getLogger(__name__)

# The PodGroup label naming the queue a workload is charged to (KRM writes it beside spec.queue).
QUEUE_LABEL = "kai.scheduler/queue"
CONDITION_TYPE = "UnschedulableOnNodePool"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
# PodGroups assigned or moved in one pass at most, and PodGroups read (each with its first pod); the rest
# in the next cycles.
MAX_WRITES_PER_PASS = 500
MAX_READS_PER_PASS = 1000
# Pods of a held-back PodGroup read to find its first one (the mirror keeps no copy of them).
MAX_HELD_POD_READS = 16


# ------------------------------------------------------------------------------------------ plain values


@dataclass(frozen=True, slots=True)
class ProjectView:
    """What the assigner needs of a project: its default pools and its queue in each pool."""

    name: str
    default_pools: tuple[str, ...] = ()
    queues: Mapping[str, str] = field(default_factory=dict)  # pool → queue name


@dataclass(frozen=True, slots=True)
class OrgView:
    """The node pools (label pairs and phases), which shard schedules which pool, and the projects."""

    pools: tuple[rules.PoolSpec, ...] = ()
    phases: Mapping[str, str] = field(default_factory=dict)
    shard_pool: Mapping[str, str] = field(default_factory=dict)  # shard name → pool name
    projects: Mapping[str, ProjectView] = field(default_factory=dict)  # by project name
    namespaces: Mapping[str, str] = field(default_factory=dict)  # namespace → project name


@dataclass(frozen=True, slots=True)
class GroupFacts:
    """One PodGroup as the assigner reads it: its labels and queue, its pods' request for pools, whether
    any pod is bound, and the node pools whose shards marked it unschedulable (its condition)."""

    labels: Mapping[str, str]
    queue: str
    annotation: str = ""
    affinity_terms: tuple[Mapping[str, Any], ...] = ()
    bound: bool = False
    unschedulable_on: str | None = None  # the shard name of an UnschedulableOnNodePool condition
    running_pool: str | None = None  # the pool of the node a bound pod is on


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the assigner wants on a PodGroup: its pool label (None: taken away, the default pool) and its
    queue, and why. ``changed`` is False when the PodGroup already says it."""

    pool_label: str | None
    queue: str
    changed: bool
    message: str = ""
    moved: bool = False
    wrapped: bool = False
    candidates: tuple[str, ...] = ()
    source: str = ""


def is_assigned(facts: GroupFacts, project: ProjectView) -> bool:
    """Assigned: the queue label says spec.queue, and that is the project's queue of the labelled pool."""
    pool = rules.labelled_pool(facts.labels)
    return (pool != UNASSIGNED_POOL and facts.labels.get(QUEUE_LABEL) == facts.queue
            and project.queues.get(pool) == facts.queue)


def decide(facts: GroupFacts, project: ProjectView, org: OrgView) -> Assignment:
    """Where the PodGroup goes now (pure: the same facts and view give the same answer)."""
    assigned = is_assigned(facts, project)
    own_label = facts.labels.get(NODE_POOL_LABEL)
    tooling_pool = None if assigned or own_label in (None, UNASSIGNED_POOL) else own_label
    asked, source = rules.candidate_pools(annotation=facts.annotation, affinity_terms=facts.affinity_terms,
                                          podgroup_pool=tooling_pool, default_pools=project.default_pools,
                                          pools=org.pools)
    candidates = rules.charged_candidates(asked, project.queues)
    skipped = [p for p in asked if p not in candidates]
    if assigned:
        pool = rules.labelled_pool(facts.labels)
        failed_here = facts.unschedulable_on is not None and org.shard_pool.get(facts.unschedulable_on) == pool
        if facts.bound or not failed_here or len(candidates) <= 1 or pool not in candidates:
            return Assignment(_label(pool), facts.queue, False, candidates=tuple(candidates), source=source)
        chosen, wrapped = rules.next_pool(candidates, pool, org.phases)
        if chosen is None or chosen == pool:
            return Assignment(_label(pool), facts.queue, False, candidates=tuple(candidates), source=source)
        message = (f"node pool {pool} cannot schedule it; moved to {chosen}"
                   + (f" ({UNSCHEDULABLE_ON_EVERY_POOL}: {' '.join(candidates)}; trying them again)"
                      if wrapped else ""))
        return Assignment(_label(chosen), project.queues[chosen], True, message, moved=True, wrapped=wrapped,
                          candidates=tuple(candidates), source=source)
    if facts.bound and facts.running_pool in project.queues:
        # Already running (bound before any assignment): charged where it runs, never moved away.
        chosen: str | None = facts.running_pool
        source = "the node it runs on"
    else:
        chosen = rules.choose_pool(candidates, org.phases)
    if chosen is None:
        why = [f"{p}: {org.phases.get(p, 'unknown')}" for p in candidates]
        why += [f"{p}: no queue of project {project.name}" for p in skipped]
        message = (f"waits unassigned: no candidate node pool ({source}) accepts it"
                   + (f" ({'; '.join(why)})" if why else ""))
        changed = own_label != UNASSIGNED_POOL or QUEUE_LABEL in facts.labels
        return Assignment(UNASSIGNED_POOL, facts.queue, changed, message, candidates=tuple(candidates),
                          source=source)
    queue = project.queues[chosen]
    changed = not (own_label == _label(chosen) and facts.queue == queue and facts.labels.get(QUEUE_LABEL) == queue)
    return Assignment(_label(chosen), queue, changed, f"assigned to node pool {chosen} ({source}), queue {queue}",
                      candidates=tuple(candidates), source=source)


def _label(pool: str) -> str | None:
    return None if pool == DEFAULT_POOL else pool


def affinity_terms_of(affinity: Mapping[str, Any] | None,
                      node_selector: Mapping[str, Any] | None = None) -> tuple[Mapping[str, Any], ...]:
    """The required node affinity terms of a pod's ``spec.affinity`` (or a Pod row's constraints), and its
    ``nodeSelector`` as one more term of ``In`` expressions: both say which nodes the pod may land on, so
    both point at the pools whose label pair they name."""
    node = (affinity or {}).get("nodeAffinity") or {}
    required = node.get(REQUIRED) or {}
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    found = tuple(t for t in terms or () if isinstance(t, Mapping))
    if isinstance(node_selector, Mapping) and node_selector:
        found += ({"matchExpressions": [{"key": str(k), "operator": "In", "values": [str(v)]}
                                        for k, v in sorted(node_selector.items())]},)
    return found


def unschedulable_shard(conditions: Iterable[Any]) -> str | None:
    """The shard (``nodePool``) of an UnschedulableOnNodePool condition, if the PodGroup has one."""
    for cond in conditions or ():
        if isinstance(cond, Mapping) and cond.get("type") == CONDITION_TYPE and cond.get("status", "True") == "True":
            return str(cond.get("nodePool") or "") or None
    return None


# ------------------------------------------------------------------------------------------ reading the org


def org_view(cluster: Cluster) -> OrgView:
    """The org as the assigner sees it, with each pool's phase from its nodes now."""
    from kaiweb.org.services import sync_phases

    if not NodePool.objects.filter(cluster=cluster).exists():
        return OrgView()
    sync_phases(cluster)
    pools = list(NodePool.objects.filter(cluster=cluster).select_related("shard"))
    queues: dict[int, dict[str, str]] = {}
    for project_id, pool, queue in OwnerQueue.objects.filter(
            project__isnull=False, node_pool__cluster=cluster).values_list("project_id", "node_pool__name",
                                                                           "queue__name"):
        queues.setdefault(project_id, {})[pool] = queue
    projects = {}
    namespaces = {}
    for p in Project.objects.all():
        defaults = tuple(str(x) for x in p.default_node_pools or () if isinstance(x, str))
        projects[p.name] = ProjectView(p.name, defaults, queues.get(p.pk, {}))
        namespaces[p.namespace_name] = p.name
    return OrgView(
        pools=tuple(rules.PoolSpec(p.name, p.label_key, p.label_value) for p in pools if not p.is_default),
        phases={p.name: p.phase for p in pools},
        shard_pool={p.shard.name: p.name for p in pools if p.shard is not None},
        projects=projects, namespaces=namespaces)


@dataclass
class AssignReport:
    assigned: int = 0
    moved: int = 0
    waiting: int = 0
    errors: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"assigned": self.assigned, "moved": self.moved, "waiting": self.waiting,
                "errors": self.errors[:20], "messages": self.messages[:20]}


def assign(gateway: Any, cluster: Cluster) -> AssignReport:
    """One pass of the assigner over the cluster's workloads of projects (see the module docstring)."""
    org = org_view(cluster)
    report = AssignReport()
    if not org.projects:
        return report
    if hasattr(gateway, "assign_pod_group") and hasattr(gateway, "get_object"):
        _assign_pod_groups(gateway, cluster, org, report)
    else:
        _assign_rows(cluster, org, report)
    return report


def _project_of(namespace: str, org: OrgView, namespace_labels: Any = None) -> ProjectView | None:
    name = org.namespaces.get(namespace)
    if name is None and namespace_labels is not None:
        name = namespace_labels(namespace).get(NAMESPACE_PROJECT_LABEL)
    return org.projects.get(name) if name else None


def _assign_pod_groups(gateway: Any, cluster: Cluster, org: OrgView, report: AssignReport) -> None:
    """The Kubernetes path. Which PodGroups to look at comes from the mirror, not from a listing (a cycle
    never lists every PodGroup): the workloads of projects that are not assigned yet or whose pool's shard
    marked them unschedulable, and the PodGroups the mirror holds back because their queue does not exist
    (a project without a queue in the default pool). Each is read again, with its first pod, just before
    it is written; at most `MAX_WRITES_PER_PASS` a pass."""
    labels_cache: dict[str, Mapping[str, str]] = {}

    def namespace_labels(namespace: str) -> Mapping[str, str]:
        if namespace not in labels_cache:
            try:
                labels_cache[namespace] = gateway.namespace_labels(namespace)
            except ClusterError:
                labels_cache[namespace] = {}
        return labels_cache[namespace]

    todo: list[tuple[str, str, ProjectView, str | None]] = []  # namespace, PodGroup, project, first pod
    waiting: list[tuple[str, str, ProjectView, str | None]] = []
    rows = (Workload.objects.filter(cluster=cluster, state__in=ACTIVE_WORKLOAD_STATES)
            .filter(Q(namespace__in=list(org.namespaces))
                    | Q(Exact(KeyTextTransform(NODE_POOL_LABEL, "labels"), UNASSIGNED_POOL)))
            .select_related("queue").order_by("namespace", "name"))
    pods: dict[int, list[tuple[str, str, str | None]]] = {}
    for wid, name, state, node in Pod.objects.filter(workload__in=rows).order_by("name").values_list(
            "workload_id", "name", "state", "node__name"):
        pods.setdefault(wid, []).append((name, state, node))
    for w in rows:
        project = _project_of(w.namespace, org, namespace_labels)
        if project is None:
            continue
        said = w.pod_group_said if isinstance(w.pod_group_said, Mapping) else {}
        own = pods.get(w.pk, [])
        bound = any(state in ALLOCATED_POD_STATES for _, state, _ in own)
        facts = GroupFacts(labels=dict(w.labels or {}), queue=w.queue.name, bound=bound,
                           unschedulable_on=unschedulable_shard(said.get("conditions") or ()))
        pool = rules.labelled_pool(facts.labels)
        if is_assigned(facts, project) and (bound or org.shard_pool.get(facts.unschedulable_on or "") != pool):
            continue  # where it belongs: nothing to read
        # Those waiting unassigned are looked at again each pass (a pool may have become ready), after the rest.
        (waiting if pool == UNASSIGNED_POOL else todo).append(
            (w.namespace, w.name, project, own[0][0] if own else None))
    from kaiweb.cluster.models import UnreadableObject

    # (The mirror keeps no copy of a held-back PodGroup: each is read below, as the others are.)
    for namespace, name in UnreadableObject.objects.filter(
            cluster=cluster, kind="PodGroup", deferred=True).order_by("namespace", "name").values_list(
            "namespace", "name"):
        project = _project_of(namespace, org, namespace_labels)
        if project is not None:
            waiting.append((namespace, name, project, None))
    writes = 0
    for namespace, name, project, first_pod in [*todo, *waiting][:MAX_READS_PER_PASS]:
        if writes >= MAX_WRITES_PER_PASS:
            break
        try:
            raw = gateway.get_object("scheduling.run.ai/v2alpha2", "PodGroup", namespace, name)
            if raw is None:
                continue
            pod = gateway.get_object("v1", "Pod", namespace, first_pod) if first_pod else _first_pod(
                gateway, cluster, namespace, name)
        except ClusterError as exc:
            report.errors.append(f"PodGroup {namespace}/{name}: {exc}")
            continue
        pod = pod or {}
        meta = raw.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        facts = GroupFacts(
            labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            queue=str((raw.get("spec") or {}).get("queue") or ""),
            annotation=str(((pod.get("metadata") or {}).get("annotations") or {}).get(NODE_POOLS_ANNOTATION, "")),
            affinity_terms=affinity_terms_of((pod.get("spec") or {}).get("affinity"),
                                             (pod.get("spec") or {}).get("nodeSelector")),
            bound=bool(node), running_pool=_node_pool(cluster, str(node)) if node else None,
            unschedulable_on=unschedulable_shard((raw.get("status") or {}).get("schedulingConditions") or ()))
        want = decide(facts, project, org)
        said = (meta.get("annotations") or {}).get(ASSIGNMENT_ANNOTATION)
        if not want.changed and (not want.message or said == want.message):
            continue
        writes += 1
        waits = want.pool_label == UNASSIGNED_POOL
        labels = {NODE_POOL_LABEL: want.pool_label, QUEUE_LABEL: None if waits else want.queue}
        try:
            if not gateway.assign_pod_group(namespace, name, str(meta.get("uid", "")), labels=labels,
                                            annotations={ASSIGNMENT_ANNOTATION: want.message}, queue=want.queue):
                continue
            if want.moved or waits:
                ref = {"apiVersion": raw.get("apiVersion", "scheduling.run.ai/v2alpha2"), "kind": "PodGroup",
                       "namespace": namespace, "name": name, "uid": str(meta.get("uid", ""))}
                reason = "Unschedulable" if want.wrapped or waits else "NodePoolChanged"
                gateway.object_event(ref, "Warning" if reason == "Unschedulable" else "Normal", reason, want.message)
        except ClusterError as exc:
            report.errors.append(f"PodGroup {namespace}/{name}: {exc}")
            continue
        _count(report, want, f"PodGroup {namespace}/{name}")
        _write_row(cluster, namespace, name, facts.labels, want)


def _first_pod(gateway: Any, cluster: Cluster, namespace: str, group: str) -> Mapping[str, Any] | None:
    """The first pod (by name) of a PodGroup the mirror holds back: its pods are held back with it, as
    pods naming a PodGroup that is not scheduled. The mirror keeps no copy of them, so they are read, in
    name order, at most `MAX_HELD_POD_READS` of the namespace's."""
    from kaiweb.cluster.models import UnreadableObject

    held = UnreadableObject.objects.filter(cluster=cluster, kind="Pod", namespace=namespace, deferred=True,
                                           field=f"metadata.annotations[{POD_GROUP_ANNOTATION}]")
    for name, raw in held.order_by("name").values_list("name", "raw")[:MAX_HELD_POD_READS]:
        pod = raw if isinstance(raw, Mapping) else gateway.get_object("v1", "Pod", namespace, name)
        if isinstance(pod, Mapping) and ((pod.get("metadata") or {}).get("annotations") or {}).get(
                POD_GROUP_ANNOTATION) == group:
            return pod
    return None


def _assign_rows(cluster: Cluster, org: OrgView, report: AssignReport) -> None:
    """The simulated path: the workloads are the rows (their labels and queue)."""
    namespaces = list(org.namespaces)
    rows = list(Workload.objects.filter(cluster=cluster, namespace__in=namespaces,
                                        state__in=ACTIVE_WORKLOAD_STATES).select_related("queue")
                .order_by("namespace", "name")[:MAX_WRITES_PER_PASS * 4])
    pods: dict[int, list[tuple[str, Any, str]]] = {}
    running: dict[int, str] = {}
    for wid, name, constraints, state, node in Pod.objects.filter(workload__in=rows).order_by("name").values_list(
            "workload_id", "name", "constraints", "state", "node__name"):
        pods.setdefault(wid, []).append((name, constraints or {}, state))
        if state in ALLOCATED_POD_STATES and node:
            running.setdefault(wid, node)
    writes = 0
    for w in rows:
        project = _project_of(w.namespace, org)
        if project is None:
            continue
        own = pods.get(w.pk, [])
        constraints = own[0][1] if own else {}
        said = w.pod_group_said if isinstance(w.pod_group_said, Mapping) else {}
        labels = {str(k): str(v) for k, v in (w.labels or {}).items()}
        facts = GroupFacts(labels=labels, queue=w.queue.name, annotation=labels.get(NODE_POOLS_ANNOTATION, ""),
                           affinity_terms=affinity_terms_of(constraints.get("affinity"),
                                                            constraints.get("nodeSelector")),
                           bound=w.pk in running,
                           running_pool=_node_pool(cluster, running[w.pk]) if w.pk in running else None,
                           unschedulable_on=unschedulable_shard(said.get("conditions") or ()))
        want = decide(facts, project, org)
        if not want.changed:
            continue
        if writes >= MAX_WRITES_PER_PASS:
            break
        writes += 1
        _count(report, want, f"workload {w.namespace}/{w.name}")
        _write_row(cluster, w.namespace, w.name, labels, want)


def _node_pool(cluster: Cluster, node: str) -> str | None:
    labels = Node.objects.filter(cluster=cluster, name=node).values_list("labels", flat=True).first()
    return None if labels is None else rules.labelled_pool(labels or {})


def _count(report: AssignReport, want: Assignment, what: str) -> None:
    if want.moved:
        report.moved += 1
    elif want.pool_label == UNASSIGNED_POOL:
        report.waiting += 1
    else:
        report.assigned += 1
    report.messages.append(f"{what}: {want.message}")


def _write_row(cluster: Cluster, namespace: str, name: str, labels: Mapping[str, str], want: Assignment) -> None:
    """The mirror's row says what the PodGroup now says, so this very cycle's snapshot sees it."""
    queue_id = Queue.objects.filter(name=want.queue).values_list("pk", flat=True).first()
    new_labels = {k: v for k, v in labels.items() if k not in (NODE_POOL_LABEL, QUEUE_LABEL)}
    if want.pool_label is not None:
        new_labels[NODE_POOL_LABEL] = want.pool_label
    if want.pool_label != UNASSIGNED_POOL:
        new_labels[QUEUE_LABEL] = want.queue
    for row in Workload.objects.filter(cluster=cluster, namespace=namespace, name=name).only(
            "pk", "labels", "queue_id", "pod_group_said"):
        said = dict(row.pod_group_said) if isinstance(row.pod_group_said, Mapping) else {}
        said["annotations"] = {**(said.get("annotations") or {}), ASSIGNMENT_ANNOTATION: want.message}
        row.labels, row.pod_group_said = new_labels, said
        row.queue_id = queue_id if queue_id is not None else row.queue_id
        row.save(update_fields=["labels", "queue_id", "pod_group_said"])
