"""What the admission webhooks change and refuse, on plain objects (no database, no cluster).

Mutation (pods of our scheduler, on create), as KAI's webhook does:

* **a GPU-sharing pod** (``gpu-fraction`` / ``gpu-memory``): the fraction container (the one the
  ``gpu-fraction-container-name`` annotation names, else the first) reads ``GPU_PORTION``,
  ``NVIDIA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_MEMORY_LIMIT`` from the pod's ConfigMap, which the
  binder writes (`kaiweb.cluster.backends.kubernetes.gpu_sharing`). The ConfigMap's name prefix is fixed now in
  the ``runai/shared-gpu-configmap`` annotation, as KAI's webhook fixes it (the pod has no uid yet).
  The references are not optional (``CUDA_DEVICE_MEMORY_LIMIT`` is optional for a ``gpu-fraction``
  pod: the binder writes it only when it knows it), so the kubelet starts the container only once
  the binder has written its share and the device it holds: never on the whole GPU.
* **device hiding**: a pod that asks for no GPU at all gets ``NVIDIA_VISIBLE_DEVICES=void`` in every
  container, so an image whose environment says ``all`` sees no device on a GPU node.
* **the queue label** from the namespace's ``kai.scheduler/queue`` label when the pod names no queue
  (neither that label nor KAI's ``project`` label, which comes first in the pod-grouper's order).
* **the scheduler** (`enforces_scheduler`): in a namespace whose project has KRM's ``enforceKaiScheduler``
  on (the namespace annotation ``kai.resources/enforce-scheduler-name: "true"``), a pod of any other
  scheduler is put on ours (`enforce_scheduler`), before the other mutations see it.

Validation: KAI's GPU-request rules, the queue (it exists, is a leaf, and the namespace may use it),
and a PodGroup's subgroups (unique names, known parents, no cycle) as KAI's PodGroup webhook checks them.
Every refusal is a `Denial` naming the field and the rule.
"""

from __future__ import annotations

import copy
import re
import secrets
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kaiweb.cluster.backends.kubernetes import gpu_sharing
from kaiweb.cluster.backends.types import (
    ENFORCE_SCHEDULER_ANNOTATION,
    GPU_FRACTION_ANNOTATION,
    GPU_FRACTION_NUM_DEVICES_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    QUEUE_LABEL,
)

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
GPU_PORTION = "GPU_PORTION"
MEMORY_LIMIT = "CUDA_DEVICE_MEMORY_LIMIT"
HIDDEN = "void"
PROJECT_LABEL = "project"
MPS_ANNOTATION = "mps"
CONTAINER_KINDS = ("initContainers", "containers")
# KAI's prefix: <base>-<7 random>-shared-gpu, short enough for "-<index>-evar" and a "-vol" volume name.
PREFIX_TAIL = "shared-gpu"
RANDOM_CHARS = 7
MAX_BASE = 63 - (RANDOM_CHARS + 6) - len(PREFIX_TAIL) - 2 - 5
_RANDOM_ALPHABET = string.ascii_lowercase + string.digits


@dataclass(frozen=True)
class Denial:
    """Why a request is refused: the field, the rule it breaks, and the sentence the user reads."""

    field: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


# ------------------------------------------------------------------------------------------ reading


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def labels(obj: Mapping[str, Any]) -> dict[str, Any]:
    return _dict(_dict(obj.get("metadata")).get("labels"))


def annotations(obj: Mapping[str, Any]) -> dict[str, Any]:
    return _dict(_dict(obj.get("metadata")).get("annotations"))


def containers(pod: Mapping[str, Any]) -> Iterable[tuple[str, int, dict[str, Any]]]:
    spec = _dict(pod.get("spec"))
    for kind in CONTAINER_KINDS:
        for index, container in enumerate(_list(spec.get(kind))):
            if isinstance(container, dict):
                yield kind, index, container


def is_fractional(pod: Mapping[str, Any]) -> bool:
    notes = annotations(pod)
    return GPU_FRACTION_ANNOTATION in notes or GPU_MEMORY_ANNOTATION in notes


def _gpu_resources(container: Mapping[str, Any]) -> Iterable[str]:
    resources = _dict(container.get("resources"))
    for part in ("limits", "requests"):
        for name in _dict(resources.get(part)):
            if name == GPU_RESOURCE or str(name).startswith(MIG_RESOURCE_PREFIX):
                yield str(name)


