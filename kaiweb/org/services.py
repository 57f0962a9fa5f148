"""Writes of the org app: node pools, departments and projects, and the queues and shards they give.

Every write runs in one transaction, checks KRM's rules first (`rules.spec_errors`, the pool rules
here) and raises a ValidationError naming the field and the rule, so nothing is half-written; each
change is audited. After a change, `sync` makes the queues, the shards and the nodes' pool labels
what the org says: the queues by `rules.derive_queues`, the nodes by `rules.pool_of`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery import current_app
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ValidationError
from django.db import transaction

from kaiweb.audit import services as audit
from kaiweb.audit.choices import AuditAction, AuditSource
from kaiweb.cluster.choices import BackendKind
from kaiweb.cluster.errors import ClusterError
from kaiweb.cluster.gateway import get_gateway
from kaiweb.cluster.models import Cluster, Node, SchedulingShard
from kaiweb.core.choices import RESOURCES
from kaiweb.core.services import Change, already_exists, reject_unknown_fields
from kaiweb.org import krm, rules
from kaiweb.org.choices import DEFAULT_POOL, NODE_POOL_LABEL, SHARD_POOL_LABEL, OwnerKind
from kaiweb.org.models import Department, NodePool, OwnerQueue, Project
from kaiweb.queues.models import Queue
from kaiweb.queues.validators import validate_queue_fields
from kaiweb.workloads.choices import ACTIVE_WORKLOAD_STATES, ALLOCATED_POD_STATES
from kaiweb.workloads.models import Pod, Workload

Actor = AbstractBaseUser | AnonymousUser | None

POOL_FIELDS = frozenset({"name", "label_key", "label_value", "preferred_topology", "gpu_placement", "cpu_placement",
                         "k_value", "preempt_min_runtime", "reclaim_min_runtime"})
SHARD_FIELDS = ("gpu_placement", "cpu_placement", "k_value", "preempt_min_runtime", "reclaim_min_runtime")
DEPARTMENT_FIELDS = frozenset({"name", "display_name", "queues"})
PROJECT_FIELDS = frozenset({"name", "display_name", "department", "namespace", "enforce_kai_scheduler",
                            "default_node_pools", "queues"})
ENTRY_FIELDS = frozenset({"pool", "name", "priority", *RESOURCES})
AMOUNT_FIELDS = frozenset({"deserved", "limit", "over_quota_weight"})
MAX_ENTRIES = 64
PUBLISH_TASK = "org.publish"


# ------------------------------------------------------------------------------------------ reading specs


def org_cluster() -> Cluster:
    """The cluster the org layer manages: the default shard's, else the first enabled cluster."""
    shard = SchedulingShard.objects.default()
    cluster = shard.cluster if shard is not None else Cluster.objects.filter(enabled=True).order_by("name").first()
    if cluster is None:
        raise ValidationError({"cluster": "no enabled cluster; add one first"})
    return cluster


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValidationError({"queues": f"{where} must be a number"})
    try:
        number = float(value)
    except ValueError as exc:
        raise ValidationError({"queues": f"{where} must be a plain number (KRM's units), not {value!r}"}) from exc
    if number != number or number in (float("inf"), float("-inf")):
        raise ValidationError({"queues": f"{where} must be a finite number"})
    return number


