"""The org layer and the cluster: KAI Resource Management's (KRM) objects imported and exported, and what the
org gives a Kubernetes cluster written to it (`publish`).

* `import_objects`: KRM's NodePools, Departments and Projects (read by `krm.read_all`) into kaiweb through
  the org services, all-or-nothing, so a team moving from KRM keeps its org; `import_from_cluster` takes
  them from the cluster.
* `export_objects`: kaiweb's org as KRM objects (YAML, or `export_to_cluster`), so a team can move back.
* `publish`: for each pool its SchedulingShard, each derived queue's spec (through the Queue sync's one
  rule, `kaiweb.cluster.mirror.sync_queues`) and KRM's labels on it, each project's namespace with its
  label and annotation, the nodes' pool label (held and cordoned while pods of their old pool run), and
  the status of the KRM objects the cluster has. Hand-made queues (no owner) are never touched.

On the simulated backend the database is the cluster and the org services already wrote it: only a
mirrored (Kubernetes) cluster is published to.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from kaiweb.audit.choices import AuditSource
from kaiweb.cluster import mirror
from kaiweb.cluster.errors import ClusterError
from kaiweb.cluster.models import Cluster
from kaiweb.org import krm, rules, services, status
from kaiweb.org.choices import (
    DEFAULT_POOL,
    DEPARTMENT_LABEL,
    MANUAL_OVERRIDE_LABEL,
    NODE_POOL_LABEL,
    NODE_UNSCHEDULABLE_LABEL,
    PROJECT_ID_LABEL,
    PROJECT_LABEL,
    SHARD_POOL_LABEL,
)
from kaiweb.org.models import Department, NodePool, OwnerQueue, Project
from kaiweb.workloads.choices import ALLOCATED_POD_STATES
from kaiweb.workloads.models import Pod

QUEUE_LABELS = (PROJECT_LABEL, PROJECT_ID_LABEL, DEPARTMENT_LABEL, NODE_POOL_LABEL)
# The services' fields → the KRM object's, for errors named as the object names them.
_PATHS = {
    krm.NODEPOOL: {"name": "metadata.name", "label_key": "spec.labelKey", "label_value": "spec.labelValue",
                   "preferred_topology": "spec.preferredNetworkTopologyName", "node_pool": "metadata.name",
                   "gpu_placement": "spec.schedulingShardConfig.placementStrategy.gpu",
                   "cpu_placement": "spec.schedulingShardConfig.placementStrategy.cpu",
                   "preempt_min_runtime": "spec.schedulingShardConfig.minRuntime.preemptMinRuntime",
                   "reclaim_min_runtime": "spec.schedulingShardConfig.minRuntime.reclaimMinRuntime"},
    krm.DEPARTMENT: {"name": "metadata.name", "queues": "spec.queues", "department": "metadata.name"},
    krm.PROJECT: {"name": "metadata.name", "queues": "spec.queues", "department": "spec.parent",
                  "namespace": "spec.namespace", "default_node_pools": "spec.defaultNodePools",
                  "enforce_kai_scheduler": "spec.enforceKaiScheduler", "project": "metadata.name"},
}


# ------------------------------------------------------------------------------------------ import / export


def _project_uids(objects: Iterable[Any]) -> dict[str, uuid.UUID]:
    """Each Project object's uid, so its queues carry KRM's ``kai.resources/project-id`` as before."""
    uids = {}
    for obj in objects:
        if isinstance(obj, Mapping) and obj.get("kind") == krm.PROJECT and isinstance(obj.get("metadata"), Mapping):
            try:
                uids[str(obj["metadata"].get("name"))] = uuid.UUID(str(obj["metadata"].get("uid")))
            except ValueError:
                continue
    return uids


def _import_one(kind: str, data: dict[str, Any], *, actor: services.Actor, source: str) -> str:
    name = data["name"]
    if kind == krm.NODEPOOL:
        cluster = services.org_cluster()
        if name == DEFAULT_POOL:
            services.ensure_default_pool(cluster)
        pool = NodePool.objects.filter(cluster=cluster, name=name).first()
        if pool is None:
            services.create_node_pool(data, actor=actor, source=source)
            return f"NodePool {name}: created"
        services.update_node_pool(pool, data, actor=actor, source=source)
        return f"NodePool {name}: updated"
    if kind == krm.DEPARTMENT:
        department = Department.objects.filter(name=name).first()
        if department is None:
            services.create_department(data, actor=actor, source=source)
            return f"Department {name}: created"
        services.update_department(department, data, actor=actor, source=source)
        return f"Department {name}: updated"
    project = Project.objects.filter(name=name).first()
    if project is None:
        services.create_project(data, actor=actor, source=source)
        return f"Project {name}: created"
    services.update_project(project, data, actor=actor, source=source)
    return f"Project {name}: updated"


@transaction.atomic
def import_objects(objects: Iterable[Any], *, actor: services.Actor = None,
                   source: str = AuditSource.SYSTEM) -> list[str]:
    """KRM's objects into kaiweb's org, all-or-nothing: node pools, then departments, then projects, each
    created or updated through the org services (KRM's admission rules, audited). A bad object raises a
    ValidationError keyed by the object and its field (``Project research: spec.parent``)."""
    objects = list(objects)
    messages = []
    for kind, data in krm.read_all(objects):
        try:
            messages.append(_import_one(kind, data, actor=actor, source=source))
        except ValidationError as exc:
            paths = _PATHS[kind]
            raise ValidationError({f"{kind} {data['name']}: {paths.get(f, f)}": m
                                   for f, m in exc.message_dict.items()}) from exc
    # A project keeps the uid KRM gave it, so its queues' project-id label does not change on the move.
    adopted = False
    for name, uid in sorted(_project_uids(objects).items()):
        if not Project.objects.filter(uid=uid).exists():
            adopted |= bool(Project.objects.filter(name=name).update(uid=uid))
    if adopted:
        services.sync(actor=actor, source=source)
    return messages


def import_from_cluster(gateway: Any, *, actor: services.Actor = None,
                        source: str = AuditSource.SYSTEM) -> list[str]:
    """The cluster's KRM objects into kaiweb (`import_objects`); a kind whose CRD is not served is skipped."""
    objects: list[dict[str, Any]] = []
    skipped = []
    for kind in krm.KINDS:
        found = gateway.list_krm(kind)
        if found is None:
            skipped.append(f"{kind}: the cluster does not serve {krm.KINDS[kind]}.{krm.API_VERSION.split('/')[0]}; "
                           "nothing read")
        else:
            objects.extend(found)
    return skipped + import_objects(objects, actor=actor, source=source)


def _pool_data(pool: NodePool) -> dict[str, Any]:
    data: dict[str, Any] = {"name": pool.name, "label_key": pool.label_key, "label_value": pool.label_value,
                            "preferred_topology": pool.preferred_topology}
    if pool.shard is not None:
        data.update({f: getattr(pool.shard, f) for f in krm.SHARD_CONFIG_FIELDS})
    return data


def export_objects() -> list[dict[str, Any]]:
    """kaiweb's org as KRM objects: node pools, departments, projects, each by name. Each queue entry names
    its queue, so an import of them gives the same queues."""
    cluster = services.org_cluster()
    objects = [krm.nodepool_object(_pool_data(p))
               for p in NodePool.objects.filter(cluster=cluster).select_related("shard").order_by("name")]
    objects += [krm.department_object({"name": d.name, "queues": services.entry_dicts(services.entries_of(d))})
                for d in Department.objects.order_by("name")]
    objects += [krm.project_object({
        "name": p.name, "department": p.department.name if p.department_id else "", "namespace": p.namespace,
        "enforce_kai_scheduler": p.enforce_kai_scheduler, "default_node_pools": list(p.default_node_pools or []),
        "queues": services.entry_dicts(services.entries_of(p))})
        for p in Project.objects.select_related("department").order_by("name")]
    return objects


def export_to_cluster(gateway: Any) -> list[str]:
    """Write kaiweb's org to the cluster as KRM objects (created, or their spec replaced)."""
    messages = []
    for obj in export_objects():
        gateway.apply_krm(obj)
        messages.append(f"{obj['kind']} {obj['metadata']['name']}: written")
    return messages


# ------------------------------------------------------------------------------------------ publish


@dataclass
class PublishReport:
    """What `publish` wrote and what it could not."""

    messages: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)


