"""Dynamic Resource Allocation in the cycle: what the engine sees of pods' ResourceClaims, and the claims
written before their pods are bound.

Before the engine decides (`prepare`), on a cluster that serves DRA and only when a pod of the snapshot
names a ResourceClaim: the DeviceClasses, ResourceSlices and ResourceClaims are read
(`dra.Inventory`); each node's GPU devices are added to its GPUs; a pod's claimed GPU devices become its
GPU request (a claim shared by several pods is counted once, at its first consumer in the snapshot's order,
and a GPU device once however many claims hold it), so quota, fair share and the node's use count them as
any GPU; and a pending pod may only go to the nodes that have the devices its claims ask for (a claim
already allocated pins its consumers to its node). Whether they are free is the engine's count of the
node's GPUs, so reclaim and preemption free them as any GPU: a device held by a claim no pod of the
snapshot counts is taken from its node only while that claim is reserved for another scheduler's pod
still on it (`OtherPod`). A pod whose claim cannot be had (not found, not made from its template yet,
malformed, a selector that does not compile, no node with the devices) stays pending, and its why-pending
says which claim and why.

What was read is kept for the node pages (`record_devices`, right after `prepare`): each node's devices and
the claim and pods holding each, written only where it changed.

After the engine decided, before the binds (`allocate`): the claims are read again from the API server,
each bound pod's claims are allocated on the chosen node (`dra.Inventory.allocate`: exact devices,
``matchAttribute``, never a device another claim holds) and reserved for it (``status.allocation`` and
``status.reservedFor``, as kube-scheduler writes them), guarded by the claim's resourceVersion. A job any of
whose pods cannot have its claims is not bound at all (a gang's claims are all-or-nothing), and what was
written for it is taken back. After the binds (`release_failed`), the claims of a pod whose bind failed are
taken back the same way: a claim is never left allocated to a pod that was not bound. A claim whose last
consumer ended is released by Kubernetes' resource-claim controller, as under kube-scheduler.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from kaiweb.cluster.backends.kubernetes import dra
from kaiweb.cluster.errors import Capability, ClusterError
from kaiweb.cluster.models import Node, OtherPod
from kaiweb.cluster.services import record_dra_devices
from kaiweb.workloads.models import Pod
from scheduler_core import model as m
from scheduler_core.predicates import NAME_FIELD

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PodClaims:
    """A pod of the snapshot with ResourceClaims, and its claims' names (in its namespace)."""

    uid: str
    namespace: str
    name: str
    job: str
    claims: tuple[str, ...]


@dataclass
class Plan:
    """What `prepare` read and found, for the bind step and the why-pending."""

    inventory: dra.Inventory
    pods: dict[str, PodClaims] = field(default_factory=dict)  # pod uid -> its claims
    unreadable: str = ""  # why the DRA objects could not be read ("" they were: the inventory is the cluster's)
    problems: dict[str, str] = field(default_factory=dict)  # job uid -> why its pod cannot have its claims
    # what `allocate` wrote: pod uid -> [(claim key, allocated by it)]
    written: dict[str, list[tuple[tuple[str, str], bool]]] = field(default_factory=dict)


def _claims_by_pod(pod_ids: Iterable[int]) -> dict[int, tuple[str, str, str, list[Any]]]:
    """pod id -> (uid, namespace, name, [[entry, claim, template], ...]) of the pods naming ResourceClaims."""
    # The few pods naming claims first, then those of the snapshot among them: no list of every pod id
    # of a large snapshot in the query each cycle.
    wanted = set(pod_ids)
    rows = (Pod.objects.filter(constraints__has_key="resourceClaims")
            .values_list("pk", "uid", "workload__namespace", "name", "constraints"))
    return {pk: (uid, ns, name, list((constraints or {}).get("resourceClaims") or []))
            for pk, uid, ns, name, constraints in rows if pk in wanted}