def parse_entries(value: Any) -> tuple[rules.QueueEntry, ...]:
    """The ``queues`` of a department or project, as given to the API or a form: a list of
    ``{pool, name?, priority?, gpu?: {deserved, limit, over_quota_weight}, cpu?, memory?}``."""
    if not isinstance(value, list):
        raise ValidationError({"queues": "must be a list of {pool, name, priority, gpu, cpu, memory}"})
    if len(value) > MAX_ENTRIES:
        raise ValidationError({"queues": f"at most {MAX_ENTRIES} entries (one per node pool)"})
    entries = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise ValidationError({"queues": f"entry {i} must be an object"})
        unknown = sorted(set(item) - ENTRY_FIELDS)
        if unknown:
            raise ValidationError({"queues": f"entry {i}: unknown field(s) {', '.join(unknown)}"})
        pool = item.get("pool")
        if not isinstance(pool, str) or not pool:
            raise ValidationError({"queues": f"entry {i}: pool is required (a node pool's name)"})
        name = item.get("name") or ""
        if not isinstance(name, str):
            raise ValidationError({"queues": f"entry {i}: name must be a string"})
        priority = item.get("priority", rules.DEFAULT_QUEUE_PRIORITY)
        if isinstance(priority, bool) or not isinstance(priority, int) or not -2**31 <= priority < 2**31:
            raise ValidationError({"queues": f"entry {i}: priority must be a 32-bit integer"})
        amounts = {}
        for r in RESOURCES:
            given = item.get(r) or {}
            if not isinstance(given, Mapping) or set(given) - AMOUNT_FIELDS:
                raise ValidationError({"queues": f"entry {i}: {r} takes deserved, limit and over_quota_weight"})
            amounts[r] = rules.Amounts(**{k: _number(v, f"entry {i}: {r}.{k}") for k, v in given.items()})
        entries.append(rules.QueueEntry(pool=pool, name=name, priority=priority, **amounts))
    return tuple(entries)


def entries_of(owner: Department | Project) -> tuple[rules.QueueEntry, ...]:
    """The entries an owner has now, read from its queues."""
    result = []
    for oq in owner.owned_queues.select_related("queue", "node_pool"):
        q = oq.queue
        amounts = {r: rules.Amounts(getattr(q, f"{r}_quota"), getattr(q, f"{r}_limit"),
                                    getattr(q, f"{r}_over_quota_weight")) for r in RESOURCES}
        result.append(rules.QueueEntry(pool=oq.node_pool.name, name=q.name, priority=q.priority, **amounts))
    return tuple(sorted(result, key=lambda e: e.pool))


def entry_dicts(entries: tuple[rules.QueueEntry, ...]) -> list[dict[str, Any]]:
    return [{"pool": e.pool, "name": e.name, "priority": e.priority,
             **{r: {"deserved": getattr(e, r).deserved, "limit": getattr(e, r).limit,
                    "over_quota_weight": getattr(e, r).over_quota_weight} for r in RESOURCES}}
            for e in entries]


def _owner_spec(owner: Department | Project, entries: tuple[rules.QueueEntry, ...] | None = None) -> rules.OwnerSpec:
    entries = entries_of(owner) if entries is None else entries
    if isinstance(owner, Department):
        return rules.OwnerSpec(OwnerKind.DEPARTMENT, owner.name, entries)
    return rules.OwnerSpec(OwnerKind.PROJECT, owner.name, entries,
                           department=owner.department.name if owner.department_id else "", uid=str(owner.uid))


# ------------------------------------------------------------------------------------------ sync


def ensure_default_pool(cluster: Cluster) -> NodePool:
    """The cluster's `default` pool, made with its shard (the one without a partition value) if missing."""
    pool = NodePool.objects.filter(cluster=cluster, name=DEFAULT_POOL).first()
    if pool is None:
        shard = (SchedulingShard.objects.filter(cluster=cluster, partition_label_value="", node_pool__isnull=True)
                 .order_by("name").first())
        if shard is None:
            shard = SchedulingShard.objects.create(cluster=cluster, name=DEFAULT_POOL,
                                                   partition_label_key=NODE_POOL_LABEL, partition_label_value="")
        pool = NodePool.objects.create(cluster=cluster, name=DEFAULT_POOL, shard=shard)
    return pool


def _pool_specs(cluster: Cluster) -> list[rules.PoolSpec]:
    return [rules.PoolSpec(p.name, p.label_key, p.label_value)
            for p in NodePool.objects.filter(cluster=cluster).exclude(name=DEFAULT_POOL)]


