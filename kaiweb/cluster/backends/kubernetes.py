"""The Kubernetes backend of the cluster gateway, on the official client (`kubernetes` 36.0.3).

Reads come back as raw JSON (``_preload_content=False``) and are parsed here into the neutral
objects of `kaiweb.cluster.backends.types`; the same parsers serve the watcher, whose events
carry raw objects too. One parser per kind returns either the object or an `Unreadable`, so a
bad object never hides the others.

Every call goes through `KubernetesGateway._call`: 429, 5xx, dropped connections and timeouts are
retried with bounded exponential backoff (honouring ``Retry-After``), then raised as
`ClusterUnavailable` / `ClusterTimeout`; other 4xx answers are raised as `ClusterRejected`
unless the caller treats them as "already done" (bind/evict idempotency).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.utils import parse_quantity

from kaiweb.cluster.backends import device_reports, gpu_sharing
from kaiweb.cluster.backends.device_reports import DeviceReports
from kaiweb.cluster.backends.pod_constraints import (
    ConstraintError,
    check_taint_effect,
    parse_affinity,
    parse_host_ports,
    parse_tolerations,
)
from kaiweb.cluster.backends.types import (
    BIND_KEY_ANNOTATION,
    DISRUPTION_TARGET,
    EVICT_BY_DELETE,
    EVICT_BY_EVICTION_API,
    EVICTION_MODE_RULE,
    EVICTION_MODES,
    GPU_FRACTION_ANNOTATION,
    GPU_FRACTION_NUM_DEVICES_ANNOTATION,
    GPU_GROUP_LABEL,
    GPU_MEMORY_ANNOTATION,
    GPU_MEMORY_LABEL,
    GPU_PORTION_ANNOTATION,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    MAX_SCHEDULING_CONDITIONS,
    MIG_ENABLED_LABEL,
    MIG_RESOURCE_PREFIX,
    MIG_STRATEGY_LABEL,
    MULTI_GPU_GROUP_PREFIX,
    POD_GROUP_ANNOTATION,
    POD_GROUP_STAMPS,
    PREEMPTION_BY_SCHEDULER,
    QUEUE_LABEL,
    SUBGROUP_LABEL,
    ActionOutcome,
    ActionResult,
    BindAction,
    EvictAction,
    Listing,
    ObservedNode,
    ObservedOtherPod,
    ObservedPod,
    ObservedPodGroup,
    ObservedPriorityClass,
    ObservedQueue,
    ObservedShard,
    ObservedTopology,
    PodRef,
    PodState,
    QueueStatusUpdate,
    QueueSyncAction,
    ResourceAmounts,
    SubGroup,
    Taint,
    Unreadable,
    UsageDbConfig,
)
from kaiweb.cluster.errors import (
    Capability,
    ClusterError,
    ClusterRejected,
    ClusterTimeout,
    ClusterUnavailable,
)
from kaiweb.core.cron import parse_cron
from scheduler_core import queue_crd
from scheduler_core.model import ACTIONS, QueueSpec, TopologyConstraint
from scheduler_core.units import bytes_to_mib

logger = logging.getLogger(__name__)

QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL = "scheduling.run.ai", "v2", "queues"
PODGROUP_GROUP, PODGROUP_VERSION, PODGROUP_PLURAL = "scheduling.run.ai", "v2alpha2", "podgroups"
KAI_GROUP = "kai.scheduler"
TASK_PRIORITY_LABEL = "kai.scheduler/task-priority"
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
PAGE_SIZE = 500
# Concurrent API calls of one bulk `KubernetesGateway.apply` (KAI_BIND_CONCURRENCY).
DEFAULT_BIND_CONCURRENCY = 32
# How long a sharer's bind waits for a new reservation pod to report its device (KAI's binder flag
# --resource-reservation-allocation-timeout, whose default is 40 s); 0 binds without waiting, which
# the default reservation image (pause, reporting no device) needs.
DEFAULT_RESERVATION_TIMEOUT = 0.0
# While binds may wait for device reports: at most this many threads beyond the API calls' bound, a
# thread per device waiting (a wait holds a thread, not an API call), so that every reservation pod of
# a fill is made before the first report comes back.
MAX_WAITING_THREADS = 1024
# Connections kept open beyond the bind pool: the watcher's streams and the pod-grouper's writers.
SPARE_CONNECTIONS = 16
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
    )


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
    """What a PodGroup says of what kaiweb writes on it: ``annotations`` (KAI's stamps, key → text)
    and ``conditions`` (status.schedulingConditions, the first `MAX_SCHEDULING_CONDITIONS` mappings)."""
    annotations = _meta(raw).get("annotations") or {}
    status = raw.get("status") if isinstance(raw.get("status"), Mapping) else {}
    conditions = status.get("schedulingConditions") if isinstance(status, Mapping) else None
    return {"annotations": {key: str(annotations[key])[:64] for _, key in POD_GROUP_STAMPS
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


# How the shard's evictions are carried out, read from SchedulingShard spec.args. KAI's operator
# passes on to its scheduler only the keys that are its scheduler's flags (`buildArgsList` in
# pkg/operator/operands/scheduler), so kaiweb's own key stays in the object when moving back to KAI.
EVICTION_MODE_ARG = "kaiweb-eviction-mode"  # delete (KAI's behaviour, when absent) or evict
UPDATE_POD_EVICTION_CONDITION_ARG = "update-pod-eviction-condition"  # KAI's flag, a Go bool
_GO_BOOLS = {**dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
             **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False)}


# The spec.args keys kaiweb reads (the rest are KAI scheduler flags it does not apply): its own
# eviction mode and KAI's flags for the DisruptionTarget condition (both above),
# max-consolidation-preemptees (scheduling.cycle) and restrict-node-scheduling (scheduling.adapters).
SHARD_ARGS_READ = (EVICTION_MODE_ARG, UPDATE_POD_EVICTION_CONDITION_ARG, "max-consolidation-preemptees",
                   "restrict-node-scheduling")
# Every field of KAI's SchedulingShardSpec (kai.scheduler/v1, up to v0.18). Those applied are read by
# `parse_shard`; `_shard_unsupported` validates the others and says why each is not applied.
SHARD_SPEC_FIELDS = ("args", "placementStrategy", "partitionLabelValue", "queueDepthPerAction", "minRuntime",
                     "kValue", "usageDBConfig", "scenarioSearchBudgets", "plugins", "actions", "goMemLimitRatio",
                     "goMemLimit")
# KAI's actions and their priorities when the object overrides none (kai.scheduler/v1
# `defaultActionPriorities`): a higher priority runs first; consolidation is off by default when
# either placement strategy is spread.
KAI_ACTION_PRIORITIES = {"allocate": 500, "consolidation": 400, "reclaim": 300, "preempt": 200,
                         "stalegangeviction": 100}
# KAI's scenario search budgets when the object sets none (pkg/common/constants); 0s = unlimited
SEARCH_BUDGET_DEFAULTS: dict[str, Any] = {"maxActionSearchDuration": {"default": "5m"}, "maxJobSearchDuration": "4m",
                          "minJobSearchDuration": "0s",
                          "maxGeneratorSearchDuration": {"default": "2m", "NodeLocalGreedy": "30s",
                                                         "MultiNodeGang": "2m"}}
SEARCH_BUDGET_ACTIONS = ("default", "reclaim", "preempt", "consolidation")
USAGE_WINDOW_TYPES = ("sliding", "tumbling", "cron")
_PROM_DURATION_PART = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_PROM_DURATION_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0,
                        "y": 365 * 86400.0}


def _prom_duration(value: Any, field: str) -> float | None:
    """A Prometheus duration ("1w", "7d", "12h30m") in seconds; None when unset."""
    seconds = _read_duration(value, field, _PROM_DURATION_PART, _PROM_DURATION_UNITS,
                             "a Prometheus duration such as 1w, 7d or 12h")
    if seconds is None:
        return None
    if seconds <= 0 or seconds > _MAX_DURATION_S:
        raise _Bad(field, "must be more than 0 and at most ten years", value)
    return seconds


def _is_rfc3339(value: Any) -> bool:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).tzinfo is not None
    except ValueError:
        return False


def _mapping(value: Any, field: str, rule: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _Bad(field, rule, value)
    return value


def _queue_depths(value: Any) -> tuple[tuple[str, int], ...]:
    """spec.queueDepthPerAction: KAI's action names → jobs per queue the action tries (≥ 0)."""
    depths = _mapping(value, "spec.queueDepthPerAction", "must map action names to whole numbers")
    out = []
    for action, depth in sorted(depths.items()):
        field = f"spec.queueDepthPerAction[{action}]"
        if action not in ACTIONS:
            raise _Bad(field, f"must name one of KAI's actions: {', '.join(ACTIONS)}", action)
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise _Bad(field, "must be a whole number, at least 0 (the jobs of each queue the action tries)", depth)
        out.append((str(action), depth))
    return tuple(out)


def _search_budgets(value: Any) -> str:
    """spec.scenarioSearchBudgets validated as KAI's operator does; the budgets in effect (KAI's
    defaults where unset), as text for the report."""
    budgets = _mapping(value, "spec.scenarioSearchBudgets", "must be an object of search durations")
    known = tuple(SEARCH_BUDGET_DEFAULTS)
    for key in budgets:
        if key not in known:
            raise _Bad(f"spec.scenarioSearchBudgets.{key}", f"is not a budget; known: {', '.join(known)}", key)
    effective: dict[str, Any] = {}
    for key in ("maxActionSearchDuration", "maxGeneratorSearchDuration"):
        given = _mapping(budgets.get(key), f"spec.scenarioSearchBudgets.{key}", "must map names to durations")
        for name, duration in given.items():
            field = f"spec.scenarioSearchBudgets.{key}[{name}]"
            if key == "maxActionSearchDuration" and name not in SEARCH_BUDGET_ACTIONS:
                raise _Bad(field, f"must be one of {', '.join(SEARCH_BUDGET_ACTIONS)}", name)
            _duration(duration, field)
        effective[key] = {**SEARCH_BUDGET_DEFAULTS[key], **{str(k): str(v) for k, v in given.items()}}
    seconds = {}
    for key in ("maxJobSearchDuration", "minJobSearchDuration"):
        given_text = budgets.get(key)
        seconds[key] = _duration(given_text, f"spec.scenarioSearchBudgets.{key}")
        effective[key] = str(given_text) if given_text not in (None, "") else SEARCH_BUDGET_DEFAULTS[key]
    low, high = seconds["minJobSearchDuration"], seconds["maxJobSearchDuration"]
    if low is not None and high is not None and high > 0 and low >= high:
        raise _Bad("spec.scenarioSearchBudgets.minJobSearchDuration",
                   "must be less than maxJobSearchDuration (unless that is 0s, unlimited)",
                   budgets.get("minJobSearchDuration"))
    return json.dumps(effective, sort_keys=True)


# KAI's usage database client (pkg/scheduler/cache/usagedb/prometheus): the metric (or PromQL) each
# resource's allocation and capacity is read from, by its extraParams key, and KAI's default.
USAGE_DB_ALLOCATION_METRICS = {"gpu": ("gpuAllocationMetric", "kai_queue_allocated_gpus"),
                               "cpu": ("cpuAllocationMetric", "kai_queue_allocated_cpu_cores"),
                               "memory": ("memoryAllocationMetric", "kai_queue_allocated_memory_bytes")}
USAGE_DB_CAPACITY_METRICS = {
    "gpu": ("gpuCapacityMetric", 'sum(kube_node_status_capacity{resource="nvidia_com_gpu"})'),
    "cpu": ("cpuCapacityMetric", 'sum(kube_node_status_capacity{resource="cpu"})'),
    "memory": ("memoryCapacityMetric", 'sum(kube_node_status_capacity{resource="memory"})')}
USAGE_DB_EXTRA_DURATIONS = {"usageQueryTimeout": 10.0, "queryResolution": 60.0}
USAGE_DB_MAX_QUERY_TIMEOUT_S = 60.0
USAGE_DB_MAX_STEPS = 100_000  # window / queryResolution: the samples one query sums per series


def _usage_db(value: Any) -> tuple[float | None, float | None, UsageDbConfig | None, list[tuple[str, str]]]:
    """spec.usageDBConfig validated: (window seconds, half-life seconds, the Prometheus source kaiweb
    reads or None, what is not applied)."""
    config = _mapping(value, "spec.usageDBConfig", "must be an object with clientType and usageParams")
    if not config:
        return None, None, None, []
    client_type = config.get("clientType")
    if not isinstance(client_type, str) or not client_type:
        raise _Bad("spec.usageDBConfig.clientType", "is required: the usage database's client, e.g. prometheus",
                   client_type)
    for key in ("connectionString", "connectionStringEnvVar"):
        if not isinstance(config.get(key) or "", str):
            raise _Bad(f"spec.usageDBConfig.{key}", "must be a string", config.get(key))
    url = str(config.get("connectionString") or "").strip()
    if url and not url.startswith(("http://", "https://")):
        raise _Bad("spec.usageDBConfig.connectionString", "must be a URL starting with http:// or https://", url)
    unsupported: list[tuple[str, str]] = []
    if client_type != "prometheus":
        unsupported.append(("spec.usageDBConfig.clientType",
                            f"kaiweb reads a usage database of client type prometheus only; time-based fair "
                            f"share reads kaiweb's own usage accounting, not the {client_type} one"))
    params = _mapping(config.get("usageParams"), "spec.usageDBConfig.usageParams", "must be an object")
    field = "spec.usageDBConfig.usageParams"
    window = _prom_duration(params.get("windowSize"), f"{field}.windowSize")
    half_life = _duration(params.get("halfLifePeriod"), f"{field}.halfLifePeriod")
    window_type = params.get("windowType") or "sliding"
    if window_type not in USAGE_WINDOW_TYPES:
        raise _Bad(f"{field}.windowType", f"must be one of {', '.join(USAGE_WINDOW_TYPES)}", window_type)
    start = params.get("tumblingWindowStartTime")
    if start not in (None, "") and not _is_rfc3339(start):
        raise _Bad(f"{field}.tumblingWindowStartTime", "must be an RFC 3339 time", start)
    if window_type == "tumbling" and start in (None, ""):
        raise _Bad(f"{field}.tumblingWindowStartTime", "is required with windowType tumbling (KAI's rule)", start)
    cron = str(params.get("cronString") or "")
    if window_type == "cron":
        try:
            parse_cron(cron)
        except ValueError as exc:
            raise _Bad(f"{field}.cronString", f"must be a cron string of five fields ({exc})", cron) from exc
    durations = {}
    for key in ("fetchInterval", "stalenessPeriod", "waitTimeout"):
        durations[key] = _duration(params.get(key), f"{field}.{key}")
        if durations[key] == 0:
            raise _Bad(f"{field}.{key}", "must be more than 0s", params.get(key))
    extra = _mapping(params.get("extraParams"), f"{field}.extraParams", "must be a map of strings")
    metrics: dict[str, dict[str, str]] = {"allocation": {}, "capacity": {}}
    known = {key for key, _ in (*USAGE_DB_ALLOCATION_METRICS.values(), *USAGE_DB_CAPACITY_METRICS.values())}
    for kind, table in (("allocation", USAGE_DB_ALLOCATION_METRICS), ("capacity", USAGE_DB_CAPACITY_METRICS)):
        for resource, (key, default) in table.items():
            text = extra.get(key, default)
            if not isinstance(text, str) or not text.strip() or len(text) > 1000:
                raise _Bad(f"{field}.extraParams[{key}]", "must be a metric name or PromQL expression "
                           "(at most 1000 characters)", text)
            metrics[kind][resource] = text.strip()
    extra_seconds = {}
    for key, default in USAGE_DB_EXTRA_DURATIONS.items():
        extra_seconds[key] = _duration(extra.get(key), f"{field}.extraParams[{key}]") or default
    if extra_seconds["queryResolution"] < 1.0:
        raise _Bad(f"{field}.extraParams[queryResolution]", "must be at least 1s", extra.get("queryResolution"))
    if extra_seconds["usageQueryTimeout"] > USAGE_DB_MAX_QUERY_TIMEOUT_S:
        raise _Bad(f"{field}.extraParams[usageQueryTimeout]",
                   f"must be at most {USAGE_DB_MAX_QUERY_TIMEOUT_S:.0f}s (kaiweb's bound)", extra.get("usageQueryTimeout"))
    if (window or 7 * 86400.0) / extra_seconds["queryResolution"] > USAGE_DB_MAX_STEPS:
        raise _Bad(f"{field}.extraParams[queryResolution]",
                   f"must leave at most {USAGE_DB_MAX_STEPS} steps in windowSize (kaiweb's bound)",
                   extra.get("queryResolution"))
    for key in sorted(set(extra) - known - set(USAGE_DB_EXTRA_DURATIONS)):
        unsupported.append((f"{field}.extraParams[{key}]", "not a parameter of KAI's Prometheus client that "
                            "kaiweb knows"))
    if window_type != "tumbling" and start not in (None, ""):
        unsupported.append((f"{field}.tumblingWindowStartTime", f"read only with windowType tumbling, not {window_type}"))
    if window_type != "cron" and cron:
        unsupported.append((f"{field}.cronString", f"read only with windowType cron, not {window_type}"))
    if durations["waitTimeout"] is not None:
        unsupported.append((f"{field}.waitTimeout", "a cycle never waits for the usage database: until its first "
                            "answer (or when it fails) time-based fair share reads kaiweb's own usage accounting"))
    if client_type != "prometheus":
        reported = {f for f, _ in unsupported}
        unsupported += [(f"{field}.{key}", "a setting of the usage database, which kaiweb does not read")
                        for key in ("windowType", "tumblingWindowStartTime", "cronString", "fetchInterval",
                                    "stalenessPeriod", "extraParams")
                        if params.get(key) not in (None, "", {}) and f"{field}.{key}" not in reported]
        return window, half_life, None, unsupported
    fetch = durations["fetchInterval"] or 60.0
    source = UsageDbConfig(
        client_type=client_type, connection_string=url,
        connection_string_env_var=str(config.get("connectionStringEnvVar") or ""), window_type=window_type,
        tumbling_start=str(start or "") if window_type == "tumbling" else "",
        cron=cron if window_type == "cron" else "", fetch_interval_s=fetch,
        staleness_s=max(fetch, durations["stalenessPeriod"] or 300.0),  # KAI: never less than the interval
        query_timeout_s=extra_seconds["usageQueryTimeout"], query_resolution_s=extra_seconds["queryResolution"],
        allocation_metrics=tuple(sorted(metrics["allocation"].items())),
        capacity_metrics=tuple(sorted(metrics["capacity"].items())))
    return window, half_life, source, unsupported


def _overrides(value: Any, field: str, with_arguments: bool) -> list[str]:
    """spec.plugins / spec.actions: name → {enabled, priority[, arguments]}, validated; the names."""
    entries = _mapping(value, field, "must map names to objects with enabled and priority")
    for name, entry in entries.items():
        entry = _mapping(entry, f"{field}[{name}]", "must be an object with enabled and priority")
        if not isinstance(entry.get("enabled", True), bool):
            raise _Bad(f"{field}[{name}].enabled", "must be true or false", entry.get("enabled"))
        priority = entry.get("priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise _Bad(f"{field}[{name}].priority", "must be a whole number", priority)
        if with_arguments:
            _mapping(entry.get("arguments"), f"{field}[{name}].arguments", "must be a map of strings")
    return sorted(str(n) for n in entries)


def _shard_actions(spec: Mapping[str, Any], gpu: str, cpu: str) -> tuple[tuple[str, ...] | None, list[tuple[str, str]]]:
    """spec.actions as KAI's operator resolves it: its default actions (consolidation off with a
    spread placement), each override's ``enabled`` and ``priority`` merged in, the enabled ones run by
    descending priority, then by name. None when the object overrides no action (the engine's own
    order, which is KAI's default). An action kaiweb does not have is reported and left out, and so is
    consolidation enabled with a spread placement (kaiweb never consolidates then)."""
    raw = spec.get("actions")
    names = _overrides(raw, "spec.actions", False)
    if not names:
        return None, []
    spread = "spread" in (gpu, cpu)
    merged = {name: {"enabled": not (name == "consolidation" and spread), "priority": priority}
              for name, priority in KAI_ACTION_PRIORITIES.items()}
    unsupported: list[tuple[str, str]] = []
    for name in names:
        entry = raw[name] or {}
        merged.setdefault(name, {"enabled": True, "priority": 0})
        merged[name].update({k: entry[k] for k in ("enabled", "priority") if entry.get(k) is not None})
        if name not in KAI_ACTION_PRIORITIES:
            unsupported.append((f"spec.actions[{name}]", f"kaiweb has no action {name}; its actions are "
                                f"{', '.join(KAI_ACTION_PRIORITIES)}"))
        elif name == "consolidation" and spread and merged[name]["enabled"]:
            unsupported.append((f"spec.actions[{name}]", "kaiweb never consolidates with a spread placement"))
    order = sorted((n for n, e in merged.items() if e["enabled"] and n in KAI_ACTION_PRIORITIES
                    and not (n == "consolidation" and spread)),
                   key=lambda n: (-int(merged[n]["priority"]), n))
    return tuple(order), unsupported


def _shard_unsupported(spec: Mapping[str, Any], args: Mapping[str, str]) -> list[tuple[str, str]]:
    """The fields the object sets that kaiweb validates but does not apply, each with the reason."""
    out: list[tuple[str, str]] = []
    out += [(f"spec.args[{key}]", "a flag of KAI's scheduler that kaiweb does not read")
            for key in sorted(args) if key not in SHARD_ARGS_READ]
    if spec.get("scenarioSearchBudgets") is not None:
        effective = _search_budgets(spec.get("scenarioSearchBudgets"))
        out.append(("spec.scenarioSearchBudgets",
                    f"KAI's wall-clock limits on its victim search ({effective}; 0s is unlimited); kaiweb's victim "
                    "search is deterministic, bounded by a number of scenarios per job and never by time, so "
                    "every budget acts as unlimited"))
    for name in _overrides(spec.get("plugins"), "spec.plugins", True):
        out.append((f"spec.plugins[{name}]", "kaiweb runs KAI's default plugins in their default order; a "
                    "shard's plugin overrides are not applied"))
    ratio = spec.get("goMemLimitRatio")
    if ratio is not None:
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio <= 1:
            raise _Bad("spec.goMemLimitRatio", "must be a number more than 0 and at most 1", ratio)
    for key in ("goMemLimitRatio", "goMemLimit"):
        if spec.get(key) is not None:
            out.append((f"spec.{key}", "the Go runtime's memory limit of KAI's scheduler process; kaiweb's "
                        "processes take theirs from the chart's resources"))
    out += [(f"spec.{key}", "not a field of KAI's SchedulingShard (kai.scheduler/v1) that kaiweb knows")
            for key in sorted(spec) if key not in SHARD_SPEC_FIELDS]
    return out


@_never_raises("SchedulingShard")
def parse_shard(raw: Mapping[str, Any]) -> ObservedShard | Unreadable:
    try:
        spec = raw.get("spec") or {}
        if not isinstance(spec, Mapping):
            raise _Bad("spec", "must be an object", spec)
        strategy = spec.get("placementStrategy") or {}
        if not isinstance(strategy, Mapping):
            raise _Bad("spec.placementStrategy", "must be an object with gpu and cpu", strategy)
        if strategy.get("gpu") not in (None, "", "binpack", "spread", "fragmentation-aware"):
            raise _Bad("spec.placementStrategy.gpu", "must be binpack, spread or fragmentation-aware", strategy.get("gpu"))
        if strategy.get("cpu") not in (None, "", "binpack", "spread"):
            raise _Bad("spec.placementStrategy.cpu", "must be binpack or spread", strategy.get("cpu"))
        args = spec.get("args") or {}
        if not isinstance(args, Mapping):
            raise _Bad("spec.args", "must be a map of strings", args)
        k_value = spec.get("kValue")
        if k_value is not None and (isinstance(k_value, bool) or not isinstance(k_value, int | float) or k_value < 0):
            raise _Bad("spec.kValue", "must be a number, at least 0", k_value)
        args = {str(k): str(v) for k, v in args.items()}
        mode = args.get(EVICTION_MODE_ARG, EVICT_BY_DELETE)
        if mode not in EVICTION_MODES:
            raise _Bad(f"spec.args[{EVICTION_MODE_ARG}]", EVICTION_MODE_RULE, mode)
        condition = args.get(UPDATE_POD_EVICTION_CONDITION_ARG, "false")
        if condition not in _GO_BOOLS:
            raise _Bad(f"spec.args[{UPDATE_POD_EVICTION_CONDITION_ARG}]",
                       "must be true or false (as KAI's flag reads it: 1, t, T, TRUE, true, True, 0, f, F, FALSE, "
                       "false, False)", condition)
        runtime = _mapping(spec.get("minRuntime"), "spec.minRuntime",
                           "must be an object with preemptMinRuntime and reclaimMinRuntime")
        depths = _queue_depths(spec.get("queueDepthPerAction"))
        window, half_life, usage_db, usage_unsupported = _usage_db(spec.get("usageDBConfig"))
        actions, actions_unsupported = _shard_actions(spec, strategy.get("gpu") or "binpack",
                                                      strategy.get("cpu") or "binpack")
        if actions is not None:
            actions_unsupported += [(f"spec.queueDepthPerAction[{a}]", "names an action the object turns off (KAI's "
                                     "operator refuses such an object); nothing to bound")
                                    for a, _ in depths if a not in actions]
        unsupported = [*usage_unsupported, *actions_unsupported, *_shard_unsupported(spec, args)]
        return ObservedShard(
            name=_meta(raw).get("name", ""), partition_label_value=str(spec.get("partitionLabelValue") or ""),
            gpu_placement=strategy.get("gpu") or None, cpu_placement=strategy.get("cpu") or None,
            args=args,
            k_value=float(k_value) if k_value is not None else None,
            preempt_min_runtime_s=_duration(runtime.get("preemptMinRuntime"), "spec.minRuntime.preemptMinRuntime"),
            reclaim_min_runtime_s=_duration(runtime.get("reclaimMinRuntime"), "spec.minRuntime.reclaimMinRuntime"),
            eviction_mode=mode, update_pod_eviction_condition=_GO_BOOLS[condition],
            queue_depth_per_action=depths, usage_window_s=window, usage_half_life_s=half_life, usage_db=usage_db,
            actions=actions, unsupported=tuple(sorted(unsupported)),
        )
    except _Bad as bad:
        return _unreadable("SchedulingShard", raw, bad)


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


def _quantity_text(amounts: ResourceAmounts) -> dict[str, str]:
    gpus = f"{amounts.gpus:.4f}".rstrip("0").rstrip(".")
    return {"cpu": f"{amounts.cpu_millis}m", "memory": str(amounts.memory_bytes), GPU_RESOURCE: gpus or "0"}


# -- Queue CRD sync -------------------------------------------------------------------------------


def _spec_differences(db: QueueSpec, cluster: QueueSpec) -> list[str]:
    """Each CRD field that differs, as "field cluster's value → database's value"."""
    return [f"{path.removeprefix('spec.')} {_shown(was)} → {_shown(now)}"
            for path, (was, now) in queue_crd.differences(cluster, db).items()]


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) and not isinstance(value, bool) else repr(value)


def _depth(name: str, parents: Mapping[str, str | None]) -> int:
    depth, seen = 0, {name}
    while (parent := parents.get(name)) and parent not in seen:
        seen.add(parent)
        name, depth = parent, depth + 1
    return depth


def diff_queues(
    database: Iterable[QueueSpec], cluster: Iterable[ObservedQueue], *, deleted_in_database: Iterable[str] = (),
    base: Mapping[str, QueueSpec] | None = None,
) -> list[QueueSyncAction]:
    """What to do so the cluster's Queue CRDs and the database agree.

    ``base`` is each queue's spec as both sides last agreed on it. For a queue in both, different:

    * only the database changed since (or there is no base) → ``update`` (the database's values go
      to the cluster; the message lists each overridden value);
    * only the cluster changed (``kubectl edit``, GitOps) → ``import``: the cluster's values go to
      the database, through the control plane's import rules;
    * both changed → ``import`` as well: the cluster, which GitOps keeps declaratively, wins, and
      the message names the database values it replaces (they stay in the audit log).

    Otherwise:

    * in the database only → ``create``;
    * in the cluster only, and deleted in the database → ``delete``;
    * in the cluster only, never known to the database → ``import`` (the other direction of the
      two-way sync: the caller adds it to the database; nothing is written to the cluster).

    Creates come parents first and deletes children first, so a tree can be applied in order;
    the order is otherwise by name, so the same inputs give the same plan.
    """
    db = {q.name: q for q in database}
    seen = {q.name: q for q in cluster}
    deleted = set(deleted_in_database) - set(db)
    parents = {**{n: q.spec.parent for n, q in seen.items()}, **{n: q.parent for n, q in db.items()}}
    creates, updates, deletes, imports = [], [], [], []
    for name in sorted(db, key=lambda n: (_depth(n, parents), n)):
        spec = db[name]
        if name not in seen:
            creates.append(QueueSyncAction("create", name, spec, f"Queue {name} is in the database but not in "
                                           "the cluster: creating it."))
            continue
        changes = _spec_differences(spec, seen[name].spec)
        before = (base or {}).get(name)
        if changes and before is not None and queue_crd.differences(before, seen[name].spec):
            detail = "; ".join(_spec_differences(seen[name].spec, spec))
            if not queue_crd.differences(before, spec):
                message = f"Queue {name} was changed in the cluster: its values replace the database's: {detail}."
            else:
                message = (f"Queue {name} was changed in both the cluster and the database; the cluster wins, "
                           f"replacing the database's values: {detail}.")
            imports.append(QueueSyncAction("import", name, seen[name].spec, message,
                                           resource_version=seen[name].resource_version))
            continue
        if changes:
            updates.append(QueueSyncAction(
                "update", name, spec,
                f"Queue {name} differs between the cluster and the database; the database wins: "
                + "; ".join(changes) + ".", resource_version=seen[name].resource_version))
    for name in sorted(set(seen) - set(db), key=lambda n: (-_depth(n, parents), n)):
        if name in deleted:
            deletes.append(QueueSyncAction("delete", name, None, f"Queue {name} was deleted in the database: "
                                           "deleting it from the cluster.",
                                           resource_version=seen[name].resource_version))
        else:
            imports.append(QueueSyncAction("import", name, seen[name].spec,
                                           f"Queue {name} exists only in the cluster: imported into kaiweb."))
    return creates + updates + deletes + imports


def apply_queue_sync(gateway: KubernetesGateway, actions: Iterable[QueueSyncAction]) -> list[str]:
    """Write the ``create``/``update``/``delete`` steps to the cluster; returns their messages
    (``import`` steps belong to the database side and are skipped here)."""
    done = []
    for action in actions:
        if action.op in ("create", "update") and action.spec is not None:
            gateway.upsert_queue(action.spec)
        elif action.op == "delete":
            gateway.delete_queue(action.name)
        else:
            continue
        done.append(action.message)
    return done


# -- the gateway ----------------------------------------------------------------------------------


def load_configuration(host: str | None = None, *, concurrency: int | None = None) -> client.Configuration:
    """Client configuration: an explicit host (tests), in-cluster (service account), or KUBECONFIG.

    Its urllib3 pool keeps a connection open for each of ``concurrency`` concurrent calls (default
    ``KAI_BIND_CONCURRENCY``) plus a few spare: a smaller pool would open and drop a connection (a
    TLS handshake) for every call beyond its size."""
    from kubernetes import config as kube_config

    configuration = client.Configuration()
    if host:
        configuration.host = host
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        kube_config.load_incluster_config(client_configuration=configuration)
    else:
        # KUBECONFIG is read now, not when the client library was imported.
        kube_config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None,
                                     client_configuration=configuration)
    # The gateway retries with its own bounded backoff; urllib3's retries would multiply them.
    configuration.retries = False
    ensure_connection_pool(configuration, bind_concurrency() if concurrency is None else concurrency)
    return configuration