def prepare(snapshot: m.ClusterSnapshot, index: Any, gateway: Any) -> tuple[m.ClusterSnapshot, Plan | None]:
    """The snapshot with DRA's GPUs and node restrictions in it, and the plan (None: no pod names a claim)."""
    if Capability.DRA not in gateway.capabilities or not index.pods:
        return snapshot, None
    by_pod = _claims_by_pod(index.pods.values())
    if not by_pod:
        return snapshot, None
    unreadable = ""
    try:
        inventory = gateway.read_dra()
    except ClusterError as exc:  # the other pods are scheduled; those with claims wait, saying why
        log.warning("the cluster's DRA objects cannot be read: %s", exc)
        inventory, unreadable = dra.Inventory({}, (), {}), f"the cluster's DRA objects cannot be read: {exc}"
    plan = Plan(inventory, unreadable=unreadable)
    counted_claims: set[tuple[str, str]] = set()
    counted_devices: set[dra.DeviceKey] = set()
    jobs: list[m.JobSpec] = []
    for job in snapshot.jobs:
        tasks = []
        for task in job.tasks:
            pod_id = index.pods.get((job.uid, task.name))
            if pod_id not in by_pod:
                tasks.append(task)
                continue
            uid, namespace, name, entries = by_pod[pod_id]
            task, claims, problem = _task_with_claims(task, namespace, entries, inventory, snapshot.nodes,
                                                      counted_claims, counted_devices, unreadable)
            plan.pods[uid] = PodClaims(uid, namespace, name, job.uid, claims)
            if problem and job.uid not in plan.problems:
                plan.problems[job.uid] = problem
            tasks.append(task)
        jobs.append(dataclasses.replace(job, tasks=tuple(tasks)) if tasks != list(job.tasks) else job)
    others = _held_for_others(inventory, counted_devices)
    nodes = tuple(_with_devices(n, inventory, others) for n in snapshot.nodes)
    return dataclasses.replace(snapshot, nodes=nodes, jobs=tuple(jobs)), plan


def _held_for_others(inventory: dra.Inventory, counted: set[dra.DeviceKey]) -> set[dra.DeviceKey]:
    """The GPU devices held by claims no pod of the snapshot counts, reserved for a pod of another scheduler
    that still holds its node (`OtherPod`): taken, as that pod's GPUs are. A claim whose consumers all
    ended holds its devices only until the resource-claim controller releases it: those are not
    subtracted (the bind step waits for the release), so an eviction is never repeated for them."""
    uncounted = [c for c in inventory.claims.values() if c.allocated is not None
                 and dra.gpu_devices(inventory, c.allocated) - counted]
    if not uncounted:
        return set()
    uids = {u for c in uncounted for _, u in c.reserved_for if u}
    living = set(OtherPod.objects.filter(uid__in=list(uids)).exclude(node_name="").values_list("uid", flat=True))
    return {key for c in uncounted if any(u in living for _, u in c.reserved_for)
            for key in dra.gpu_devices(inventory, c.allocated or ()) - counted}


def _with_devices(node: m.NodeSpec, inventory: dra.Inventory, others: set[dra.DeviceKey]) -> m.NodeSpec:
    devices = [d for d in inventory.on_node(node) if d.is_gpu and d.key not in others]
    if not devices:
        return node
    allocatable = None if node.allocatable_gpus is None else node.allocatable_gpus + len(devices)
    return dataclasses.replace(node, gpus=node.gpus + len(devices), allocatable_gpus=allocatable)


def _task_with_claims(task: m.TaskSpec, namespace: str, entries: list[Any], inventory: dra.Inventory,
                      nodes: tuple[m.NodeSpec, ...], counted_claims: set[tuple[str, str]],
                      counted_devices: set[dra.DeviceKey],
                      unreadable: str = "") -> tuple[m.TaskSpec, tuple[str, ...], str]:
    """The task with its claimed GPUs in its request and, pending, restricted to the nodes that have the
    devices its claims ask for (held or not: whether they are free is the engine's count of the node's GPUs,
    so reclaim and preemption can free them; the bind step allocates the exact ones); its claims' names;
    why it cannot have them ("" it can)."""
    names: list[str] = []
    problem = unreadable
    for entry in entries:
        entry_name, claim_name, template = (list(entry) + ["", "", ""])[:3] if isinstance(entry, list) else ("", "", "")
        if not claim_name:
            problem = problem or (f"resourceClaims[{entry_name}]: waiting for the ResourceClaim of template "
                                  f"{namespace}/{template} to be made")
            continue
        names.append(str(claim_name))
    claims: list[dra.Claim] = []
    for name in names:
        claim = inventory.claims.get((namespace, name))
        if claim is None:
            problem = problem or f'resourceclaim "{namespace}/{name}" not found'
        elif claim.problem:
            problem = problem or claim.problem
        else:
            claims.append(claim)
    gpus = 0
    pending = task.state in (m.PENDING, m.GATED) and task.node is None
    allowed: set[str] | None = None
    for claim in claims:
        if claim.allocated is not None:
            devices = dra.gpu_devices(inventory, claim.allocated)
            if claim.node is not None:
                allowed = {claim.node} if allowed is None else allowed & {claim.node}
        else:
            choices = [(n, inventory.allocate(claim, n, set())) for n in nodes] if pending else []
            fitting = [(n, c) for n, c in choices if not isinstance(c, str)]
            devices = dra.gpu_devices(inventory, fitting[0][1]) if fitting else set()
            if pending and not fitting and not problem:
                problem = str(choices[0][1]) if len(choices) == 1 else (
                    f"ResourceClaim {claim.namespace}/{claim.name}: no node has the devices it asks for")
            allowed = ({n.name for n, _ in fitting} if allowed is None else allowed & {n.name for n, _ in fitting})
        if claim.key in counted_claims:
            continue
        counted_claims.add(claim.key)
        if claim.allocated is None:
            gpus += len(devices)  # the devices it would get: which ones is the bind's choice
            continue
        gpus += len(devices - counted_devices)
        counted_devices |= devices
    if pending and problem:
        allowed = set()
    request = task.request
    if gpus:
        request = dataclasses.replace(request, gpu_kind=m.GPU_WHOLE, gpus=request.gpus + gpus)
    if not pending or allowed is None:
        return dataclasses.replace(task, request=request), tuple(names), problem if pending else ""
    by_name = m.NodeSelectorRequirement(NAME_FIELD, "In", tuple(sorted(allowed)))
    terms = task.required_node_affinity or (m.NodeSelectorTerm(),)
    affinity = tuple(dataclasses.replace(t, match_fields=(*t.match_fields, by_name)) for t in terms)
    return dataclasses.replace(task, request=request, required_node_affinity=affinity), tuple(names), problem


