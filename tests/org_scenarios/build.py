"""Writes placement.json: the org scenarios (node pools, departments, projects) in the kai-e2e format.

Run ``python -m tests.org_scenarios.build`` after changing a scenario here; the JSON is what the runner
plays (`devkube.org_scenarios`, `tests/kube/test_org_scenarios_real.py`). Every scenario has two node
pools, h100 and a100 (nodes chosen by ``nvidia.com/gpu.product``), the default pool's node, and the
department ``research`` with the projects ``vision`` and ``nlp``; each changes only what it is about.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("placement.json")
GPU = "nvidia.com/gpu"
PRODUCT = "nvidia.com/gpu.product"
POOL = "kai.scheduler/node-pool"
UNASSIGNED = "kai-unexisting-node-pool"


def amounts(deserved: float = 0, limit: float = -1, weight: float = 1) -> dict[str, float]:
    return {"deserved": deserved, "limit": limit, "over_quota_weight": weight}


def entry(pool: str, gpu: dict[str, float] | None = None) -> dict[str, Any]:
    return {"pool": pool, "gpu": gpu or amounts(), "cpu": amounts(), "memory": amounts()}


def org(vision: dict[str, Any] | None = None, nlp: dict[str, Any] | None = None,
        department: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    everywhere = [entry("default"), entry("h100"), entry("a100")]
    return {
        "node_pools": [{"name": "h100", "label_key": PRODUCT, "label_value": "H100"},
                       {"name": "a100", "label_key": PRODUCT, "label_value": "A100"}],
        "departments": [{"name": "research", "queues": department or everywhere}],
        "projects": [{"name": "vision", "department": "research", "queues": everywhere, **(vision or {})},
                     {"name": "nlp", "department": "research", "queues": everywhere, **(nlp or {})}],
    }


def node(name: str, product: str, pool: str | None, *, gpus: int = 8, ready: bool = True) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, PRODUCT: product, "nvidia.com/gpu.count": str(gpus)}
    if pool:
        labels[POOL] = pool
    capacity = {"cpu": "64", "memory": "256Gi", "pods": "110", GPU: str(gpus)}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def namespace(project: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": f"kai-{project}", "labels": {"kai/project": project}}}


def pod(name: str, project: str = "vision", *, gpus: int = 1, pools: str | None = None,
        affinity: list[dict[str, Any]] | None = None, labels: dict[str, str] | None = None,
        running_on: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": f"kai-{project}",
                            "labels": {"app": "engine-e2e", "project": project, **(labels or {})}}
    if pools is not None:
        meta["annotations"] = {"kai.scheduler/node-pools": pools}
    spec: dict[str, Any] = {
        "schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "ubuntu", "resources": {
            "limits": {GPU: str(gpus)}, "requests": {"cpu": "100m", GPU: str(gpus)}}}],
        "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]}
    if affinity is not None:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": affinity}]}}}
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Pending"}}
    if running_on:
        spec["nodeName"] = running_on
        body["status"] = {"phase": "Running"}
    return body


def cluster(h100_ready: bool = True) -> list[dict[str, Any]]:
    return [node("h100-1", "H100", "h100", ready=h100_ready), node("a100-1", "A100", "a100"),
            node("node-1", "L4", None), namespace("vision"), namespace("nlp")]


def scenario(sid: str, title: str, objects: list[dict[str, Any]], expect: dict[str, Any], *, cycles: int = 2,
             org_: dict[str, Any] | None = None, before: list[dict[str, Any]] | None = None,
             features: tuple[str, ...] = ("node-pools",)) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    if before:
        steps += [{"apply": cluster_objects(before)}, {"cycles": 2}]
        steps += [{"apply": objects}]
    else:
        steps += [{"apply": cluster_objects(objects)}]
    steps += [{"cycles": cycles}, {"expect": expect}]
    return {"id": f"org/placement#{sid}", "title": title, "features": list(features),
            "scheduler": {"name": "kai-scheduler", "config": {}}, "org": copy.deepcopy(org_ or org()),
            "steps": steps}


def cluster_objects(objects: list[dict[str, Any]], h100_ready: bool = True) -> list[dict[str, Any]]:
    if any(o["kind"] == "Node" for o in objects):
        return objects
    return [*cluster(h100_ready), *objects]


def pg(pod_key: str, pool: str, queue: str | None = None) -> dict[str, Any]:
    out = {"for_pod": pod_key, "node_pool": pool}
    if queue:
        out["queue"] = queue
    return out


V, N = "kai-vision", "kai-nlp"


def scenarios() -> list[dict[str, Any]]:
    out = []
    add = out.append
    add(scenario("annotation", "The kai.scheduler/node-pools annotation places the workload in its first pool",
                 [pod("p", pools="a100")],
                 {"pods": {f"{V}/p": {"scheduled": True, "node_in": ["a100-1"]}},
                  "podgroups": [pg(f"{V}/p", "a100", "vision-a100")]}))
    add(scenario("affinity-product", "Required node affinity on a pool's label pair places it in that pool",
                 [pod("p", affinity=[{"key": PRODUCT, "operator": "In", "values": ["H100"]}])],
                 {"pods": {f"{V}/p": {"scheduled": True, "node_in": ["h100-1"]}},
                  "podgroups": [pg(f"{V}/p", "h100", "vision-h100")]}))
    add(scenario("affinity-pool-label", "Required node affinity on the node-pool label places it in that pool",
                 [pod("p", affinity=[{"key": POOL, "operator": "In", "values": ["a100"]}])],
                 {"pods": {f"{V}/p": {"scheduled": True, "node_in": ["a100-1"]}},
                  "podgroups": [pg(f"{V}/p", "a100", "vision-a100")]}))
    add(scenario("affinity-default", "Affinity 'node-pool DoesNotExist' places it in the default pool",
                 [pod("p", pools=None, affinity=[{"key": POOL, "operator": "DoesNotExist"}])],
                 {"pods": {f"{V}/p": {"scheduled": True, "node_in": ["node-1"]}},
                  "podgroups": [pg(f"{V}/p", "default", "vision")]}))
    add(scenario("podgroup-label", "A pool label the PodGroup already carries places it there",
                 [pod("p", labels={POOL: "h100"})],
                 {"pods": {f"{V}/p": {"scheduled": True, "node_in": ["h100-1"]}},
                  "podgroups": [pg(f"{V}/p", "h100", "vision-h100")]}))
    add(scenario("default-pools", "The project's default pools place a workload that names none",
                 [pod("p")],
                 {"pods": {f"{V}/p": {"scheduled": True, "node_in": ["h100-1"]}},
                  "podgroups": [pg(f"{V}/p", "h100", "vision-h100")]},
                 org_=org(vision={"default_node_pools": ["h100", "a100"]})))
    add(scenario("default", "With no request and no default pools a workload goes to the default pool",
                 [pod("p")],
                 {"pods": {f"{V}/p": {"scheduled": True, "node_in": ["node-1"]}},
                  "podgroups": [pg(f"{V}/p", "default", "vision")]}))
    add(scenario("annotation-over-default-pools", "The annotation overrides the project's default pools",
                 [pod("p", pools="a100")],
                 {"pods": {f"{V}/p": {"scheduled": True, "node_in": ["a100-1"]}},
                  "podgroups": [pg(f"{V}/p", "a100", "vision-a100")]},
                 org_=org(vision={"default_node_pools": ["h100"]})))
    add(scenario("affinity-over-default-pools", "Required node affinity overrides the project's default pools",
                 [pod("p", affinity=[{"key": PRODUCT, "operator": "In", "values": ["A100"]}])],
                 {"pods": {f"{V}/p": {"scheduled": True, "node_in": ["a100-1"]}},
                  "podgroups": [pg(f"{V}/p", "a100", "vision-a100")]},
                 org_=org(vision={"default_node_pools": ["h100"]})))
    add(scenario("unknown-pool-falls-back", "An annotation naming no existing pool falls back to the default pool",
                 [pod("p", pools="b200")],
                 {"pods": {f"{V}/p": {"scheduled": True, "node_in": ["node-1"]}},
                  "podgroups": [pg(f"{V}/p", "default", "vision")]}))
    add(scenario("round-robin", "When the first pool is full the workload moves to the next candidate",
                 [pod("p", gpus=4, pools="h100 a100")],
                 {"pods": {f"{V}/p": {"scheduled": True, "node_in": ["a100-1"]}},
                  "podgroups": [pg(f"{V}/p", "a100", "vision-a100")],
                  "events": [{"for_pod": f"{V}/p", "reason": "NodePoolChanged", "message_regex": "moved to a100"}]},
                 before=[pod("fill", gpus=8, pools="h100")], cycles=3))
    add(scenario("wrap-around", "Past the last candidate the workload is marked unschedulable and tried again",
                 [pod("p", gpus=4, pools="h100 a100")],
                 {"pods": {f"{V}/p": {"scheduled": False, "why_regex": "unschedulable on every candidate node pool"}},
                  "events": [{"for_pod": f"{V}/p", "reason": "Unschedulable",
                              "message_regex": "unschedulable on every candidate node pool"}]},
                 before=[pod("fill-h", gpus=8, pools="h100"), pod("fill-a", gpus=8, pools="a100")], cycles=3))
    add(scenario("single-candidate-stays", "With one candidate the workload waits in that pool, never moved",
                 [pod("p", gpus=4, pools="h100")],
                 {"pods": {f"{V}/p": {"scheduled": False}},
                  "podgroups": [pg(f"{V}/p", "h100", "vision-h100")]},
                 before=[pod("fill", gpus=8, pools="h100")], cycles=3))
    unready = scenario("unaccepting-phase-skipped", "A pool whose nodes are all not ready is skipped",
                       [pod("p", pools="h100 a100")],
                       {"pods": {f"{V}/p": {"scheduled": True, "node_in": ["a100-1"]}},
                        "podgroups": [pg(f"{V}/p", "a100", "vision-a100")]})
    unready["steps"][0]["apply"] = [*cluster(h100_ready=False), pod("p", pools="h100 a100")]
    add(unready)
    add(scenario("running-never-moved", "A workload already running stays charged to the pool it runs in",
                 [*cluster(), pod("p", pools="a100 h100", running_on="h100-1")],
                 {"pods": {f"{V}/p": {"scheduled": True, "node_in": ["h100-1"]}},
                  "podgroups": [pg(f"{V}/p", "h100", "vision-h100")]}))
    quota = org(vision={"queues": [entry("default"), entry("h100", amounts(8, 8)), entry("a100", amounts(0, 0))]})
    add(scenario("h100-quota-not-on-a100", "H100 quota is not usable in A100: the a100 queue's limit holds",
                 [pod("p", pools="a100"), pod("q", pools="h100")],
                 {"pods": {f"{V}/p": {"scheduled": False}, f"{V}/q": {"scheduled": True, "node_in": ["h100-1"]}},
                  "podgroups": [pg(f"{V}/p", "a100", "vision-a100")]}, org_=quota))
    capped = org(vision={"queues": [entry("default"), entry("h100", amounts(2, 2)), entry("a100", amounts(8, 8))]})
    add(scenario("a100-quota-not-on-h100", "A100 quota is not usable in H100: 4 GPUs over the h100 limit of 2 wait",
                 [pod("p", gpus=4, pools="h100"), pod("q", gpus=4, pools="a100")],
                 {"pods": {f"{V}/p": {"scheduled": False}, f"{V}/q": {"scheduled": True, "node_in": ["a100-1"]}},
                  "podgroups": [pg(f"{V}/p", "h100", "vision-h100")]}, org_=capped))
    borrow = org(vision={"queues": [entry("default"), entry("h100", amounts(2, -1)), entry("a100", amounts(4, -1))]})
    add(scenario("borrow-h100-a100-idle", "A project borrows H100s over its quota while its A100 quota sits idle",
                 [pod(f"p{i}", gpus=2, pools="h100", labels={"batch": "b"}) for i in range(3)],
                 {"selectors": [{"namespace": V, "labels": {"batch": "b"}, "scheduled_count": 3}],
                  "pods": {f"{V}/p{i}": {"node_in": ["h100-1"]} for i in range(3)}}, org_=borrow))
    ceiling = org(department=[entry("default"), entry("h100", amounts(0, 4)), entry("a100")])
    add(scenario("department-ceiling", "The department's h100 limit of 4 binds its two projects together",
                 [*[pod(f"v{i}", pools="h100", labels={"batch": "b"}) for i in range(3)],
                  *[pod(f"n{i}", "nlp", pools="h100", labels={"batch": "b"}) for i in range(3)]],
                 {"selectors": [{"labels": {"batch": "b"}, "scheduled_count": 4, "pending_count": 2}]},
                 org_=ceiling))
    weights = org(vision={"queues": [entry("default"), entry("h100", amounts(0, -1, 3)), entry("a100")]},
                  nlp={"queues": [entry("default"), entry("h100", amounts(0, -1, 1)), entry("a100")]})
    add(scenario("over-quota-weights", "Over-quota weights 3:1 share the department's H100s 6:2",
                 [*[pod(f"v{i}", pools="h100", labels={"batch": "b"}) for i in range(8)],
                  *[pod(f"n{i}", "nlp", pools="h100", labels={"batch": "b"}) for i in range(8)]],
                 {"selectors": [{"namespace": V, "labels": {"batch": "b"}, "scheduled_count": 6},
                                {"namespace": N, "labels": {"batch": "b"}, "scheduled_count": 2}]},
                 org_=weights, cycles=3))
    reclaim = org(vision={"queues": [entry("default"), entry("h100", amounts(4, -1)), entry("a100")]},
                  nlp={"queues": [entry("default"), entry("h100", amounts(0, -1)), entry("a100")]})
    add(scenario("reclaim-in-pool", "A project under its H100 quota reclaims from another over it, in that pool",
                 [pod(f"v{i}", pools="h100", labels={"batch": "v"}) for i in range(4)],
                 {"selectors": [{"namespace": V, "labels": {"batch": "v"}, "scheduled_count": 4},
                                {"namespace": N, "labels": {"batch": "n"}, "scheduled_count": 4}]},
                 before=[pod(f"n{i}", "nlp", pools="h100", labels={"batch": "n"}) for i in range(8)],
                 org_=reclaim, cycles=5, features=("node-pools", "reclaim")))
    no_default = org(nlp={"queues": [entry("h100"), entry("a100")]})
    add(scenario("no-queue-waits", "A project without a queue in the only candidate pool waits unassigned",
                 [pod("p", "nlp")],
                 {"pods": {f"{N}/p": {"scheduled": False}},
                  "podgroups": [pg(f"{N}/p", UNASSIGNED)]}, org_=no_default))
    no_a100 = org(nlp={"queues": [entry("default"), entry("h100")]})
    add(scenario("no-queue-skipped", "A pool where the project has no queue is skipped for the next candidate",
                 [pod("p", "nlp", pools="a100 h100")],
                 {"pods": {f"{N}/p": {"scheduled": True, "node_in": ["h100-1"]}},
                  "podgroups": [pg(f"{N}/p", "h100", "nlp-h100")]}, org_=no_a100))
    return out


def main() -> None:
    OUT.write_text(json.dumps(scenarios(), indent=1) + "\n")


if __name__ == "__main__":
    main()
