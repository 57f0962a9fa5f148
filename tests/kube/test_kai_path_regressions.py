"""What a KAI user saw go wrong on the Kubernetes path, each replayed on a real API server.

Every test plays a small scenario through the product's own path (the e2e runner: objects applied
with the official client, then pod-grouper, mirror, cycle, binder and status writer) and reads the
cluster afterwards, as `kubectl` would.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devkube import e2e
from devkube.localkube import LocalKube
from devkube.product import product_cycle
from tests.kube.fixtures import kwok_scenario_cluster, product_on

pytestmark = [pytest.mark.kube, pytest.mark.django_db(transaction=True)]

GPU = "nvidia.com/gpu"


def node(name: str, gpus: int = 8, labels: dict[str, str] | None = None, taints: list[dict] | None = None,
         resources: dict[str, str] | None = None) -> dict[str, Any]:
    capacity = {"cpu": "64", "memory": "256Gi", "pods": "110", **({GPU: str(gpus)} if gpus else {}),
                **(resources or {})}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {"taints": taints} if taints else {},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def queue(name: str, parent: str | None = None, gpu_limit: float = -1) -> dict[str, Any]:
    res = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: dict[str, Any] = {"resources": {"cpu": res, "memory": res,
                                          "gpu": {"quota": -1 if gpu_limit < 0 else 0, "limit": gpu_limit,
                                                  "overQuotaWeight": 1}}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def pod(name: str, *, ns: str = "team", queue_name: str | None = "q", gpus: int = 1, owner: dict | None = None,
        labels: dict[str, str] | None = None, spec: dict[str, Any] | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": dict(labels or {})}
    if queue_name:
        meta["labels"]["kai.scheduler/queue"] = queue_name
    if owner:
        meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                    "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                    "controller": True}]
    if annotations:
        meta["annotations"] = annotations
    limits = {GPU: str(gpus)} if gpus else {}
    body = {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "busybox",
                            "resources": {"limits": limits, "requests": {"cpu": "100m", **limits}}}],
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}], **(spec or {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def base(*nodes: dict[str, Any], gpu_limit: float = -1) -> list[dict[str, Any]]:
    return [*nodes, queue("dept"), queue("q", parent="dept", gpu_limit=gpu_limit), namespace("team")]


@pytest.fixture(scope="module")
def kwok_cluster() -> Iterator[LocalKube]:
    yield from kwok_scenario_cluster()


@pytest.fixture
def play(kwok_cluster: LocalKube, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    """Run a list of steps through the product's Kubernetes path; returns the last observation."""

    prepare = product_on(settings, monkeypatch)

    def run(steps: list[dict[str, Any]], config: dict[str, Any] | None = None) -> dict[str, Any]:
        kwok_cluster.reset()
        runner = e2e.ScenarioRunner(kwok_cluster, prepare=prepare, run_cycle=product_cycle)
        result = runner.run({"id": "regression", "scheduler": {"config": config or {}},
                             "steps": [*steps, {"expect": {}}]})
        assert result.error is None, result.error
        return result.observations[-1]

    before = os.environ.get("KUBECONFIG")
    yield run
    if before is None:
        os.environ.pop("KUBECONFIG", None)


def pods_of(obs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in obs["pods"] if not p["deleted"]}


def bound(obs: dict[str, Any]) -> set[str]:
    return {name for name, p in pods_of(obs).items() if p["nodeName"]}


def unschedulable_message(p: dict[str, Any]) -> str | None:
    for c in p["conditions"]:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return c.get("message") or ""
    return None


def pytorchjob(name: str, workers: int, queue_name: str) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}",
                         "labels": {"kai.scheduler/queue": queue_name}},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": workers, "template": {"spec": {}}}}}}


def test_a_pytorchjob_is_one_gang_that_starts_all_or_none(play):
    job = pytorchjob("train", workers=3, queue_name="q")
    workers = [pod(f"train-worker-{i}", queue_name=None, gpus=4, owner=job,
                   labels={"training.kubeflow.org/job-name": "train", "training.kubeflow.org/replica-type": "worker",
                           "training.kubeflow.org/replica-index": str(i)}) for i in range(3)]
    obs = play([{"apply": [*base(node("node-0", gpus=8)), job, *workers]}, {"cycles": 3}])

    assert bound(obs) == set()  # 12 GPUs asked, 8 exist: none starts
    (group,) = [g for g in obs["podgroups"] if g["metadata"]["namespace"] == "team"]
    assert group["spec"]["minMember"] == 3
    assert group["spec"]["queue"] == "q"  # from the PyTorchJob's label; its pods carry none
    assert {p["annotations"]["pod-group-name"] for p in pods_of(obs).values()} == {group["metadata"]["name"]}