def sync_nodes(cluster: Cluster) -> list[str]:
    """Give each node of the cluster its pool's label (none for the default pool). A node whose pool
    changes while pods of its old pool still hold it keeps its old label and is cordoned until they end
    (KRM's drain before the move: its pods stay counted where they were admitted, and no shard sees the
    node while another's pods are on it). Returns the nodes held."""
    specs = _pool_specs(cluster)
    held: list[str] = []
    busy = set(Pod.objects.filter(node__cluster=cluster, state__in=ALLOCATED_POD_STATES)
               .values_list("node_id", flat=True).distinct())
    for node in Node.objects.filter(cluster=cluster).order_by("name"):
        labels = dict(node.labels or {})
        want, hold = rules.node_move(labels, specs, node.pk in busy)
        have = rules.labelled_pool(labels)
        if want == have and not hold:
            continue
        if hold:
            held.append(node.name)
            if not node.unschedulable:
                node.unschedulable = True
                node.save(update_fields=["unschedulable"])
            continue
        if want == DEFAULT_POOL:
            labels.pop(NODE_POOL_LABEL, None)
        else:
            labels[NODE_POOL_LABEL] = want
        node.labels = labels
        node.save(update_fields=["labels"])
    return held


def sync_phases(cluster: Cluster) -> None:
    """Each pool's phase from its nodes (as the nodes' pool labels say)."""
    nodes_by_pool: dict[str, list[tuple[str, bool]]] = {}
    for name, labels, ready, cordoned in Node.objects.filter(cluster=cluster).values_list(
            "name", "labels", "ready", "unschedulable"):
        pool = rules.labelled_pool(labels)
        nodes_by_pool.setdefault(pool, []).append((name, bool(ready and not cordoned)))
    for pool in NodePool.objects.filter(cluster=cluster):
        phase, message = rules.pool_phase(nodes_by_pool.get(pool.name, ()))
        if (pool.phase, pool.message) != (phase, message):
            pool.phase, pool.message = phase, message
            pool.save(update_fields=["phase", "message", "updated"])


def set_numbers(queue: Queue, entry: rules.QueueEntry | rules.DerivedQueue) -> None:
    """An owner's entry on its queue: the priority, and per resource KRM's deserved as the queue's quota,
    its limit and over-quota weight (KRM's units are the Queue's)."""
    queue.priority = entry.priority
    for r in RESOURCES:
        amounts: rules.Amounts = getattr(entry, r)
        setattr(queue, f"{r}_quota", amounts.deserved)
        setattr(queue, f"{r}_limit", amounts.limit)
        setattr(queue, f"{r}_over_quota_weight", amounts.over_quota_weight)


def sync_queues(*, actor: Actor = None, source: str = AuditSource.SYSTEM) -> list[rules.DerivedQueue]:
    """Make the queues what the departments' and projects' entries say (`rules.derive_queues`): create,
    update and re-parent them, link each to its owner, and delete the queues of entries that are gone.
    Hand-made queues are left alone."""
    owners = [_owner_spec(d) for d in Department.objects.all()] + [
        _owner_spec(p) for p in Project.objects.select_related("department")]
    links = {oq.queue.name: oq for oq in OwnerQueue.objects.select_related("queue", "department", "project")}
    held: dict[str, tuple[str, str] | None] = {name: None for name in Queue.objects.values_list("name", flat=True)}
    held.update({name: (oq.owner_kind, oq.owner_name) for name, oq in links.items()})
    derived = rules.derive_queues(owners, held)
    cluster = org_cluster()
    pools = {p.name: p for p in NodePool.objects.filter(cluster=cluster)}
    departments = {d.name: d for d in Department.objects.all()}
    projects = {p.name: p for p in Project.objects.all()}
    wanted = {d.name for d in derived}
    for d in derived:
        queue = Queue.objects.filter(name=d.name).first()
        before = audit.snapshot(queue) if queue is not None else None
        queue = queue or Queue(name=d.name)
        queue.parent = Queue.objects.get(name=d.parent) if d.parent else None
        queue.labels = {**{k: v for k, v in (queue.labels or {}).items()
                           if k not in (NODE_POOL_LABEL, rules.PROJECT_LABEL, rules.PROJECT_ID_LABEL,
                                        rules.DEPARTMENT_LABEL)}, **d.labels}
        set_numbers(queue, d)
        validate_queue_fields(queue)
        queue.save()
        after = audit.snapshot(queue)
        if before != after:
            audit.record(queue, AuditAction.CREATE if before is None else AuditAction.UPDATE, actor=actor,
                         source=source, before=before, after=after)
        owner = {"department": departments[d.owner_name]} if d.owner_kind == OwnerKind.DEPARTMENT else {
            "project": projects[d.owner_name]}
        OwnerQueue.objects.update_or_create(queue=queue, defaults={"node_pool": pools[d.pool], "department": None,
                                                                   "project": None, **owner})
    for name, oq in links.items():
        if name not in wanted:
            queue = oq.queue
            before = audit.snapshot(queue)
            pk = queue.pk
            queue.delete()
            audit.record(queue, AuditAction.DELETE, actor=actor, source=source, before=before, object_id=pk)
    return derived


