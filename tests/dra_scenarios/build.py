"""Writes the DRA scenarios: KAI's Dynamic Resource Allocation e2e specs, and ours, in the kai-e2e format.

Run ``python -m tests.dra_scenarios.build`` after changing a scenario here; the JSON files are what the
runner plays (`devkube.dra_scenarios`, `tests/kube/test_dra_scenarios_real.py`, or
``manage.py cluster_scenarios tests/dra_scenarios``). Files follow the corpus's layout,
``<suite path>/<go file stem>.json``; ours are in ``kaiweb/dra.json``.

Source: github.com/NVIDIA/KAI-Scheduler at commit ``72de64fc8eca10fa8cca26a20156178f3edbe092``; every KAI
scenario names its spec file and the line of its ``It`` in ``source``. Read for the set-ups and the
asserted outcomes; no Go code is copied.

**Objects.** What the corpus's README asks (labels, namespaces ``kai-<queue>``, queues with explicit
gpu/cpu/memory, pods built like KAI's ``rd.CreatePodObject``, deterministic uids), and for DRA:

* the DeviceClass ``gpu.nvidia.com`` (devices of the driver ``gpu.nvidia.com``), as NVIDIA's driver
  installs it; where a spec names another class it is applied under that name;
* one ResourceSlice per node, as the driver's kubelet plugin publishes it (``nodeName``, one pool named
  after the node, generation 1): devices ``gpu-<i>`` (attributes ``productName``, ``type: gpu``;
  capacity ``memory``) and MIG slices ``mig-<i>`` (``type: mig``, ``profile``);
* nodes carry no ``nvidia.com/gpu``: their GPUs are their devices;
* ResourceClaims and ResourceClaimTemplates as KAI's ``rd.CreateResourceClaim(Template)`` make them (one
  request ``req``, ``ExactCount``), pods naming them in ``spec.resourceClaims``. The resource-claim
  controller makes a template's claims; the runner starts it.

**Expectations.** The corpus's vocabulary where it says what is meant:

* ``pods: {"ns/name": {"scheduled", "unschedulable", "node", "node_in", "evicted"}}``, plus
  ``why_regex`` (the message of the pod's ``PodScheduled=False`` condition, as the org scenarios have it);
* ``selectors: [{"namespace", "labels", "scheduled_count", "pending_count", "distinct_nodes", "same_node"}]``;
* ``queues: [{"name", "status_allocated": {res: qty}}]``, plus ``status_requested`` (``status.requested``).

and two DRA keys:

* ``claims: [{"for_pod": "ns/name"} | {"claim": "ns/name"}, ...checks]``: the claims a pod's
  ``spec.resourceClaims`` name (a template's through its ``status.resourceClaimStatuses``), or one claim.
  Checks on each: ``allocated`` (``status.allocation`` set), ``node`` / ``node_in`` (the node of the
  allocation's ``nodeSelector``, ``matchFields metadata.name In [node]``), ``devices`` (exactly these
  ``pool/device``), ``device_count``, ``reserved_for`` (exactly these pod names in ``status.reservedFor``);
* ``devices: {"allocated": N, "distinct": true}``: the devices all claims hold together, and none held twice.

**Not converted.** Every DRA ``It`` of the three files is converted. Differences are in each
scenario's ``notes``: KAI's queue status counts DRA GPUs under the device class name
(``gpu.nvidia.com``), kaiweb under ``nvidia.com/gpu``; KAI's Jobs are applied with their pods, and an
evicted pod is not made again; ``preempt_test`` "Preempts a pod based on DRA contention" uses the
example driver's class ``gpu.example.com``, here a class of NVIDIA's driver's devices under that name
(kaiweb counts only ``gpu.nvidia.com`` devices as GPUs).

**Ours** (``kaiweb/dra#...``, ``source`` naming kaiweb): a shared claim counted once; a gang whose pods
each have a claim, bound all or nothing; MIG slices chosen by their attributes (no KAI spec exercises
MIG); a queue's GPU limit on claimed GPUs.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KAI = "test/e2e/suites"
DRIVER = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
DRA = "resource.k8s.io/v1"
QUEUE_LABEL = "kai.scheduler/queue"
PG = "pod-group-name"
GPU_KEY = "nvidia.com/gpu"
_NS = uuid.UUID("6f1c2a52-3f7e-4f0e-9a57-0c1d5e3b2a11")


def uid(kind: str, namespace: str, name: str) -> str:
    return str(uuid.uuid5(_NS, f"{kind}/{namespace}/{name}"))


def _meta(kind: str, name: str, namespace: str = "", **more: Any) -> dict[str, Any]:
    meta = {"name": name, "uid": uid(kind, namespace, name), **more}
    if namespace:
        meta["namespace"] = namespace
    return meta


# ------------------------------------------------------------------------------------------ cluster


def node(name: str, gpus: int = 0, *, migs: tuple[str, ...] = (), product: str = "H100") -> list[dict[str, Any]]:
    """A node without ``nvidia.com/gpu`` and the ResourceSlice the driver publishes for it."""
    capacity = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    devices = [{"name": f"gpu-{i}", "attributes": {"productName": {"string": product}, "type": {"string": "gpu"}},
                "capacity": {"memory": {"value": "80Gi"}}} for i in range(gpus)]
    devices += [{"name": f"mig-{i}", "attributes": {"productName": {"string": product}, "type": {"string": "mig"},
                                                     "profile": {"string": profile}}}
                for i, profile in enumerate(migs)]
    return [
        {"apiVersion": "v1", "kind": "Node",
         "metadata": _meta("Node", name, labels={"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}),
         "spec": {}, "status": {"capacity": capacity, "allocatable": capacity,
                                "conditions": [{"type": "Ready", "status": "True"}]}},
        {"apiVersion": DRA, "kind": "ResourceSlice", "metadata": _meta("ResourceSlice", f"{name}-{DRIVER}"),
         "spec": {"driver": DRIVER, "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                  "devices": devices}},
    ]


def device_class(name: str = GPU_CLASS, driver: str = DRIVER) -> dict[str, Any]:
    return {"apiVersion": DRA, "kind": "DeviceClass", "metadata": _meta("DeviceClass", name),
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}


def _gpu(quota: float, limit: float, weight: float) -> dict[str, Any]:
    return {"gpu": {"quota": quota, "overQuotaWeight": weight, "limit": limit},
            "cpu": {"quota": -1, "overQuotaWeight": 1, "limit": -1},
            "memory": {"quota": -1, "overQuotaWeight": 1, "limit": -1}}


def queue(name: str, quota: float = -1, *, limit: float = -1, weight: float = 1, parent: str | None = None,
          priority: int | None = None, cpu: tuple[float, float] | None = None) -> list[dict[str, Any]]:
    """A Queue and its namespace ``kai-<name>`` (KAI's ``InitQueues``)."""
    spec: dict[str, Any] = {"resources": _gpu(quota, limit, weight)}
    if cpu is not None:
        spec["resources"]["cpu"] = {"quota": cpu[0], "overQuotaWeight": 1, "limit": cpu[1]}
    if parent:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    labels = {"project": name, "app": "engine-e2e"}
    return [{"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": _meta("Queue", name, labels=labels),
             "spec": spec},
            {"apiVersion": "v1", "kind": "Namespace",
             "metadata": _meta("Namespace", f"kai-{name}", labels={**labels, QUEUE_LABEL: name})}]


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": _meta("PriorityClass", name),
            "value": value, "globalDefault": False}


