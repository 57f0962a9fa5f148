"""What the org layer (departments, projects, node pools) writes to a Kubernetes cluster, and KAI Resource
Management's (KRM) objects read and written: `KubernetesGateway`'s part for them.

Each write touches only what the org owns: a SchedulingShard's fields the node pool sets (the shard's
others stay the cluster's), a project namespace's label and annotation, a node's pool label and the
cordon of a node held for draining, a queue's org labels, a KRM object's spec or status. The decisions
are the org layer's (`kaiweb.org`); these are the calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client

from kaiweb.cluster.backends.kubernetes.parsing import (
    KAI_GROUP,
    QUEUE_GROUP,
    QUEUE_PLURAL,
    QUEUE_VERSION,
    _meta,
)
from kaiweb.cluster.choices import KRM_GROUP, KRM_PLURALS, KRM_VERSION
from kaiweb.cluster.errors import ClusterRejected

SHARD_VERSION, SHARD_PLURAL = "v1", "schedulingshards"
MERGE_PATCH = "application/merge-patch+json"


class OrgObjects:
    """The org layer's reads and writes on the cluster (a part of `KubernetesGateway`)."""

    custom: client.CustomObjectsApi
    core: client.CoreV1Api
    _json: Callable[..., Any]
    list_raw: Callable[..., tuple[list[Any], str]]

    def _get(self, operation: str, fn: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
        try:
            return self._json(operation, fn, *args)
        except ClusterRejected as err:
            if err.status == 404:
                return None
            raise

    # -- KRM's objects ---------------------------------------------------------------------------

    def list_krm(self, kind: str) -> list[dict[str, Any]] | None:
        """Every KRM object of this kind (NodePool, Department, Project); None when its CRD is not served."""
        try:
            raws, _ = self.list_raw(f"list {kind}s", self.custom.list_cluster_custom_object, KRM_GROUP, KRM_VERSION,
                                    KRM_PLURALS[kind])
        except ClusterRejected as err:
            if err.status == 404:
                return None
            raise
        return [r for r in raws if isinstance(r, dict)]

    def apply_krm(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create the KRM object, or replace its spec (its status and others' labels kept)."""
        kind, name = obj["kind"], obj["metadata"]["name"]
        plural, operation = KRM_PLURALS[kind], f"write {kind} {name}"
        current = self._get(operation, self.custom.get_cluster_custom_object, KRM_GROUP, KRM_VERSION, plural, name)
        if current is None:
            return self._json(operation, self.custom.create_cluster_custom_object, KRM_GROUP, KRM_VERSION, plural,
                              dict(obj))
        body = {**current, "spec": obj.get("spec") or {}}
        return self._json(operation, self.custom.replace_cluster_custom_object, KRM_GROUP, KRM_VERSION, plural, name,
                          body)

    def write_krm_status(self, kind: str, name: str, status: Mapping[str, Any]) -> bool:
        """Replace the status fields given on a KRM object, only when they changed; False when it is gone."""
        plural, operation = KRM_PLURALS[kind], f"write {kind} {name} status"
        current = self._get(operation, self.custom.get_cluster_custom_object, KRM_GROUP, KRM_VERSION, plural, name)
        if current is None:
            return False
        have = current.get("status") if isinstance(current.get("status"), dict) else {}
        if all(have.get(k) == v for k, v in status.items()):
            return True
        self._json(operation, self.custom.patch_cluster_custom_object_status, KRM_GROUP, KRM_VERSION, plural, name,
                   {"status": dict(status)}, _content_type=MERGE_PATCH)
        return True

    # -- what the org gives the cluster -----------------------------------------------------------

    def upsert_shard(self, name: str, spec: Mapping[str, Any], unset: tuple[str, ...] = (),
                     labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Create the SchedulingShard with ``spec`` and ``labels``, or set these fields of its spec
        (``unset``: fields no longer set, removed) and these labels; its other fields and labels are left
        as they are. Written only when something differs."""
        operation = f"write SchedulingShard {name}"
        current = self._get(operation, self.custom.get_cluster_custom_object, KAI_GROUP, SHARD_VERSION, SHARD_PLURAL,
                            name)
        if current is None:
            body = {"apiVersion": f"{KAI_GROUP}/{SHARD_VERSION}", "kind": "SchedulingShard",
                    "metadata": {"name": name, "labels": dict(labels or {})}, "spec": dict(spec)}
            return self._json(operation, self.custom.create_cluster_custom_object, KAI_GROUP, SHARD_VERSION,
                              SHARD_PLURAL, body)
        have = current.get("spec") if isinstance(current.get("spec"), dict) else {}
        patch: dict[str, Any] = {}
        spec_patch = {k: v for k, v in spec.items() if have.get(k) != v}
        spec_patch.update({k: None for k in unset if k in have and k not in spec})
        if spec_patch:
            patch["spec"] = spec_patch
        have_labels = _meta(current).get("labels") or {}
        if any(have_labels.get(k) != v for k, v in (labels or {}).items()):
            patch["metadata"] = {"labels": dict(labels or {})}
        if not patch:
            return current
        return self._json(operation, self.custom.patch_cluster_custom_object, KAI_GROUP, SHARD_VERSION, SHARD_PLURAL,
                          name, patch, _content_type=MERGE_PATCH)

    def delete_shard(self, name: str) -> bool:
        """Delete the SchedulingShard; False when it did not exist."""
        try:
            self._json(f"delete SchedulingShard {name}", self.custom.delete_cluster_custom_object, KAI_GROUP,
                       SHARD_VERSION, SHARD_PLURAL, name)
        except ClusterRejected as err:
            if err.status == 404:
                return False
            raise
        return True

    def shards_labelled(self, key: str) -> dict[str, str]:
        """The SchedulingShards carrying label ``key``: name → its value (none when the CRD is not served)."""
        try:
            raws, _ = self.list_raw("list SchedulingShards", self.custom.list_cluster_custom_object, KAI_GROUP,
                                    SHARD_VERSION, SHARD_PLURAL, label_selector=key)
        except ClusterRejected as err:
            if err.status == 404:
                return {}
            raise
        return {str(_meta(r).get("name")): str((_meta(r).get("labels") or {}).get(key, ""))
                for r in raws if isinstance(r, dict)}

    def read_namespace(self, name: str) -> dict[str, Any] | None:
        return self._get(f"read namespace {name}", self.core.read_namespace, name)

    def upsert_namespace(self, name: str, labels: Mapping[str, str], annotations: Mapping[str, str],
                         *, create: bool = True) -> dict[str, Any] | None:
        """Set these labels and annotations on the namespace, made first when missing and ``create``;
        None when it is missing and not to be made."""
        operation = f"write namespace {name}"
        current = self.read_namespace(name)
        if current is None:
            if not create:
                return None
            body = {"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": name, "labels": dict(labels), "annotations": dict(annotations)}}
            return self._json(operation, self.core.create_namespace, body)
        meta = _meta(current)
        have_labels, have_notes = meta.get("labels") or {}, meta.get("annotations") or {}
        patch: dict[str, Any] = {}
        if any(have_labels.get(k) != v for k, v in labels.items()):
            patch["labels"] = dict(labels)
        if any(have_notes.get(k) != v for k, v in annotations.items()):
            patch["annotations"] = dict(annotations)
        if not patch:
            return current
        return self._json(operation, self.core.patch_namespace, name, {"metadata": patch},
                          _content_type=MERGE_PATCH)

    def patch_node(self, name: str, labels: Mapping[str, str | None], unschedulable: bool | None = None) -> bool:
        """Set (a value) or remove (None) these labels of the node, and cordon or uncordon it; False when
        the node is gone."""
        body: dict[str, Any] = {"metadata": {"labels": dict(labels)}}
        if unschedulable is not None:
            body["spec"] = {"unschedulable": unschedulable or None}
        try:
            self._json(f"label node {name}", self.core.patch_node, name, body, _content_type=MERGE_PATCH)
        except ClusterRejected as err:
            if err.status == 404:
                return False
            raise
        return True

    def label_queue(self, name: str, labels: Mapping[str, str | None]) -> bool:
        """Set (a value) or remove (None) these labels of the Queue; False when it is gone."""
        try:
            self._json(f"label Queue {name}", self.custom.patch_cluster_custom_object, QUEUE_GROUP, QUEUE_VERSION,
                       QUEUE_PLURAL, name, {"metadata": {"labels": dict(labels)}}, _content_type=MERGE_PATCH)
        except ClusterRejected as err:
            if err.status == 404:
                return False
            raise
        return True