def sync(*, actor: Actor = None, source: str = AuditSource.SYSTEM) -> list[str]:
    """Queues, node labels and pool phases after an org change; returns the nodes held for draining."""
    cluster = org_cluster()
    ensure_default_pool(cluster)
    sync_queues(actor=actor, source=source)
    held = sync_nodes(cluster)
    sync_phases(cluster)
    if cluster.backend == BackendKind.KUBERNETES:
        # The cluster follows the database once the change is committed (`kaiweb.org.tasks.publish_task`,
        # named here: the task's module imports these services).
        transaction.on_commit(lambda: current_app.send_task(PUBLISH_TASK))
    return held


# ------------------------------------------------------------------------------------------ node pools


def _check_pool(pool: NodePool, before: Mapping[str, Any] | None) -> None:
    if pool.is_default and (pool.label_key or pool.label_value):
        raise ValidationError({"label_key": "the default node pool holds the nodes no other pool claims; "
                                            "its label key and value must be empty"})
    if not pool.is_default and not (pool.label_key and pool.label_value):
        raise ValidationError({"label_key": "a node pool selects its nodes by one label: give a key and a value"})
    if before is not None and (before["label_key"], before["label_value"]) != (pool.label_key, pool.label_value):
        raise ValidationError({"label_key": "a node pool's label pair cannot change; delete it and make a new one"})
    if before is not None and before["name"] != pool.name:
        raise ValidationError({"name": "a node pool cannot be renamed"})
    taken = NodePool.objects.filter(cluster=pool.cluster, label_key=pool.label_key, label_value=pool.label_value)
    if pool.label_key and taken.exclude(pk=pool.pk).exists():
        raise already_exists("label_value", f"node pool {taken.first()} already selects "
                                            f"{pool.label_key}={pool.label_value}; a node belongs to one pool")
    if pool.pk is None and NodePool.objects.filter(cluster=pool.cluster, name=pool.name).exists():
        raise already_exists("name", f"a node pool named {pool.name!r} already exists")
    pool.full_clean(exclude=["cluster", "shard"], validate_unique=False, validate_constraints=False)


def _apply_pool(pool: NodePool, data: Mapping[str, Any]) -> dict[str, Any]:
    reject_unknown_fields(dict(data), POOL_FIELDS)
    shard_values = {k: v for k, v in data.items() if k in SHARD_FIELDS}
    for key in ("name", "label_key", "label_value", "preferred_topology"):
        if key in data:
            setattr(pool, key, data[key] if data[key] is not None else "")
    return shard_values


def write_pool_shard(pool: NodePool, gateway: Any = None) -> None:
    """On a Kubernetes cluster, the pool's SchedulingShard as the pool sets it (`krm.shard_spec`), written
    at once: each cycle reads the cluster's shards into the database, so a pool's change must be there
    first. Raises the gateway's `ClusterError`."""
    if pool.cluster.backend != BackendKind.KUBERNETES or pool.shard is None:
        return
    gateway = gateway or get_gateway(pool.cluster)
    spec = krm.shard_spec(pool.name, {f: getattr(pool.shard, f) for f in krm.SHARD_CONFIG_FIELDS})
    gateway.upsert_shard(pool.shard.name, spec, unset=krm.SHARD_MODELLED, labels={SHARD_POOL_LABEL: pool.name})


def _write_pool_shard_now(pool: NodePool) -> None:
    try:
        write_pool_shard(pool)
    except ClusterError as exc:
        raise ValidationError({"cluster": f"the node pool's SchedulingShard could not be written to the cluster "
                                          f"({exc}); nothing was saved"}) from exc