def _publish_shards(gateway: Any, cluster: Cluster, report: PublishReport) -> None:
    """Each pool's SchedulingShard (`services.write_pool_shard`), and the shards the org wrote for pools
    that are gone deleted (a shard it did not write is never deleted)."""
    pools = list(NodePool.objects.filter(cluster=cluster).select_related("shard", "cluster").order_by("name"))
    for pool in pools:
        if pool.shard is not None:
            services.write_pool_shard(pool, gateway)
    owned = {p.shard.name for p in pools if p.shard is not None}
    for name, pool_name in sorted(gateway.shards_labelled(SHARD_POOL_LABEL).items()):
        if name not in owned:
            gateway.delete_shard(name)
            report.messages.append(f"SchedulingShard {name}: deleted (node pool {pool_name} is gone)")


def _publish_queue_labels(gateway: Any, report: PublishReport) -> None:
    for oq in OwnerQueue.objects.select_related("queue").order_by("queue__name"):
        labels = oq.queue.labels or {}
        wanted = {key: (str(labels[key]) if labels.get(key) else None) for key in QUEUE_LABELS}
        if not gateway.label_queue(oq.queue.name, wanted):
            report.problems.append(f"Queue {oq.queue.name}: not in the cluster; its labels wait for the Queue sync")


def _publish_namespaces(gateway: Any, report: PublishReport) -> dict[str, list[str]]:
    problems: dict[str, list[str]] = {}
    for project in Project.objects.order_by("name"):
        name = project.namespace_name
        current = gateway.read_namespace(name)
        overridden = current is not None and ((current.get("metadata") or {}).get("labels") or {}).get(
            MANUAL_OVERRIDE_LABEL) == "true"
        if overridden:
            report.messages.append(f"namespace {name}: {MANUAL_OVERRIDE_LABEL}=true, left alone")
            continue
        labels, annotations = krm.namespace_labels(project.name, project.enforce_kai_scheduler)
        # An adopted namespace must exist already (KRM); kai-<project> is made and kept.
        if gateway.upsert_namespace(name, labels, annotations, create=not project.namespace) is None:
            why = f"namespace {name} does not exist; an adopted namespace must be made first"
            problems.setdefault(project.name, []).append(why)
            report.problems.append(f"Project {project.name}: {why}")
    return problems


