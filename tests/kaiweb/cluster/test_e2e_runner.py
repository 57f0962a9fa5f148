"""The KAI end-to-end scenario runner's own parts: what it applies, and in what order."""

from __future__ import annotations

from devkube import e2e


def test_third_party_kinds_get_a_permissive_crd_and_built_in_kinds_do_not():
    objects = [
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "a", "namespace": "n"}},
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "b", "namespace": "n"}},
        {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r", "namespace": "n"}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "n"}},
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"}},
    ]
    crds = e2e.permissive_crds(objects)
    assert [c["metadata"]["name"] for c in crds] == ["pytorchjobs.kubeflow.org", "rayclusters.ray.io"]
    spec = crds[0]["spec"]
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "PyTorchJob"
    assert spec["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-preserve-unknown-fields"] is True


def test_objects_are_created_before_what_refers_to_them():
    objects = [
        {"kind": "Pod", "metadata": {"name": "p"}},
        {"kind": "Job", "metadata": {"name": "j"}},
        {"kind": "Queue", "metadata": {"name": "q"}},
        {"kind": "Namespace", "metadata": {"name": "n"}},
        {"kind": "PriorityClass", "metadata": {"name": "pc"}},
        {"kind": "PodGroup", "metadata": {"name": "pg"}},
    ]
    kinds = [o["kind"] for o in e2e._creation_order(objects)]
    assert kinds == ["Namespace", "PriorityClass", "Queue", "Job", "PodGroup", "Pod"]


def test_the_scheduler_configuration_becomes_a_scheduling_shard_object():
    shard = e2e.shard_object({"placementStrategy": {"gpu": "spread", "cpu": "spread"},
                              "args": {"restrict-node-scheduling": "true"}})
    assert shard["apiVersion"] == "kai.scheduler/v1"
    assert shard["kind"] == "SchedulingShard"
    assert shard["spec"]["placementStrategy"] == {"gpu": "spread", "cpu": "spread"}
    assert shard["spec"]["args"] == {"restrict-node-scheduling": "true"}


def test_scenarios_load_from_a_folder_in_file_order(tmp_path):
    (tmp_path / "b.json").write_text('[{"id": "b#1", "steps": []}]')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.json").write_text('[{"id": "a#1", "steps": []}, {"id": "a#2", "steps": []}]')
    (tmp_path / "notes.json").write_text('{"not": "a list"}')
    assert [s["id"] for s in e2e.load_scenarios(tmp_path)] == ["b#1", "a#1", "a#2"]


def test_owners_are_created_before_what_they_own_across_kinds():
    created: list[str] = []

    class Recording(e2e.Applier):
        def __init__(self) -> None:
            super().__init__(api_client=None)  # type: ignore[arg-type]

        def apply_one(self, obj):
            created.append(obj["metadata"]["name"])
            self.uids[obj["metadata"]["uid"]] = "real-" + obj["metadata"]["uid"]
            return obj

    leader = {"kind": "Pod", "metadata": {"name": "leader", "uid": "u-leader"}}
    workers = {"kind": "StatefulSet", "metadata": {"name": "workers", "uid": "u-workers", "ownerReferences": [
        {"kind": "Pod", "name": "leader", "uid": "u-leader"}]}}
    worker = {"kind": "Pod", "metadata": {"name": "worker-0", "uid": "u-w0", "ownerReferences": [
        {"kind": "StatefulSet", "name": "workers", "uid": "u-workers"}]}}
    Recording().apply([worker, workers, leader])
    assert created == ["leader", "workers", "worker-0"]


class _Created:
    def __init__(self, body):
        self.body = body

    def to_dict(self):
        return {**self.body, "metadata": {**self.body["metadata"], "uid": "uid-1"}}


class _NodeResource:
    namespaced = False

    def __init__(self) -> None:
        self.bodies: list[dict] = []

    def create(self, body, namespace=None):
        self.bodies.append(body)
        return _Created(body)


def _applier_with(resource: _NodeResource, *, kwok: bool) -> e2e.Applier:
    applier = e2e.Applier(api_client=None, kwok=kwok)  # type: ignore[arg-type]
    applier.resource = lambda api_version, kind: resource  # type: ignore[method-assign]
    return applier


def test_on_a_kwok_cluster_nodes_get_kwoks_annotation_and_nothing_else_changes():
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "node-0", "labels": {"kubernetes.io/hostname": "node-0"},
                         "annotations": {"kept": "yes"}},
            "spec": {"taints": [{"key": "testKey", "value": "v", "effect": "NoSchedule"}]}}
    kwok, plain = _NodeResource(), _NodeResource()

    _applier_with(kwok, kwok=True).apply_one(node)
    _applier_with(plain, kwok=False).apply_one(node)

    assert kwok.bodies[0]["metadata"]["annotations"] == {"kept": "yes", "kwok.x-k8s.io/node": "fake"}
    assert kwok.bodies[0]["metadata"]["labels"] == node["metadata"]["labels"]
    assert kwok.bodies[0]["spec"] == node["spec"]  # no KWOK taint: the scenarios' pods do not tolerate one
    assert plain.bodies[0]["metadata"]["annotations"] == {"kept": "yes"}


def test_the_fake_cluster_plays_the_kubelets_at_once():
    with e2e.FakeCluster() as kube:
        server = kube.server
        server.add_node("node-0")
        server.add_pod("bound", node="node-0")
        server.add_pod("waiting")
        server.add_pod("leaving", node="node-0", phase="Running")
        leaving = server.get("pods", "leaving")
        leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        server.put("pods", leaving)

        kube.wait_for_pods()

        bound = server.get("pods", "bound")
        assert bound["status"]["phase"] == "Running"
        assert {c["type"]: c["status"] for c in bound["status"]["conditions"]}["Ready"] == "True"
        assert (server.get("pods", "waiting").get("status") or {}).get("phase", "Pending") == "Pending"
        assert server.get("pods", "leaving") is None