def _apply_shard(pool: NodePool, values: Mapping[str, Any]) -> None:
    shard = pool.shard
    if shard is None:
        shard = SchedulingShard(cluster=pool.cluster, name=pool.name, partition_label_key=NODE_POOL_LABEL,
                                partition_label_value="" if pool.is_default else pool.name)
    for key, value in values.items():
        setattr(shard, key, value)
    try:
        shard.full_clean(exclude=["cluster"], validate_unique=False)
    except ValidationError as exc:
        raise ValidationError({k: v for k, v in exc.message_dict.items()}) from exc
    shard.save()
    if pool.shard_id != shard.pk:
        pool.shard = shard
        pool.save(update_fields=["shard"])


@transaction.atomic
def create_node_pool(data: Mapping[str, Any], *, actor: Actor = None,
                     source: str = AuditSource.SYSTEM) -> Change[NodePool]:
    """A node pool and its shard (partition ``kai.scheduler/node-pool=<name>``)."""
    cluster = org_cluster()
    ensure_default_pool(cluster)
    pool = NodePool(cluster=cluster)
    shard_values = _apply_pool(pool, data)
    _check_pool(pool, None)
    if SchedulingShard.objects.filter(cluster=cluster, name=pool.name).exists():
        raise already_exists("name", f"shard {pool.name!r} exists and no node pool owns it; the pool would take it")
    pool.save()
    _apply_shard(pool, shard_values)
    _write_pool_shard_now(pool)
    audit.record(pool, AuditAction.CREATE, actor=actor, source=source, after=audit.snapshot(pool))
    sync(actor=actor, source=source)
    pool.refresh_from_db()
    return Change(pool)


@transaction.atomic
def update_node_pool(pool: NodePool, data: Mapping[str, Any], *, actor: Actor = None,
                     source: str = AuditSource.SYSTEM) -> Change[NodePool]:
    """Change a pool's topology or its shard's configuration; its name and label pair are fixed."""
    pool = NodePool.objects.select_for_update().get(pk=pool.pk)
    before = audit.snapshot(pool)
    shard_values = _apply_pool(pool, data)
    _check_pool(pool, before)
    pool.save()
    _apply_shard(pool, shard_values)
    _write_pool_shard_now(pool)
    after = audit.snapshot(pool)
    if after != before or shard_values:
        audit.record(pool, AuditAction.UPDATE, actor=actor, source=source, before=before,
                     after={**after, **{k: str(v) for k, v in shard_values.items()}})
    return Change(pool)


def pool_delete_problems(pool: NodePool) -> list[str]:
    """Why a pool cannot go (empty when it can): it is the default, a project or department has a queue in
    it, or its nodes still run work."""
    if pool.is_default:
        return ["the default node pool cannot be deleted: it holds every node no other pool claims"]
    problems = []
    owners = sorted({oq.owner_name for oq in pool.owner_queues.select_related("department", "project")})
    if owners:
        problems.append(f"{', '.join(owners)} still have a queue in node pool {pool.name}; remove those entries first")
    running = Pod.objects.filter(node__cluster=pool.cluster, state__in=ALLOCATED_POD_STATES,
                                 node__labels__contains={NODE_POOL_LABEL: pool.name}).count()
    if running:
        problems.append(f"{running} pod(s) still run on node pool {pool.name}'s nodes; they must end first")
    return problems


@transaction.atomic
def delete_node_pool(pool: NodePool, *, actor: Actor = None, source: str = AuditSource.SYSTEM) -> None:
    pool = NodePool.objects.select_for_update().get(pk=pool.pk)
    problems = pool_delete_problems(pool)
    if problems:
        raise ValidationError({"node_pool": problems})
    before, pk, shard = audit.snapshot(pool), pool.pk, pool.shard
    if shard is not None and pool.cluster.backend == BackendKind.KUBERNETES:
        # The shard the org wrote for this pool goes with it (one it did not write stays).
        try:
            gateway = get_gateway(pool.cluster)
            if gateway.shards_labelled(SHARD_POOL_LABEL).get(shard.name) == pool.name:
                gateway.delete_shard(shard.name)
        except ClusterError as exc:
            raise ValidationError({"cluster": f"the node pool's SchedulingShard could not be deleted from the "
                                              f"cluster ({exc}); nothing was deleted"}) from exc
    pool.delete()
    if shard is not None:
        shard.delete()
    audit.record(pool, AuditAction.DELETE, actor=actor, source=source, before=before, object_id=pk)
    sync(actor=actor, source=source)