# ------------------------------------------------------------------------------- the nodes' devices


def record_devices(shard: Any, snapshot: m.ClusterSnapshot, plan: Plan | None, gateway: Any,
                   cycle_id: int | None) -> int:
    """Store the DRA devices of the snapshot's nodes, and who holds them, for the node pages
    (`cluster.services.record_dra_devices`: only the nodes whose devices changed). Called by the cycle
    right after `prepare`, with what it read.

    Without a plan (no pod of the snapshot names a claim, so `prepare` read nothing), the DRA objects are
    read here only while a node of the snapshot is stored with claimed devices: the claims of pods that
    ended are released by Kubernetes without a cycle reading them, and the node's page must not show
    them held for ever. When they cannot be read, what is stored stays as it was (and says when it was
    read). Returns how many nodes were written."""
    if plan is not None and plan.unreadable:
        return 0
    inventory = plan.inventory if plan is not None else None
    if inventory is None:
        if Capability.DRA not in gateway.capabilities:
            return 0
        names = {n.name for n in snapshot.nodes}
        claimed = Node.objects.filter(cluster_id=shard.cluster_id, dra_claimed__gt=0).values_list("name", flat=True)
        if not names.intersection(claimed):
            return 0
        try:
            inventory = gateway.read_dra()
        except ClusterError as exc:
            log.warning("the cluster's DRA objects cannot be read for the node pages: %s", exc)
            return 0
    holders = inventory.holders()
    devices = {n.name: inventory.node_devices(n, holders) for n in snapshot.nodes}
    return record_dra_devices(shard.cluster_id, devices, cycle_id=cycle_id, at=timezone.now())


# ------------------------------------------------------------------------------------------ the binds


class ClaimNotAllocated(ClusterError):
    """A bound pod's claim could not be allocated or reserved on its node: the pod is not bound."""


def allocate(gateway: Any, plan: Plan | None, binds: list[tuple[str, str, str]]) -> dict[str, Exception]:
    """Allocate and reserve the claims of the pods about to be bound, ``binds`` as (pod uid, job, node) in
    the engine's order. Returns the pods not to bind, with why: every pod of a job any of whose pods'
    claims could not be had (what was written for that job is taken back)."""
    if plan is None:
        return {}
    ours = [(uid, job, node) for uid, job, node in binds if uid in plan.pods]
    if not ours:
        return {}
    try:
        fresh = _fresh(gateway, plan)
    except ClusterError as exc:
        return {uid: exc for uid, _, _ in ours}
    held = fresh.held()
    failed: dict[str, Exception] = {}
    failed_jobs: dict[str, Exception] = {}
    for uid, job, node_name in ours:
        if job in failed_jobs:
            failed[uid] = failed_jobs[job]
            continue
        pod = plan.pods[uid]
        try:
            for name in pod.claims:
                _reserve(gateway, plan, fresh, held, pod, name, node_name)
        except ClusterError as exc:
            failed_jobs[job] = exc
            failed[uid] = exc
    for uid, job, _ in ours:
        if job in failed_jobs:
            failed.setdefault(uid, failed_jobs[job])
            _take_back(gateway, plan, fresh, uid)
    return failed