def test_a_pytorchjob_that_fits_starts_whole_with_the_queue_of_its_owner(play):
    job = pytorchjob("train", workers=3, queue_name="q")
    workers = [pod(f"train-worker-{i}", queue_name=None, gpus=4, owner=job,
                   labels={"training.kubeflow.org/job-name": "train",
                           "training.kubeflow.org/replica-type": "worker"}) for i in range(3)]
    obs = play([{"apply": [*base(node("node-0"), node("node-1")), job, *workers]}, {"cycles": 2}])
    assert bound(obs) == {"train-worker-0", "train-worker-1", "train-worker-2"}


def test_node_constraints_are_honoured_and_explained(play):
    nodes = [node("node-0", labels={"rack": "r0"}),
             node("node-1", labels={"rack": "r1"}, taints=[{"key": "dedicated", "value": "infra",
                                                            "effect": "NoSchedule"}])]
    pods = [
        pod("no-such-rack", spec={"nodeSelector": {"rack": "r9"}}),
        pod("r1-untolerated", spec={"nodeSelector": {"rack": "r1"}}),
        pod("r1-tolerated", spec={"nodeSelector": {"rack": "r1"}, "tolerations": [
            {"key": GPU, "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}]}),
        pod("mig", gpus=0, spec={"containers": [{"name": "c", "image": "busybox", "resources": {
            "limits": {"nvidia.com/mig-1g.10gb": "1"}, "requests": {"nvidia.com/mig-1g.10gb": "1"}}}]}),
    ]
    obs = play([{"apply": [*base(*nodes), *pods]}, {"cycles": 2}])

    live = pods_of(obs)
    assert live["r1-tolerated"]["nodeName"] == "node-1"
    assert bound(obs) == {"r1-tolerated"}
    assert "node affinity/selector" in unschedulable_message(live["no-such-rack"])
    assert "untolerated taint" in unschedulable_message(live["r1-untolerated"])
    assert "mig" in unschedulable_message(live["mig"])


def test_a_gang_below_its_minimum_is_evicted_after_the_staleness_grace(play):
    group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
             "metadata": {"name": "gang", "namespace": "team"},
             "spec": {"queue": "q", "minMember": 2, "stalenessGracePeriod": "60s"}}
    members = [pod(f"member-{i}", annotations={"pod-group-name": "gang"}, labels={"pod-group-name": "gang"})
               for i in range(2)]
    obs = play([
        {"apply": [*base(node("node-0")), group, *members]}, {"cycles": 2},
        {"delete": [{"kind": "Pod", "namespace": "team", "name": "member-1"}]},
        {"cycles": 1}, {"advance_seconds": 61}, {"cycles": 2},
    ])
    assert "member-0" not in pods_of(obs)  # the stale gang's last member was evicted


def test_a_deployments_pods_are_inference_workloads(play):
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "serve", "namespace": "team", "uid": "uid-serve",
                               "labels": {"kai.scheduler/queue": "q"}},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "serve"}},
                           "template": {"metadata": {"labels": {"app": "serve"}},
                                        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
    replicaset = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                  "metadata": {"name": "serve-5d8", "namespace": "team", "uid": "uid-serve-rs",
                               "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "serve",
                                                    "uid": "uid-serve", "controller": True}]},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "serve"}},
                           "template": {"metadata": {"labels": {"app": "serve"}},
                                        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
    obs = play([{"apply": [*base(node("node-0")), deployment, replicaset,
                           pod("serve-5d8-x", queue_name=None, owner=replicaset, labels={"app": "serve"})]},
                {"cycles": 1}])
    (group,) = [g for g in obs["podgroups"] if g["metadata"]["namespace"] == "team"]
    assert group["spec"]["priorityClassName"] == "inference"
    assert bound(obs) == {"serve-5d8-x"}


def test_pod_groups_pods_and_queues_get_kais_status_and_events(play):
    group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
             "metadata": {"name": "big", "namespace": "team"}, "spec": {"queue": "q", "minMember": 1}}
    obs = play([{"apply": [*base(node("node-0"), gpu_limit=2), group,
                           pod("big-0", gpus=4, annotations={"pod-group-name": "big"}),
                           pod("small", gpus=1)]},
                {"cycles": 2}])

    assert bound(obs) == {"small"}
    (big,) = [g for g in obs["podgroups"] if g["metadata"]["name"] == "big"]
    (condition,) = big["status"]["schedulingConditions"]
    assert condition["type"] == "UnschedulableOnNodePool"
    assert [r["reason"] for r in condition["reasons"]] == ["OverLimit"]
    assert unschedulable_message(pods_of(obs)["big-0"])
    reasons = {(e["involvedObject"]["kind"], e["involvedObject"]["name"], e["reason"]) for e in obs["events"]}
    assert ("Pod", "big-0", "Unschedulable") in reasons
    assert ("Pod", "small", "Scheduled") in reasons
    assert ("PodGroup", "big", "Unschedulable") in reasons
    (q,) = [x for x in obs["queues"] if x["metadata"]["name"] == "q"]
    assert q["status"]["allocated"][GPU] == "1"