# ------------------------------------------------------------------------------------------ departments, projects


def _owner_snapshot(owner: Department | Project, entries: tuple[rules.QueueEntry, ...]) -> dict[str, Any]:
    data = audit.snapshot(owner)
    data["queues"] = entry_dicts(entries)
    return data


def _check_owner(owner: Department | Project, entries: tuple[rules.QueueEntry, ...]) -> None:
    cluster = org_cluster()
    ensure_default_pool(cluster)
    spec = _owner_spec(owner, entries)
    pools = NodePool.objects.filter(cluster=cluster).values_list("name", flat=True)
    departments = Department.objects.values_list("name", flat=True)
    default_pools = owner.default_node_pools if isinstance(owner, Project) else ()
    if not isinstance(default_pools, list | tuple) or not all(isinstance(p, str) for p in default_pools):
        raise ValidationError({"default_node_pools": "must be a list of node pool names"})
    errors = rules.spec_errors(spec, pools, departments, default_pools)
    if errors:
        raise ValidationError(errors)
    owner.full_clean(exclude=["department", "admins", "members"], validate_unique=False,
                     validate_constraints=False)


def _apply_owner(owner: Department | Project, data: Mapping[str, Any],
                 fields: frozenset[str]) -> tuple[rules.QueueEntry, ...] | None:
    reject_unknown_fields(dict(data), fields)
    entries = parse_entries(data["queues"]) if "queues" in data else None
    for key, value in data.items():
        if key == "queues":
            continue
        if key == "department":
            if value in (None, ""):
                owner.department = None
            elif isinstance(value, Department):
                owner.department = value
            elif isinstance(value, str):
                owner.department = Department.objects.filter(name=value).first()
                if owner.department is None:
                    raise ValidationError({"department": f"department {value!r} does not exist"})
            else:
                raise ValidationError({"department": "must be a department's name"})
            continue
        setattr(owner, key, value if value is not None else "")
    return entries


def _removed_entries_problems(owner: Department | Project, entries: tuple[rules.QueueEntry, ...]) -> list[str]:
    """Entries being removed whose queue still has workloads pending or running."""
    keep = {e.pool for e in entries}
    problems = []
    for oq in owner.owned_queues.select_related("queue", "node_pool"):
        if oq.node_pool.name in keep:
            continue
        active = Workload.objects.filter(queue=oq.queue, state__in=ACTIVE_WORKLOAD_STATES).count()
        if active:
            problems.append(f"queue {oq.queue.name} (node pool {oq.node_pool.name}) still has {active} workload(s) "
                            "pending or running; they must end before its entry goes")
        if oq.queue.children.exclude(org_owner__isnull=False).exists():
            problems.append(f"queue {oq.queue.name} has hand-made child queues; move them first")
    return problems


def _save_owner(owner: Department | Project, data: Mapping[str, Any], fields: frozenset[str], *, actor: Actor,
                source: str) -> Change[Any]:
    model = type(owner)
    creating = owner.pk is None
    if not creating:
        owner = model.objects.select_for_update().get(pk=owner.pk)
    old_entries = () if creating else entries_of(owner)
    before = None if creating else _owner_snapshot(owner, old_entries)
    old_name = owner.name
    entries = _apply_owner(owner, data, fields)
    entries = old_entries if entries is None else entries
    if not creating and owner.name != old_name:
        raise ValidationError({"name": f"a {model._meta.verbose_name} cannot be renamed; its queues carry the name"})
    if creating and model.objects.filter(name=owner.name).exists():
        raise already_exists("name", f"a {model._meta.verbose_name} named {owner.name!r} already exists")
    _check_owner(owner, entries)
    if isinstance(owner, Project) and owner.namespace and Project.objects.filter(
            namespace=owner.namespace).exclude(pk=owner.pk).exists():
        raise already_exists("namespace", f"namespace {owner.namespace!r} belongs to another project")
    if not creating:
        problems = _removed_entries_problems(owner, entries)
        if problems:
            raise ValidationError({"queues": problems})
    owner.save()
    # The entries are written as the owner's queues: a new entry's queue is made by the sync, an
    # existing one's numbers set here first (the sync reads them back as the owner's entries).
    _write_entries(owner, entries, actor=actor, source=source)
    sync(actor=actor, source=source)
    after = _owner_snapshot(owner, entries_of(owner))
    if before != after:
        audit.record(owner, AuditAction.CREATE if creating else AuditAction.UPDATE, actor=actor, source=source,
                     before=before, after=after)
    return Change(owner, _warnings(owner))


