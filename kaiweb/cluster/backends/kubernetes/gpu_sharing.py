"""Shared GPUs on a Kubernetes cluster, as KAI's binder holds them.

A fractional pod (``gpu-fraction`` / ``gpu-memory``) asks the device plugin for no GPU, so the plugin
could hand its device to anyone. Before such a pod is bound, its GPU group (``runai-gpu-group``, one
physical device on one node) gets a **reservation pod**: bound straight to the node, in the
reservation namespace (``KAI_RESERVATION_NAMESPACE``), asking for one ``nvidia.com/gpu`` and labelled
with the group, so the device stays taken while anyone shares it. Its container (``KAI_RESERVATION_IMAGE``)
writes the index of the device it got into its ``run.ai/reserve_for_gpu_index`` annotation.

Each sharer gets a **ConfigMap** with what its container needs to keep to its share: ``GPU_PORTION``,
``CUDA_DEVICE_MEMORY_LIMIT`` for a GPU-memory request, and ``NVIDIA_VISIBLE_DEVICES`` once the
reservation pod has reported its device. It is named as KAI's admission webhook names it (the
``runai/shared-gpu-configmap`` annotation, plus ``-<index>`` of the fraction container, ``-i<index>``
for an init container) and owned by the pod, so it goes with the pod. kaiweb's mutating webhook
(`kaiweb.admission`) points the fraction container's environment at its keys when it admits the pod;
without the webhook a workload spells the references out itself.

A sharer says which devices it holds by labels, as KAI's binder writes them (its
``resourcereservation`` service): a pod on one device has ``runai-gpu-group: <group>``; a pod on
several (``gpu-fraction-num-devices`` > 1) has one ``runai-gpu-group/<group>: <group>`` per device and
no plain label, since a label value cannot list several (`group_labels`, read back by `groups_of`).
Each device has its own group and its own reservation pod.

When the last sharer of a group has left (finished, deleted or evicted), the group's reservation pod
is deleted on the next observe step (`orphaned_reservations`).

These functions are pure; `KubernetesGateway` calls them and does the reads and writes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kaiweb.cluster.backends.types import GPU_GROUP_LABEL, GPU_RESOURCE, MULTI_GPU_GROUP_PREFIX

RESERVATION_APP = "kai-resource-reservation"
APP_LABEL = "app"
GPU_INDEX_ANNOTATION = "run.ai/reserve_for_gpu_index"
CONFIG_MAP_ANNOTATION = "runai/shared-gpu-configmap"
FRACTION_CONTAINER_ANNOTATION = "gpu-fraction-container-name"
MAX_NAME = 63
# A group names a label value and, on a pod with several devices, a label key's name part: both
# are at most 63 characters of this shape.
GROUP_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def group_labels(groups: Sequence[str]) -> dict[str, str]:
    """The labels that say a pod holds ``groups`` (one per device), as KAI's binder writes them: the
    plain ``runai-gpu-group`` for one device, one ``runai-gpu-group/<group>`` each for several.

    Raises ValueError for no group, a group twice (one device given twice) or a name that cannot be
    a label."""
    if not groups:
        raise ValueError("a shared-GPU pod needs at least one GPU group")
    if len(set(groups)) != len(groups):
        raise ValueError(f"GPU groups {', '.join(groups)} name one device twice")
    bad = [g for g in groups if not GROUP_NAME.match(g)]
    if bad:
        raise ValueError(f"GPU group {bad[0]!r} is not a label value (63 characters at most, letters, "
                         "digits, '-', '_', '.', starting and ending with a letter or digit)")
    if len(groups) == 1:
        return {GPU_GROUP_LABEL: groups[0]}
    return {MULTI_GPU_GROUP_PREFIX + g: g for g in groups}


def is_group_label(key: str) -> bool:
    """Whether a label key is one of those `group_labels` writes."""
    return key == GPU_GROUP_LABEL or key.startswith(MULTI_GPU_GROUP_PREFIX)


def groups_of(labels: Mapping[str, str] | None) -> tuple[str, ...]:
    """The GPU groups a pod's labels say it holds: the plain label's, then the per-device labels' in
    name order (a label map keeps no order). KAI's own reader (``GetGpuGroups``) reads the per-device
    labels only beside a plain one; a pod on several devices has none, so they are read on their own."""
    labels = labels or {}
    plain = labels.get(GPU_GROUP_LABEL)
    multi = sorted({v for k, v in labels.items() if k.startswith(MULTI_GPU_GROUP_PREFIX) and v and v != plain})
    return ((plain,) if plain else ()) + tuple(multi)


def _short(text: str, n: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def reservation_name(node: str, group: str) -> str:
    """One name per (node, group), stable, and a valid object name."""
    suffix = f"-{_short(f'{node}/{group}')}"
    return f"gpu-reservation-{node}"[: MAX_NAME - len(suffix)].rstrip("-.") + suffix


def reservation_pod(*, namespace: str, node: str, group: str, image: str,
                    tolerations: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The pod that holds one physical GPU of ``node`` for the sharers of ``group``."""
    field_env = [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
                 for name, path in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"))]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": reservation_name(node, group), "namespace": namespace,
                     "labels": {APP_LABEL: RESERVATION_APP, GPU_GROUP_LABEL: group}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "tolerations": [dict(t) for t in tolerations],
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65535, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "resource-reservation", "image": image, "imagePullPolicy": "IfNotPresent",
                            "env": field_env,
                            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                                "readOnlyRootFilesystem": True},
                            "resources": {"limits": {GPU_RESOURCE: "1"}, "requests": {GPU_RESOURCE: "1"}}}],
        },
    }


