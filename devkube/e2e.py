"""KAI's end-to-end scenarios, run through the product's own Kubernetes path.

A scenario of the kai-e2e corpus (its README gives the steps, the object conventions and the results
format) is played against a real API server on loopback (`devkube.localkube`), exactly as the
product is deployed:

    apply objects with the official client → cycle: observe (pod-grouper, mirror) → snapshot →
    decide → bind / evict through the API → write status and events back → KWOK plays the kubelets

Nothing here decides anything: the runner only plays the parts that a real cluster has and a bare API
server lacks. It writes no database rows of its own and never reads the scenario's expectations.

* **Objects.** Cluster-scoped objects first, then owners before what they own; the API server gives
  every object a new uid, so each ``ownerReferences[].uid`` is rewritten to the uid its owner really
  got. Node and pod ``status`` goes through the status subresource. Third-party owner kinds
  (PyTorchJob, JobSet, RayCluster, ...) get a permissive CRD, as the corpus README asks.
* **Scheduler configuration.** A scenario's ``scheduler.config`` (KAI's ``SchedulingShard.spec``)
  is applied as a SchedulingShard object in the cluster; the mirror reads it like any other.
* **The kubelet's part.** There is no kubelet: every node is a KWOK node (``LocalKube(kwok=True)``; the
  runner adds KWOK's annotation ``kwok.x-k8s.io/node=fake`` to the scenario's nodes and changes nothing
  else on them), and KWOK's stages (``deploy/kube/kwok-stages.yaml``) do what kubelets would: a bound
  pod goes Running, a pod being deleted (evicted) goes away. After each cycle the runner waits, bounded,
  until KWOK has done so (`LocalKube.wait_for_pods`), so the next step sees what a cluster would. On
  the in-process fake API server (`FakeCluster`), which has no KWOK, its store does the same at once.
* **Dynamic Resource Allocation.** ``resource.k8s.io/v1`` objects (DeviceClass, ResourceSlice,
  ResourceClaim, ResourceClaimTemplate) are applied as any other built-in kind; a scenario's
  ResourceSlices stand for what a DRA driver publishes for its nodes. Scenarios with claims need
  Kubernetes' resource-claim controller (`controllers_for`): it makes the claims of a pod's templates
  and releases a claim whose pods are gone. After each apply and each cycle the runner waits, bounded,
  until it has done so (`Applier.claims_settled`), as it waits for the kubelets' part. The observations
  carry each pod's ``resourceClaims`` and ``resourceClaimStatuses`` and every ResourceClaim.
* **Time.** ``advance_seconds`` moves `kaiweb.core.clock`; cycles themselves do not advance it.
* **Isolation.** Every scenario gets an empty API server (etcd wiped) and an empty database.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

from devkube.localkube import KWOK_ANNOTATION, LocalKubeError

log = logging.getLogger(__name__)

CRDS_FILE = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes" / "crds.yaml"

# apiVersions the API server serves itself, or our CRDs do: anything else gets a permissive CRD.
_BUILT_IN_GROUPS = {"", "apps", "batch", "scheduling.k8s.io", "node.k8s.io", "storage.k8s.io", "policy",
                    "scheduling.run.ai", "kai.scheduler", "rbac.authorization.k8s.io", "coordination.k8s.io",
                    "resource.k8s.io"}
_CLUSTER_SCOPED = {"Node", "Namespace", "Queue", "PriorityClass", "StorageClass", "PersistentVolume", "Topology",
                   "RuntimeClass", "CSIDriver", "SchedulingShard", "CustomResourceDefinition", "DeviceClass",
                   "ResourceSlice"}
# Creation order: what others refer to comes first.
_KIND_RANK = {"CustomResourceDefinition": 0, "Namespace": 1, "PriorityClass": 2, "RuntimeClass": 2, "StorageClass": 2,
              "Queue": 3, "Topology": 3, "SchedulingShard": 3, "Node": 4, "PersistentVolume": 4, "ConfigMap": 5,
              "PersistentVolumeClaim": 5, "DeviceClass": 2, "ResourceSlice": 5, "ResourceClaimTemplate": 5,
              "ResourceClaim": 7, "PodGroup": 8, "Pod": 9}
_OWNER_RANK = 6
SHARD_API_VERSION, SHARD_KIND, SHARD_NAME = "kai.scheduler/v1", "SchedulingShard", "default"
_RESULT_POD_FIELDS = ("namespace", "name", "uid")
DRA_API_VERSION = "resource.k8s.io/v1"
CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")
CLAIM_CONTROLLER = "resourceclaim-controller"


def controllers_for(scenarios: Iterable[Mapping[str, Any]]) -> str | None:
    """The controller-manager's controllers the scenarios need: the resource-claim controller when one
    of them has a claim (it makes a template's claims and releases those of ended pods), else none."""
    for scenario in scenarios:
        for step in scenario.get("steps", []):
            if any(o.get("kind") in CLAIM_KINDS for o in step.get("apply", [])):
                return CLAIM_CONTROLLER
    return None


class ScenarioError(Exception):
    """A scenario could not be played (bad object, API server refusal); recorded as its error."""


def load_scenarios(path: Path | str) -> list[dict[str, Any]]:
    """Every scenario under ``path`` (a folder of JSON arrays, or one file), in file order."""
    root = Path(path)
    files = sorted(root.rglob("*.json")) if root.is_dir() else [root]
    out: list[dict[str, Any]] = []
    for file in files:
        data = json.loads(file.read_text())
        if isinstance(data, list):
            out.extend(s for s in data if isinstance(s, dict) and "steps" in s)
    return out


# ----------------------------------------------------------------------------------- objects


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def _plural(kind: str) -> str:
    low = kind.lower()
    return low + ("es" if low.endswith("s") else "s")


def permissive_crds(objects: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A CRD that accepts anything for each third-party kind among ``objects``."""
    seen: dict[tuple[str, str], set[str]] = {}
    for obj in objects:
        api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
        group = _group(api_version)
        if not group or group in _BUILT_IN_GROUPS or not kind:
            continue
        seen.setdefault((group, kind), set()).add(api_version.rpartition("/")[2])
    crds = []
    for (group, kind), versions in sorted(seen.items()):
        plural = _plural(kind)
        ordered = sorted(versions)
        crds.append({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {
                "group": group, "scope": "Cluster" if kind in _CLUSTER_SCOPED else "Namespaced",
                "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
                "versions": [{"name": v, "served": True, "storage": v == ordered[-1],
                              "schema": {"openAPIV3Schema": {"type": "object",
                                                             "x-kubernetes-preserve-unknown-fields": True}},
                              "subresources": {"status": {}}} for v in ordered],
            },
        })
    return crds


def shard_object(config: Mapping[str, Any]) -> dict[str, Any]:
    """The SchedulingShard that carries a scenario's ``scheduler.config`` (KAI's spec fields)."""
    spec: dict[str, Any] = {"partitionLabelValue": ""}
    for key in ("placementStrategy", "args", "partitionLabelValue", "kValue", "usageParams", "minRuntime"):
        if key in config:
            spec[key] = config[key]
    return {"apiVersion": SHARD_API_VERSION, "kind": SHARD_KIND, "metadata": {"name": SHARD_NAME}, "spec": spec}


def _creation_order(objects: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    def rank(item: tuple[int, Mapping[str, Any]]) -> tuple[int, int]:
        index, obj = item
        kind = str(obj.get("kind", ""))
        if kind in _KIND_RANK:
            return _KIND_RANK[kind], index
        return _OWNER_RANK, index

    return [obj for _, obj in sorted(enumerate(objects), key=rank)]


class Applier:
    """Creates, replaces and deletes arbitrary objects on the API server (the dynamic client).

    With ``kwok`` every Node gets KWOK's annotation, so that KWOK plays its kubelet."""

    def __init__(self, api_client: client.ApiClient, *, kwok: bool = False) -> None:
        self.api_client = api_client
        self.kwok = kwok
        self._dynamic: DynamicClient | None = None
        self.uids: dict[str, str] = {}  # the scenario's uid → the uid the API server gave

    @property
    def dynamic(self) -> DynamicClient:
        if self._dynamic is None:
            self._dynamic = DynamicClient(self.api_client)
        return self._dynamic

    def forget_discovery(self) -> None:
        self._dynamic = None

    def resource(self, api_version: str, kind: str) -> Any:
        try:
            return self.dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            self.forget_discovery()
            try:
                return self.dynamic.resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError as exc:
                raise ScenarioError(f"{kind} ({api_version}): the API server does not serve this kind") from exc

    def apply(self, objects: Sequence[Mapping[str, Any]]) -> None:
        """Create the objects, each after the owners it names in the same batch (so every
        ownerReference carries the uid its owner really got), otherwise in `_creation_order`."""
        pending = _creation_order(objects)
        in_batch = {str((o.get("metadata") or {}).get("uid")) for o in pending if (o.get("metadata") or {}).get("uid")}
        while pending:
            ready = [o for o in pending
                     if all(ref.get("uid") not in in_batch or ref.get("uid") in self.uids
                            for ref in (o.get("metadata") or {}).get("ownerReferences") or [])]
            for obj in ready or pending[:1]:  # an ownership cycle: go on in order rather than stall
                self.apply_one(obj)
            taken = {id(o) for o in (ready or pending[:1])}
            pending = [o for o in pending if id(o) not in taken]

    def apply_one(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        body = json.loads(json.dumps(obj))
        meta = body.setdefault("metadata", {})
        given_uid = meta.pop("uid", None)
        for key in ("resourceVersion", "creationTimestamp", "generation", "managedFields"):
            meta.pop(key, None)
        for ref in meta.get("ownerReferences") or []:
            if ref.get("uid") in self.uids:
                ref["uid"] = self.uids[ref["uid"]]
        status = body.pop("status", None)
        kind, api_version = body.get("kind", ""), body.get("apiVersion", "")
        if kind == "Node" and self.kwok:
            meta["annotations"] = {**(meta.get("annotations") or {}), KWOK_ANNOTATION[0]: KWOK_ANNOTATION[1]}
        _selector_in_template(body)
        res = self.resource(api_version, kind)
        namespace = meta.get("namespace") if res.namespaced else None
        if res.namespaced and not namespace:
            namespace = meta["namespace"] = "default"
        try:
            created = res.create(body=body, namespace=namespace)
        except ApiException as exc:
            if exc.status != 409:
                raise ScenarioError(f"{kind} {namespace or ''}/{meta.get('name')}: {_api_message(exc)}") from exc
            current = res.get(name=meta["name"], namespace=namespace)
            body["metadata"]["resourceVersion"] = current.metadata.resourceVersion
            try:
                created = res.replace(body=body, namespace=namespace)
            except ApiException as exc2:
                raise ScenarioError(f"{kind} {namespace or ''}/{meta.get('name')}: {_api_message(exc2)}") from exc2
        out = created.to_dict()
        if given_uid:
            self.uids[given_uid] = out["metadata"]["uid"]
        if status:
            # Status goes through its own subresource (a Node's capacity, a running Pod, a RayJob's
            # cluster name, ...), as the controllers that own it would write it.
            self._write_status(res, kind, meta["name"], namespace, status)
        if kind == "Node" and _is_ready(status):
            # The API server taints every new node not-ready; the node lifecycle controller lifts the
            # taint once the node reports Ready. That controller does not run here: its part is played.
            taints = list((body.get("spec") or {}).get("taints") or [])
            if any(t.get("key") == NOT_READY_TAINT for t in (out.get("spec") or {}).get("taints") or []):
                res.patch(body={"spec": {"taints": taints or None}}, name=meta["name"],
                          content_type="application/merge-patch+json")
        return out

    def _write_status(self, res: Any, kind: str, name: str, namespace: str | None, status: Mapping[str, Any]) -> None:
        body = {"status": dict(status)}
        if kind == "Pod" and body["status"].get("phase") == "Running":
            body["status"].setdefault("conditions", [
                {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}])
            body["status"].setdefault("startTime", _rfc3339(time.time()))
        try:
            res.status.patch(body=body, name=name, namespace=namespace,
                             content_type="application/merge-patch+json")
        except (ApiException, AttributeError, ResourceNotFoundError) as exc:
            if isinstance(exc, ApiException) and exc.status not in (404, 405):
                raise ScenarioError(f"{kind} {namespace or ''}/{name} status: {_api_message(exc)}") from exc
            log.info("%s %s/%s: no status subresource; its status is left as created", kind, namespace or "", name)

    def claims_settled(self) -> bool:
        """The resource-claim controller has done its part: every pod's claim templates have their claims
        (``status.resourceClaimStatuses``), and no claim is still allocated for, or reserved for, a pod
        that is gone."""
        pods = self.resource("v1", "Pod").get().to_dict().get("items") or []
        live = {(p["metadata"]["namespace"], p["metadata"]["uid"]) for p in pods}
        for pod in pods:
            wanted = {e["name"] for e in (pod.get("spec") or {}).get("resourceClaims") or []
                      if e.get("resourceClaimTemplateName")}
            made = {s["name"] for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
            if not wanted <= made:
                return False
        for claim in self.resource(DRA_API_VERSION, "ResourceClaim").get().to_dict().get("items") or []:
            status, namespace = claim.get("status") or {}, claim["metadata"]["namespace"]
            reserved = status.get("reservedFor") or []
            if any((namespace, r.get("uid")) not in live for r in reserved if r.get("resource") == "pods"):
                return False
            if status.get("allocation") and not reserved:
                return False
        return True

    def delete(self, refs: Iterable[Mapping[str, Any]]) -> None:
        for ref in refs:
            kind = str(ref.get("kind", ""))
            api_version = ref.get("apiVersion") or _default_api_version(kind)
            res = self.resource(api_version, kind)
            try:
                res.delete(name=ref["name"], namespace=ref.get("namespace") if res.namespaced else None,
                           body={"gracePeriodSeconds": 0, "propagationPolicy": "Background"})
            except (NotFoundError, ApiException) as exc:
                if getattr(exc, "status", 404) != 404:
                    raise ScenarioError(f"delete {kind} {ref.get('namespace', '')}/{ref['name']}: {exc}") from exc


NOT_READY_TAINT = "node.kubernetes.io/not-ready"
_CONTROLLER_KINDS = {("apps", "StatefulSet"), ("apps", "Deployment"), ("apps", "ReplicaSet"), ("apps", "DaemonSet")}


def _selector_in_template(body: dict[str, Any]) -> None:
    """A stand-in controller object whose selector its own pod template does not match is refused by
    the API server (its controller would never create such pods). The pods are applied by the scenario,
    not by a controller, so the template is given the selector's labels and the object is accepted."""
    if (_group(str(body.get("apiVersion", ""))), body.get("kind")) not in _CONTROLLER_KINDS:
        return
    spec = body.get("spec") or {}
    wanted = ((spec.get("selector") or {}).get("matchLabels")) or {}
    template = spec.get("template")
    if wanted and isinstance(template, dict):
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        labels.update({k: v for k, v in wanted.items() if labels.get(k) != v})


def _is_ready(status: Mapping[str, Any] | None) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in (status or {}).get("conditions") or [])


def _default_api_version(kind: str) -> str:
    return {"Pod": "v1", "Node": "v1", "Namespace": "v1", "ConfigMap": "v1", "Job": "batch/v1",
            "CronJob": "batch/v1", "Deployment": "apps/v1", "ReplicaSet": "apps/v1", "StatefulSet": "apps/v1",
            "PodGroup": "scheduling.run.ai/v2alpha2", "Queue": "scheduling.run.ai/v2",
            "PriorityClass": "scheduling.k8s.io/v1", "ResourceClaim": DRA_API_VERSION,
            "ResourceClaimTemplate": DRA_API_VERSION, "DeviceClass": DRA_API_VERSION,
            "ResourceSlice": DRA_API_VERSION}.get(kind, "v1")


def _api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError):
        return f"{exc.status} {exc.reason}"


def _rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class FakeApplier(Applier):
    """The same, into the fake API server's store (it has no discovery for the dynamic client)."""

    def __init__(self, cluster: FakeCluster) -> None:
        super().__init__(cluster.api_client())
        self.cluster = cluster

    def _plural(self, obj: Mapping[str, Any]) -> str:
        from kaiweb.cluster.backends.kubernetes.parsing import plural_of

        kind, api_version = str(obj.get("kind", "")), str(obj.get("apiVersion", ""))
        plural = plural_of(kind)
        self.cluster.server.register(plural, kind, api_version, namespaced=kind not in _CLUSTER_SCOPED)
        return plural

    def apply_one(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        body = json.loads(json.dumps(obj))
        meta = body.setdefault("metadata", {})
        given_uid = meta.pop("uid", None)
        for ref in meta.get("ownerReferences") or []:
            if ref.get("uid") in self.uids:
                ref["uid"] = self.uids[ref["uid"]]
        out = self.cluster.server.put(self._plural(body), body)
        if given_uid:
            self.uids[given_uid] = out["metadata"]["uid"]
        return out

    def delete(self, refs: Iterable[Mapping[str, Any]]) -> None:
        for ref in refs:
            kind = str(ref.get("kind", ""))
            plural = self._plural({"kind": kind, "apiVersion": ref.get("apiVersion") or _default_api_version(kind)})
            self.cluster.server.remove(plural, ref["name"], ref.get("namespace", ""))


class FakeCluster:
    """The runner's cluster on the in-process fake API server, with `LocalKube`'s surface."""

    def __init__(self) -> None:
        self.server: Any = None
        self.kubeconfig = None

    def start(self) -> FakeCluster:
        from devkube.fake_apiserver import FakeKubeApiServer

        if self.server is None:
            self.server = FakeKubeApiServer().start()
            # What the product reads besides pods and its CRDs, served even while empty.
            for plural, kind, api_version, namespaced in (
                    ("namespaces", "Namespace", "v1", False), ("configmaps", "ConfigMap", "v1", True),
                    ("persistentvolumeclaims", "PersistentVolumeClaim", "v1", True),
                    ("persistentvolumes", "PersistentVolume", "v1", False),
                    ("storageclasses", "StorageClass", "storage.k8s.io/v1", False)):
                self.server.register(plural, kind, api_version, namespaced=namespaced)
        return self

    @property
    def host(self) -> str:
        return str(self.server.url)

    def reset(self) -> None:
        self.stop()
        self.start()

    def install_crds(self, documents: Iterable[Mapping[str, Any]] | Path) -> None:
        import yaml

        if isinstance(documents, str | Path):
            documents = [d for d in yaml.safe_load_all(Path(documents).read_text()) if d]
        for crd in documents:
            spec = crd.get("spec") or {}
            for version in spec.get("versions") or []:
                self.server.register(spec["names"]["plural"], spec["names"]["kind"],
                                     f"{spec['group']}/{version['name']}", namespaced=spec.get("scope") != "Cluster")

    def api_client(self) -> client.ApiClient:
        return self.server.api_client

    def wait_for_pods(self, *, timeout: float = 60.0) -> None:
        """`LocalKube.wait_for_pods`'s counterpart: the fake has no KWOK, so its store does the
        kubelets' part at once (`FakeKubeApiServer.play_kubelets`)."""
        self.server.play_kubelets()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def __enter__(self) -> FakeCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def applier_for(kube: Any) -> Applier:
    if isinstance(kube, FakeCluster):
        return FakeApplier(kube)
    return Applier(kube.api_client(), kwok=bool(getattr(kube, "kwok", False)))


# ----------------------------------------------------------------------------------- observation


def observe(api_client: client.ApiClient, seen_pods: dict[str, dict[str, Any]], *,
            claims: bool = False) -> dict[str, Any]:
    """The cluster as the corpus's results format wants it (pods, PodGroups, events, Queues); with
    ``claims`` also every ResourceClaim (``resourceclaims``, whole objects)."""
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    pods = []
    live: set[str] = set()
    for pod in core.list_pod_for_all_namespaces().items:
        raw = api_client.sanitize_for_serialization(pod)
        meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        live.add(key)
        entry = {"namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid"),
                 "nodeName": spec.get("nodeName"), "deleted": bool(meta.get("deletionTimestamp")),
                 "labels": meta.get("labels") or {}, "annotations": meta.get("annotations") or {},
                 "conditions": status.get("conditions") or []}
        if spec.get("resourceClaims"):
            entry["resourceClaims"] = spec["resourceClaims"]
            entry["resourceClaimStatuses"] = status.get("resourceClaimStatuses") or []
        seen_pods[key] = entry
        pods.append(entry)
    for key, entry in sorted(seen_pods.items()):
        if key not in live:
            pods.append({**entry, "deleted": True, "nodeName": None})
    podgroups = custom.list_cluster_custom_object("scheduling.run.ai", "v2alpha2", "podgroups").get("items", [])
    queues = custom.list_cluster_custom_object("scheduling.run.ai", "v2", "queues").get("items", [])
    events = []
    for ev in core.list_event_for_all_namespaces().items:
        raw = api_client.sanitize_for_serialization(ev)
        events.append({"involvedObject": raw.get("involvedObject") or {}, "reason": raw.get("reason"),
                       "type": raw.get("type"), "message": raw.get("message")})
    out = {"pods": pods, "podgroups": podgroups, "events": events, "queues": queues}
    if claims:
        listed = client.ResourceV1Api(api_client).list_resource_claim_for_all_namespaces()
        out["resourceclaims"] = [api_client.sanitize_for_serialization(c) for c in listed.items]
    return out


# ----------------------------------------------------------------------------------- the runner


@dataclass
class ScenarioResult:
    observations: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    cycles: int = 0
    violations: list[str] = field(default_factory=list)  # invariants broken after a cycle

    def as_json(self) -> dict[str, Any]:
        return {"observations": self.observations, "error": self.error, "invariant_violations": self.violations}


class ScenarioRunner:
    """Plays scenarios one after another on one API server harness and one database.

    ``kube`` is a started `LocalKube` with KWOK (``kwok=True``: KWOK plays the kubelets; no workload
    controllers, as the corpus asks), or anything with ``reset()``, ``install_crds()``,
    ``api_client()`` and ``wait_for_pods()`` (`FakeCluster`); ``prepare`` empties the database and
    points the product at ``kube``; ``setup``, when given, then sets up what the scenario asks of the
    product itself (the org scenarios' ``org``); ``run_cycle`` runs one scheduling cycle of the product. After each
    cycle the runner waits at most ``kubelet_timeout`` seconds for the kubelets' part to be done."""

    def __init__(self, kube: Any, *, prepare: Callable[[Any], None], run_cycle: Callable[[], Any],
                 crds: Path = CRDS_FILE, check: Callable[[Any], list[str]] | None = None,
                 kubelet_timeout: float = 60.0, setup: Callable[[Mapping[str, Any]], None] | None = None) -> None:
        self.kube = kube
        self.prepare = prepare
        self.setup = setup  # what the scenario sets up in the product itself (its ``org``), after prepare
        self.run_cycle = run_cycle
        self.check = check  # the invariants after each cycle, given what run_cycle returned
        self.crds = crds
        self.kubelet_timeout = kubelet_timeout
        self._fresh = True

    def run(self, scenario: Mapping[str, Any]) -> ScenarioResult:
        from kaiweb.core import clock

        result = ScenarioResult()
        started = time.perf_counter()
        try:
            if not self._fresh:
                self.kube.reset()
            self._fresh = False
            self.kube.install_crds(self.crds)
            objects = [o for step in scenario.get("steps", []) for o in step.get("apply", [])]
            extra = permissive_crds(objects)
            if extra:
                self.kube.install_crds(extra)
            clock.reset()
            self.prepare(self.kube)
            if self.setup is not None:
                self.setup(scenario)
            api_client = self.kube.api_client()
            applier = applier_for(self.kube)
            applier.apply_one(shard_object((scenario.get("scheduler") or {}).get("config") or {}))
            seen: dict[str, dict[str, Any]] = {}
            dra = controllers_for([scenario]) is not None
            for step in scenario.get("steps", []):
                if "apply" in step:
                    applier.apply(step["apply"])
                    if dra:
                        self._await_claims(applier)
                elif "delete" in step:
                    applier.delete(step["delete"])
                elif "cycles" in step:
                    for _ in range(int(step["cycles"])):
                        outcome = self.run_cycle()
                        if self.check is not None:
                            result.violations.extend(self.check(outcome))
                        result.cycles += 1
                        self._await_kubelets(result.cycles)
                        if dra:
                            self._await_claims(applier)
                elif "advance_seconds" in step:
                    clock.advance(float(step["advance_seconds"]))
                elif "expect" in step:
                    result.observations.append(observe(api_client, seen, claims=dra))
            if result.violations:
                raise ScenarioError("invariants broken after a cycle: " + "; ".join(result.violations[:5]))
        except ScenarioError as exc:
            result.error = str(exc)
        except Exception as exc:  # noqa: BLE001 - one broken scenario must not stop the corpus
            log.exception("scenario %s failed", scenario.get("id"))
            result.error = f"{exc.__class__.__name__}: {exc}\n{traceback.format_exc(limit=6)}"
        finally:
            clock.reset()  # the scenario's time does not outlive it
        result.seconds = time.perf_counter() - started
        return result

    def _await_claims(self, applier: Applier) -> None:
        """The resource-claim controller's part is done (`Applier.claims_settled`), waited for at most
        ``kubelet_timeout`` seconds; what is still not done by then is left for the expectations to show."""
        deadline = time.monotonic() + self.kubelet_timeout
        while not applier.claims_settled() and time.monotonic() < deadline:
            time.sleep(0.2)

    def _await_kubelets(self, cycle: int) -> None:
        """What the cycle bound runs and what it evicted is gone (KWOK's part), before the next step."""
        try:
            self.kube.wait_for_pods(timeout=self.kubelet_timeout)
        except LocalKubeError as exc:
            raise ScenarioError(f"after cycle {cycle}: {exc}") from exc


def summarise(results: Mapping[str, ScenarioResult]) -> dict[str, Any]:
    errors = {k: (v.error or "").splitlines()[0][:300] for k, v in results.items() if v.error}
    return {"scenarios": len(results), "errors": len(errors), "error_messages": errors,
            "invariant_violations": sum(len(v.violations) for v in results.values()),
            "seconds": round(sum(v.seconds for v in results.values()), 1)}


def expectation_failures(scenario: Mapping[str, Any], observations: Sequence[Mapping[str, Any]],
                         check: Callable[[Mapping[str, Any], Mapping[str, Any]], list[str]]) -> list[str]:
    """What the observations (one per ``expect`` step, as `ScenarioRunner.run` records them) do not show
    of the scenario's expectations, each named by its step; ``check(expect, observation)`` is the
    checker of our own scenario sets (`devkube.org_scenarios`, `devkube.dra_scenarios`). The corpus's
    scenarios are scored by its ``evaluate.py`` instead (`score`)."""
    expects = [step["expect"] for step in scenario.get("steps", []) if "expect" in step]
    if len(observations) != len(expects):
        return [f"{len(observations)} observations for {len(expects)} expect steps"]
    return [f"expect #{i + 1}: {f}" for i, (want, obs) in enumerate(zip(expects, observations, strict=True))
            for f in check(want, obs)]


def matches(scenario_id: str, pattern: str | None) -> bool:
    return pattern is None or re.search(pattern, scenario_id) is not None


def point_product_at(kube: Any) -> None:
    """Point the product's Kubernetes backend at ``kube``, as a deployment's settings would: the
    fake server by its address, a real one by its kubeconfig."""
    from django.conf import settings

    settings.KAI_CLUSTER_BACKEND = "kubernetes"
    if isinstance(kube, FakeCluster):
        settings.KAI_KUBERNETES_HOST = kube.host
    else:
        settings.KAI_KUBERNETES_HOST = ""
        os.environ["KUBECONFIG"] = str(kube.kubeconfig)


def score(path: Path | str, scenarios: list[dict[str, Any]],
          results: Mapping[str, Any]) -> tuple[int, int, list[tuple[str, str]]]:
    """Pass count, total and failures by the corpus's own ``evaluate.py`` (found beside or above ``path``)."""
    import importlib.util

    here = Path(path).resolve()
    for folder in (here if here.is_dir() else here.parent, *here.parents):
        candidate = folder / "evaluate.py"
        if candidate.is_file():
            break
    else:
        raise FileNotFoundError(f"no evaluate.py beside or above {path}")
    spec = importlib.util.spec_from_file_location("kai_e2e_evaluate", candidate)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]  # the spec of an existing file is never None
    spec.loader.exec_module(module)  # type: ignore[union-attr]  # a file spec always has a loader
    rows, _features = module.evaluate(scenarios, dict(results), {"no_conditions": False})
    failures = [(r["id"], r.get("failure") or "") for r in rows if not r["pass"]]
    return sum(1 for r in rows if r["pass"]), len(rows), failures