def _write_entries(owner: Department | Project, entries: tuple[rules.QueueEntry, ...], *, actor: Actor,
                   source: str) -> None:
    """Store the entries as the owner's queues: an existing pool's queue gets the entry's numbers, a removed
    pool's queue is deleted, a new pool gets a queue (named as the derivation names it)."""
    cluster = org_cluster()
    pools = {p.name: p for p in NodePool.objects.filter(cluster=cluster)}
    links = {oq.node_pool.name: oq for oq in owner.owned_queues.select_related("queue", "node_pool")}
    owner_field = "department" if isinstance(owner, Department) else "project"
    for pool_name, oq in links.items():
        if pool_name not in {e.pool for e in entries}:
            queue = oq.queue
            before, pk = audit.snapshot(queue), queue.pk
            queue.delete()
            audit.record(queue, AuditAction.DELETE, actor=actor, source=source, before=before, object_id=pk)
    for entry in entries:
        oq = links.get(entry.pool)
        queue = oq.queue if oq is not None else None
        if queue is None:
            name = entry.name or rules.derived_queue_name(owner.name, entry.pool)
            if Queue.objects.filter(name=name).exists():
                name = rules.suffixed_name(name, owner_field, owner.name, entry.pool)
            queue = Queue(name=name)
        elif entry.name and entry.name != queue.name:
            raise ValidationError({"queues": f"{entry.pool}: the queue is {queue.name}; a queue cannot be renamed"})
        set_numbers(queue, entry)
        if queue.pk is None:
            queue.labels = {}
            validate_queue_fields(queue)
            queue.save()
            OwnerQueue.objects.create(queue=queue, node_pool=pools[entry.pool], **{owner_field: owner})
        else:
            validate_queue_fields(queue)
            queue.save()


def _warnings(owner: Department | Project) -> list[str]:
    warnings = []
    if isinstance(owner, Project) and owner.department_id:
        mine = {oq.node_pool_id for oq in owner.owned_queues.all()}
        theirs = {oq.node_pool_id for oq in owner.department.owned_queues.all()}
        missing = NodePool.objects.filter(pk__in=mine - theirs).values_list("name", flat=True)
        if missing:
            warnings.append(f"department {owner.department.name} has no queue in {', '.join(missing)}: this project's "
                            "queue there has no parent and is not bound by the department")
    if not owner.owned_queues.filter(node_pool__name=DEFAULT_POOL).exists():
        warnings.append("no queue in the default node pool: work that falls back to it has nowhere to be charged")
    return warnings


@transaction.atomic
def create_department(data: Mapping[str, Any], *, actor: Actor = None,
                      source: str = AuditSource.SYSTEM) -> Change[Department]:
    return _save_owner(Department(), data, DEPARTMENT_FIELDS, actor=actor, source=source)


@transaction.atomic
def update_department(department: Department, data: Mapping[str, Any], *, actor: Actor = None,
                      source: str = AuditSource.SYSTEM) -> Change[Department]:
    return _save_owner(department, data, DEPARTMENT_FIELDS, actor=actor, source=source)


@transaction.atomic
def create_project(data: Mapping[str, Any], *, actor: Actor = None,
                   source: str = AuditSource.SYSTEM) -> Change[Project]:
    return _save_owner(Project(), data, PROJECT_FIELDS, actor=actor, source=source)