def asks_for_gpu(pod: Mapping[str, Any]) -> bool:
    """Whole devices, MIG slices or a share, in any container."""
    return is_fractional(pod) or any(any(_gpu_resources(c)) for _, _, c in containers(pod))


def pod_queue(pod: Mapping[str, Any]) -> str | None:
    return str(labels(pod).get(QUEUE_LABEL) or "") or None


# ------------------------------------------------------------------------------------------ mutation


def new_config_map_prefix(pod: Mapping[str, Any], random: Callable[[int], str] | None = None) -> str:
    """A ConfigMap name prefix as KAI's webhook makes one: the first owner's name (else the pod's, else
    its generateName), cut to fit, then 7 random characters and ``shared-gpu``."""
    meta = _dict(pod.get("metadata"))
    owners = [o for o in _list(meta.get("ownerReferences")) if isinstance(o, dict)]
    base = str((owners[0].get("name") if owners else None) or meta.get("name")
               or str(meta.get("generateName") or "").rstrip("-") or "pod")
    base = base[:MAX_BASE].rstrip("-.") or "pod"
    pick = random or (lambda n: "".join(secrets.choice(_RANDOM_ALPHABET) for _ in range(n)))
    return f"{base}-{pick(RANDOM_CHARS)}-{PREFIX_TAIL}"


def _set_env(container: dict[str, Any], entry: dict[str, Any]) -> None:
    """Put ``entry`` last in the container's env, replacing any variable of the same name (as KAI does)."""
    env = [e for e in _list(container.get("env")) if not (isinstance(e, dict) and e.get("name") == entry["name"])]
    env.append(entry)
    container["env"] = env


def _from_config_map(name: str, config_map: str, *, optional: bool = False) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": config_map, "key": name}
    if optional:
        ref["optional"] = True
    return {"name": name, "valueFrom": {"configMapKeyRef": ref}}


def enforces_scheduler(namespace_annotations: Mapping[str, Any]) -> bool:
    """Whether the namespace's project puts every pod on our scheduler (KRM's annotation, "true")."""
    return str(namespace_annotations.get(ENFORCE_SCHEDULER_ANNOTATION, "")).strip().lower() == "true"


def enforce_scheduler(pod: Mapping[str, Any], scheduler_name: str) -> tuple[dict[str, Any], str | None]:
    """The pod on our scheduler, and the note saying what it asked for (None when it asked for ours)."""
    out = copy.deepcopy(dict(pod))
    spec = out.setdefault("spec", {})
    if not isinstance(spec, dict):
        return out, None
    asked = spec.get("schedulerName") or "default-scheduler"
    if asked == scheduler_name:
        return out, None
    spec["schedulerName"] = scheduler_name
    return out, f"schedulerName {scheduler_name} (it asked for {asked}): the namespace's project enforces it"


