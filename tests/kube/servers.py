"""One small interface over the two API servers the contract tests run on.

``FakeServer`` wraps the in-memory fake (``tests.fakes.kube_apiserver``); ``RealServer`` drives a
real kube-apiserver started by `LocalKube`. Both offer the builders and readers a contract test
needs (``add_node``, ``add_pod``, ``add_queue``, ``get``, ``put``, ``list``, ``remove``, ...),
speaking plain dicts, so one test body checks the gateway against both.

What the real server does differently, and how the driver bridges it:

* ``status`` is written through the status subresource (a create or an update ignores it);
* a pod's spec is immutable, so ``put`` of a changed pod deletes it and creates it again;
* a namespace must exist before anything is created in it: the driver creates it on demand;
* the fake records requests, bindings and evictions; the real server cannot, so checks on those
  run only where ``records_requests`` is true.
"""

from __future__ import annotations

import copy
import subprocess
import time
from typing import Any

from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from devkube.fake_apiserver import ObjectHelpers, pod_manifest
from devkube.localkube import LocalKube
from tests.fakes.kube_apiserver import FakeKubeApiServer

# plural → (apiVersion, kind, namespaced)
KINDS: dict[str, tuple[str, str, bool]] = {
    "nodes": ("v1", "Node", False),
    "pods": ("v1", "Pod", True),
    "events": ("v1", "Event", True),
    "namespaces": ("v1", "Namespace", False),
    "priorityclasses": ("scheduling.k8s.io/v1", "PriorityClass", False),
    "runtimeclasses": ("node.k8s.io/v1", "RuntimeClass", False),
    "poddisruptionbudgets": ("policy/v1", "PodDisruptionBudget", True),
    "queues": ("scheduling.run.ai/v2", "Queue", False),
    "podgroups": ("scheduling.run.ai/v2alpha2", "PodGroup", True),
    "topologies": ("kai.scheduler/v1alpha1", "Topology", False),
    "schedulingshards": ("kai.scheduler/v1", "SchedulingShard", False),
    "nodepools": ("kai.resources/v1alpha1", "NodePool", False),
    "departments": ("kai.resources/v1alpha1", "Department", False),
    "projects": ("kai.resources/v1alpha1", "Project", False),
    "deviceclasses": ("resource.k8s.io/v1", "DeviceClass", False),
    "resourceslices": ("resource.k8s.io/v1", "ResourceSlice", False),
    "resourceclaims": ("resource.k8s.io/v1", "ResourceClaim", True),
    "resourceclaimtemplates": ("resource.k8s.io/v1", "ResourceClaimTemplate", True),
}
# What a wipe empties between tests (namespaces stay: deleting one takes the namespace controller).
WIPED = ("pods", "events", "poddisruptionbudgets", "podgroups", "nodes", "queues", "priorityclasses",
         "runtimeclasses")


def node_body(name: str, *, cpu: str = "64", memory: str = "512Gi", gpus: int = 8, pods: str = "110",
              labels: dict[str, str] | None = None, ready: bool = True, unschedulable: bool = False,
              extra_allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, **(extra_allocatable or {})}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"unschedulable": unschedulable} if unschedulable else {},
        "status": {
            "allocatable": allocatable,
            "capacity": dict(allocatable),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


class FakeServer:
    """The fake server, with the few extras the common interface adds."""

    kind = "fake"
    records_requests = True
    git_version = "v1.31.0-fake"

    def __init__(self, fake: FakeKubeApiServer) -> None:
        self.fake = fake

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fake, name)

    def resource_version_is_current(self, rv: str) -> bool:
        return rv == str(self.fake.resource_version)

    def begin_deletion(self, name: str, namespace: str = "default") -> None:
        pod = self.fake.get("pods", name, namespace)
        assert pod is not None
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        pod["metadata"]["deletionGracePeriodSeconds"] = 30
        self.fake.put("pods", pod)

    def add_runtime_class(self, name: str, overhead: dict[str, str]) -> None:
        """The fake has no admission: a pod's overhead is taken as written, so nothing to declare."""