def _fresh(gateway: Any, plan: Plan) -> dra.Inventory:
    """The plan's devices with the claims as the API server has them now."""
    claims = (dra.read_claim(r) for r in gateway.list_resource_claims_raw() if isinstance(r, dict))
    return dra.Inventory(plan.inventory.classes, plan.inventory.devices, {c.key: c for c in claims})


def _reserve(gateway: Any, plan: Plan, fresh: dra.Inventory, held: set[dra.DeviceKey], pod: PodClaims,
             name: str, node_name: str) -> None:
    claim = fresh.claims.get((pod.namespace, name))
    where = f"ResourceClaim {pod.namespace}/{name}"
    if claim is None:
        raise ClaimNotAllocated("allocate", f"{where} not found")
    if claim.problem:
        raise ClaimNotAllocated("allocate", claim.problem)
    reserved = list(claim.reserved_for)
    if claim.allocated is not None:
        if claim.node is not None and claim.node != node_name:
            raise ClaimNotAllocated("allocate", f"{where} is allocated on node {claim.node}, not {node_name}")
        if (pod.name, pod.uid) in reserved:
            return
        if len(reserved) >= dra.MAX_RESERVED_FOR:
            raise ClaimNotAllocated("allocate", f"{where} is reserved for {len(reserved)} pods already")
        allocation, made = None, False
    else:
        node = m.NodeSpec(name=node_name, labels=_node_labels(node_name))
        chosen = fresh.allocate(claim, node, held)
        if isinstance(chosen, str):
            raise ClaimNotAllocated("allocate", chosen)
        local = any(d.key == a.key and (d.node is not None or d.node_terms is not None)
                    for a in chosen for d in fresh.devices)
        allocation, made = dra.allocation_status(chosen, node_name if local else None), True
    if allocation is not None and dra.FINALIZER not in claim.finalizers:
        # as kube-scheduler: protected before it is allocated, so the controller may deallocate it later
        claim = dra.read_claim(gateway.write_claim_finalizers(claim, [*claim.finalizers, dra.FINALIZER]))
        fresh.claims[claim.key] = claim
    status = {**claim.status, "reservedFor": [*(_consumer(n, u) for n, u in reserved), _consumer(pod.name, pod.uid)]}
    if allocation is not None:
        status["allocation"] = allocation
    written = gateway.write_claim_status(claim, status)
    updated = dra.read_claim(written)
    fresh.claims[claim.key] = updated
    if made:
        held |= {a.key for a in updated.allocated or () if not a.admin_access}
    plan.written.setdefault(pod.uid, []).append((claim.key, made))


def _consumer(name: str, uid: str) -> dict[str, str]:
    return {"resource": "pods", "name": name, "uid": uid}


def _node_labels(node: str) -> dict[str, str]:
    """A node's labels from the mirror (for devices reached by a node selector)."""
    labels = Node.objects.filter(name=node).values_list("labels", flat=True).first()
    return dict(labels or {})


def _take_back(gateway: Any, plan: Plan, fresh: dra.Inventory, uid: str) -> None:
    """Undo what `allocate` wrote for a pod: its reservation, and an allocation it made that no one else
    holds now. A failure is logged; the resource-claim controller drops a reservation of a pod that is gone."""
    pod = plan.pods.get(uid)
    for key, made in plan.written.pop(uid, []):
        claim = fresh.claims.get(key)
        if claim is None or pod is None:
            continue
        reserved = [(n, u) for n, u in claim.reserved_for if u != uid]
        status = {k: v for k, v in claim.status.items() if k != "reservedFor"}
        if reserved:
            status["reservedFor"] = [_consumer(n, u) for n, u in reserved]
        elif made:
            status.pop("allocation", None)
        try:
            claim = dra.read_claim(gateway.write_claim_status(claim, status))
            if made and not reserved and dra.FINALIZER in claim.finalizers:
                claim = dra.read_claim(gateway.write_claim_finalizers(
                    claim, [f for f in claim.finalizers if f != dra.FINALIZER]))
            fresh.claims[key] = claim
        except ClusterError as exc:
            log.warning("taking back ResourceClaim %s/%s for pod %s failed: %s", key[0], key[1], uid, exc)


def release_failed(gateway: Any, plan: Plan | None, failed_uids: Iterable[str]) -> None:
    """Take back the claims written for pods whose bind failed."""
    if plan is None or not plan.written:
        return
    wanted = [u for u in failed_uids if u in plan.written]
    if not wanted:
        return
    try:
        fresh = _fresh(gateway, plan)
    except ClusterError as exc:
        log.warning("taking back the ResourceClaims of %d pods not bound failed: %s", len(wanted), exc)
        return
    for uid in wanted:
        _take_back(gateway, plan, fresh, uid)