def mutate_pod(pod: Mapping[str, Any], *, namespace_queue: str | None,
               random: Callable[[int], str] | None = None) -> tuple[dict[str, Any], list[str]] | Denial:
    """The pod as admitted, and what was done (one short note per change); a `Denial` when the pod
    names a fraction container it does not have. The caller checks the scheduler name."""
    out = copy.deepcopy(dict(pod))
    meta = out.setdefault("metadata", {})
    if not isinstance(meta, dict):
        return Denial("metadata", "must be an object", "the pod's metadata is not an object")
    notes: list[str] = []

    if namespace_queue and not pod_queue(out) and not labels(out).get(PROJECT_LABEL):
        meta["labels"] = {**labels(out), QUEUE_LABEL: namespace_queue}
        notes.append(f"queue {namespace_queue} from the namespace's {QUEUE_LABEL} label")

    if is_fractional(out):
        where = gpu_sharing.fraction_container(out)
        if where is None:
            name = annotations(out).get(gpu_sharing.FRACTION_CONTAINER_ANNOTATION)
            return Denial(f"metadata.annotations[{gpu_sharing.FRACTION_CONTAINER_ANNOTATION}]",
                          "must name a container of the pod",
                          f"names container {name!r}, which the pod does not have")
        kind, index = where
        spec_containers = _list(_dict(out.get("spec")).get(kind))
        if index >= len(spec_containers) or not isinstance(spec_containers[index], dict):
            return Denial(f"spec.{kind}", "must hold the fraction container", "the pod has no container to share a GPU with")
        if not annotations(out).get(gpu_sharing.CONFIG_MAP_ANNOTATION):
            meta["annotations"] = {**annotations(out), gpu_sharing.CONFIG_MAP_ANNOTATION: new_config_map_prefix(out, random)}
        config_map = gpu_sharing.config_map_name(out)
        container = spec_containers[index]
        _set_env(container, _from_config_map(VISIBLE_DEVICES, config_map))
        _set_env(container, _from_config_map(GPU_PORTION, config_map))
        by_memory = GPU_MEMORY_ANNOTATION in annotations(out)
        _set_env(container, _from_config_map(MEMORY_LIMIT, config_map, optional=not by_memory))
        notes.append(f"{kind}[{index}] ({container.get('name', '')}) reads its GPU share from ConfigMap {config_map}")
    elif not asks_for_gpu(out):
        hidden = 0
        for _, _, container in containers(out):
            _set_env(container, {"name": VISIBLE_DEVICES, "value": HIDDEN})
            hidden += 1
        if hidden:
            notes.append(f"{VISIBLE_DEVICES}={HIDDEN} in {hidden} container(s): the pod asks for no GPU")
    return out, notes


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def json_patch(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The RFC 6902 operations that turn ``before`` into ``after`` for the parts `mutate_pod` changes:
    the labels and annotations (key by key), the scheduler name (`enforce_scheduler`) and each
    container's env (whole). ``add`` on an existing member replaces it, so each operation holds whether
    or not the member was there."""
    ops: list[dict[str, Any]] = []
    meta_before, meta_after = _dict(before.get("metadata")), _dict(after.get("metadata"))
    for part in ("labels", "annotations"):
        old, new = _dict(meta_before.get(part)), _dict(meta_after.get(part))
        if old == new:
            continue
        if part not in meta_before or not isinstance(meta_before.get(part), dict):
            ops.append({"op": "add", "path": f"/metadata/{part}", "value": new})
            continue
        for key, value in new.items():
            if old.get(key) != value or key not in old:
                ops.append({"op": "add", "path": f"/metadata/{part}/{_escape(str(key))}", "value": value})
    spec_before, spec_after = _dict(before.get("spec")), _dict(after.get("spec"))
    if spec_after.get("schedulerName") != spec_before.get("schedulerName"):
        ops.append({"op": "add", "path": "/spec/schedulerName", "value": spec_after.get("schedulerName")})
    for kind in CONTAINER_KINDS:
        olds, news = _list(spec_before.get(kind)), _list(spec_after.get(kind))
        for index, new_container in enumerate(news):
            old_container = olds[index] if index < len(olds) and isinstance(olds[index], dict) else {}
            if isinstance(new_container, dict) and new_container.get("env") != old_container.get("env"):
                ops.append({"op": "add", "path": f"/spec/{kind}/{index}/env", "value": new_container["env"]})
    return ops


# ------------------------------------------------------------------------------------------ validation

_UNSIGNED = re.compile(r"^[0-9]+$")


def gpu_request_denial(pod: Mapping[str, Any]) -> Denial | None:
    """KAI's rules for GPU requests (its binder's ``ValidateGpuRequests``), each named by its field."""
    notes = annotations(pod)
    fraction, memory = notes.get(GPU_FRACTION_ANNOTATION), notes.get(GPU_MEMORY_ANNOTATION)
    has_fraction, has_memory = GPU_FRACTION_ANNOTATION in notes, GPU_MEMORY_ANNOTATION in notes
    whole = next((f"spec.{kind}[{index}].resources.limits[{GPU_RESOURCE}]" for kind, index, c in containers(pod)
                  if GPU_RESOURCE in _dict(_dict(c.get("resources")).get("limits"))), None)
    fraction_field = f"metadata.annotations[{GPU_FRACTION_ANNOTATION}]"
    memory_field = f"metadata.annotations[{GPU_MEMORY_ANNOTATION}]"
    if not (has_fraction or has_memory) and str(notes.get(MPS_ANNOTATION)) == "true":
        return Denial(f"metadata.annotations[{MPS_ANNOTATION}]", "only with a GPU share",
                      f"MPS is only supported with a {GPU_FRACTION_ANNOTATION} or {GPU_MEMORY_ANNOTATION} request")
    if has_fraction and whole:
        return Denial(fraction_field, f"not together with {GPU_RESOURCE}",
                      f"a GPU fraction cannot be asked together with whole GPUs ({whole})")
    if has_memory and (has_fraction or whole):
        return Denial(memory_field, "not together with another GPU request",
                      f"GPU memory cannot be asked together with {fraction_field if has_fraction else whole}")
    if GPU_FRACTION_NUM_DEVICES_ANNOTATION in notes and not (has_fraction or has_memory):
        return Denial(f"metadata.annotations[{GPU_FRACTION_NUM_DEVICES_ANNOTATION}]", "only with a GPU share",
                      f"several fractional devices need a {GPU_FRACTION_ANNOTATION} or {GPU_MEMORY_ANNOTATION} annotation")
    if has_memory and not (_UNSIGNED.match(str(memory)) and int(str(memory)) > 0):
        return Denial(memory_field, "a whole number of MiB greater than 0",
                      f"must be a whole number of MiB greater than 0, not {memory!r}")
    if has_fraction:
        try:
            value = float(str(fraction))
        except ValueError:
            value = float("nan")
        if not 0 < value < 1:
            return Denial(fraction_field, "a number greater than 0 and smaller than 1",
                          f"must be a number greater than 0 and smaller than 1, not {fraction!r} "
                          f"(a whole device is {GPU_RESOURCE}: 1)")
    count = notes.get(GPU_FRACTION_NUM_DEVICES_ANNOTATION)
    if count is not None and not (_UNSIGNED.match(str(count)) and int(str(count)) > 0):
        return Denial(f"metadata.annotations[{GPU_FRACTION_NUM_DEVICES_ANNOTATION}]", "a whole number greater than 0",
                      f"must be a whole number of devices greater than 0, not {count!r}")
    return None


@dataclass(frozen=True)
class QueueFacts:
    """What the queue check needs to know: does the queue exist, its child queues, and the queues the
    namespace is bound to (empty: no binding, every queue may be used)."""

    exists: bool
    children: tuple[str, ...] = ()
    bound: tuple[str, ...] = ()


def queue_denial(queue: str, namespace: str, facts: QueueFacts, *, field: str) -> Denial | None:
    if not facts.exists:
        return Denial(field, "must name an existing queue",
                      f"queue {queue!r} does not exist (kaiweb knows the cluster's Queue objects and its own queues)")
    if facts.children:
        shown = ", ".join(facts.children[:5]) + (", …" if len(facts.children) > 5 else "")
        return Denial(field, "must name a leaf queue",
                      f"queue {queue!r} has child queues ({shown}); workloads go to leaf queues only")
    if facts.bound and queue not in facts.bound:
        shown = ", ".join(facts.bound[:10]) + (", …" if len(facts.bound) > 10 else "")
        return Denial(field, "must name a queue bound to the namespace",
                      f"namespace {namespace!r} may use only the queues bound to it ({shown}), not {queue!r}; "
                      "a platform admin binds namespaces to queues")
    return None


def subgroup_denial(pod_group: Mapping[str, Any]) -> Denial | None:
    """A PodGroup's ``spec.subGroups`` as KAI's PodGroup webhook checks them: unique names, parents
    that exist, and no cycle through the parents."""
    groups = _list(_dict(pod_group.get("spec")).get("subGroups"))
    parents: dict[str, str | None] = {}
    for index, group in enumerate(groups):
        field = f"spec.subGroups[{index}]"
        if not isinstance(group, dict):
            return Denial(field, "must be an object", "is not an object")
        name = group.get("name")
        if not isinstance(name, str) or not name:
            return Denial(f"{field}.name", "is required", "a subgroup needs a name")
        if name in parents:
            return Denial(f"{field}.name", "must be unique", f"duplicate subgroup name {name!r}")
        parent = group.get("parent")
        parents[name] = parent if isinstance(parent, str) else None
    for index, group in enumerate(groups):
        parent = parents[group["name"]]
        if parent is not None and parent not in parents:
            return Denial(f"spec.subGroups[{index}].parent", "must name a subgroup of the PodGroup",
                          f"parent {parent!r} of {group['name']!r} was not found")
    reaches_root: set[str] = set()  # each subgroup is walked once: linear in their number
    for start in parents:
        path: list[str] = []
        on_path: set[str] = set()
        at: str | None = start
        while at is not None and at not in reaches_root:
            if at in on_path:
                return Denial("spec.subGroups", "must form a tree", f"cycle detected in subgroups through {at!r}")
            path.append(at)
            on_path.add(at)
            at = parents.get(at)
        reaches_root.update(path)
    return None