def _publish_nodes(gateway: Any, cluster: Cluster, report: PublishReport) -> dict[str, list[tuple[str, bool]]]:
    """Each node's pool label (`rules.node_move`), and each pool's nodes as (name, ready and schedulable)."""
    specs = [rules.PoolSpec(p.name, p.label_key, p.label_value)
             for p in NodePool.objects.filter(cluster=cluster).exclude(name=DEFAULT_POOL)]
    busy = set(Pod.objects.filter(node__cluster=cluster, state__in=ALLOCATED_POD_STATES)
               .values_list("node__name", flat=True))
    by_pool: dict[str, list[tuple[str, bool]]] = {}
    for node in sorted(gateway.list_nodes().items, key=lambda n: n.name):
        labels = dict(node.labels or {})
        have = rules.labelled_pool(labels)
        want, hold = rules.node_move(labels, specs, node.name in busy)
        cordoned_by_us = NODE_UNSCHEDULABLE_LABEL in labels
        unschedulable = node.unschedulable
        if hold:
            report.held.append(node.name)
            if not (cordoned_by_us and node.unschedulable):
                gateway.patch_node(node.name, {NODE_UNSCHEDULABLE_LABEL: "true"}, unschedulable=True)
                report.messages.append(f"node {node.name}: held in {have} until its pods end (cordoned), then "
                                       f"moves to {rules.pool_of(labels, specs)}")
            unschedulable = True
        elif want != have or cordoned_by_us:
            gateway.patch_node(node.name, {NODE_POOL_LABEL: None if want == DEFAULT_POOL else want,
                                           NODE_UNSCHEDULABLE_LABEL: None},
                               unschedulable=False if cordoned_by_us else None)
            report.messages.append(f"node {node.name}: pool {have} → {want}")
            unschedulable = False if cordoned_by_us else unschedulable
        by_pool.setdefault(want, []).append((node.name, bool(node.ready and not unschedulable)))
    return by_pool