class RealServer(ObjectHelpers):
    """A real kube-apiserver (a started `LocalKube`), emptied by `wipe` before each test."""

    kind = "real"
    records_requests = False

    def __init__(self, kube: LocalKube) -> None:
        self.kube = kube
        self._host = ""
        self._api_client: client.ApiClient | None = None
        self._dynamic: DynamicClient | None = None
        self._namespaces: set[str] = set()
        self._highest_written = 0

    # -- plumbing ------------------------------------------------------------------------------

    @property
    def git_version(self) -> str:
        return self.kube.version

    @property
    def api_client(self) -> client.ApiClient:
        if self._api_client is None or self._host != self.kube.host:
            self._host = self.kube.host
            self._api_client = self.kube.api_client()
            self._dynamic = None
        return self._api_client

    @property
    def dynamic(self) -> DynamicClient:
        if self._dynamic is None:
            self._dynamic = DynamicClient(self.api_client)
        return self._dynamic

    def resource(self, plural: str) -> Any:
        api_version, kind, _ = KINDS[plural]
        return self.dynamic.resources.get(api_version=api_version, kind=kind)

    def _noted(self, obj: Any) -> dict[str, Any]:
        body = obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)
        self._highest_written = max(self._highest_written, int(body["metadata"]["resourceVersion"]))
        return body

    def ensure_namespace(self, namespace: str) -> None:
        if namespace in self._namespaces:
            return
        try:
            self.resource("namespaces").create(body={"metadata": {"name": namespace}})
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        self._namespaces.add(namespace)

    def wipe(self) -> None:
        """Empty the cluster of everything a test may have made (system objects stay)."""
        self._namespaces = {ns.metadata.name for ns in self.resource("namespaces").get().items}
        everything = "metadata.name!="  # no object has an empty name: this selects them all
        for plural in WIPED:
            selector = everything
            if plural == "priorityclasses":
                selector = "metadata.name!=system-cluster-critical,metadata.name!=system-node-critical"
            namespaces = sorted(self._namespaces) if KINDS[plural][2] else [None]
            for namespace in namespaces:
                self.resource(plural).delete(namespace=namespace, field_selector=selector,
                                             body={"gracePeriodSeconds": 0, "propagationPolicy": "Background"})

    # -- readers -------------------------------------------------------------------------------

    def get(self, plural: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        namespaced = KINDS[plural][2]
        try:
            obj = self.resource(plural).get(name=name, namespace=(namespace or "default") if namespaced else None)
        except NotFoundError:
            return None
        return dict(obj.to_dict())

    def list(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        items = [dict(i.to_dict()) for i in self.resource(plural).get(namespace=namespace).items]
        return sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))

    @property
    def resource_version(self) -> int:
        """The server's current resourceVersion (etcd's revision)."""
        return int(self.resource("namespaces").get().metadata.resourceVersion)

    def resource_version_is_current(self, rv: str) -> bool:
        """``rv`` reflects every write this driver made and is not ahead of the server.

        Unlike the fake, a real server writes on its own (leases, bootstrap objects), so the
        current resourceVersion can move between two reads.
        """
        return self._highest_written <= int(rv) <= self.resource_version

    # -- writers -------------------------------------------------------------------------------

    def put(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace (no preconditions); ``status`` goes through the status subresource."""
        api_version, kind, namespaced = KINDS[plural]
        body = copy.deepcopy(obj)
        body["apiVersion"], body["kind"] = api_version, kind
        meta = body.setdefault("metadata", {})
        status = body.pop("status", None)
        for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "deletionTimestamp",
                    "deletionGracePeriodSeconds", "generation"):
            meta.pop(key, None)
        namespace = None
        if namespaced:
            namespace = meta.setdefault("namespace", "default")
            self.ensure_namespace(namespace)
        resource = self.resource(plural)
        current = self.get(plural, meta["name"], namespace or "")
        if current is not None and plural == "pods":
            # A pod's spec cannot change: delete it and create it again (a new uid, as on a cluster).
            resource.delete(name=meta["name"], namespace=namespace, body={"gracePeriodSeconds": 0})
            self._wait_gone(plural, meta["name"], namespace or "")
            current = None
        if current is None:
            written = resource.create(body=body, namespace=namespace)
        else:
            meta["resourceVersion"] = current["metadata"]["resourceVersion"]
            written = resource.replace(body=body, namespace=namespace)
        if status is not None:
            written_body = written.to_dict()
            written_body["status"] = status
            written = resource.status.replace(body=written_body, namespace=namespace)
        return self._noted(written)

    def put_status(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Write only ``status`` (the status subresource), as a kubelet or a controller does."""
        namespace = obj["metadata"].get("namespace") if KINDS[plural][2] else None
        current = self.get(plural, obj["metadata"]["name"], namespace or "")
        assert current is not None, f"{plural} {obj['metadata']['name']} does not exist"
        current["status"] = obj.get("status") or {}
        return self._noted(self.resource(plural).status.replace(body=current, namespace=namespace))

    def _wait_gone(self, plural: str, name: str, namespace: str) -> None:
        deadline = time.monotonic() + 10
        while self.get(plural, name, namespace) is not None:
            assert time.monotonic() < deadline, f"{plural} {namespace}/{name} still there after 10s"
            time.sleep(0.02)

    def remove(self, plural: str, name: str, namespace: str = "") -> bool:
        namespaced = KINDS[plural][2]
        try:
            self.resource(plural).delete(name=name, namespace=(namespace or "default") if namespaced else None,
                                         body={"gracePeriodSeconds": 0})
        except NotFoundError:
            return False
        return True

    def begin_deletion(self, name: str, namespace: str = "default") -> None:
        """Delete a bound pod with its grace period: with no kubelet to finish, it stays Terminating."""
        self.resource("pods").delete(name=name, namespace=namespace)

    def complete_terminations(self) -> int:
        """Play the kubelet: delete every terminating pod at once."""
        doomed = [p for p in self.list("pods") if p["metadata"].get("deletionTimestamp")]
        for pod in doomed:
            self.remove("pods", pod["metadata"]["name"], pod["metadata"]["namespace"])
        return len(doomed)

    # -- builders (the fake's signatures) ------------------------------------------------------

    def add_node(self, name: str, **kwargs: Any) -> dict[str, Any]:
        """A node; when Ready, without the not-ready taint admission gives every new node (the node
        lifecycle controller, not run here, would lift it once the node reports Ready)."""
        node = self.put("nodes", node_body(name, **kwargs))
        if kwargs.get("ready", True):
            taints = [t for t in node["spec"].get("taints") or [] if t["key"] != "node.kubernetes.io/not-ready"]
            if taints != (node["spec"].get("taints") or []):
                node["spec"]["taints"] = taints
                node = self._noted(self.resource("nodes").replace(body=node))
        return node

    def add_pod(self, name: str, *, phase: str = "Pending", **fields: Any) -> dict[str, Any]:
        """A pod as `pod_manifest` writes it; a phase other than Pending is set as its status."""
        pod = pod_manifest(name, **fields)
        if phase != "Pending":
            pod["status"] = {"phase": phase}
        return self.put("pods", pod)

    def add_runtime_class(self, name: str, overhead: dict[str, str]) -> dict[str, Any]:
        """A RuntimeClass whose fixed overhead admission copies into the pods that name it."""
        return self.put("runtimeclasses", {"metadata": {"name": name}, "handler": "runc",
                                           "overhead": {"podFixed": dict(overhead)}})

    def add_pdb(self, name: str, match_labels: dict[str, str], *, min_available: int,
                namespace: str = "default") -> dict[str, Any]:
        self.ensure_namespace(namespace)
        written = self.resource("poddisruptionbudgets").create(namespace=namespace, body={
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": match_labels}}})
        return self._noted(written)

    # -- etcd ----------------------------------------------------------------------------------

    def compact(self) -> int:
        """Compact etcd up to its current revision: watches from an older resourceVersion get 410.

        Only watches served by etcd see it (start the cluster with ``--watch-cache-sizes=pods#0``);
        the API server's watch cache keeps its own window.
        """
        assert self.kube.bin_dir is not None
        etcdctl = str(self.kube.bin_dir / "etcdctl")
        revision = self.resource_version
        subprocess.run([etcdctl, "--endpoints", self.kube.etcd_endpoint, "compact", str(revision)],
                       check=True, capture_output=True, text=True)
        return revision


def pod_ready_status(phase: str = "Running") -> dict[str, Any]:
    """A pod status a kubelet would write for a running, ready pod (the disruption controller counts it)."""
    return {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}
