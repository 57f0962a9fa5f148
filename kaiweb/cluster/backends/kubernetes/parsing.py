"""Kubernetes objects read into the gateway's neutral objects (`kaiweb.cluster.backends.types`).

Reads come back as raw JSON (``_preload_content=False``) and are parsed here; the same parsers serve
the watcher, whose events carry raw objects too. One parser per kind returns either the object or an
`Unreadable` naming the field and the rule, so a bad object never hides the others: pods (and other
schedulers' bound pods), nodes, PodGroups and their KAI stamps, Topologies, Queues and PriorityClasses.
SchedulingShard objects are read by `kaiweb.cluster.backends.kubernetes.shards`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from kubernetes.utils import parse_quantity

from kaiweb.cluster.backends.kubernetes import gpu_sharing
from kaiweb.cluster.backends.kubernetes.pod_constraints import (
    ConstraintError,
    check_taint_effect,
    parse_affinity,
    parse_host_ports,
    parse_tolerations,
)
from kaiweb.cluster.backends.types import (
    GPU_FRACTION_ANNOTATION,
    GPU_FRACTION_NUM_DEVICES_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    LINE_ANNOTATION_MAX,
    LINE_ANNOTATIONS,
    MAX_SCHEDULING_CONDITIONS,
    MIG_ENABLED_LABEL,
    MIG_RESOURCE_PREFIX,
    MIG_STRATEGY_LABEL,
    NODE_POOL_ASSIGNMENT_ANNOTATION,
    POD_GROUP_ANNOTATION,
    POD_GROUP_STAMPS,
    QUEUE_LABEL,
    SUBGROUP_LABEL,
    ObservedNode,
    ObservedOtherPod,
    ObservedPod,
    ObservedPodGroup,
    ObservedPriorityClass,
    ObservedQueue,
    ObservedTopology,
    PodState,
    ResourceAmounts,
    SubGroup,
    Taint,
    Unreadable,
)
from scheduler_core import queue_crd
from scheduler_core.model import TopologyConstraint
from scheduler_core.units import bytes_to_mib

QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL = "scheduling.run.ai", "v2", "queues"
PODGROUP_GROUP, PODGROUP_VERSION, PODGROUP_PLURAL = "scheduling.run.ai", "v2alpha2", "podgroups"
KAI_GROUP = "kai.scheduler"
TASK_PRIORITY_LABEL = "kai.scheduler/task-priority"

# nvidia.com/gpu.memory is MiB; values this large can only be bytes (KAI-SEMANTICS §5).
_BYTES_THRESHOLD_MIB = 1024 * 1024


class _Bad(Exception):
    """A field that cannot be read; becomes an `Unreadable`."""

    def __init__(self, field: str, rule: str, value: Any = None) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule
        self.value = value


# -- parsing helpers ------------------------------------------------------------------------------


def _meta(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    return raw.get("metadata") or {}


def pod_group_carries(current: Mapping[str, Any] | None, manifest: Mapping[str, Any]) -> bool:
    """Whether a PodGroup already says what ``manifest`` wants: the same spec and owners, and each of
    its labels and annotations with its value. Others' keys are no difference: a merge patch adds
    keys and takes none away, and KAI's stamps (ours too) live beside the pod-grouper's annotations."""
    if current is None or current.get("spec") != manifest.get("spec"):
        return False
    have, want = _meta(current), manifest.get("metadata") or {}
    for key in ("labels", "annotations"):
        held = have.get(key) or {}
        if any(held.get(k) != v for k, v in (want.get(key) or {}).items()):
            return False
    return "ownerReferences" not in want or have.get("ownerReferences") == want["ownerReferences"]


def _time(value: Any, field: str) -> datetime | None:
    if not value:
        return None
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as exc:
        raise _Bad(field, "must be an RFC 3339 time", value) from exc


# Go's time.RFC3339 as time.Parse reads it: whole seconds, an optional fraction, then Z or an offset.
_RFC3339 = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})")


def stamp_text(at: datetime) -> str:
    """A time as KAI writes its PodGroup stamps: Go's time.RFC3339 of the UTC time, whole seconds."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_stamp(text: Any) -> datetime:
    """A PodGroup stamp as KAI reads it (Go's time.RFC3339, any fraction of a second); ValueError
    for anything else."""
    found = _RFC3339.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    seconds, fraction, zone = found.groups()
    micro = (fraction or "")[:6].ljust(6, "0")
    return datetime.fromisoformat(f"{seconds}.{micro}{'+00:00' if zone == 'Z' else zone}")