def _publish_statuses(gateway: Any, cluster: Cluster, by_pool: Mapping[str, list[tuple[str, bool]]],
                      namespace_problems: Mapping[str, list[str]], report: PublishReport) -> None:
    pools = {p.name: p for p in NodePool.objects.filter(cluster=cluster)}
    for pool in pools.values():
        phase, message = rules.pool_phase(by_pool.get(pool.name, ()))
        if (pool.phase, pool.message) != (phase, message):
            pool.phase, pool.message = phase, message
            pool.save(update_fields=["phase", "message", "updated"])
    for obj in gateway.list_krm(krm.NODEPOOL) or []:
        pool = pools.get((obj.get("metadata") or {}).get("name"))
        if pool is not None:
            gateway.write_krm_status(krm.NODEPOOL, pool.name,
                                     krm.nodepool_status(pool.phase, pool.message, by_pool.get(pool.name, ())))
    projects = {p.name: p for p in Project.objects.all()}
    present = [projects[n] for n in sorted({(o.get("metadata") or {}).get("name") for o in
                                            gateway.list_krm(krm.PROJECT) or []} & set(projects))]
    links = list(OwnerQueue.objects.filter(project__in=present).select_related("node_pool", "queue"))
    figures = status.queue_figures(oq.queue_id for oq in links)
    empty = krm.quota_figures({}, {}, {})
    for project in present:
        per_pool = {}
        for oq in links:
            if oq.project_id == project.pk:
                found = figures.get(oq.queue_id)
                per_pool[oq.node_pool.name] = krm.quota_figures(*(found[k] for k in (
                    "requested", "allocated", "allocated_non_preemptible"))) if found else empty
        gateway.write_krm_status(krm.PROJECT, project.name, krm.project_status(
            project.namespace_name, per_pool, namespace_problems.get(project.name, ())))


def publish(gateway: Any, cluster: Cluster | None = None) -> PublishReport:
    """Write what the org gives to a Kubernetes cluster (see the module docstring). A write the cluster
    refuses is a problem in the report; the others still go."""
    report = PublishReport()
    cluster = cluster or services.org_cluster()
    services.ensure_default_pool(cluster)
    steps = (
        ("shards", lambda: _publish_shards(gateway, cluster, report)),
        ("queues", lambda: report.problems.extend(str(p) for p in mirror.sync_queues(gateway, cluster)[1])),
        ("queue labels", lambda: _publish_queue_labels(gateway, report)),
    )
    for what, step in steps:
        try:
            step()
        except ClusterError as exc:
            report.problems.append(f"{what}: {exc}")
    namespace_problems: dict[str, list[str]] = {}
    by_pool: dict[str, list[tuple[str, bool]]] = {}
    try:
        namespace_problems = _publish_namespaces(gateway, report)
        by_pool = _publish_nodes(gateway, cluster, report)
        _publish_statuses(gateway, cluster, by_pool, namespace_problems, report)
    except ClusterError as exc:
        report.problems.append(f"namespaces, nodes and status: {exc}")
    return report
