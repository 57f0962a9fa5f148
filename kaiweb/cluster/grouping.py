"""The pod-grouper at work on a cluster: every pod of our scheduler gets its owner's PodGroup.

`kaiweb.cluster.podgrouper` decides, from a pod and its owners, what PodGroup the pod belongs to
(pure). This module does the cluster's part, as KAI's pod-grouper controller does: it reads the pods
and their owners through the gateway, creates or updates each PodGroup (recomputed on every pass, so
a later pod of the same owner updates minMember and subgroups), and marks each pod with the
``pod-group-name`` annotation and its subgroup label. It runs in the cycle's observe step, before the
mirror reads the cluster, so a pod is scheduled in the cycle that first sees it.

A pod whose owner chain cannot be read, or whose queue is nowhere to be found, is reported (once per
pass, as a `Problem`) and left alone: the mirror then reports it as unreadable, with the field.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from kaiweb.cluster import podgrouper
from kaiweb.cluster.backends.types import POD_GROUP_ANNOTATION
from kaiweb.cluster.errors import ClusterError

log = logging.getLogger(__name__)


@dataclass
class GroupingReport:
    pods: int = 0
    grouped: int = 0
    pod_groups_written: int = 0
    pods_marked: int = 0
    skipped: int = 0
    problems: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"pods": self.pods, "grouped": self.grouped, "pod_groups_written": self.pod_groups_written,
                "pods_marked": self.pods_marked, "skipped": self.skipped, "problems": self.problems[:20]}


class _CachedLookup:
    """Owner look-ups for one pass: each object is read once however many pods it owns."""

    def __init__(self, gateway: Any) -> None:
        self.gateway = gateway
        self.objects: dict[tuple[str, str, str, str], Mapping[str, Any] | None] = {}
        self.namespaces: dict[str, Mapping[str, str]] = {}

    def __call__(self, api_version: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        key = (api_version, kind, namespace, name)
        if key not in self.objects:
            try:
                self.objects[key] = self.gateway.get_object(api_version, kind, namespace, name)
            except ClusterError as exc:
                log.warning("pod-grouper: %s", exc)
                self.objects[key] = None
        return self.objects[key]

    def pods(self, namespace: str, labels: Mapping[str, str]) -> list[Mapping[str, Any]]:
        try:
            return list(self.gateway.list_pods_raw(namespace, labels))
        except ClusterError as exc:
            log.warning("pod-grouper: %s", exc)
            return []

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        if namespace not in self.namespaces:
            try:
                self.namespaces[namespace] = self.gateway.namespace_labels(namespace)
            except ClusterError as exc:
                log.warning("pod-grouper: %s", exc)
                self.namespaces[namespace] = {}
        return self.namespaces[namespace]


def _needs_marking(pod: Mapping[str, Any], grouping: podgrouper.Grouping) -> bool:
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return (any(annotations.get(k) != v for k, v in grouping.pod_annotations.items())
            or any(labels.get(k) != v for k, v in grouping.pod_labels.items()))


def _existing_pod_groups(gateway: Any) -> dict[tuple[str, str], Mapping[str, Any]]:
    try:
        raws = gateway.list_pod_groups_raw()
    except ClusterError as exc:
        log.warning("pod-grouper: %s", exc)
        return {}
    return {((r.get("metadata") or {}).get("namespace", ""), (r.get("metadata") or {}).get("name", "")): r
            for r in raws if isinstance(r, Mapping)}


def _same(current: Mapping[str, Any] | None, manifest: Mapping[str, Any]) -> bool:
    """Whether the PodGroup in the cluster already says what the grouper wants."""
    if current is None or current.get("spec") != manifest.get("spec"):
        return False
    have, want = current.get("metadata") or {}, manifest.get("metadata") or {}
    return all(have.get(k) == want[k] for k in ("labels", "annotations", "ownerReferences") if k in want)


def group_pods(gateway: Any, pods: list[Mapping[str, Any]] | None = None) -> GroupingReport:
    """One pass of the pod-grouper over the cluster's pods of our scheduler, or over ``pods`` only
    (the watcher passes the pod an event brought)."""
    report = GroupingReport()
    lookup = _CachedLookup(gateway)
    if pods is None:
        pods = gateway.list_scheduler_pods_raw()
    report.pods = len(pods)
    wanted: dict[tuple[str, str], dict[str, Any]] = {}
    marks: list[tuple[Mapping[str, Any], podgrouper.Grouping]] = []
    for pod in sorted(pods, key=lambda p: ((p.get("metadata") or {}).get("namespace", ""),
                                           (p.get("metadata") or {}).get("name", ""))):
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        outcome = podgrouper.group_pod(pod, lookup, scheduler_name=gateway.scheduler_name,
                                       default_queue=getattr(settings, "KAI_DEFAULT_QUEUE", "") or None,
                                       namespace_labels=lookup.namespace_labels, list_pods=lookup.pods)
        if isinstance(outcome, podgrouper.Skipped):
            report.skipped += 1
            continue
        if isinstance(outcome, podgrouper.Problem):
            meta = pod.get("metadata") or {}
            report.problems.append(f"Pod {meta.get('namespace')}/{meta.get('name')}: {outcome.message}")
            continue
        report.grouped += 1
        pg_meta = outcome.podgroup["metadata"]
        wanted[(pg_meta["namespace"], pg_meta["name"])] = outcome.podgroup
        if _needs_marking(pod, outcome):
            marks.append((pod, outcome))
    existing = _existing_pod_groups(gateway) if wanted else {}
    for (namespace, name), manifest in sorted(wanted.items()):
        if _same(existing.get((namespace, name)), manifest):
            continue
        try:
            gateway.upsert_pod_group(manifest)
            report.pod_groups_written += 1
        except ClusterError as exc:
            report.problems.append(f"PodGroup {namespace}/{name}: {exc}")
    for pod, grouping in marks:
        meta = pod.get("metadata") or {}
        try:
            if gateway.label_pod(meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", ""),
                                 labels=grouping.pod_labels, annotations=grouping.pod_annotations):
                report.pods_marked += 1
        except ClusterError as exc:
            report.problems.append(f"Pod {meta.get('namespace')}/{meta.get('name')}: {exc}")
    for problem in report.problems:
        log.warning("pod-grouper: %s", problem)
    return report


def wants_grouping(event: Any) -> bool:
    """Whether a watch event brings a pod the pod-grouper must look at: a new pod of ours (a staged
    owner may have grown), or one that is not in a PodGroup yet."""
    raw = getattr(event, "raw", None)
    if getattr(event, "kind", "") != "Pod" or event.type not in ("ADDED", "MODIFIED") or not raw:
        return False
    meta, status = raw.get("metadata") or {}, raw.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return False
    return event.type == "ADDED" or not (meta.get("annotations") or {}).get(POD_GROUP_ANNOTATION)