def bind_concurrency() -> int:
    """``KAI_BIND_CONCURRENCY`` when Django is configured, else the default; at least 1."""
    try:
        from django.conf import settings

        value = int(getattr(settings, "KAI_BIND_CONCURRENCY", DEFAULT_BIND_CONCURRENCY))
    except Exception:  # noqa: BLE001 - outside Django (a script, the fake server's tests)
        value = DEFAULT_BIND_CONCURRENCY
    return max(1, value)


def ensure_connection_pool(configuration: client.Configuration, concurrency: int) -> None:
    """Make the urllib3 pool of clients built from ``configuration`` hold ``concurrency`` calls
    at once (plus `SPARE_CONNECTIONS`). Only clients made afterwards see it: call before `ApiClient`."""
    wanted = max(1, concurrency) + SPARE_CONNECTIONS
    current = getattr(configuration, "connection_pool_maxsize", None) or 0
    configuration.connection_pool_maxsize = max(int(current), wanted)


# How an action has its event written: at once (`bind`, `evict`) or queued behind the actions (`apply`).
_Later = Callable[[Callable[[], None]], None]


def _at_once(note: Callable[[], None]) -> None:
    note()


def _in_turns(binds: Sequence[BindAction]) -> list[int]:
    """The binds' indexes, the first sharer of each device (node and groups) first, then the second
    of each, and so on; binds sharing nothing keep their place in the first turn."""
    turn: dict[tuple[str, tuple[str, ...]], int] = {}
    ranked = []
    for i, b in enumerate(binds):
        key = (b.node, b.gpu_groups)
        ranked.append((turn.get(key, 0) if b.gpu_groups else 0, i))
        if b.gpu_groups:
            turn[key] = turn.get(key, 0) + 1
    return [i for _, i in sorted(ranked)]


