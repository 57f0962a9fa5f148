"""A dict-backed cluster for the pod-grouper's tests: objects in, lookups and a grouper pass out.

`FakeCluster.run_grouper()` does what KAI's pod-grouper controller does after an apply: every pod of
the scheduler, in name order, is grouped; the PodGroup is created or updated (spec replaced, labels
and annotations merged) and the pod gets its ``pod-group-name`` annotation and subgroup label.
Later pods of the same pass see the PodGroups written by earlier ones, as in the cluster.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from typing import Any

from kaiweb.cluster import podgrouper

NS = "kai-q"


def uid_of(kind: str, name: str, namespace: str = NS) -> str:
    """Deterministic uids, as the corpus writes them (UUIDv5 of kind/namespace/name)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{kind}/{namespace}/{name}"))


def ref(owner: Mapping[str, Any]) -> dict[str, Any]:
    m = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": m["name"], "uid": m["uid"],
            "controller": True, "blockOwnerDeletion": True}


def obj(api_version: str, kind: str, name: str, *, namespace: str = NS, labels: dict | None = None,
        annotations: dict | None = None, owner: Mapping[str, Any] | None = None, spec: dict | None = None,
        status: dict | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": uid_of(kind, name, namespace)}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        meta["ownerReferences"] = [ref(owner)]
    out: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": meta}
    if spec is not None:
        out["spec"] = spec
    if status is not None:
        out["status"] = status
    return out


def pod(name: str, *, owner: Mapping[str, Any] | None = None, queue: str | None = "q", labels: dict | None = None,
        annotations: dict | None = None, scheduler: str = "kai-scheduler", priority_class: str | None = None,
        node: str | None = None, namespace: str = NS) -> dict[str, Any]:
    all_labels = {"app": "engine-e2e", **({"kai.scheduler/queue": queue} if queue else {}), **(labels or {})}
    out = obj("v1", "Pod", name, namespace=namespace, labels=all_labels, annotations=annotations, owner=owner,
              spec={"schedulerName": scheduler, "containers": [{"name": "c", "image": "ubuntu"}]},
              status={"phase": "Pending"})
    if priority_class:
        out["spec"]["priorityClassName"] = priority_class
    if node:
        out["spec"]["nodeName"] = node
    return out


def priority_class(name: str, value: int) -> dict[str, Any]:
    return obj("scheduling.k8s.io/v1", "PriorityClass", name, namespace="", spec=None) | {"value": value}


class FakeCluster:
    """Objects by (kind, namespace, name); lookups answer only for the object's own apiVersion."""

    def __init__(self, *objects: Mapping[str, Any]) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.apply(*objects)

    # ---------------------------------------------------------------- writes
    def apply(self, *objects: Mapping[str, Any]) -> None:
        for o in objects:
            m = o.get("metadata") or {}
            self.objects[(o["kind"], m.get("namespace", "") or "", m["name"])] = copy.deepcopy(dict(o))

    def delete(self, kind: str, namespace: str, name: str) -> None:
        self.objects.pop((kind, namespace or "", name), None)

    # ---------------------------------------------------------------- reads the grouper is given
    def lookup(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.objects.get((kind, namespace or "", name))
        if found is None or found.get("apiVersion") != api_version:
            return None
        return copy.deepcopy(found)

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        ns = self.objects.get(("Namespace", "", namespace)) or {}
        return dict((ns.get("metadata") or {}).get("labels") or {})

    def list_pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for (kind, ns, _), o in sorted(self.objects.items())
                if kind == "Pod" and ns == namespace
                and all(((o["metadata"].get("labels") or {}).get(k) == v) for k, v in selector.items())]

    def pods(self) -> list[dict[str, Any]]:
        return [o for (kind, _, _), o in sorted(self.objects.items()) if kind == "Pod"]

    def pod_groups(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [o for (kind, ns, _), o in sorted(self.objects.items())
                if kind == "PodGroup" and (namespace is None or ns == namespace)]

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, namespace or "", name))

    # ---------------------------------------------------------------- the grouper
    def group(self, the_pod: Mapping[str, Any], **kwargs: Any) -> Any:
        kwargs.setdefault("namespace_labels", self.namespace_labels)
        kwargs.setdefault("list_pods", self.list_pods)
        return podgrouper.group_pod(the_pod, self.lookup, **kwargs)

    def run_grouper(self, **kwargs: Any) -> dict[str, Any]:
        """One pass over every pod; returns {"ns/pod": outcome}."""
        outcomes: dict[str, Any] = {}
        for the_pod in self.pods():
            m = the_pod["metadata"]
            outcome = self.group(copy.deepcopy(the_pod), **kwargs)
            outcomes[f"{m['namespace']}/{m['name']}"] = outcome
            if isinstance(outcome, podgrouper.Grouping):
                self._write(outcome)
                m.setdefault("annotations", {}).update(outcome.pod_annotations)
                m.setdefault("labels", {}).update(outcome.pod_labels)
        return outcomes

    def _write(self, grouping: podgrouper.Grouping) -> None:
        new = copy.deepcopy(grouping.podgroup)
        m = new["metadata"]
        old = self.get("PodGroup", m["namespace"], m["name"])
        if old is None:
            self.apply(new)
            return
        old_meta = old["metadata"]
        old_meta.setdefault("labels", {}).update(m.get("labels") or {})
        old_meta.setdefault("annotations", {}).update(m.get("annotations") or {})
        old_meta["ownerReferences"] = m["ownerReferences"]
        old["spec"] = new["spec"]