@transaction.atomic
def update_project(project: Project, data: Mapping[str, Any], *, actor: Actor = None,
                   source: str = AuditSource.SYSTEM) -> Change[Project]:
    return _save_owner(project, data, PROJECT_FIELDS, actor=actor, source=source)


def project_delete_problems(project: Project) -> list[str]:
    """Why a project cannot be deleted (empty when it can): workloads in its queues still pend or run."""
    active = Workload.objects.filter(queue__org_owner__project=project, state__in=ACTIVE_WORKLOAD_STATES)
    count = active.count()
    if count:
        names = ", ".join(f"{ns}/{n}" for ns, n in active.order_by("namespace", "name").values_list(
            "namespace", "name")[:5])
        return [f"project {project.name} still has {count} workload(s) pending or running ({names}); "
                "they must end first"]
    return []


@transaction.atomic
def delete_project(project: Project, *, actor: Actor = None, source: str = AuditSource.SYSTEM) -> None:
    project = Project.objects.select_for_update().get(pk=project.pk)
    problems = project_delete_problems(project)
    if problems:
        raise ValidationError({"project": problems})
    before, pk = _owner_snapshot(project, entries_of(project)), project.pk
    queues = [oq.queue for oq in project.owned_queues.select_related("queue")]
    project.delete()
    for queue in queues:
        if Workload.objects.filter(queue=queue).exists():
            raise ValidationError({"project": f"queue {queue.name} still holds finished workloads' records"})
        qb, qpk = audit.snapshot(queue), queue.pk
        queue.delete()
        audit.record(queue, AuditAction.DELETE, actor=actor, source=source, before=qb, object_id=qpk)
    audit.record(project, AuditAction.DELETE, actor=actor, source=source, before=before, object_id=pk)


def department_delete_problems(department: Department) -> list[str]:
    projects = list(department.projects.order_by("name").values_list("name", flat=True))
    if projects:
        return [f"department {department.name} still has project(s) {', '.join(projects[:5])}; delete or move "
                "them first"]
    return []


@transaction.atomic
def delete_department(department: Department, *, actor: Actor = None, source: str = AuditSource.SYSTEM) -> None:
    department = Department.objects.select_for_update().get(pk=department.pk)
    problems = department_delete_problems(department)
    if problems:
        raise ValidationError({"department": problems})
    before, pk = _owner_snapshot(department, entries_of(department)), department.pk
    queues = [oq.queue for oq in department.owned_queues.select_related("queue")]
    department.delete()
    for queue in queues:
        qb, qpk = audit.snapshot(queue), queue.pk
        queue.delete()
        audit.record(queue, AuditAction.DELETE, actor=actor, source=source, before=qb, object_id=qpk)
    audit.record(department, AuditAction.DELETE, actor=actor, source=source, before=before, object_id=pk)


# ------------------------------------------------------------------------------------------ people

MAX_PEOPLE = 200


@transaction.atomic
def set_people(owner: Department | Project, usernames: Any, *, actor: Actor = None,
               source: str = AuditSource.SYSTEM) -> Change[Any]:
    """A department's admins or a project's members, by username (all of them: the list replaces the
    old one); every name must be an existing user's. Audited as a change of the owner."""
    field = "admins" if isinstance(owner, Department) else "members"
    if not isinstance(usernames, list | tuple) or not all(isinstance(u, str) for u in usernames):
        raise ValidationError({field: "must be a list of usernames"})
    if len(usernames) > MAX_PEOPLE:
        raise ValidationError({field: f"at most {MAX_PEOPLE} users"})
    from django.contrib.auth import get_user_model

    wanted = sorted(set(usernames))
    users = list(get_user_model().objects.filter(username__in=wanted))
    unknown = sorted(set(wanted) - {u.get_username() for u in users})
    if unknown:
        raise ValidationError({field: f"no user named {', '.join(unknown)}"})
    people = getattr(owner, field)
    before = sorted(people.values_list("username", flat=True))
    if before != wanted:
        people.set(users)
        audit.record(owner, AuditAction.UPDATE, actor=actor, source=source, before={field: before},
                     after={field: wanted})
    return Change(owner)