_RESERVATION_SELECTOR = f"{gpu_sharing.APP_LABEL}={gpu_sharing.RESERVATION_APP}"


def _reported_device(pod: Mapping[str, Any]) -> str:
    """The device a reservation pod reports holding (``run.ai/reserve_for_gpu_index``), "" until then."""
    return str((_meta(pod).get("annotations") or {}).get(gpu_sharing.GPU_INDEX_ANNOTATION) or "")


class _DeviceNotReported(ClusterRejected):
    """A reservation pod did not report its device in time, or was deleted first: every sharer of its
    group in the apply fails with it."""


class KubernetesGateway:
    """`ClusterGateway` on a Kubernetes API server (see the module docstring)."""

    capabilities = frozenset({Capability.MIRRORED, Capability.RECONCILES, Capability.BULK_APPLY})

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        scheduler_name: str = "kai-scheduler",
        request_timeout: float = 10.0,
        max_attempts: int = 4,
        backoff_base: float = 0.2,
        backoff_max: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
        reservation_namespace: str = "kai-resource-reservation",
        reservation_image: str = "registry.k8s.io/pause:3.10",
        bind_concurrency: int = DEFAULT_BIND_CONCURRENCY,
        reservation_timeout: float = DEFAULT_RESERVATION_TIMEOUT,
    ) -> None:
        self.api_client = api_client
        self.reservation_timeout = float(reservation_timeout)
        self.bind_concurrency = max(1, int(bind_concurrency))
        self.scheduler_name = scheduler_name
        self.request_timeout = request_timeout
        self.max_attempts = max(1, max_attempts)
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._sleep = sleep
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.reservation_namespace = reservation_namespace
        self.reservation_image = reservation_image
        self._namespaces_seen: set[str] = set()
        self._uid_precondition: bool | None = None
        self._version_lock = threading.Lock()
        # While `apply` runs: each (node, GPU group)'s reservation pod, found or made once for all the
        # sharers it binds there (a lock per key, so the others wait for the first).
        self._holders: dict[tuple[str, str], list[Any]] | None = None
        self._held: dict[tuple[str, str], Mapping[str, Any]] | None = None
        # While `apply` runs with threads that may wait for device reports: the bound on API calls.
        self._gate: threading.BoundedSemaphore | None = None
        # While `apply` waits for devices: the reservation pods' watch, from the version of their list.
        self._board: DeviceReports | None = None
        self._held_version = ""
        self._holders_lock = threading.Lock()
        self.scheduling = client.SchedulingV1Api(api_client)
        self.version = client.VersionApi(api_client)

    @classmethod
    def from_settings(cls) -> KubernetesGateway:
        from django.conf import settings

        concurrency = bind_concurrency()
        configuration = load_configuration(getattr(settings, "KAI_KUBERNETES_HOST", None) or None,
                                           concurrency=concurrency)
        return cls(client.ApiClient(configuration),
                   scheduler_name=getattr(settings, "KAI_SCHEDULER_NAME", "kai-scheduler"),
                   request_timeout=float(getattr(settings, "KAI_KUBERNETES_TIMEOUT", 10.0)),
                   reservation_namespace=settings.KAI_RESERVATION_NAMESPACE,
                   reservation_image=settings.KAI_RESERVATION_IMAGE,
                   reservation_timeout=float(getattr(settings, "KAI_RESERVATION_ALLOCATION_TIMEOUT",
                                                     DEFAULT_RESERVATION_TIMEOUT)),
                   bind_concurrency=concurrency)

    # -- transport ---------------------------------------------------------------------------

    def _backoff(self, attempt: int, exc: ApiException | None) -> float:
        delay = min(self.backoff_max, self.backoff_base * (2 ** (attempt - 1)))
        retry_after = (exc.headers or {}).get("Retry-After") if exc is not None else None
        if retry_after and str(retry_after).isdigit():
            delay = min(self.backoff_max, max(delay, float(retry_after)))
        return delay

    def _call(self, operation: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` with the request timeout and bounded retries (module docstring)."""
        kwargs.setdefault("_request_timeout", self.request_timeout)
        retryable = kwargs.pop("_retry_statuses", RETRYABLE_STATUSES)
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn(*args, **kwargs)
            except ApiException as exc:
                status = int(exc.status or 0)
                if (status in retryable or status == 0) and attempt < self.max_attempts:
                    logger.info("%s: %s from the API server, retry %d", operation, status, attempt)
                    self._sleep(self._backoff(attempt, exc))
                    continue
                raise self._error(operation, exc, attempt) from exc
            except urllib3.exceptions.NewConnectionError as exc:
                # Checked before timeouts: urllib3 derives "connection refused" from ConnectTimeoutError.
                if attempt < self.max_attempts:
                    self._sleep(self._backoff(attempt, None))
                    continue
                raise ClusterUnavailable(operation, f"cannot reach the API server after {attempt} attempts: "
                                         f"{exc}") from exc
            except urllib3.exceptions.TimeoutError as exc:
                if attempt < self.max_attempts:
                    self._sleep(self._backoff(attempt, None))
                    continue
                raise ClusterTimeout(operation, f"no answer within {self.request_timeout:g}s after {attempt} "
                                     "attempts") from exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                if attempt < self.max_attempts:
                    self._sleep(self._backoff(attempt, None))
                    continue
                raise ClusterUnavailable(operation, f"cannot reach the API server after {attempt} attempts: "
                                         f"{exc}") from exc

    @staticmethod
    def _error(operation: str, exc: ApiException, attempts: int) -> ClusterError:
        status = int(exc.status or 0)
        reason, message = exc.reason or "", ""
        try:
            body = json.loads(exc.body) if exc.body else {}
            message = body.get("message", "") if isinstance(body, dict) else ""
            reason = body.get("reason", reason) if isinstance(body, dict) else reason
        except (ValueError, TypeError):
            message = str(exc.body or "")[:300]
        text = f"{status} {reason}: {message}".strip().rstrip(":")
        if status in RETRYABLE_STATUSES or status == 0:
            return ClusterUnavailable(operation, f"{text} (after {attempts} attempts)", status=status, reason=reason)
        return ClusterRejected(operation, text, status=status, reason=reason)

    def _json(self, operation: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call with ``_preload_content=False`` and decode the JSON body ourselves (no model objects)."""
        timeout = kwargs.pop("_request_timeout", self.request_timeout)
        retryable = kwargs.pop("_retry_statuses", RETRYABLE_STATUSES)

        def fetch(**extra: Any) -> bytes:
            # The body is read inside the retried call, so a stall mid-body is retried like any timeout.
            with self._gate or contextlib.nullcontext():
                resp = fn(*args, _preload_content=False, **kwargs, **extra)
                try:
                    return bytes(resp.data or b"")
                finally:
                    resp.release_conn()

        data = self._call(operation, fetch, _request_timeout=timeout, _retry_statuses=retryable)
        try:
            return json.loads(data) if data else {}
        except ValueError as exc:
            raise ClusterUnavailable(operation, f"the API server answered something that is not JSON: "
                                     f"{data[:120]!r}") from exc

    def list_raw(self, operation: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[list[Any], str]:
        """Every item of a (possibly paginated) list, and the list's resourceVersion."""
        items: list[Any] = []
        resource_version, token, restarts = "", None, 0
        while True:
            page_args = dict(kwargs, limit=PAGE_SIZE)
            if token:
                page_args["_continue"] = token
            try:
                body = self._json(operation, fn, *args, **page_args)
            except ClusterRejected as err:
                if err.status == 410 and token and restarts < 3:
                    # The continue token expired (the snapshot was compacted): list again from the start.
                    items, resource_version, token, restarts = [], "", None, restarts + 1
                    continue
                if err.status == 404:
                    raise ClusterRejected(operation, f"{err.detail} (is the resource's CRD installed?)",
                                          status=404, reason=err.reason) from err
                raise
            items.extend(body.get("items") or [])
            meta = body.get("metadata") or {}
            resource_version = resource_version or str(meta.get("resourceVersion", ""))
            token = meta.get("continue")
            if not token:
                return items, resource_version

    @staticmethod
    def _listing(raws: list[Any], rv: str, parse: Callable[[Any], Any]) -> Listing[Any]:
        items, problems = [], []
        for raw in raws:
            parsed = parse(raw)
            (problems if isinstance(parsed, Unreadable) else items).append(parsed)
        for problem in problems:
            logger.warning("%s", problem.message)
        return Listing(tuple(items), tuple(problems), rv)

    # -- reads ------------------------------------------------------------------------------

    def ping(self) -> str:
        info = self._json("ping", self.version.get_code)
        return f"Kubernetes {info.get('gitVersion', '?')}"

    def list_nodes(self) -> Listing[ObservedNode]:
        return self._listing(*self.list_raw("list nodes", self.core.list_node), parse_node)

    def pod_field_selector(self) -> str:
        return f"spec.schedulerName={self.scheduler_name}"

    def other_pod_field_selector(self) -> str:
        """Bound pods of every other scheduler, but the reservation pods of shared GPUs (their
        sharers count them). Every field is one that never changes, so a pod never leaves the
        selection while it lives: a finished one is seen finishing."""
        return (f"spec.schedulerName!={self.scheduler_name},spec.nodeName!=,"
                f"metadata.namespace!={self.reservation_namespace}")

    def list_other_pods(self) -> Listing[ObservedOtherPod]:
        raws, rv = self.list_raw("list other schedulers' pods", self.core.list_pod_for_all_namespaces,
                                 field_selector=self.other_pod_field_selector())
        # The field selector already filters; this guards against servers that ignore it.
        raws = [r for r in raws if (r.get("spec") or {}).get("schedulerName") != self.scheduler_name
                and (r.get("spec") or {}).get("nodeName")
                and (r.get("metadata") or {}).get("namespace") != self.reservation_namespace]
        return self._listing(raws, rv, parse_other_pod)

    def list_pods(self) -> Listing[ObservedPod]:
        raws, rv = self.list_raw("list pods", self.core.list_pod_for_all_namespaces,
                              field_selector=self.pod_field_selector())
        # The field selector already filters; this guards against servers that ignore it.
        raws = [r for r in raws if (r.get("spec") or {}).get("schedulerName") == self.scheduler_name]
        return self._listing(raws, rv, parse_pod)

    def list_pod_groups(self) -> Listing[ObservedPodGroup]:
        return self._listing(*self.list_raw("list PodGroups", self.custom.list_cluster_custom_object,
                                         PODGROUP_GROUP, PODGROUP_VERSION, PODGROUP_PLURAL), parse_pod_group)

    def list_queues(self) -> Listing[ObservedQueue]:
        return self._listing(*self.list_raw("list Queues", self.custom.list_cluster_custom_object,
                                         QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL), parse_queue)

    def list_topologies(self) -> Listing[ObservedTopology]:
        return self._listing(*self.list_raw("list Topologies", self.custom.list_cluster_custom_object,
                                         KAI_GROUP, "v1alpha1", "topologies"), parse_topology)

    def list_shards(self) -> Listing[ObservedShard]:
        return self._listing(*self.list_raw("list SchedulingShards", self.custom.list_cluster_custom_object,
                                         KAI_GROUP, "v1", "schedulingshards"), parse_shard)

    def list_priority_classes(self) -> Listing[ObservedPriorityClass]:
        return self._listing(*self.list_raw("list PriorityClasses", self.scheduling.list_priority_class),
                             parse_priority_class)

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._json(f"read pod {namespace}/{name}", self.core.read_namespaced_pod, name, namespace)
        except ClusterRejected as err:
            if err.status == 404:
                return None
            raise

    # -- actions ----------------------------------------------------------------------------

    def apply(self, binds: Sequence[BindAction] = (), evicts: Sequence[EvictAction] = ()
              ) -> list[ActionResult | Exception]:
        """A cycle's actions at once, as KAI's binder carries them out: the evictions, then the binds,
        each set on up to ``bind_concurrency`` concurrent API calls (the binds start once every
        eviction has its answer, so a bind onto what an eviction frees comes after it).

        One entry per action, evictions first, each in the order given: the `ActionResult`, or the
        exception the action raised, as `evict` and `bind` called one after another give. The events
        that say what was done (``Scheduled``, the eviction's reason) are queued behind the actions
        in the same pool: no action waits for an event, and an event that cannot be written is logged.

        Shared-GPU binds that may wait for a device report (``reservation_timeout``) start in turns,
        the first sharer of every device before the second of any, and run on more threads than
        ``bind_concurrency`` while the API calls stay within it: a sharer waiting for its device
        holds a thread, not an API call, and the sharers of one device do not fill the pool."""
        if not binds and not evicts:
            return []
        notes: list[Future[None]] = []
        guard = threading.Lock()
        sharing = any(b.gpu_groups for b in binds)
        waits = sharing and self.reservation_timeout > 0
        devices = len({(b.node, b.gpu_groups) for b in binds if b.gpu_groups}) if waits else 0
        workers = min(self.bind_concurrency + min(devices, MAX_WAITING_THREADS), max(len(binds), len(evicts)))
        self._holders = {}
        self._held = self._reservations_held() if sharing else None
        self._gate = threading.BoundedSemaphore(self.bind_concurrency) if waits else None
        if waits and self._held is not None:
            self._board = DeviceReports(
                self.core.list_namespaced_pod, self.reservation_namespace, _RESERVATION_SELECTOR,
                self._held_version, _reported_device, request_timeout=self.request_timeout).start()
        try:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kai-apply") as pool:

                def later(note: Callable[[], None]) -> None:
                    with guard:
                        notes.append(pool.submit(note))

                results = self._all(pool, self._evict, evicts, later)
                results += self._all(pool, self._bind, binds, later, order=_in_turns(binds) if waits else None)
                for done in notes:
                    exc = done.exception()
                    if exc is not None:
                        logger.warning("an event after apply was not written: %s", exc)
        finally:
            if self._board is not None:
                self._board.stop()
            self._holders = self._held = self._gate = self._board = None
        return results

    def _reservations_held(self) -> dict[tuple[str, str], Mapping[str, Any]] | None:
        """The live reservation pods by (node, GPU group), listed once for a whole `apply` (one
        list instead of one per group: each is a read of every reservation pod, so a fill making
        thousands of groups would read them thousands of times). None when they cannot be listed
        now: each group is then looked up on its own."""
        ns = self.reservation_namespace
        try:
            self._ensure_namespace(ns, "list reservation pods")
            held, self._held_version = self.list_raw("list reservation pods", self.core.list_namespaced_pod, ns,
                                                     label_selector=_RESERVATION_SELECTOR)
        except ClusterError as exc:
            logger.warning("reservation pods not listed before the binds, looked up one by one: %s", exc)
            return None
        index: dict[tuple[str, str], Mapping[str, Any]] = {}
        for r in held:
            node = (r.get("spec") or {}).get("nodeName")
            group = (_meta(r).get("labels") or {}).get(GPU_GROUP_LABEL)
            if node and group and not _meta(r).get("deletionTimestamp"):
                index.setdefault((node, group), r)
        return index

    @staticmethod
    def _all(pool: ThreadPoolExecutor, fn: Callable[[Any, _Later], ActionResult], actions: Sequence[Any],
             later: _Later, order: Sequence[int] | None = None) -> list[ActionResult | Exception]:
        """Each action's result (or error) in the order given; submitted in ``order`` (indexes)."""
        submitted = {i: pool.submit(fn, actions[i], later) for i in (order if order is not None else range(len(actions)))}
        futures = [submitted[i] for i in range(len(actions))]
        results: list[ActionResult | Exception] = []
        for future in futures:
            try:
                results.append(future.result())
            except Exception as exc:  # noqa: BLE001 - the action's failure is its result, as on the serial path
                results.append(exc)
        return results

    def bind(self, action: BindAction) -> ActionResult:
        """Bind through the Binding subresource (its ``Scheduled`` event written before returning)."""
        return self._bind(action, _at_once)

    def _bind(self, action: BindAction, later: _Later) -> ActionResult:
        """Bind through the Binding subresource; ``later`` writes the ``Scheduled`` event.

        For a shared GPU the still-unbound pod first gets the labels of its GPU groups, as KAI's
        binder writes them (`gpu_sharing.group_labels`: one device, ``runai-gpu-group``; several, one
        ``runai-gpu-group/<group>`` each), guarded by its resourceVersion, and each group its
        reservation pod; the Binding carries the decision's idempotency key and GPU portion as
        annotations, which the API server copies onto the pod. The server answers
        a Binding with a ``Status`` the client cannot turn into a ``V1Binding`` (its ``target``
        is required), so the raw response is used. A 409 is read back: already on this node is
        success; elsewhere, or another incarnation of the pod, is refused.
        """
        operation = f"bind pod {action.namespace}/{action.name} to {action.node}"
        if action.uid and not action.gpu_groups and not self._binding_checks_uid():
            # An API server before 1.27 may bind whatever pod has the name (the Binding's uid is no
            # precondition there): check the incarnation first. A newer one refuses another incarnation
            # with 409, read back below; a shared-GPU bind checks it in its guarded label patch.
            done = self._check_bindable(action, self.read_pod(action.namespace, action.name), operation)
            if done is not None:
                return done
        if action.gpu_groups:
            done, pod = self._label_gpu_groups(action, operation)
            if done is not None:
                return done
            self._reserve_shared_gpu(action, pod, operation)
        annotations = {}
        if action.idempotency_key:
            annotations[BIND_KEY_ANNOTATION] = action.idempotency_key
        if action.gpu_portion is not None:
            annotations[GPU_PORTION_ANNOTATION] = f"{action.gpu_portion:g}"
        body = client.V1Binding(
            metadata=client.V1ObjectMeta(name=action.name, namespace=action.namespace, uid=action.uid or None,
                                         annotations=annotations or None),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=action.node),
        )
        try:
            self._json(operation, self.core.create_namespaced_pod_binding, action.name, action.namespace, body)
        except ClusterRejected as err:
            if err.status == 404:
                raise ClusterRejected(operation, "the pod no longer exists", status=404) from err
            if err.status != 409:
                raise
            done = self._check_bindable(action, self.read_pod(action.namespace, action.name), operation)
            if done is not None:
                return done
            raise ClusterRejected(operation, f"the server refused the binding: {err.detail}", status=409,
                                  reason="Conflict") from err
        message = f"Successfully assigned pod {action.namespace}/{action.name} to node {action.node}"
        later(functools.partial(self._note, operation, PodRef(action.namespace, action.name, action.uid),
                                "Normal", "Scheduled", f"{message} at node-pool {action.node_pool or 'default'}",
                                bump=False))
        return ActionResult(ActionOutcome.BOUND, message)

    def _note(self, operation: str, pod: PodRef, type_: str, reason: str, message: str, *, bump: bool = True) -> None:
        """An event after an action: the action took effect, so a lost event is only logged."""
        try:
            self._event(pod, type_, reason, message, bump=bump)
        except ClusterError as exc:
            logger.warning("%s: %s event not written: %s", operation, reason, exc)

    def _binding_checks_uid(self) -> bool:
        """Whether the server takes the ``metadata.uid`` of a pod's ``binding`` subresource as a
        precondition: since Kubernetes 1.23, but for 1.25 and 1.26 before the fix of 1.27
        (kubernetes#105913, #116550); asked once. (The older ``bindings`` resource drops the uid.)"""
        with self._version_lock:
            if self._uid_precondition is None:
                try:
                    info = self._json("read the server version", self.version.get_code)
                    major = int(re.sub(r"\D.*", "", str(info.get("major", ""))) or 0)
                    minor = int(re.sub(r"\D.*", "", str(info.get("minor", ""))) or 0)
                    self._uid_precondition = (major, minor) >= (1, 27)
                except (ClusterError, ValueError, AttributeError):
                    return False  # unknown for now: read the pod first, ask again next time
            return self._uid_precondition

    def _check_bindable(self, action: BindAction, pod: Mapping[str, Any] | None, operation: str) -> ActionResult | None:
        """None if the pod can still be bound; ALREADY_BOUND if it is on the target node; else raises."""
        if pod is None:
            raise ClusterRejected(operation, "the pod no longer exists", status=404)
        uid = _meta(pod).get("uid", "")
        if action.uid and uid != action.uid:
            raise ClusterRejected(operation, f"the pod was replaced (uid {uid}, decided for {action.uid})",
                                  status=409, reason="Conflict")
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound == action.node:
            return ActionResult(ActionOutcome.ALREADY_BOUND, f"pod {action.namespace}/{action.name} was "
                                f"already bound to {action.node}")
        if bound:
            raise ClusterRejected(operation, f"the pod is already bound to {bound}", status=409, reason="Conflict")
        return None

    def _reserve_shared_gpu(self, action: BindAction, pod: Mapping[str, Any], operation: str) -> None:
        """Before a sharer (``pod``, as just read) is bound: the reservation pod of each of its groups
        on the node (made once, and waited for until it reports its device, as KAI's binder waits),
        and the sharer's ConfigMap (`kaiweb.cluster.backends.gpu_sharing`), whose
        ``NVIDIA_VISIBLE_DEVICES`` lists the devices in the order of the groups (as KAI's binder joins
        them). A reservation that cannot be made, or does not report its device within
        ``reservation_timeout``, refuses the bind: the pod would otherwise run on a device the plugin
        may give away, or start without knowing which device is its own."""
        holders = [self._reservation_holder(action, group, pod, operation) for group in action.gpu_groups]
        indexes = [(_meta(h).get("annotations") or {}).get(gpu_sharing.GPU_INDEX_ANNOTATION) for h in holders]
        memory = (_meta(pod).get("annotations") or {}).get(GPU_MEMORY_ANNOTATION)
        config_map = gpu_sharing.sharing_config_map(
            pod, portion=action.gpu_portion, gpu_memory_mib=int(memory) if str(memory or "").isdigit() else None,
            device_index=",".join(str(i) for i in indexes) if all(indexes) else None)
        try:
            self._json(f"{operation}: ConfigMap", self.core.create_namespaced_config_map, action.namespace, config_map)
        except ClusterRejected as err:
            if err.status != 409:
                raise
            self._json(f"{operation}: ConfigMap", self.core.patch_namespaced_config_map,
                       config_map["metadata"]["name"], action.namespace, {"data": config_map["data"]},
                       _content_type="application/merge-patch+json")

    def _reservation_holder(self, action: BindAction, group: str, pod: Mapping[str, Any],
                            operation: str) -> Mapping[str, Any]:
        """The reservation pod of one of the sharer's (node, GPU group), with its device reported:
        found, else made. Within `apply`, once per (node, group) for all its sharers; a device that
        was not reported in time fails them all at once, any other failure is not remembered (the
        next sharer tries)."""
        memo = self._holders
        if memo is None:
            return self._reported(*self._find_or_make_holder(action, group, pod, operation), operation)
        with self._holders_lock:
            entry = memo.setdefault((action.node, group), [threading.Lock(), None, None])
        with entry[0]:
            if entry[2] is not None:
                raise entry[2]
            if entry[1] is None:
                try:
                    entry[1] = self._reported(*self._find_or_make_holder(action, group, pod, operation), operation)
                except _DeviceNotReported as late:
                    entry[2] = late
                    raise
            return entry[1]

    def _reported(self, holder: Mapping[str, Any], made: bool, operation: str) -> Mapping[str, Any]:
        """``holder`` once it carries its device (``run.ai/reserve_for_gpu_index``), read again until
        then, for at most ``reservation_timeout`` seconds (KAI's binder waits the same way, 40 s by
        default). A reservation pod made for this bind that never reports is deleted, as KAI's binder
        deletes it, and the bind refused; 0 s takes the holder as it is."""
        if _reported_device(holder) or self.reservation_timeout <= 0:
            return holder
        ns, name = self.reservation_namespace, str(_meta(holder).get("name", ""))
        deadline = time.monotonic() + self.reservation_timeout
        gone = _DeviceNotReported(operation, f"the reservation pod {ns}/{name} was deleted before it reported its "
                                  "device", status=409, reason="Conflict")
        board = self._board
        if board is not None:
            # One watch for every waiting bind (`DeviceReports`); when it cannot tell, read the pod.
            seen = board.wait(name, self.reservation_timeout)
            if seen == device_reports.GONE:
                raise gone
            if isinstance(seen, Mapping):
                return seen
        pause = 0.05
        while time.monotonic() < deadline:
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 1.0)
            current = self.read_pod(ns, name)
            if current is None:
                raise gone
            if _reported_device(current):
                return current
        said = (f"the reservation pod {ns}/{name} did not report its device ({gpu_sharing.GPU_INDEX_ANNOTATION}) "
                f"within {self.reservation_timeout:g} s")
        if made:
            try:
                self._json(f"{operation}: delete reservation {name}", self.core.delete_namespaced_pod, name, ns,
                           grace_period_seconds=0)
                said += "; it was deleted"
            except ClusterRejected as err:
                if err.status != 404:
                    logger.warning("%s: %s, and could not be deleted: %s", operation, said, err)
        raise _DeviceNotReported(operation, said, status=504, reason="Timeout")

    def _find_or_make_holder(self, action: BindAction, group: str, pod: Mapping[str, Any],
                             operation: str) -> tuple[Mapping[str, Any], bool]:
        """The reservation pod of (node, group), and whether this call made it."""
        ns = self.reservation_namespace
        self._ensure_namespace(ns, operation)
        listed = self._held
        if listed is not None:
            holder = listed.get((action.node, group))
        else:
            selector = f"{gpu_sharing.APP_LABEL}={gpu_sharing.RESERVATION_APP},{GPU_GROUP_LABEL}={group}"
            held, _ = self.list_raw(f"{operation}: reservation", self.core.list_namespaced_pod, ns,
                                    label_selector=selector)
            holder = next((r for r in held if (r.get("spec") or {}).get("nodeName") == action.node
                           and not _meta(r).get("deletionTimestamp")), None)
        if holder is not None:
            return holder, False
        manifest = gpu_sharing.reservation_pod(namespace=ns, node=action.node, group=group,
                                               image=self.reservation_image,
                                               tolerations=(pod.get("spec") or {}).get("tolerations") or ())
        try:
            return self._json(f"{operation}: reservation", self.core.create_namespaced_pod, ns, manifest), True
        except ClusterRejected as err:
            if err.status != 409:
                raise
            return self.read_pod(ns, manifest["metadata"]["name"]) or {}, False

    def _ensure_namespace(self, name: str, operation: str) -> None:
        """The reservation namespace: read (an install makes it), else created (a plain kubeconfig)."""
        if name in self._namespaces_seen:
            return
        try:
            self._json(f"{operation}: namespace {name}", self.core.read_namespace, name)
        except ClusterRejected as err:
            if err.status != 404:
                raise
            try:
                self._json(f"{operation}: namespace {name}", self.core.create_namespace, {"metadata": {"name": name}})
            except ClusterRejected as again:
                if again.status != 409:
                    raise
        self._namespaces_seen.add(name)

    def collect_reservations(self) -> list[str]:
        """Delete the reservation pods whose GPU group no live sharer uses any more; their names."""
        ns = self.reservation_namespace
        try:
            held, _ = self.list_raw("list reservation pods", self.core.list_namespaced_pod, ns,
                                    label_selector=_RESERVATION_SELECTOR)
        except ClusterRejected as err:
            if err.status == 404:
                return []
            raise
        if not held:
            return []
        sharers, _ = self.list_raw("list GPU sharers", self.core.list_pod_for_all_namespaces,
                                   label_selector=GPU_GROUP_LABEL)
        sharers = [p for p in sharers if _meta(p).get("namespace") != ns]
        # A pod on several devices has no plain label (a selector cannot ask for a key prefix): the
        # groups no plain label holds are asked for by their per-device label, as KAI's binder does.
        orphans = set(gpu_sharing.orphaned_reservations(held, sharers))
        for group in sorted({(_meta(h).get("labels") or {}).get(GPU_GROUP_LABEL) or "" for h in held
                             if _meta(h).get("name") in orphans} - {""}):
            more, _ = self.list_raw(f"list the sharers of GPU group {group}", self.core.list_pod_for_all_namespaces,
                                    label_selector=f"{MULTI_GPU_GROUP_PREFIX}{group}={group}")
            sharers += [p for p in more if _meta(p).get("namespace") != ns]
        doomed = gpu_sharing.orphaned_reservations(held, sharers)
        for name in doomed:
            try:
                self._json(f"delete reservation pod {ns}/{name}", self.core.delete_namespaced_pod, name, ns,
                           grace_period_seconds=0)
            except ClusterRejected as err:
                if err.status != 404:
                    raise
        return doomed

    def _label_gpu_groups(self, action: BindAction, operation: str
                          ) -> tuple[ActionResult | None, dict[str, Any]]:
        """Label a still-unbound pod with its GPU groups before the Binding (as KAI's binder does);
        returns (None, the pod as read) when it may be bound now, else (the result, {}).

        The groups must be one per device the pod asks for (``gpu-fraction-num-devices``, else one),
        each named once: anything else is refused before the pod is touched. Group labels left by an
        earlier attempt that are not among these are removed, so the pod holds only these devices.
        The patch carries the resourceVersion just read, so it cannot land on a pod that was bound
        elsewhere (or replaced) in between: the server refuses it with 409, and the pod is read again.
        A one-device bind whose pod the mirror saw unbound (``action.resource_version``) first tries the
        patch guarded by that version, without the read."""
        try:
            labels: dict[str, str | None] = dict(gpu_sharing.group_labels(action.gpu_groups))
        except ValueError as bad:
            raise ClusterRejected(operation, str(bad), status=422, reason="Invalid") from bad
        if action.resource_version and len(action.gpu_groups) == 1:
            # The mirror saw the pod unbound at this version: guarded by it, the one-device label (a
            # key the patch overwrites, so nothing stale can stay) needs no read first. A pod changed
            # since is refused with 409 and read below.
            try:
                pod = self._json(operation, self.core.patch_namespaced_pod, action.name, action.namespace,
                                 {"metadata": {"resourceVersion": action.resource_version, "labels": labels}},
                                 _content_type="application/strategic-merge-patch+json")
            except ClusterRejected as err:
                if err.status == 404:
                    raise ClusterRejected(operation, "the pod no longer exists", status=404) from err
                if err.status != 409:
                    raise
            else:
                wanted = (_meta(pod).get("annotations") or {}).get(GPU_FRACTION_NUM_DEVICES_ANNOTATION) or "1"
                if str(wanted) == "1" and not any(gpu_sharing.is_group_label(k) and k not in labels
                                                  for k in _meta(pod).get("labels") or {}):
                    return None, pod
        for _ in range(3):
            pod = self.read_pod(action.namespace, action.name)
            done = self._check_bindable(action, pod, operation)
            if done is not None or pod is None:
                return done, {}
            wanted = str((_meta(pod).get("annotations") or {}).get(GPU_FRACTION_NUM_DEVICES_ANNOTATION) or "1")
            if wanted != str(len(action.gpu_groups)):
                raise ClusterRejected(operation, f"the pod asks for {wanted} shared devices "
                                      f"({GPU_FRACTION_NUM_DEVICES_ANNOTATION}), the decision gives "
                                      f"{len(action.gpu_groups)}", status=422, reason="Invalid")
            stale = {k: None for k in _meta(pod).get("labels") or {}
                     if gpu_sharing.is_group_label(k) and k not in labels}
            patch = {"metadata": {"resourceVersion": _meta(pod).get("resourceVersion"),
                                  "labels": {**labels, **stale}}}
            try:
                self._json(operation, self.core.patch_namespaced_pod, action.name, action.namespace, patch,
                           _content_type="application/strategic-merge-patch+json")
                return None, pod
            except ClusterRejected as err:
                if err.status == 404:
                    raise ClusterRejected(operation, "the pod no longer exists", status=404) from err
                if err.status != 409:
                    raise
        raise ClusterRejected(operation, "the pod kept changing while its GPU group was written", status=409,
                              reason="Conflict")

    def evict(self, action: EvictAction) -> ActionResult:
        """Evict as ``action.mode`` says, with the grace period and the pod's UID as precondition (so a
        same-named newer pod is never evicted by an old decision); the event saying why is written
        before returning.

        ``evict``: through the Eviction API, which a PodDisruptionBudget may refuse (429, raised as
        `ClusterUnavailable`). ``delete``: as KAI's evictor, the pod is deleted (budgets do not apply),
        after DisruptionTarget=True is set through its status when ``action.disruption_target``."""
        return self._evict(action, _at_once)

    def _evict(self, action: EvictAction, later: _Later) -> ActionResult:
        if action.mode == EVICT_BY_DELETE:
            return self._delete_victim(action, later)
        if action.mode != EVICT_BY_EVICTION_API:
            raise ClusterError(f"evict pod {action.namespace}/{action.name}",
                               f"eviction mode must be one of {', '.join(EVICTION_MODES)}, not {action.mode!r}")
        operation = f"evict pod {action.namespace}/{action.name}"
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=action.name, namespace=action.namespace),
            delete_options=client.V1DeleteOptions(
                grace_period_seconds=action.grace_seconds,
                preconditions=client.V1Preconditions(uid=action.uid) if action.uid else None,
            ),
        )
        try:
            # A 429 here is a PodDisruptionBudget's answer, not load: it is not waited out while the
            # cycle holds its shard's lock. The decision fails and the next cycle decides again.
            self._json(operation, self.core.create_namespaced_pod_eviction, action.name, action.namespace, body,
                       _retry_statuses=RETRYABLE_STATUSES - {429})
        except ClusterRejected as err:
            if err.status == 404:
                return ActionResult(ActionOutcome.ALREADY_GONE, f"pod {action.namespace}/{action.name} is gone")
            if err.status == 409 and "precondition" in err.detail.lower():
                return ActionResult(ActionOutcome.ALREADY_GONE,
                                    f"pod {action.namespace}/{action.name} was replaced by a new pod; not evicted")
            raise
        except ClusterUnavailable as err:
            if err.status == 429:
                raise ClusterUnavailable(operation, f"{err.detail}; a PodDisruptionBudget may forbid this "
                                         "eviction", status=429, reason=err.reason) from err
            raise
        if action.message:
            later(functools.partial(self._note, operation, PodRef(action.namespace, action.name, action.uid),
                                    "Normal", action.reason, action.message))
        return ActionResult(ActionOutcome.EVICTED, f"pod {action.namespace}/{action.name} evicted")

    def _delete_victim(self, action: EvictAction, later: _Later) -> ActionResult:
        """KAI's eviction (`pkg/scheduler/cache/evictor`): optionally the DisruptionTarget condition by
        a strategic-merge patch of the pod's status (a failure stops there, the pod is not deleted),
        then a delete of that pod incarnation with the grace period."""
        operation = f"delete pod {action.namespace}/{action.name}"
        gone = ActionResult(ActionOutcome.ALREADY_GONE, f"pod {action.namespace}/{action.name} is gone")
        replaced = ActionResult(ActionOutcome.ALREADY_GONE,
                                f"pod {action.namespace}/{action.name} was replaced by a new pod; not deleted")
        if action.disruption_target:
            condition = {"type": DISRUPTION_TARGET, "status": "True", "reason": PREEMPTION_BY_SCHEDULER,
                         "message": action.message,
                         "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
            # The UID in the patch is a precondition: the server refuses it (422 on metadata.uid) for
            # a same-named newer pod.
            patch: dict[str, Any] = {"status": {"conditions": [condition]}}
            if action.uid:
                patch["metadata"] = {"uid": action.uid}
            try:
                self._json(f"set DisruptionTarget on pod {action.namespace}/{action.name}",
                           self.core.patch_namespaced_pod_status, action.name, action.namespace, patch,
                           _content_type="application/strategic-merge-patch+json")
            except ClusterRejected as err:
                if err.status == 404:
                    return gone
                if _uid_refused(err):
                    return replaced
                raise
        options = client.V1DeleteOptions(
            grace_period_seconds=action.grace_seconds,
            preconditions=client.V1Preconditions(uid=action.uid) if action.uid else None,
        )
        try:
            # A 429 here is the API server's load, never a PodDisruptionBudget: retried as any other.
            self._json(operation, self.core.delete_namespaced_pod, action.name, action.namespace, body=options)
        except ClusterRejected as err:
            if err.status == 404:
                return gone
            if err.status == 409 and "precondition" in err.detail.lower():
                return replaced
            raise
        if action.message:
            later(functools.partial(self._note, operation, PodRef(action.namespace, action.name, action.uid),
                                    "Normal", action.reason, action.message))
        return ActionResult(ActionOutcome.EVICTED, f"pod {action.namespace}/{action.name} deleted")

    def report_pending(self, pod: PodRef | ObservedPod, reason: str, message: str) -> None:
        """Condition PodScheduled=False/Unschedulable with the message, and a Warning event."""
        operation = f"report pending pod {pod.namespace}/{pod.name}"
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                     "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
        try:
            self._json(operation, self.core.patch_namespaced_pod_status, pod.name, pod.namespace,
                       {"status": {"conditions": [condition]}},
                       _content_type="application/strategic-merge-patch+json")
        except ClusterRejected as err:
            if err.status == 404:
                return  # the pod is gone: nothing left to explain
            raise
        self._event(PodRef(pod.namespace, pod.name, pod.uid), "Warning", reason, message)

    def _event(self, pod: PodRef, type_: str, reason: str, message: str, *, kind: str = "Pod",
               api_version: str = "v1", bump: bool = True) -> None:
        """An event on the pod (or another object). Its name derives from what it says, so a repeated
        explanation bumps ``count`` on one event (as the kubelet's aggregation does) instead of piling up."""
        digest = hashlib.sha256(f"{pod.uid}|{type_}|{reason}|{message}".encode()).hexdigest()[:16]
        name = f"{pod.name}.{digest}"
        now = datetime.now(UTC)
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=name, namespace=pod.namespace),
            involved_object=client.V1ObjectReference(api_version=api_version, kind=kind, name=pod.name,
                                                     namespace=pod.namespace, uid=pod.uid or None),
            type=type_, reason=reason, message=message, count=1, first_timestamp=now, last_timestamp=now,
            source=client.V1EventSource(component=self.scheduler_name),
            reporting_component=self.scheduler_name,
        )
        operation = f"event on {kind} {pod.namespace}/{pod.name}"
        try:
            self._json(operation, self.core.create_namespaced_event, pod.namespace, event)
        except ClusterRejected as err:
            if err.status != 409:
                raise
            if not bump:
                return  # said already: once per distinct message is enough
            current = self._json(operation, self.core.read_namespaced_event, name, pod.namespace)
            self._json(operation, self.core.patch_namespaced_event, name, pod.namespace,
                       {"count": int(current.get("count") or 1) + 1,
                        "lastTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ")},
                       _content_type="application/merge-patch+json")

    # -- Queue CRDs -------------------------------------------------------------------------

    def read_queue(self, name: str) -> ObservedQueue | Unreadable | None:
        try:
            raw = self._json(f"read Queue {name}", self.custom.get_cluster_custom_object,
                             QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, name)
        except ClusterRejected as err:
            if err.status == 404:
                return None
            raise
        return parse_queue(raw)

    def upsert_queue(self, spec: QueueSpec) -> ObservedQueue:
        """Create the Queue, or replace its spec (status untouched) at the version just read; a
        concurrent change makes the replace conflict, and it is read and replaced once more."""
        operation = f"write Queue {spec.name}"
        for _ in range(3):
            try:
                raw = self._json(operation, self.custom.get_cluster_custom_object,
                                 QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, spec.name)
            except ClusterRejected as err:
                if err.status != 404:
                    raise
                raw = None
            body = queue_crd.write(spec)
            try:
                if raw is None:
                    created = self._json(operation, self.custom.create_cluster_custom_object,
                                         QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, body)
                else:
                    meta = _meta(raw)
                    body["metadata"] = {"name": spec.name, "resourceVersion": meta.get("resourceVersion")}
                    # Keep what others put on the object; the database only owns the spec.
                    for key in ("labels", "annotations"):
                        if meta.get(key):
                            body["metadata"][key] = meta[key]
                    created = self._json(operation, self.custom.replace_cluster_custom_object,
                                         QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, spec.name, body)
            except ClusterRejected as err:
                if err.status == 409:
                    continue  # created or changed meanwhile: read again
                raise
            parsed = parse_queue(created)
            if isinstance(parsed, Unreadable):
                raise ClusterRejected(operation, f"the server returned an unreadable Queue: {parsed.message}")
            return parsed
        raise ClusterRejected(operation, "the Queue kept changing during 3 attempts", status=409, reason="Conflict")

    def delete_queue(self, name: str) -> bool:
        try:
            self._json(f"delete Queue {name}", self.custom.delete_cluster_custom_object,
                       QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, name)
        except ClusterRejected as err:
            if err.status == 404:
                return False
            raise
        return True

    def write_shard_conditions(self, name: str, conditions: Sequence[Mapping[str, str]]) -> bool:
        """Set these conditions (type, status, reason, message) in the SchedulingShard object's
        status, keeping its other conditions and a condition's lastTransitionTime while its status
        holds; False when there is no such object. Written only when something changed."""
        try:
            current = self._json(f"read SchedulingShard {name}", self.custom.get_cluster_custom_object,
                                 KAI_GROUP, "v1", "schedulingshards", name)
        except ClusterRejected as err:
            if err.status == 404:
                return False
            raise
        status = current.get("status") if isinstance(current.get("status"), dict) else {}
        before = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
        by_type = {c.get("type"): c for c in before}
        now = datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        generation = _meta(current).get("generation")
        ours = {}
        for condition in conditions:
            old = by_type.get(condition["type"]) or {}
            held = old.get("status") == condition["status"] and old.get("lastTransitionTime")
            ours[condition["type"]] = {
                **condition, "lastTransitionTime": held or now,
                **({"observedGeneration": generation} if isinstance(generation, int) else {})}
        after = [ours.pop(c.get("type"), c) for c in before] + list(ours.values())
        if after == before:
            return True
        self._json(f"write SchedulingShard {name} status", self.custom.patch_cluster_custom_object_status,
                   KAI_GROUP, "v1", "schedulingshards", name, {"status": {"conditions": after}})
        return True

    def write_queue_status(self, status: QueueStatusUpdate) -> None:
        body = {"status": {
            "allocated": _quantity_text(status.allocated),
            "allocatedNonPreemptible": _quantity_text(status.allocated_non_preemptible),
            "requested": _quantity_text(status.requested),
            "childQueues": list(status.child_queues),
        }}
        self._json(f"write Queue {status.name} status", self.custom.patch_cluster_custom_object_status,
                   QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, status.name, body)

    # -- reconciliation of an interrupted cycle -------------------------------------------------

    def is_bound(self, namespace: str, name: str, uid: str, node: str) -> bool:
        """Whether that pod incarnation is bound to ``node`` (a recorded bind took effect)."""
        pod = self.read_pod(namespace, name)
        if pod is None or (uid and _meta(pod).get("uid") != uid):
            return False
        return (pod.get("spec") or {}).get("nodeName") == node

    def is_gone(self, namespace: str, name: str, uid: str) -> bool:
        """Whether that pod incarnation no longer exists or is terminating (an eviction took effect)."""
        pod = self.read_pod(namespace, name)
        if pod is None or (uid and _meta(pod).get("uid") != uid):
            return True
        return bool(_meta(pod).get("deletionTimestamp"))

    # -- the pod-grouper's reads and writes ----------------------------------------------------

    def list_scheduler_pods_raw(self) -> list[dict[str, Any]]:
        """Raw pods of our scheduler that still matter (not finished), for the pod-grouper."""
        raws, _ = self.list_raw("list pods", self.core.list_pod_for_all_namespaces,
                                field_selector=self.pod_field_selector())
        return [r for r in raws if isinstance(r, dict)
                and (r.get("spec") or {}).get("schedulerName") == self.scheduler_name
                and (r.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]

    def missing_volume_sources(self, pods: Iterable[ObservedPod]) -> dict[tuple[str, str], tuple[str, str]]:
        """(namespace, pod) → (field, what is missing) for each pending pod whose ConfigMap or claim
        cannot be had, as kube-scheduler's volume predicates find: a ConfigMap that does not exist; a
        claim that does not exist; an unbound claim whose StorageClass does not exist and which no
        PersistentVolume of that class could satisfy. One read per object, whatever the pod count."""
        seen: dict[tuple[str, str, str], Any] = {}
        readers: dict[str, Callable[..., Any]] = {
            "ConfigMap": self.core.read_namespaced_config_map,
            "PersistentVolumeClaim": self.core.read_namespaced_persistent_volume_claim,
            "StorageClass": client.StorageV1Api(self.api_client).read_storage_class,
        }

        def get(kind: str, namespace: str, name: str) -> Any:
            key = (kind, namespace, name)
            if key not in seen:
                args = (name, namespace) if namespace else (name,)
                try:
                    seen[key] = self._json(f"read {kind} {namespace}/{name}", readers[kind], *args)
                except ClusterRejected as err:
                    if err.status != 404:
                        raise
                    seen[key] = None
            return seen[key]

        volume_classes: set[str] | None = None
        out: dict[tuple[str, str], tuple[str, str]] = {}
        for pod in pods:
            if pod.node or not (pod.config_maps or pod.claims):
                continue
            ns, key = pod.namespace, (pod.namespace, pod.name)
            for field_, name in pod.config_maps:
                if get("ConfigMap", ns, name) is None:
                    out[key] = (field_, f'configmap "{name}" not found')
                    break
            for field_, name in pod.claims if key not in out else ():
                claim = get("PersistentVolumeClaim", ns, name)
                if claim is None:
                    out[key] = (field_, f'persistentvolumeclaim "{name}" not found')
                    break
                spec = claim.get("spec") or {}
                if spec.get("volumeName") or (claim.get("status") or {}).get("phase") == "Bound":
                    continue
                klass = str(spec.get("storageClassName") or "")
                if klass and get("StorageClass", "", klass) is not None:
                    continue
                if volume_classes is None:
                    raws, _ = self.list_raw("list PersistentVolumes", self.core.list_persistent_volume)
                    volume_classes = {str((v.get("spec") or {}).get("storageClassName") or "") for v in raws
                                      if (v.get("status") or {}).get("phase") in (None, "Available")}
                if klass not in volume_classes:
                    out[key] = (field_, f'persistentvolumeclaim "{name}" cannot be bound: '
                                        f'storageclass "{klass}" not found')
                    break
        return out

    def list_pods_raw(self, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """Raw pods of a namespace carrying all ``labels`` (any scheduler)."""
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        raws, _ = self.list_raw(f"list pods in {namespace}", self.core.list_namespaced_pod, namespace,
                                label_selector=selector)
        return [r for r in raws if isinstance(r, dict)]

    def list_pod_groups_raw(self) -> list[dict[str, Any]]:
        raws, _ = self.list_raw("list PodGroups", self.custom.list_cluster_custom_object, PODGROUP_GROUP,
                                PODGROUP_VERSION, PODGROUP_PLURAL)
        return [r for r in raws if isinstance(r, dict)]

    def get_object(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Any object by apiVersion, kind, namespace and name (None when absent or not served)."""
        group, _, version = api_version.rpartition("/")
        operation = f"read {kind} {namespace}/{name}"
        try:
            if not group:
                if kind == "Pod":
                    return self._json(operation, self.core.read_namespaced_pod, name, namespace)
                if kind == "Namespace":
                    return self._json(operation, self.core.read_namespace, name)
                return None
            plural = plural_of(kind)
            if namespace:
                return self._json(operation, self.custom.get_namespaced_custom_object, group, version, namespace,
                                  plural, name)
            return self._json(operation, self.custom.get_cluster_custom_object, group, version, plural, name)
        except ClusterRejected as err:
            if err.status == 404:
                return None
            raise

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        raw = self.get_object("v1", "Namespace", "", namespace)
        return dict(_meta(raw).get("labels") or {}) if raw else {}

    def create_pod_group(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Create the PodGroup (`ClusterRejected` with status 409 when it exists); the object made."""
        meta = manifest["metadata"]
        return self._json(f"write PodGroup {meta['namespace']}/{meta['name']}", self.custom.create_namespaced_custom_object,
                          PODGROUP_GROUP, PODGROUP_VERSION, meta["namespace"], PODGROUP_PLURAL, dict(manifest))

    def upsert_pod_group(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Create the PodGroup, or update its spec, labels and owners when they differ."""
        meta = manifest["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        operation = f"write PodGroup {namespace}/{name}"
        try:
            return self.create_pod_group(manifest)
        except ClusterRejected as err:
            if err.status != 409:
                raise
        current = self._json(operation, self.custom.get_namespaced_custom_object, PODGROUP_GROUP, PODGROUP_VERSION,
                             namespace, PODGROUP_PLURAL, name)
        wanted_meta = {k: meta[k] for k in ("labels", "annotations", "ownerReferences") if k in meta}
        if pod_group_carries(current, manifest):
            return current
        body = {"metadata": {**wanted_meta, "resourceVersion": _meta(current).get("resourceVersion")},
                "spec": manifest.get("spec")}
        return self._json(operation, self.custom.patch_namespaced_custom_object, PODGROUP_GROUP, PODGROUP_VERSION,
                          namespace, PODGROUP_PLURAL, name, body, _content_type="application/merge-patch+json")

    def annotate_pod_groups(self, changes: Sequence[tuple[str, str, str, Mapping[str, str | None]]]
                            ) -> list[ClusterError | None]:
        """Merge annotations into PodGroups, each change ``(namespace, name, uid, {key: text or None})``
        into that incarnation only (None removes the key), on up to ``bind_concurrency`` concurrent
        calls. One entry per change, in order: None when written or when the PodGroup is gone (or is
        another incarnation by now), else the error."""

        def annotate(change: tuple[str, str, str, Mapping[str, str | None]]) -> ClusterError | None:
            namespace, name, uid, annotations = change
            body: dict[str, Any] = {"metadata": {"annotations": dict(annotations)}}
            if uid:
                body["metadata"]["uid"] = uid
            try:
                self._json(f"annotate PodGroup {namespace}/{name}", self.custom.patch_namespaced_custom_object,
                           PODGROUP_GROUP, PODGROUP_VERSION, namespace, PODGROUP_PLURAL, name, body,
                           _content_type="application/merge-patch+json")
            except ClusterRejected as err:
                # Gone, or made again under the same name (`_uid_refused`).
                return None if err.status == 404 or _uid_refused(err) else err
            except ClusterError as err:
                return err
            return None

        if len(changes) <= 1:
            return [annotate(c) for c in changes]
        with ThreadPoolExecutor(max_workers=min(self.bind_concurrency, len(changes)),
                                thread_name_prefix="annotate") as pool:
            return list(pool.map(annotate, changes))

    def write_pod_group_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self._json(f"write PodGroup {namespace}/{name} status", self.custom.patch_namespaced_custom_object_status,
                   PODGROUP_GROUP, PODGROUP_VERSION, namespace, PODGROUP_PLURAL, name, {"status": dict(status)},
                   _content_type="application/merge-patch+json")

    def label_pod(self, namespace: str, name: str, uid: str, *, labels: Mapping[str, str],
                  annotations: Mapping[str, str]) -> bool:
        """Merge labels and annotations into that pod incarnation (False when it is gone)."""
        body = {"metadata": {"labels": dict(labels), "annotations": dict(annotations)}}
        if uid:
            body["metadata"]["uid"] = uid
        try:
            self._json(f"label pod {namespace}/{name}", self.core.patch_namespaced_pod, name, namespace, body,
                       _content_type="application/merge-patch+json")
        except ClusterRejected as err:
            if err.status == 404 or _uid_refused(err):
                return False
            raise
        return True

    def object_event(self, ref: Mapping[str, str], type_: str, reason: str, message: str) -> None:
        """An event on any object (``ref``: apiVersion, kind, namespace, name, uid)."""
        self._event(PodRef(ref["namespace"], ref["name"], ref.get("uid", "")), type_, reason, message,
                    kind=ref.get("kind", "Pod"), api_version=ref.get("apiVersion", "v1"), bump=False)


def _uid_refused(err: ClusterRejected) -> bool:
    """A patch that carries the object's uid refused because the object under that name is another
    incarnation: the uid cannot change (the API server says 422 on ``metadata.uid``, "field is
    immutable"; some servers say 409)."""
    return err.status == 409 or (err.status == 422 and "metadata.uid" in err.detail)


def plural_of(kind: str) -> str:
    """The resource name of a kind, by Kubernetes' own rule for the kinds we read."""
    low = kind.lower()
    if low.endswith(("s", "x", "ch", "sh")):
        return low + "es"
    if low.endswith("y") and low[-2:-1] not in "aeiou":
        return low[:-1] + "ies"
    return low + "s"