# ------------------------------------------------------------------------------------------ claims, pods


def _claim_spec(count: int, device_class_name: str, selectors: tuple[str, ...]) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class_name, "allocationMode": "ExactCount", "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"devices": {"requests": [{"name": "req", "exactly": exactly}]}}


def claim(name: str, q: str, count: int = 1, *, device_class_name: str = GPU_CLASS,
          selectors: tuple[str, ...] = (), owner: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ResourceClaim in the queue's namespace (``rd.CreateResourceClaim``); ``owner``: a pod that owns it."""
    meta = _meta("ResourceClaim", name, f"kai-{q}", labels={"app": "engine-e2e", QUEUE_LABEL: q})
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"]}]
    return {"apiVersion": DRA, "kind": "ResourceClaim", "metadata": meta,
            "spec": _claim_spec(count, device_class_name, selectors)}


def template(name: str, q: str, count: int = 1) -> dict[str, Any]:
    labels = {"app": "engine-e2e", QUEUE_LABEL: q}
    return {"apiVersion": DRA, "kind": "ResourceClaimTemplate",
            "metadata": _meta("ResourceClaimTemplate", name, f"kai-{q}", labels=labels),
            "spec": {"metadata": {"labels": labels}, "spec": _claim_spec(count, GPU_CLASS, ())}}


def pod(name: str, q: str, *, claim_name: str = "", template_name: str = "", entry: str = "claim",
        container_claim: bool = True, host: str | None = None, affinity_host: str | None = None,
        pod_group: str | None = None, priority_class_name: str | None = None,
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod like ``rd.CreatePodObject``, with one ``spec.resourceClaims`` entry: a claim or a template."""
    meta_labels = {"app": "engine-e2e", QUEUE_LABEL: q, **(labels or {})}
    annotations: dict[str, str] = {}
    if pod_group:
        meta_labels[PG] = annotations[PG] = pod_group
    resources: dict[str, Any] = {"claims": [{"name": entry}]} if container_claim else {}
    spec: dict[str, Any] = {
        "schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "ubuntu-container", "image": "ubuntu", "args": ["sleep", "infinity"],
                        "imagePullPolicy": "IfNotPresent", "resources": resources}],
        "tolerations": [{"key": GPU_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        "resourceClaims": [{"name": entry, **({"resourceClaimName": claim_name} if claim_name
                                              else {"resourceClaimTemplateName": template_name})}]}
    if host:
        spec["nodeSelector"] = {"kubernetes.io/hostname": host}
    if affinity_host:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [affinity_host]}]}]}}}
    if priority_class_name:
        spec["priorityClassName"] = priority_class_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": _meta("Pod", name, f"kai-{q}", labels=meta_labels, annotations=annotations),
            "spec": spec, "status": {"phase": "Pending"}}


def job_with_pod(name: str, q: str, template_name: str, host: str) -> list[dict[str, Any]]:
    """A batch Job (``rd.CreateBatchJobObject``) and the one pod its controller would make."""
    ns = f"kai-{q}"
    job_uid = uid("Job", ns, name)
    the_pod = pod(f"{name}-p0", q, template_name=template_name, entry="gpu", container_claim=False, host=host,
                  labels={"batch-job-app-name": name})
    the_pod["spec"]["restartPolicy"] = "Never"
    template_spec = {k: v for k, v in the_pod["spec"].items()}
    the_pod["metadata"]["labels"].update({"batch.kubernetes.io/job-name": name, "job-name": name,
                                          "batch.kubernetes.io/controller-uid": job_uid, "controller-uid": job_uid})
    the_pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job_uid,
                                               "controller": True, "blockOwnerDeletion": True}]
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": _meta("Job", name, ns, labels={"app": "engine-e2e", "batch-job-app-name": name}),
           "spec": {"template": {"metadata": {"labels": {"app": "engine-e2e", QUEUE_LABEL: q,
                                                         "batch-job-app-name": name}},
                                 "spec": template_spec}}}
    return [job, the_pod]


def podgroup(name: str, q: str, min_member: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": _meta("PodGroup", name, f"kai-{q}", labels={"app": "engine-e2e", QUEUE_LABEL: q}),
            "spec": {"minMember": min_member, "queue": q}}


# ------------------------------------------------------------------------------------------ scenarios


def kai(sid: str, line: int, file: str, title: str, features: list[str], steps: list[dict[str, Any]],
        notes: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"id": sid, "source": f"{KAI}/{file}:{line}", "title": title,
                           "features": ["dra", *features], "scheduler": {"name": "kai-scheduler", "config": {}},
                           "steps": steps}
    if notes:
        out["notes"] = notes
    return out


def ours(slug: str, title: str, features: list[str], steps: list[dict[str, Any]], notes: str = "") -> dict[str, Any]:
    out = kai(f"kaiweb/dra#{slug}", 0, "", title, features, steps, notes)
    out["source"] = "kaiweb (ours): tests/dra_scenarios/build.py"
    return out


def key(q: str, name: str) -> str:
    return f"kai-{q}/{name}"


QUEUE_STATUS_NOTE = ("KAI's queue status counts DRA GPUs under the device class name (gpu.nvidia.com); kaiweb "
                     "counts them as GPUs, under nvidia.com/gpu.")


def dra_test() -> list[dict[str, Any]]:
    """test/e2e/suites/allocate/resources/dra_test.go: queue ``q`` under ``parent``."""
    file = "allocate/resources/dra_test.go"
    queues = [*queue("parent"), *queue("q", parent="parent")]
    out = []

    one = claim("allocate-simple", "q", 1)
    out.append(kai("allocate/resources/dra_test#1", 77, file, "Dynamic Resources: Allocate simple request",
                   ["basic"], [
                       {"apply": [device_class(), *node("node-1", 2), *queues, one,
                                  pod("simple", "q", claim_name="allocate-simple")]},
                       {"cycles": 2},
                       {"expect": {"pods": {key("q", "simple"): {"scheduled": True, "node": "node-1"}},
                                   "claims": [{"for_pod": key("q", "simple"), "allocated": True, "node": "node-1",
                                               "devices": ["node-1/gpu-0"], "reserved_for": ["simple"]}],
                                   "devices": {"allocated": 1, "distinct": True}}}]))

    out.append(kai("allocate/resources/dra_test#2", 111, file,
                   "Dynamic Resources: Fails to allocate request with wrong device class", ["basic"], [
                       {"apply": [device_class(), *node("node-1", 2), *queues,
                                  claim("fail-allocate", "q", 1, device_class_name="fake-device-class"),
                                  pod("lost", "q", claim_name="fail-allocate")]},
                       {"cycles": 2},
                       {"expect": {"pods": {key("q", "lost"): {
                           "scheduled": False, "unschedulable": True,
                           "why_regex": 'deviceclass "fake-device-class" not found'}},
                           "claims": [{"for_pod": key("q", "lost"), "allocated": False}],
                           "devices": {"allocated": 0}}}]))

    fillers = [pod(f"filler-{i}", "q", template_name="fill-a-node", entry="claim-template", affinity_host="node-1")
               for i in range(3)]
    out.append(kai("allocate/resources/dra_test#3", 144, file, "Dynamic Resources: Fills a node",
                   ["node-affinity"], [
                       {"apply": [device_class(), *node("node-1", 3), *node("node-2", 2), *queues,
                                  template("fill-a-node", "q", 1), *fillers]},
                       {"cycles": 2},
                       {"expect": {"pods": {key("q", f"filler-{i}"): {"scheduled": True, "node": "node-1"}
                                            for i in range(3)},
                                   "claims": [{"for_pod": key("q", f"filler-{i}"), "allocated": True,
                                               "node": "node-1", "device_count": 1,
                                               "reserved_for": [f"filler-{i}"]} for i in range(3)],
                                   "devices": {"allocated": 3, "distinct": True}}},
                       {"apply": [pod("unschedulable", "q", template_name="fill-a-node", entry="claim-template",
                                      affinity_host="node-1")]},
                       {"cycles": 2},
                       {"expect": {"pods": {key("q", "unschedulable"): {"scheduled": False, "unschedulable": True}},
                                   "claims": [{"for_pod": key("q", "unschedulable"), "allocated": False}],
                                   "devices": {"allocated": 3, "distinct": True}}}],
                   notes="KAI picks a node with more than one device and fills it; here node-1 has 3 devices "
                         "and node-2 (2 devices) is the node the pods' affinity keeps them off."))

    pg_pods = [pod("book-1", "q", claim_name="bookkeeping-claim1", entry="gpu-claim-1", container_claim=False,
                   pod_group="bookkeeping"),
               pod("book-2", "q", claim_name="bookkeeping-claim2", entry="gpu-claim-2", container_claim=False,
                   pod_group="bookkeeping")]
    out.append(kai("allocate/resources/dra_test#4", 250, file,
                   "DRA GPU Queue Bookkeeping: Should track DRA GPU resources in queue status",
                   ["gang", "queue-quota"], [
                       {"apply": [device_class(), *node("node-1", 4), *queues, claim("bookkeeping-claim1", "q", 1),
                                  claim("bookkeeping-claim2", "q", 2), podgroup("bookkeeping", "q", 2), *pg_pods]},
                       {"cycles": 3},
                       {"expect": {"pods": {key("q", p): {"scheduled": True, "node": "node-1"}
                                            for p in ("book-1", "book-2")},
                                   "claims": [{"for_pod": key("q", "book-1"), "device_count": 1},
                                              {"for_pod": key("q", "book-2"), "device_count": 2}],
                                   "queues": [{"name": "q", "status_allocated": {GPU_KEY: 3},
                                               "status_requested": {GPU_KEY: 3}}],
                                   "devices": {"allocated": 3, "distinct": True}}}],
                   notes=QUEUE_STATUS_NOTE + " As in KAI, the pods' containers name no claim."))
    return out


def reclaim_dra_test() -> list[dict[str, Any]]:
    """test/e2e/suites/reclaim/reclaim_dra_test.go."""
    file = "reclaim/reclaim_dra_test.go"
    out = []

    def owned(name: str, q: str, count: int, host: str | None = None) -> list[dict[str, Any]]:
        """A pod and its claim, the claim owned by the pod (``createPodWithDRAClaim``)."""
        the_pod = pod(name, q, claim_name=f"{name}-claim", entry="gpu-claim", host=host)
        return [the_pod, claim(f"{name}-claim", q, count, owner=the_pod)]

    queues = [*queue("parent", 4, limit=4, weight=2), *queue("reclaimee", 1, weight=2, parent="parent"),
              *queue("reclaimer", 1, weight=2, parent="parent")]
    reclaimees = ("reclaimee-0", "reclaimee-1", "reclaimee-2")
    out.append(kai("reclaim/reclaim_dra_test#1", 88, file,
                   "Under quota and Over fair share -> Over fair share and Over quota - Should not reclaim (DRA)",
                   ["reclaim", "queue-quota", "over-quota", "hierarchy"], [
                       {"apply": [device_class(), *node("node-1", 4), *queues, *owned("reclaimee-0", "reclaimee", 2),
                                  *owned("reclaimee-1", "reclaimee", 1), *owned("reclaimee-2", "reclaimee", 1)]},
                       {"cycles": 3},
                       {"expect": {"pods": {key("reclaimee", p): {"scheduled": True} for p in reclaimees},
                                   "devices": {"allocated": 4, "distinct": True}}},
                       {"apply": owned("running", "reclaimer", 1)},
                       {"cycles": 5},
                       {"expect": {"pods": {key("reclaimer", "running"): {"scheduled": True}},
                                   "claims": [{"for_pod": key("reclaimer", "running"), "allocated": True,
                                               "node": "node-1", "device_count": 1, "reserved_for": ["running"]}],
                                   "selectors": [{"namespace": "kai-reclaimee", "scheduled_count": 2,
                                                  "pending_count": 0}],
                                   "devices": {"allocated": 4, "distinct": True}}},
                       {"apply": owned("pending", "reclaimer", 2)},
                       {"cycles": 4},
                       {"expect": {"pods": {key("reclaimer", "pending"): {"scheduled": False, "unschedulable": True},
                                            key("reclaimer", "running"): {"scheduled": True}},
                                   "claims": [{"for_pod": key("reclaimer", "pending"), "allocated": False}],
                                   "selectors": [{"namespace": "kai-reclaimee", "scheduled_count": 2}],
                                   "queues": [{"name": "reclaimer", "status_allocated": {GPU_KEY: 1}}],
                                   "devices": {"allocated": 4, "distinct": True}}}],
                   notes="KAI asserts the reclaimer's first pod scheduled and its second unschedulable; the "
                         "reclaimee's pods left (2 of 3: one reclaimed, not made again) and the reclaimer's "
                         "allocated GPUs are ours. " + QUEUE_STATUS_NOTE))

    queues8 = [*queue("parent", 8, limit=8, weight=2), *queue("reclaimee-1", 1, weight=1, parent="parent"),
               *queue("reclaimee-2", 1, weight=2, parent="parent"),
               *queue("reclaimer", 0, weight=1, parent="parent", priority=101)]
    jobs = [o for q in ("reclaimee-1", "reclaimee-2") for i in range(10)
            for o in job_with_pod(f"{q}-job-{i}", q, f"{q}-gpu", "node-1")]
    reclaimer = owned("reclaimer-pod", "reclaimer", 3, host="node-1")
    out.append(kai("reclaim/reclaim_dra_test#2", 116, file,
                   "Reclaim based on priority, maintain over-quota weight proportion",
                   ["reclaim", "over-quota", "queue-priority", "hierarchy", "podgrouper-job", "node-selector"], [
                       {"apply": [device_class(), *node("node-1", 8), *queues8,
                                  template("reclaimee-1-gpu", "reclaimee-1"),
                                  template("reclaimee-2-gpu", "reclaimee-2"), *jobs]},
                       {"cycles": 4},
                       {"expect": {"selectors": [{"namespace": "kai-reclaimee-1", "scheduled_count": 3},
                                                 {"namespace": "kai-reclaimee-2", "scheduled_count": 5}],
                                   "devices": {"allocated": 8, "distinct": True}}},
                       {"apply": reclaimer},
                       {"cycles": 6},
                       {"expect": {"pods": {key("reclaimer", "reclaimer-pod"): {"scheduled": True, "node": "node-1"}},
                                   "claims": [{"for_pod": key("reclaimer", "reclaimer-pod"), "allocated": True,
                                               "node": "node-1", "device_count": 3}],
                                   "selectors": [{"namespace": "kai-reclaimee-1", "scheduled_count": 2},
                                                 {"namespace": "kai-reclaimee-2", "scheduled_count": 3}],
                                   "devices": {"allocated": 8, "distinct": True}}}],
                   notes="KAI's Jobs are applied with the pod each would make; an evicted pod is not made "
                         "again, so only the live scheduled counts are asserted (3 and 5, then 2 and 3), as the "
                         "corpus does for reclaim_specs' spec of the same name."))
    return out


def preempt_test() -> list[dict[str, Any]]:
    """test/e2e/suites/preempt/preempt_test.go, context "Dynamic Resources"."""
    cls = "gpu.example.com"
    queues = [*queue("parent"), *queue("q", parent="parent", cpu=(500, 500))]
    classes = [priority_class("low-preemptible", 40), priority_class("high-preemptible", 41)]

    def one(name: str, priority: str) -> dict[str, Any]:
        return pod(name, "q", template_name="claim-template", entry="claim-template", affinity_host="node-1",
                   priority_class_name=priority)

    tmpl = template("claim-template", "q")
    tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = cls
    fillers = [one(f"filler-{i}", "low-preemptible") for i in range(2)]
    return [kai("preempt/preempt_test#3", 109, "preempt/preempt_test.go",
                "Dynamic Resources: Preempts a pod based on DRA contention",
                ["preempt", "priority", "node-affinity"], [
                    {"apply": [device_class(cls), *node("node-1", 2), *queues, *classes, tmpl, *fillers]},
                    {"cycles": 2},
                    {"expect": {"pods": {key("q", f"filler-{i}"): {"scheduled": True} for i in range(2)},
                                "devices": {"allocated": 2, "distinct": True}}},
                    {"apply": [one("unschedulable", "low-preemptible")]},
                    {"cycles": 2},
                    {"expect": {"pods": {key("q", "unschedulable"): {"scheduled": False, "unschedulable": True}}}},
                    {"apply": [one("preemptor", "high-preemptible")]},
                    {"cycles": 6},
                    {"expect": {"pods": {key("q", "preemptor"): {"scheduled": True, "node": "node-1"}},
                                "claims": [{"for_pod": key("q", "preemptor"), "allocated": True, "node": "node-1",
                                            "device_count": 1, "reserved_for": ["preemptor"]}],
                                "selectors": [{"namespace": "kai-q", "scheduled_count": 2}],
                                "devices": {"allocated": 2, "distinct": True}}}],
                notes="KAI's class gpu.example.com is the example DRA driver's; here a class of that name "
                      "selects NVIDIA's driver's devices, the GPUs kaiweb counts. Numbered after the corpus's "
                      "two scenarios of this file (its #1 and #2), so the ids stay distinct. The count of "
                      "scheduled pods after the preemption (one filler gone) is ours.")]


def kaiweb_dra() -> list[dict[str, Any]]:
    """Ours: what KAI's specs do not cover."""
    queues = [*queue("parent"), *queue("q", 8, parent="parent")]
    out = []
    out.append(ours("shared-claim-counted-once", "A claim shared by two pods is allocated once and counted once",
                    ["queue-quota"], [
                        {"apply": [device_class(), *node("node-1", 2), *node("node-2", 2), *queues,
                                   claim("shared", "q", 2), pod("sharer-a", "q", claim_name="shared"),
                                   pod("sharer-b", "q", claim_name="shared")]},
                        {"cycles": 4},
                        {"expect": {"selectors": [{"namespace": "kai-q", "scheduled_count": 2, "same_node": True}],
                                    "claims": [{"claim": "kai-q/shared", "allocated": True, "device_count": 2,
                                                "node_in": ["node-1", "node-2"],
                                                "reserved_for": ["sharer-a", "sharer-b"]}],
                                    "queues": [{"name": "q", "status_allocated": {GPU_KEY: 2}}],
                                    "devices": {"allocated": 2, "distinct": True}}}],
                    notes="KAI #1931: a GPU shared by several consumers counts once. Both pods run on the "
                          "claim's node; the queue is charged 2 GPUs, not 4."))

    gang = [podgroup("gang", "q", 3)]
    for i in range(3):
        gang += [claim(f"gang-{i}", "q", 2), pod(f"member-{i}", "q", claim_name=f"gang-{i}", pod_group="gang",
                                                labels={"gang": "g"})]
    out.append(ours("gang-with-claims-all-or-nothing", "A gang whose pods each claim 2 GPUs is bound all or nothing",
                    ["gang"], [
                        {"apply": [device_class(), *node("node-1", 2), *node("node-2", 2), *queues, *gang]},
                        {"cycles": 2},
                        {"expect": {"selectors": [{"namespace": "kai-q", "labels": {"gang": "g"},
                                                   "scheduled_count": 0, "pending_count": 3}],
                                    "claims": [{"for_pod": key("q", f"member-{i}"), "allocated": False}
                                               for i in range(3)],
                                    "devices": {"allocated": 0}}},
                        {"apply": node("node-3", 2)},
                        {"cycles": 2},
                        {"expect": {"selectors": [{"namespace": "kai-q", "labels": {"gang": "g"},
                                                   "scheduled_count": 3, "distinct_nodes": 3}],
                                    "claims": [{"for_pod": key("q", f"member-{i}"), "allocated": True,
                                                "device_count": 2, "reserved_for": [f"member-{i}"]}
                                               for i in range(3)],
                                    "devices": {"allocated": 6, "distinct": True}}}],
                    notes="On 4 devices none of the three is bound and no claim is allocated; once a third "
                          "node's devices are published, all three are bound on six distinct devices."))

    mig = (f'device.attributes["{DRIVER}"].type == "mig"', f'device.attributes["{DRIVER}"].profile == "3g.40gb"')
    out.append(ours("mig-by-attributes", "A claim selecting a MIG profile by attributes gets that slice",
                    ["mig"], [
                        {"apply": [device_class(), *node("plain", 2), *node("migged", 0, migs=("1g.10gb", "3g.40gb")),
                                   *queues, claim("slice", "q", 1, selectors=mig),
                                   pod("mig-user", "q", claim_name="slice")]},
                        {"cycles": 2},
                        {"expect": {"pods": {key("q", "mig-user"): {"scheduled": True, "node": "migged"}},
                                    "claims": [{"for_pod": key("q", "mig-user"), "allocated": True, "node": "migged",
                                                "devices": ["migged/mig-1"], "reserved_for": ["mig-user"]}]}}],
                    notes="No KAI e2e spec exercises MIG; the slices carry the NVIDIA driver's MIG attributes."))

    limited = [*queue("parent"), *queue("capped", 0, limit=2, parent="parent")]
    out.append(ours("queue-limit-on-claimed-gpus", "A queue's GPU limit holds on claimed GPUs",
                    ["limit", "queue-quota"], [
                        {"apply": [device_class(), *node("node-1", 4), *limited,
                                   *[o for i in range(3) for o in (
                                       claim(f"c-{i}", "capped", 1),
                                       pod(f"p-{i}", "capped", claim_name=f"c-{i}", labels={"batch": "b"}))]]},
                        {"cycles": 3},
                        {"expect": {"selectors": [{"namespace": "kai-capped", "labels": {"batch": "b"},
                                                   "scheduled_count": 2, "pending_count": 1}],
                                    "queues": [{"name": "capped", "status_allocated": {GPU_KEY: 2}}],
                                    "devices": {"allocated": 2, "distinct": True}}}],
                    notes="Three pods of one claimed GPU each in a queue limited to 2 GPUs: two run, one waits."))
    return out


FILES = {"allocate/resources/dra_test.json": dra_test, "reclaim/reclaim_dra_test.json": reclaim_dra_test,
         "preempt/preempt_test.json": preempt_test, "kaiweb/dra.json": kaiweb_dra}


def scenarios() -> list[dict[str, Any]]:
    return [s for make in FILES.values() for s in make()]


def main() -> None:
    for path, make in FILES.items():
        out = HERE / path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(make(), indent=1) + "\n")


if __name__ == "__main__":
    main()
