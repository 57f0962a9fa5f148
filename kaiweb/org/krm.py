"""KAI Resource Management's (KRM) objects and kaiweb's org, converted both ways, on plain values.

* `read`: a ``kai.resources/v1alpha1`` NodePool, Department or Project (as the cluster or a YAML file
  holds it) → the dict the org services take (`services.create_node_pool`, `create_department`,
  `create_project`). Strict: an unknown field, a wrong type or a field kaiweb does not model is refused
  with a ValidationError keyed by the field's path (``spec.queues[1].resources.gpu.limit``); bounded
  (at most `MAX_ENTRIES` queue entries, `MAX_OBJECTS` objects a read).
* `nodepool_object`, `department_object`, `project_object`: the services' dicts → KRM's objects, so
  a team can move back (what `read` gives back, `read` of them gives again).
* What the org gives the cluster, as KRM writes it: a pool's `shard_object`, a project's
  `namespace_labels`, and the KRM objects' status (`nodepool_status`, `project_status`).

KRM's units are kept as they are (GPUs, millicores, MB): they are the queue model's units too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError

from kaiweb.cluster.choices import KRM_PLURALS
from kaiweb.core.choices import RESOURCES
from kaiweb.org.choices import (
    DEFAULT_POOL,
    ENFORCE_SCHEDULER_ANNOTATION,
    KRM_GROUP,
    KRM_VERSION,
    NAMESPACE_PROJECT_LABEL,
)
from scheduler_core import queue_crd

API_VERSION = f"{KRM_GROUP}/{KRM_VERSION}"
NODEPOOL, DEPARTMENT, PROJECT = "NodePool", "Department", "Project"
KINDS = KRM_PLURALS  # kind → plural, in the order an import applies them
MAX_ENTRIES = 64
MAX_OBJECTS = 5000
MAX_NAME = 253
# What KRM's shard leaves unset means the scheduler's default; kaiweb's shard rows hold these values then.
DEFAULT_PLACEMENT = "binpack"
# The shard settings a node pool models (the shard row's fields), and the SchedulingShard spec fields they
# are written to: the pool rewrites these, a shard's other fields stay the cluster's.
SHARD_CONFIG_FIELDS = ("gpu_placement", "cpu_placement", "preempt_min_runtime", "reclaim_min_runtime")
SHARD_MODELLED = ("placementStrategy", "minRuntime")
# KRM's own fields of an object that carry no org meaning; kept out of the comparison and the import.
_METADATA_IGNORED = frozenset({"labels", "annotations", "uid", "resourceVersion", "generation", "creationTimestamp",
                               "managedFields", "finalizers", "ownerReferences", "deletionTimestamp",
                               "deletionGracePeriodSeconds", "selfLink"})
_AMOUNT_KEYS = {"deserved": "deserved", "limit": "limit", "overQuotaWeight": "over_quota_weight"}
_SUPPORTED_SHARD_CONFIG = ("placementStrategy", "minRuntime")
_UNMODELLED_SHARD_CONFIG = ("plugins", "actions", "queueDepthPerAction", "args", "timeBasedFairShare")


def _refuse(path: str, rule: str) -> ValidationError:
    return ValidationError({path: rule})


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _refuse(path, "must be an object")
    return value


def _known(value: Mapping[str, Any], allowed: Iterable[str], path: str) -> None:
    """Refuse the first unknown field (by name), naming its path and the fields known there."""
    unknown = sorted(set(value) - set(allowed), key=str)
    if unknown:
        field = f"{path}.{unknown[0]}" if path else str(unknown[0])
        raise _refuse(field, f"is not a field KRM's objects have here (known: {', '.join(sorted(allowed))})")


def _string(value: Any, path: str, *, required: bool = False, max_length: int = MAX_NAME) -> str:
    if value is None or value == "":
        if required:
            raise _refuse(path, "is required")
        return ""
    if not isinstance(value, str):
        raise _refuse(path, "must be a string")
    if len(value) > max_length:
        raise _refuse(path, f"must be at most {max_length} characters")
    return value


def _number(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _refuse(path, f"must be a plain number (KRM's units: GPUs, millicores, MB), not {value!r}")
    if not math.isfinite(value):
        raise _refuse(path, "must be a finite number")
    return float(value)


# ------------------------------------------------------------------------------------------ KRM → kaiweb


def kind_of(obj: Any) -> str:
    """The object's kind, checked: a KRM org object of ``kai.resources/v1alpha1``."""
    if not isinstance(obj, Mapping):
        raise _refuse("object", "must be a Kubernetes object (a mapping)")
    if obj.get("apiVersion") != API_VERSION:
        raise _refuse("apiVersion", f"must be {API_VERSION}, not {obj.get('apiVersion')!r}")
    kind = obj.get("kind")
    if kind not in KINDS:
        raise _refuse("kind", f"must be one of {', '.join(KINDS)}, not {kind!r}")
    return str(kind)