def _stamps(meta: Mapping[str, Any]) -> tuple[dict[str, datetime | None], tuple[str, ...]]:
    """KAI's stamps on a PodGroup by Workload field; one that is not an RFC 3339 time is ignored, as
    KAI ignores it (logged there), and said in a note naming the field."""
    annotations = meta.get("annotations") or {}
    ref = f"PodGroup {meta.get('namespace', '') or ''}/{meta.get('name', '') or '?'}"
    stamps: dict[str, datetime | None] = {}
    notes = []
    for field, key in POD_GROUP_STAMPS:
        text = annotations.get(key) if isinstance(annotations, Mapping) else None
        stamps[field] = None
        if not text:
            continue
        try:
            stamps[field] = read_stamp(text)
        except ValueError:
            notes.append(f"{ref}: metadata.annotations[{key}] = {text!r} must be an RFC 3339 time such as "
                         f"2025-01-02T15:04:05Z; ignored, as KAI ignores it")
    return stamps, tuple(notes)


def _never_raises(kind: str) -> Callable[[Callable[[Mapping[str, Any]], Any]], Callable[[Mapping[str, Any]], Any]]:
    """A parser that meets an object of an unexpected shape (a list where a map belongs, ...)
    reports it as unreadable instead of failing the whole listing."""

    def wrap(parse: Callable[[Mapping[str, Any]], Any]) -> Callable[[Mapping[str, Any]], Any]:
        @functools.wraps(parse)
        def safe(raw: Mapping[str, Any]) -> Any:
            try:
                return parse(raw)
            except _Bad as bad:
                return _unreadable(kind, raw if isinstance(raw, Mapping) else {}, bad)
            except (AttributeError, TypeError, ValueError, KeyError) as exc:
                shaped = raw if isinstance(raw, Mapping) and isinstance(raw.get("metadata"), Mapping) else {}
                return _unreadable(kind, shaped, _Bad("(object)", f"has an unexpected shape ({exc})"))

        return safe

    return wrap


def _quantity(value: Any, field: str) -> Decimal:
    try:
        amount = parse_quantity(value)
    except (ValueError, TypeError, InvalidOperation) as exc:
        raise _Bad(field, "must be a Kubernetes quantity (e.g. 500m, 4, 16Gi)", value) from exc
    if amount < 0:
        raise _Bad(field, "must not be negative", value)
    return amount


def _amounts(resources: Mapping[str, Any], field: str) -> dict[str, Decimal]:
    return {name: _quantity(value, f"{field}[{name}]") for name, value in (resources or {}).items()}


def _to_resource_amounts(totals: Mapping[str, Decimal]) -> ResourceAmounts:
    # CPU rounds up to whole millicores (a request of 0.0001 still needs a slot), memory to bytes.
    cpu = totals.get("cpu", Decimal(0))
    mig = {name[len("nvidia.com/"):]: int(v) for name, v in totals.items() if name.startswith(MIG_RESOURCE_PREFIX)}
    other = {name: int(v) for name, v in totals.items()
             if name not in ("cpu", "memory", "pods", GPU_RESOURCE) and not name.startswith(MIG_RESOURCE_PREFIX)}
    return ResourceAmounts(
        cpu_millis=int((cpu * 1000).to_integral_value(rounding="ROUND_CEILING")),
        memory_bytes=int(totals.get("memory", Decimal(0)).to_integral_value(rounding="ROUND_CEILING")),
        gpus=float(totals.get(GPU_RESOURCE, Decimal(0))),
        pods=int(totals.get("pods", Decimal(0))),
        mig=mig,
        other=other,
    )