def fraction_container(pod: Mapping[str, Any]) -> tuple[str, int] | None:
    """Which container gets the share, as KAI picks it: the one the ``gpu-fraction-container-name``
    annotation names (init containers first), else the first container. ``("containers", i)`` or
    ``("initContainers", i)``; None when the annotation names no container of the pod."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    wanted = (meta.get("annotations") or {}).get(FRACTION_CONTAINER_ANNOTATION)
    if wanted is None:
        return ("containers", 0)
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(kind) or []):
            if isinstance(container, Mapping) and container.get("name") == wanted:
                return (kind, index)
    return None


def config_map_name(pod: Mapping[str, Any], container_index: int | str | None = None) -> str:
    """The name KAI's webhook gives a sharer's ConfigMap: the annotation's prefix, or one made
    from the pod's owner (or the pod) and its uid, then ``-<index>`` of the fraction container
    (``-i<index>`` for an init container; ``container_index`` overrides it)."""
    if container_index is None:
        kind, index = fraction_container(pod) or ("containers", 0)
        container_index = f"i{index}" if kind == "initContainers" else index
    meta = pod.get("metadata") or {}
    prefix = (meta.get("annotations") or {}).get(CONFIG_MAP_ANNOTATION)
    if not prefix:
        owners = meta.get("ownerReferences") or []
        base = str(owners[0].get("name") if owners else meta.get("name", "pod"))
        tail = f"-{_short(str(meta.get('uid') or meta.get('name', '')), 7)}-shared-gpu"
        prefix = base[: MAX_NAME - len(tail) - 6].rstrip("-.") + tail
    return f"{prefix}-{container_index}"


def sharing_config_map(pod: Mapping[str, Any], *, portion: float | None, gpu_memory_mib: int | None,
                       device_index: str | None) -> dict[str, Any]:
    """The ConfigMap of one sharer, owned by it."""
    meta = pod.get("metadata") or {}
    data = {"GPU_PORTION": f"{portion:g}" if portion is not None else ""}
    if gpu_memory_mib:
        data["CUDA_DEVICE_MEMORY_LIMIT"] = f"{gpu_memory_mib}M"
    if device_index:
        data["NVIDIA_VISIBLE_DEVICES"] = device_index
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": config_map_name(pod), "namespace": meta.get("namespace", ""),
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta.get("name", ""),
                                          "uid": meta.get("uid", ""), "blockOwnerDeletion": False}]},
        "data": {k: v for k, v in data.items() if v != ""},
    }


def orphaned_reservations(reservations: Iterable[Mapping[str, Any]],
                          sharers: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names of the reservation pods whose (node, group) no live sharer uses any more."""
    live = set()
    for pod in sharers:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
            continue
        node = (pod.get("spec") or {}).get("nodeName") or ""
        live.update((node, group) for group in groups_of(meta.get("labels")))
    out = []
    for pod in reservations:
        meta = pod.get("metadata") or {}
        group = (meta.get("labels") or {}).get(GPU_GROUP_LABEL, "")
        node = (pod.get("spec") or {}).get("nodeName") or ""
        if (node, group) not in live and not meta.get("deletionTimestamp"):
            out.append(str(meta.get("name", "")))
    return sorted(out)