def _name(obj: Mapping[str, Any]) -> str:
    metadata = _mapping(obj.get("metadata"), "metadata")
    return _string(metadata.get("name"), "metadata.name", required=True, max_length=63)


def _spec(obj: Mapping[str, Any], allowed: Iterable[str]) -> Mapping[str, Any]:
    _known(obj, ("apiVersion", "kind", "metadata", "spec", "status"), "")
    spec = _mapping(obj.get("spec"), "spec")
    _known(spec, allowed, "spec")
    return spec


def read(obj: Any) -> tuple[str, dict[str, Any]]:
    """A KRM object → (its kind, the org services' dict for it)."""
    kind = kind_of(obj)
    reader = {NODEPOOL: read_nodepool, DEPARTMENT: read_department, PROJECT: read_project}[kind]
    return kind, reader(obj)


def read_nodepool(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A NodePool → ``{name, label_key, label_value, preferred_topology, gpu_placement, cpu_placement,
    preempt_min_runtime, reclaim_min_runtime}`` (only what the object sets beyond the name and pair)."""
    spec = _spec(obj, ("labelKey", "labelValue", "preferredNetworkTopologyName", "schedulingShardConfig"))
    data: dict[str, Any] = {"name": _name(obj), "label_key": _string(spec.get("labelKey"), "spec.labelKey"),
                            "label_value": _string(spec.get("labelValue"), "spec.labelValue", max_length=63)}
    topology = _string(spec.get("preferredNetworkTopologyName"), "spec.preferredNetworkTopologyName")
    if topology:
        data["preferred_topology"] = topology
    config = _mapping(spec.get("schedulingShardConfig"), "spec.schedulingShardConfig")
    for key in _UNMODELLED_SHARD_CONFIG:
        if key in config:
            raise _refuse(f"spec.schedulingShardConfig.{key}",
                          "is not modelled by kaiweb's node pools; set it on the pool's SchedulingShard instead "
                          "(kaiweb keeps a shard's other fields)")
    _known(config, _SUPPORTED_SHARD_CONFIG, "spec.schedulingShardConfig")
    placement = _mapping(config.get("placementStrategy"), "spec.schedulingShardConfig.placementStrategy")
    _known(placement, ("gpu", "cpu"), "spec.schedulingShardConfig.placementStrategy")
    for resource in ("gpu", "cpu"):
        path = f"spec.schedulingShardConfig.placementStrategy.{resource}"
        value = _string(placement.get(resource), path)
        if value and value not in ("binpack", "spread"):
            raise _refuse(path, f"must be binpack or spread, not {value!r}")
        if value:
            data[f"{resource}_placement"] = value
    runtimes = _mapping(config.get("minRuntime"), "spec.schedulingShardConfig.minRuntime")
    _known(runtimes, ("preemptMinRuntime", "reclaimMinRuntime"), "spec.schedulingShardConfig.minRuntime")
    for key, field in (("preemptMinRuntime", "preempt_min_runtime"), ("reclaimMinRuntime", "reclaim_min_runtime")):
        if runtimes.get(key) in (None, ""):
            continue
        try:
            seconds = queue_crd.parse_duration(runtimes[key])
        except ValueError as exc:
            raise _refuse(f"spec.schedulingShardConfig.minRuntime.{key}", str(exc)) from exc
        data[field] = timedelta(seconds=seconds)
    return data


def _entries(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise _refuse("spec.queues", "must be a list (one entry per node pool; it may be empty)")
    if len(value) > MAX_ENTRIES:
        raise _refuse("spec.queues", f"at most {MAX_ENTRIES} entries (one per node pool)")
    entries = []
    for i, item in enumerate(value):
        path = f"spec.queues[{i}]"
        item = _mapping(item, path)
        _known(item, ("name", "nodepool", "priority", "resources"), path)
        entry: dict[str, Any] = {"pool": _string(item.get("nodepool"), f"{path}.nodepool", required=True,
                                                 max_length=63)}
        name = _string(item.get("name"), f"{path}.name", max_length=63)
        if name:
            entry["name"] = name
        if "priority" in item:
            priority = item["priority"]
            if isinstance(priority, bool) or not isinstance(priority, int) or not -2**31 <= priority < 2**31:
                raise _refuse(f"{path}.priority", "must be a 32-bit integer")
            entry["priority"] = priority
        resources = _mapping(item.get("resources"), f"{path}.resources")
        _known(resources, RESOURCES, f"{path}.resources")
        for resource in RESOURCES:
            given = _mapping(resources.get(resource), f"{path}.resources.{resource}")
            _known(given, _AMOUNT_KEYS, f"{path}.resources.{resource}")
            entry[resource] = {field: _number(given[key], f"{path}.resources.{resource}.{key}")
                               for key, field in _AMOUNT_KEYS.items() if key in given}
        entries.append(entry)
    return entries


def read_department(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A Department → ``{name, queues}``."""
    spec = _spec(obj, ("queues",))
    return {"name": _name(obj), "queues": _entries(spec.get("queues"))}


def read_project(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A Project → ``{name, department, namespace, enforce_kai_scheduler, default_node_pools, queues}``.
    ``deletionType`` is read and not kept: kaiweb always refuses to delete a project whose workloads run."""
    spec = _spec(obj, ("queues", "parent", "defaultNodePools", "namespace", "enforceKaiScheduler",
                                "deletionType"))
    enforce = spec.get("enforceKaiScheduler", False)
    if not isinstance(enforce, bool):
        raise _refuse("spec.enforceKaiScheduler", "must be true or false")
    pools = spec.get("defaultNodePools") or []
    if not isinstance(pools, list) or not all(isinstance(p, str) and p for p in pools) or len(pools) > MAX_ENTRIES:
        raise _refuse("spec.defaultNodePools", f"must be a list of at most {MAX_ENTRIES} node pool names")
    deletion = _string(spec.get("deletionType"), "spec.deletionType")
    if deletion and deletion != "Blocking":
        raise _refuse("spec.deletionType", f"must be Blocking or absent, not {deletion!r}")
    return {"name": _name(obj), "department": _string(spec.get("parent"), "spec.parent", max_length=63),
            "namespace": _string(spec.get("namespace"), "spec.namespace", max_length=63),
            "enforce_kai_scheduler": enforce, "default_node_pools": list(pools),
            "queues": _entries(spec.get("queues"))}


def read_all(objects: Iterable[Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every object read, in the order an import applies them: node pools, departments, projects, each by
    name. A bad object is refused with its kind, name and the field (``Project research:
    spec.queues[0].nodepool``); more than `MAX_OBJECTS` is refused whole."""
    read_objects: list[tuple[str, dict[str, Any]]] = []
    for i, obj in enumerate(objects):
        if i >= MAX_OBJECTS:
            raise _refuse("objects", f"at most {MAX_OBJECTS} KRM objects at a time")
        where = f"object {i}"
        if isinstance(obj, Mapping):
            meta = obj.get("metadata")
            name = meta.get("name") if isinstance(meta, Mapping) else None
            where = f"{obj.get('kind', 'object')} {name}" if isinstance(name, str) else where
        try:
            read_objects.append(read(obj))
        except ValidationError as exc:
            raise ValidationError({f"{where}: {path}": msgs for path, msgs in exc.message_dict.items()}) from exc
    order = list(KINDS)
    return sorted(read_objects, key=lambda kd: (order.index(kd[0]), kd[1]["name"]))


# ------------------------------------------------------------------------------------------ kaiweb → KRM


def _object(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}


def _plain(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def nodepool_object(data: Mapping[str, Any]) -> dict[str, Any]:
    """A node pool's dict (as `read_nodepool` gives it) → a NodePool. Placement ``binpack`` and absent
    runtimes are the scheduler's defaults and left unset, as KRM leaves them."""
    spec: dict[str, Any] = {}
    if data.get("label_key"):
        spec["labelKey"] = data["label_key"]
        spec["labelValue"] = data.get("label_value", "")
    if data.get("preferred_topology"):
        spec["preferredNetworkTopologyName"] = data["preferred_topology"]
    config: dict[str, Any] = {}
    placement = {r: data[f"{r}_placement"] for r in ("gpu", "cpu")
                 if data.get(f"{r}_placement") not in (None, "", DEFAULT_PLACEMENT)}
    if placement:
        config["placementStrategy"] = placement
    runtimes = {key: queue_crd.format_duration(data[field].total_seconds())
                for key, field in (("preemptMinRuntime", "preempt_min_runtime"),
                                   ("reclaimMinRuntime", "reclaim_min_runtime")) if data.get(field) is not None}
    if runtimes:
        config["minRuntime"] = runtimes
    if config:
        spec["schedulingShardConfig"] = config
    return _object(NODEPOOL, data["name"], spec)


def _queue_items(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    items = []
    for entry in entries:
        item: dict[str, Any] = {}
        if entry.get("name"):
            item["name"] = entry["name"]
        item["nodepool"] = entry["pool"]
        if "priority" in entry:
            item["priority"] = entry["priority"]
        item["resources"] = {r: {key: _plain((entry.get(r) or {}).get(field, 0.0))
                                 for key, field in _AMOUNT_KEYS.items()} for r in RESOURCES}
        items.append(item)
    return items


def department_object(data: Mapping[str, Any]) -> dict[str, Any]:
    """A department's dict → a Department."""
    return _object(DEPARTMENT, data["name"], {"queues": _queue_items(data.get("queues") or [])})


def project_object(data: Mapping[str, Any]) -> dict[str, Any]:
    """A project's dict → a Project (its adopted namespace only when it adopted one)."""
    spec: dict[str, Any] = {}
    if data.get("department"):
        spec["parent"] = data["department"]
    if data.get("enforce_kai_scheduler"):
        spec["enforceKaiScheduler"] = True
    if data.get("default_node_pools"):
        spec["defaultNodePools"] = list(data["default_node_pools"])
    if data.get("namespace"):
        spec["namespace"] = data["namespace"]
    spec["queues"] = _queue_items(data.get("queues") or [])
    return _object(PROJECT, data["name"], spec)


# ------------------------------------------------------------------------------------------ what the cluster gets


def shard_spec(pool: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a pool's SchedulingShard kaiweb writes (KRM: a shard named after the pool, partition
    value the pool's name, empty for the default pool, and the pool's ``schedulingShardConfig``; fields
    left at the scheduler's defaults are not written, and a shard's other fields are the cluster's)."""
    spec: dict[str, Any] = {"partitionLabelValue": "" if pool == DEFAULT_POOL else pool}
    placement = {r: config[f"{r}_placement"] for r in ("gpu", "cpu")
                 if config.get(f"{r}_placement") not in (None, "", DEFAULT_PLACEMENT)}
    if placement:
        spec["placementStrategy"] = placement
    runtimes = {key: queue_crd.format_duration(config[field].total_seconds())
                for key, field in (("preemptMinRuntime", "preempt_min_runtime"),
                                   ("reclaimMinRuntime", "reclaim_min_runtime")) if config.get(field) is not None}
    if runtimes:
        spec["minRuntime"] = runtimes
    return spec


def namespace_labels(project: str, enforce: bool) -> tuple[dict[str, str], dict[str, str]]:
    """A project namespace's label (``kai/project``) and annotation (``kai.resources/enforce-scheduler-name``)."""
    return {NAMESPACE_PROJECT_LABEL: project}, {ENFORCE_SCHEDULER_ANNOTATION: "true" if enforce else "false"}


def nodepool_status(phase: str, message: str, nodes: Iterable[tuple[str, bool]]) -> dict[str, Any]:
    """A NodePool's status: its phase, why, and its nodes as ``Ready`` or ``Unschedulable``."""
    return {"phase": phase, "message": message,
            "nodes": [{"name": name, "status": "Ready" if ok else "Unschedulable"} for name, ok in sorted(nodes)]}


def quota_figures(requested: Mapping[str, float], allocated: Mapping[str, float],
                  non_preemptible: Mapping[str, float]) -> dict[str, dict[str, float | int]]:
    """The three figures of a queue status, each {gpu, cpu, memory} in KRM's units."""
    return {name: {r: _plain(round(float(figures.get(r, 0.0)), 6)) for r in RESOURCES}
            for name, figures in (("requested", requested), ("allocated", allocated),
                                  ("allocatedNonPreemptible", non_preemptible))}


def project_status(namespace: str, per_pool: Mapping[str, Mapping[str, Mapping[str, float]]],
                   problems: Sequence[str] = ()) -> dict[str, Any]:
    """A Project's status: Ready (or NotReady with the problems), the namespace in use, each pool's queue
    figures (``per_pool``: pool → figure → resource → amount) and their sums."""
    totals: dict[str, dict[str, float]] = {}
    statuses = []
    for pool in sorted(per_pool):
        figures = per_pool[pool]
        statuses.append({"nodePoolName": pool, "queueStatus": {k: dict(v) for k, v in figures.items()}})
        for figure, amounts in figures.items():
            bucket = totals.setdefault(figure, {r: 0.0 for r in RESOURCES})
            for r in RESOURCES:
                bucket[r] += float(amounts.get(r, 0.0))
    quota = {figure: {r: _plain(round(v, 6)) for r, v in amounts.items()} for figure, amounts in totals.items()}
    return {"phase": "NotReady" if problems else "Ready", "namespace": namespace,
            "message": "; ".join(problems) if problems else "namespace and queues are in place",
            "nodePoolsQuotaStatuses": statuses, "quotaStatus": quota}


def plain_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object as its owner wrote it: apiVersion, kind, name and spec (the cluster's bookkeeping left out)."""
    metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _METADATA_IGNORED}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": metadata,
            "spec": obj.get("spec") or {}}