def _add(into: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for key, value in more.items():
        into[key] = into.get(key, Decimal(0)) + value


def _container_requests(container: Mapping[str, Any], field: str) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    requests = _amounts(resources.get("requests") or {}, f"{field}.resources.requests")
    # The API server defaults a missing request to its limit; GPUs are often given as limits only.
    for name, value in _amounts(resources.get("limits") or {}, f"{field}.resources.limits").items():
        requests.setdefault(name, value)
    return requests


def pod_requests(spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """A pod's request vector as KAI computes it (KAI-SEMANTICS §1.1): containers plus native
    sidecars, maxed with each regular init container's peak (plus the sidecars started before
    it), plus ``spec.overhead``."""
    total: dict[str, Decimal] = {}
    for i, container in enumerate(spec.get("containers") or []):
        _add(total, _container_requests(container, f"spec.containers[{i}]"))
    sidecars: dict[str, Decimal] = {}
    peak: dict[str, Decimal] = {}
    for i, container in enumerate(spec.get("initContainers") or []):
        requests = _container_requests(container, f"spec.initContainers[{i}]")
        if container.get("restartPolicy") == "Always":
            _add(sidecars, requests)
            continue
        candidate = dict(sidecars)
        _add(candidate, requests)
        for key, value in candidate.items():
            peak[key] = max(peak.get(key, Decimal(0)), value)
    _add(total, sidecars)
    for key, value in peak.items():
        total[key] = max(total.get(key, Decimal(0)), value)
    _add(total, _amounts(spec.get("overhead") or {}, "spec.overhead"))
    return total


def _unreadable(kind: str, raw: Mapping[str, Any], bad: _Bad) -> Unreadable:
    meta = _meta(raw)
    ns, name = meta.get("namespace", "") or "", meta.get("name", "") or "?"
    ref = f"{kind} {ns}/{name}" if ns else f"{kind} {name}"
    value = "" if bad.value is None else f" = {bad.value!r}"
    return Unreadable(kind=kind, namespace=ns, name=name, uid=meta.get("uid", "") or "", field=bad.field,
                      rule=bad.rule, message=f"{ref}: {bad.field}{value} {bad.rule}; it is skipped until fixed")


def _pod_state(raw: Mapping[str, Any]) -> str:
    phase = (raw.get("status") or {}).get("phase") or "Pending"
    spec = raw.get("spec") or {}
    deleting = bool(_meta(raw).get("deletionTimestamp"))
    if phase == "Running":
        return PodState.RELEASING if deleting else PodState.RUNNING
    if phase == "Pending":
        if deleting:
            return PodState.RELEASING
        if spec.get("nodeName"):
            return PodState.BOUND
        if spec.get("schedulingGates"):
            return PodState.GATED
        return PodState.PENDING
    return {"Succeeded": PodState.SUCCEEDED, "Failed": PodState.FAILED}.get(phase, PodState.UNKNOWN)


@_never_raises("Pod")
def parse_pod(raw: Mapping[str, Any]) -> ObservedPod | Unreadable:
    """An `ObservedPod`, or an `Unreadable` naming the first field that breaks a rule."""
    try:
        return _parse_pod(raw)
    except _Bad as bad:
        return _unreadable("Pod", raw, bad)


@_never_raises("Pod")
def parse_other_pod(raw: Mapping[str, Any]) -> ObservedOtherPod | Unreadable:
    """A pod of another scheduler as an `ObservedOtherPod` (its node, phase and requests as KAI
    sums them), or an `Unreadable` naming the field."""
    meta, spec = _meta(raw), raw.get("spec") or {}
    return ObservedOtherPod(
        namespace=meta.get("namespace", "") or "", name=meta.get("name", "") or "", uid=meta.get("uid", "") or "",
        node=spec.get("nodeName") or None, scheduler_name=str(spec.get("schedulerName") or ""),
        phase=str((raw.get("status") or {}).get("phase") or "Pending"),
        requests=_to_resource_amounts(pod_requests(spec)),
        resource_version=str(meta.get("resourceVersion", "")),
    )


def _parse_pod(raw: Mapping[str, Any]) -> ObservedPod:
    meta, spec = _meta(raw), raw.get("spec") or {}
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    pod_group = annotations.get(POD_GROUP_ANNOTATION) or None
    queue = labels.get(QUEUE_LABEL) or None
    if queue is None and pod_group is None:
        raise _Bad(f"metadata.labels[{QUEUE_LABEL}]",
                   f"is required (or annotation {POD_GROUP_ANNOTATION} naming a PodGroup with a queue)")
    fraction: float | None = None
    if GPU_FRACTION_ANNOTATION in annotations:
        text = annotations[GPU_FRACTION_ANNOTATION]
        field = f"metadata.annotations[{GPU_FRACTION_ANNOTATION}]"
        try:
            fraction = float(text)
        except (TypeError, ValueError) as exc:
            raise _Bad(field, "must be a number in (0, 1]", text) from exc
        if not 0 < fraction <= 1:
            raise _Bad(field, "must be a number in (0, 1]", text)
    memory_mib: int | None = None
    if GPU_MEMORY_ANNOTATION in annotations:
        text = annotations[GPU_MEMORY_ANNOTATION]
        field = f"metadata.annotations[{GPU_MEMORY_ANNOTATION}]"
        if not str(text).isdigit() or int(text) <= 0:
            raise _Bad(field, "must be a whole number of MiB greater than 0", text)
        memory_mib = int(text)
    devices = 1
    if GPU_FRACTION_NUM_DEVICES_ANNOTATION in annotations:
        text = annotations[GPU_FRACTION_NUM_DEVICES_ANNOTATION]
        if not str(text).isdigit() or int(text) < 1:
            raise _Bad(f"metadata.annotations[{GPU_FRACTION_NUM_DEVICES_ANNOTATION}]",
                       "must be a whole number of devices, at least 1", text)
        devices = int(text)
    requests = _to_resource_amounts(pod_requests(spec))
    if (fraction is not None or memory_mib is not None) and requests.gpus:
        raise _Bad(f"spec.containers[*].resources.requests[{GPU_RESOURCE}]",
                   f"must not be set together with the {GPU_FRACTION_ANNOTATION}/{GPU_MEMORY_ANNOTATION} "
                   "annotations", requests.gpus)
    if requests.gpus and requests.gpus != int(requests.gpus):
        raise _Bad(f"spec.containers[*].resources.requests[{GPU_RESOURCE}]",
                   f"must be whole devices (use the {GPU_FRACTION_ANNOTATION} annotation for a share)",
                   requests.gpus)
    priority = spec.get("priority")
    try:
        tolerations = parse_tolerations(spec.get("tolerations"))
        affinity = parse_affinity(spec.get("affinity"))
        host_ports = parse_host_ports(spec)
    except ConstraintError as bad:
        raise _Bad(bad.field, bad.rule, bad.value) from bad
    return ObservedPod(
        namespace=meta.get("namespace", "") or "",
        name=meta.get("name", ""),
        uid=meta.get("uid", "") or "",
        node=spec.get("nodeName") or None,
        phase=(raw.get("status") or {}).get("phase") or "Pending",
        state=_pod_state(raw),
        queue=queue,
        pod_group=pod_group,
        sub_group=labels.get(SUBGROUP_LABEL) or None,
        priority_class=spec.get("priorityClassName") or None,
        priority=int(priority) if isinstance(priority, int) else None,
        requests=requests,
        gpu_fraction=fraction,
        gpu_memory_mib=memory_mib,
        gpu_fraction_num_devices=devices,
        gpu_groups=gpu_sharing.groups_of(labels),
        labels=labels,
        node_selector=dict(spec.get("nodeSelector") or {}),
        created_at=_time(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        deleted_at=_time(meta.get("deletionTimestamp"), "metadata.deletionTimestamp"),
        resource_version=str(meta.get("resourceVersion", "")),
        tolerations=tolerations,
        affinity=affinity,
        host_ports=host_ports,
        task_priority=_task_priority(labels.get(TASK_PRIORITY_LABEL)),
        config_maps=_required_config_maps(spec),
        claims=tuple((f"spec.volumes[{i}].persistentVolumeClaim.claimName", str(v["persistentVolumeClaim"]["claimName"]))
                     for i, v in enumerate(spec.get("volumes") or [])
                     if isinstance(v, Mapping) and isinstance(v.get("persistentVolumeClaim"), Mapping)
                     and v["persistentVolumeClaim"].get("claimName")),
        owned=bool(meta.get("ownerReferences")),
        resource_claims=_resource_claims(spec, raw.get("status") or {}),
    )


def resource_claim_names(raw: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of the ResourceClaims a pod (as the API returns it) uses, those of its templates' claims
    once made; () when it names none or its spec.resourceClaims cannot be read."""
    try:
        return tuple(claim for _, claim, _ in _resource_claims(raw.get("spec") or {}, raw.get("status") or {}) if claim)
    except _Bad:
        return ()


def _resource_claims(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[tuple[str, str, str], ...]:
    """A pod's spec.resourceClaims as (entry, claim, template); a template's claim is the one
    status.resourceClaimStatuses names for the entry ("" until the resource-claim controller made it)."""
    made = {str(s.get("name")): str(s.get("resourceClaimName") or "") for s in status.get("resourceClaimStatuses") or []
            if isinstance(s, Mapping)}
    out: list[tuple[str, str, str]] = []
    for i, entry in enumerate(spec.get("resourceClaims") or []):
        if not isinstance(entry, Mapping) or not entry.get("name"):
            raise _Bad(f"spec.resourceClaims[{i}].name", "is required", entry)
        name, template = str(entry["name"]), str(entry.get("resourceClaimTemplateName") or "")
        claim = str(entry.get("resourceClaimName") or "")
        if bool(claim) == bool(template):
            raise _Bad(f"spec.resourceClaims[{i}]", "must name exactly one of resourceClaimName and "
                       "resourceClaimTemplateName", entry)
        out.append((name, claim or made.get(name, ""), template))
    return tuple(out)


def _task_priority(text: str | None) -> int | None:
    """KAI's task order label: a whole number orders the pod inside its job; anything else counts as absent."""
    try:
        return int(str(text).strip()) if text is not None else None
    except ValueError:
        return None


def _required_config_maps(spec: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(field, name) of each ConfigMap the pod cannot start without (references not marked optional)."""
    out: list[tuple[str, str]] = []
    for i, volume in enumerate(spec.get("volumes") or []):
        source = volume.get("configMap") if isinstance(volume, Mapping) else None
        if isinstance(source, Mapping) and source.get("name") and not source.get("optional"):
            out.append((f"spec.volumes[{i}].configMap.name", str(source["name"])))
    for kind in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(kind) or []):
            if not isinstance(container, Mapping):
                continue
            for j, env_from in enumerate(container.get("envFrom") or []):
                ref = env_from.get("configMapRef") if isinstance(env_from, Mapping) else None
                if isinstance(ref, Mapping) and ref.get("name") and not ref.get("optional"):
                    out.append((f"spec.{kind}[{i}].envFrom[{j}].configMapRef.name", str(ref["name"])))
            for j, env in enumerate(container.get("env") or []):
                ref = ((env.get("valueFrom") or {}).get("configMapKeyRef")) if isinstance(env, Mapping) else None
                if isinstance(ref, Mapping) and ref.get("name") and not ref.get("optional"):
                    out.append((f"spec.{kind}[{i}].env[{j}].valueFrom.configMapKeyRef.name", str(ref["name"])))
    return tuple(out)


@_never_raises("Node")
def parse_node(raw: Mapping[str, Any]) -> ObservedNode | Unreadable:
    try:
        meta, spec, status = _meta(raw), raw.get("spec") or {}, raw.get("status") or {}
        labels = dict(meta.get("labels") or {})
        allocatable = _to_resource_amounts(_amounts(status.get("allocatable") or {}, "status.allocatable"))
        if allocatable.gpus != int(allocatable.gpus):
            raise _Bad(f"status.allocatable[{GPU_RESOURCE}]", "must be whole devices", allocatable.gpus)
        gpu_memory: int | None = None
        if GPU_MEMORY_LABEL in labels:
            text = labels[GPU_MEMORY_LABEL]
            if not str(text).isdigit():
                raise _Bad(f"metadata.labels[{GPU_MEMORY_LABEL}]", "must be a whole number of MiB", text)
            gpu_memory = int(text)
            if gpu_memory >= _BYTES_THRESHOLD_MIB:
                gpu_memory = bytes_to_mib(gpu_memory)
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        taints = []
        for i, t in enumerate(spec.get("taints") or []):
            if not t.get("key"):
                raise _Bad(f"spec.taints[{i}].key", "is required")
            try:
                effect = check_taint_effect(t.get("effect"), f"spec.taints[{i}].effect")
            except ConstraintError as bad:
                raise _Bad(bad.field, bad.rule, bad.value) from bad
            taints.append(Taint(str(t["key"]), str(t.get("value", "") or ""), effect))
        return ObservedNode(
            name=meta.get("name", ""),
            allocatable=allocatable,
            gpu_product=labels.get(GPU_PRODUCT_LABEL) or None,
            gpu_memory_mib=gpu_memory,
            mig_enabled=labels.get(MIG_ENABLED_LABEL) == "true" or bool(allocatable.mig),
            mig_strategy=labels.get(MIG_STRATEGY_LABEL) or None,
            labels=labels,
            ready=ready,
            unschedulable=bool(spec.get("unschedulable")),
            taints=tuple(taints),
            resource_version=str(meta.get("resourceVersion", "")),
            uid=meta.get("uid", "") or "",
        )
    except _Bad as bad:
        return _unreadable("Node", raw, bad)


def _optional_int(spec: Mapping[str, Any], key: str, field: str, minimum: int = 0) -> int | None:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _Bad(field, f"must be a whole number, at least {minimum}", value)
    return value


@_never_raises("PodGroup")
def parse_pod_group(raw: Mapping[str, Any]) -> ObservedPodGroup | Unreadable:
    try:
        meta, spec = _meta(raw), raw.get("spec") or {}
        queue = spec.get("queue")
        if not isinstance(queue, str) or not queue:
            raise _Bad("spec.queue", "is required: the name of a leaf queue", queue)
        min_member = _optional_int(spec, "minMember", "spec.minMember")
        min_sub_group = _optional_int(spec, "minSubGroup", "spec.minSubGroup")
        preemptibility = spec.get("preemptibility") or None
        if preemptibility not in (None, "preemptible", "non-preemptible"):
            raise _Bad("spec.preemptibility", "must be 'preemptible', 'non-preemptible' or empty", preemptibility)
        sub_groups = []
        for i, sg in enumerate(spec.get("subGroups") or []):
            if not isinstance(sg, Mapping) or not sg.get("name"):
                raise _Bad(f"spec.subGroups[{i}].name", "is required", sg)
            sub_groups.append(SubGroup(
                name=sg["name"],
                min_member=_optional_int(sg, "minMember", f"spec.subGroups[{i}].minMember"),
                parent=sg.get("parent") or None,
                min_sub_group=_optional_int(sg, "minSubGroup", f"spec.subGroups[{i}].minSubGroup"),
                topology_constraint=_topology_constraint(sg.get("topologyConstraint"),
                                                         f"spec.subGroups[{i}].topologyConstraint"),
            ))
        names = [sg.name for sg in sub_groups]
        if len(set(names)) != len(names):
            raise _Bad("spec.subGroups[*].name", "must be unique within the PodGroup", names)
        for i, sg in enumerate(sub_groups):
            if sg.parent is not None and sg.parent not in names:
                raise _Bad(f"spec.subGroups[{i}].parent", "must name another subgroup of this PodGroup", sg.parent)
        topology = _topology_constraint(spec.get("topologyConstraint"), "spec.topologyConstraint")
        owner = next((ref for ref in meta.get("ownerReferences") or [] if isinstance(ref, Mapping)), None)
        stamps, notes = _stamps(meta)
        return ObservedPodGroup(
            namespace=meta.get("namespace", "") or "",
            name=meta.get("name", ""),
            uid=meta.get("uid", "") or "",
            min_member=1 if min_member is None else min_member,
            min_sub_group=min_sub_group,
            queue=queue,
            priority_class=spec.get("priorityClassName") or None,
            preemptibility=preemptibility,
            sub_groups=tuple(sub_groups),
            topology_constraint=topology,
            mark_unschedulable=spec.get("markUnschedulable", True) is not False,
            created_at=_time(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
            resource_version=str(meta.get("resourceVersion", "")),
            labels=dict(meta.get("labels") or {}),
            preemption_delay_s=_duration(spec.get("preemptionDelay"), "spec.preemptionDelay"),
            staleness_grace_s=_duration(spec.get("stalenessGracePeriod"), "spec.stalenessGracePeriod"),
            owner=({"kind": str(owner.get("kind", "")), "name": str(owner.get("name", "")),
                    "uid": str(owner.get("uid", ""))} if owner else None),
            last_start_at=stamps["last_start_at"],
            last_eviction_at=stamps["last_eviction_at"],
            stale_since=stamps["stale_since"],
            notes=notes,
            said=pod_group_said(raw),
        )
    except _Bad as bad:
        return _unreadable("PodGroup", raw, bad)


def pod_group_said(raw: Mapping[str, Any]) -> dict[str, Any]:
    """What a PodGroup says of what kaiweb writes on it: ``annotations`` (KAI's stamps, kaiweb's place
    in line and start estimate, and its node pool assignment, key → text) and ``conditions`` (status.schedulingConditions, the first
    `MAX_SCHEDULING_CONDITIONS` mappings)."""
    annotations = _meta(raw).get("annotations") or {}
    status = raw.get("status") if isinstance(raw.get("status"), Mapping) else {}
    conditions = status.get("schedulingConditions") if isinstance(status, Mapping) else None
    kept = ({key: 64 for _, key in POD_GROUP_STAMPS} | dict.fromkeys(LINE_ANNOTATIONS, LINE_ANNOTATION_MAX)
            | {NODE_POOL_ASSIGNMENT_ANNOTATION: LINE_ANNOTATION_MAX})
    return {"annotations": {key: str(annotations[key])[:longest] for key, longest in kept.items()
                            if isinstance(annotations, Mapping) and annotations.get(key)},
            "conditions": [dict(c) for c in (conditions if isinstance(conditions, list) else [])
                           if isinstance(c, Mapping)][:MAX_SCHEDULING_CONDITIONS]}


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_MAX_DURATION_S = 10 * 365 * 24 * 3600.0


def _duration(value: Any, field: str) -> float | None:
    """A Kubernetes duration ("90s", "1m30s", "2h") in seconds; None when unset."""
    seconds = _read_duration(value, field, _DURATION_PART, _DURATION_UNITS, "a duration such as 30s, 5m or 1h30m")
    if seconds is not None and seconds > _MAX_DURATION_S:
        raise _Bad(field, "must be at most ten years", value)
    return seconds


def _read_duration(value: Any, field: str, part: re.Pattern[str], units: Mapping[str, float],
                   example: str) -> float | None:
    """Seconds of a duration written as number-unit parts matching ``part`` (``units``: seconds per
    unit); None when unset; `_Bad` naming ``example`` when the text is anything else."""
    if value is None or value == "":
        return None
    text = str(value).strip()
    parts = part.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise _Bad(field, f"must be {example}", value)
    return sum(float(n) * units[u] for n, u in parts)


def _topology_constraint(tc: Any, field: str) -> TopologyConstraint | None:
    if not tc:
        return None
    if not isinstance(tc, Mapping):
        raise _Bad(field, "must be an object with topology, requiredTopologyLevel, preferredTopologyLevel", tc)
    if not tc.get("topology") and (tc.get("requiredTopologyLevel") or tc.get("preferredTopologyLevel")):
        raise _Bad(f"{field}.topology", "is required with a topology level", tc)
    if not tc.get("topology"):
        return None
    return TopologyConstraint(topology=str(tc.get("topology")), required_level=tc.get("requiredTopologyLevel") or None,
                              preferred_level=tc.get("preferredTopologyLevel") or None)


@_never_raises("Topology")
def parse_topology(raw: Mapping[str, Any]) -> ObservedTopology | Unreadable:
    try:
        levels = (raw.get("spec") or {}).get("levels")
        if not isinstance(levels, list) or not levels:
            raise _Bad("spec.levels", "must list at least one level", levels)
        keys: list[str] = []
        aliases: list[str] = []
        for i, level in enumerate(levels):
            key = level.get("nodeLabel") if isinstance(level, Mapping) else None
            if not isinstance(key, str) or not key:
                raise _Bad(f"spec.levels[{i}].nodeLabel", "is required: a node label key", level)
            keys.append(key)
            alias = level.get("alias") or ""
            if not isinstance(alias, str):
                raise _Bad(f"spec.levels[{i}].alias", "must be a string: another name of the level", alias)
            aliases.append(alias)
        # KAI's Topology webhook: an alias names one level only, and never another level's label
        for i, alias in enumerate(aliases):
            if alias and alias in aliases[:i]:
                raise _Bad(f"spec.levels[{i}].alias", f"must be unique within the topology: "
                           f"spec.levels[{aliases.index(alias)}].alias is {alias!r} too", alias)
            if alias in keys:
                raise _Bad(f"spec.levels[{i}].alias", f"must not be a level's nodeLabel: "
                           f"spec.levels[{keys.index(alias)}].nodeLabel is {alias!r}", alias)
        return ObservedTopology(name=_meta(raw).get("name", ""), levels=tuple(keys), aliases=tuple(aliases))
    except _Bad as bad:
        return _unreadable("Topology", raw, bad)


@_never_raises("Queue")
def parse_queue(raw: Mapping[str, Any]) -> ObservedQueue | Unreadable:
    """A Queue the cluster holds, read as KAI reads it (``queue_crd.read``, lenient)."""
    reading = queue_crd.read(raw, strict=False)
    if reading.spec is None:
        first = reading.problems[0]
        return _unreadable("Queue", raw, _Bad(first.field, first.message, first.value))
    meta = _meta(raw)
    return ObservedQueue(spec=reading.spec, uid=meta.get("uid", "") or "",
                         resource_version=str(meta.get("resourceVersion", "")), status=dict(raw.get("status") or {}))


@_never_raises("PriorityClass")
def parse_priority_class(raw: Mapping[str, Any]) -> ObservedPriorityClass | Unreadable:
    meta = _meta(raw)
    value = raw.get("value")
    if isinstance(value, bool) or not isinstance(value, int):
        return _unreadable("PriorityClass", raw, _Bad("value", "must be a whole number", value))
    return ObservedPriorityClass(name=meta.get("name", ""), value=value,
                                 global_default=bool(raw.get("globalDefault")),
                                 preemption_policy=raw.get("preemptionPolicy") or None,
                                 resource_version=str(meta.get("resourceVersion", "")))



def plural_of(kind: str) -> str:
    """The resource name of a kind, by Kubernetes' own rule for the kinds we read."""
    low = kind.lower()
    if low.endswith(("s", "x", "ch", "sh")):
        return low + "es"
    if low.endswith("y") and low[-2:-1] not in "aeiou":
        return low[:-1] + "ies"
    return low + "s"
