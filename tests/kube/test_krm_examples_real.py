"""KAI Resource Management's (KRM) example objects on a real kube-apiserver (KRM's CRDs from
`deploy/kubernetes/crds.yaml`): imported into kaiweb's org and published back, they give the Queues,
SchedulingShards, namespace and node labels KRM's docs say KRM makes, object by object, with zero diff
(`tests/krm_examples.py` holds the examples and the documented results, each citing its doc section).
Also: a hand-made queue holding a derived name is left alone while the project's queue gets a suffix; a
bad KRM object is refused with the field named and nothing imported; export then import gives the same org."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from kubernetes.dynamic.exceptions import UnprocessibleEntityError

from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.models import SchedulingShard
from kaiweb.org import krm_sync, services
from kaiweb.org.models import Department, NodePool, Project
from kaiweb.queues.models import Queue
from tests.krm_examples import (
    DEPARTMENT,
    EXAMPLES,
    EXPECTED_NAMESPACE,
    EXPECTED_SHARDS,
    GPU_PRODUCT,
    NODEPOOL,
    PROJECT,
    expected_queues,
)
from tests.kube.servers import RealServer

pytestmark = [pytest.mark.kube, pytest.mark.django_db]

PLURALS = {"NodePool": "nodepools", "Department": "departments", "Project": "projects"}


@pytest.fixture
def gateway(server: RealServer, kube_shard: SchedulingShard) -> Iterator[KubernetesGateway]:
    server.add_node("h1", labels={GPU_PRODUCT: "H100"})
    server.add_node("c1", gpus=0)
    yield KubernetesGateway(server.api_client, request_timeout=5.0)
    # Cluster-scoped objects `wipe` does not empty.
    for plural in ("projects", "departments", "nodepools", "schedulingshards"):
        for obj in server.list(plural):
            server.remove(plural, obj["metadata"]["name"])


def _put(server: RealServer, *objects: dict[str, Any]) -> None:
    for obj in objects:
        server.put(PLURALS[obj["kind"]], obj)


def _queues(server: RealServer) -> dict[str, dict[str, Any]]:
    return {q["metadata"]["name"]: {"parent": q["spec"].get("parentQueue"), "labels": q["metadata"].get("labels") or {},
                                    "priority": q["spec"].get("priority"), "resources": q["spec"].get("resources")}
            for q in server.list("queues")}


def test_krms_examples_give_krms_objects_with_zero_diff(server: RealServer, kube_shard: SchedulingShard,
                                                        gateway: KubernetesGateway) -> None:
    _put(server, *EXAMPLES)
    mirror.sync_full(gateway, kube_shard.cluster)

    messages = krm_sync.import_from_cluster(gateway)
    report = krm_sync.publish(gateway, kube_shard.cluster)

    assert messages == ["NodePool h100: created", "Department engineering: created", "Project research: created"]
    assert report.problems == []
    uid = server.get("projects", "research")["metadata"]["uid"]
    assert _queues(server) == expected_queues(uid)
    shards = {s["metadata"]["name"]: s["spec"] for s in server.list("schedulingshards")}
    assert shards == EXPECTED_SHARDS
    namespace = server.get("namespaces", EXPECTED_NAMESPACE["name"])
    assert namespace is not None
    labels, annotations = namespace["metadata"].get("labels") or {}, namespace["metadata"].get("annotations") or {}
    assert {k: labels.get(k) for k in EXPECTED_NAMESPACE["labels"]} == EXPECTED_NAMESPACE["labels"]
    assert {k: annotations.get(k) for k in EXPECTED_NAMESPACE["annotations"]} == EXPECTED_NAMESPACE["annotations"]
    # The node pool label on the H100 node, none on the node no pool claims [KRM: node-pools.md, "The default
    # node pool"; labels-and-annotations.md, "Node labels"].
    nodes = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in server.list("nodes")}
    assert nodes["h1"].get("kai.scheduler/node-pool") == "h100"
    assert "kai.scheduler/node-pool" not in nodes["c1"]
    # The status KRM's controllers write [KRM: reference/api.md, NodePool and Project status].
    pool = server.get("nodepools", "h100")["status"]
    assert (pool["phase"], pool["nodes"]) == ("Ready", [{"name": "h1", "status": "Ready"}])
    project = server.get("projects", "research")["status"]
    assert (project["phase"], project["namespace"]) == ("Ready", "kai-research")
    assert [s["nodePoolName"] for s in project["nodePoolsQuotaStatuses"]] == ["default", "h100"]
    assert project["quotaStatus"]["allocated"] == {"gpu": 0, "cpu": 0, "memory": 0}

    # Publishing again changes nothing: the cluster already is what the org says.
    before = (_queues(server), {s["metadata"]["name"]: s["metadata"]["resourceVersion"]
                                for s in server.list("schedulingshards")})
    again = krm_sync.publish(gateway, kube_shard.cluster)
    assert again.problems == []
    assert (_queues(server), {s["metadata"]["name"]: s["metadata"]["resourceVersion"]
                              for s in server.list("schedulingshards")}) == before


def test_a_hand_made_queue_holding_a_derived_name_is_left_alone(server: RealServer, kube_shard: SchedulingShard,
                                                               gateway: KubernetesGateway) -> None:
    hand_made = {"metadata": {"name": "research-h100", "labels": {"team": "legacy"}},
                 "spec": {"priority": 50, "resources": {r: {"quota": 1, "limit": -1, "overQuotaWeight": 1}
                                                        for r in ("gpu", "cpu", "memory")}}}
    server.put("queues", hand_made)
    mirror.sync_full(gateway, kube_shard.cluster)
    _put(server, *EXAMPLES)

    krm_sync.import_from_cluster(gateway)
    krm_sync.publish(gateway, kube_shard.cluster)

    queues = _queues(server)
    assert queues["research-h100"] == {"parent": None, "labels": {"team": "legacy"}, "priority": 50,
                                       "resources": hand_made["spec"]["resources"]}
    suffixed = [name for name, q in queues.items() if q["labels"].get("project") == "research"
                and q["labels"].get("kai.scheduler/node-pool") == "h100"]
    assert len(suffixed) == 1
    assert suffixed[0].startswith("research-h100-")
    assert queues[suffixed[0]]["parent"] == "engineering-h100"
    assert queues[suffixed[0]]["resources"]["gpu"] == {"quota": 4, "limit": 8, "overQuotaWeight": 2}


def test_the_crd_refuses_a_quantity_string_where_krm_takes_a_plain_number(server: RealServer) -> None:
    quantity = copy.deepcopy(DEPARTMENT)
    quantity["spec"]["queues"][0]["resources"]["memory"]["deserved"] = "32Gi"
    with pytest.raises(UnprocessibleEntityError, match=r"spec\.queues\[0\]\.resources\.memory\.deserved"):
        server.put("departments", quantity)


def test_a_bad_krm_object_is_refused_with_the_field_named_and_nothing_imported(
        server: RealServer, kube_shard: SchedulingShard, gateway: KubernetesGateway) -> None:
    bad = {**PROJECT, "spec": {**PROJECT["spec"], "defaultNodePools": ["a100"]}}
    _put(server, NODEPOOL, DEPARTMENT, bad)
    mirror.sync_full(gateway, kube_shard.cluster)

    with pytest.raises(ValidationError) as e:
        krm_sync.import_from_cluster(gateway)

    assert "a100 has no queue in this project" in e.value.message_dict["Project research: spec.defaultNodePools"][0]
    assert not Department.objects.exists()
    assert not Project.objects.exists()
    assert not NodePool.objects.filter(name="h100").exists()


def test_export_to_the_cluster_then_import_gives_the_same_org(server: RealServer, kube_shard: SchedulingShard,
                                                              gateway: KubernetesGateway) -> None:
    server.add_node("a1", labels={GPU_PRODUCT: "A100"})
    mirror.sync_full(gateway, kube_shard.cluster)
    services.create_node_pool({"name": "h100", "label_key": GPU_PRODUCT, "label_value": "H100",
                               "gpu_placement": "spread"})
    services.create_node_pool({"name": "a100", "label_key": GPU_PRODUCT, "label_value": "A100"})
    gpus = {"deserved": 4, "limit": 8, "over_quota_weight": 1}
    services.create_department({"name": "ml", "queues": [{"pool": "h100", "gpu": {**gpus, "limit": 12}},
                                                         {"pool": "a100", "gpu": gpus}]})
    for name in ("vision", "speech"):
        services.create_project({"name": name, "department": "ml", "default_node_pools": ["a100"],
                                 "queues": [{"pool": "h100", "gpu": gpus}, {"pool": "a100", "gpu": gpus}]})
    exported = krm_sync.export_objects()
    krm_sync.export_to_cluster(gateway)
    for project in Project.objects.all():
        services.delete_project(project)
    services.delete_department(Department.objects.get(name="ml"))
    for pool in NodePool.objects.exclude(name="default"):
        services.delete_node_pool(pool)
    assert not Queue.objects.exists()

    krm_sync.import_from_cluster(gateway)

    assert krm_sync.export_objects() == exported
    assert {o["metadata"]["name"] for o in server.list("projects")} == {"vision", "speech"}


def test_a_relabelled_node_is_held_cordoned_while_its_pods_run_then_moves(
        server: RealServer, kube_shard: SchedulingShard, gateway: KubernetesGateway) -> None:
    _put(server, *EXAMPLES)
    server.add_node("c2", gpus=0)
    mirror.sync_full(gateway, kube_shard.cluster)
    krm_sync.import_from_cluster(gateway)
    server.add_pod("train", phase="Running", node="c2", queue="research", namespace="kai-research",
                   requests={"cpu": "2"})
    server.put("nodes", {**server.get("nodes", "c2"), "metadata": {
        **server.get("nodes", "c2")["metadata"], "labels": {GPU_PRODUCT: "H100"}}})
    mirror.sync_full(gateway, kube_shard.cluster)

    report = krm_sync.publish(gateway, kube_shard.cluster)

    node = server.get("nodes", "c2")
    assert report.held == ["c2"]
    assert "kai.scheduler/node-pool" not in node["metadata"]["labels"]
    assert node["metadata"]["labels"]["kai.scheduler/unschedulable"] == "true"
    assert node["spec"]["unschedulable"] is True
    # Its pod is still charged where it was admitted: the project's default-pool queue.
    statuses = {s["nodePoolName"]: s["queueStatus"] for s in
                server.get("projects", "research")["status"]["nodePoolsQuotaStatuses"]}
    assert statuses["default"]["allocated"]["cpu"] == 2000
    assert statuses["h100"]["allocated"]["cpu"] == 0

    server.remove("pods", "train", "kai-research")
    mirror.sync_full(gateway, kube_shard.cluster)
    report = krm_sync.publish(gateway, kube_shard.cluster)

    node = server.get("nodes", "c2")
    assert report.held == []
    assert node["metadata"]["labels"]["kai.scheduler/node-pool"] == "h100"
    assert "kai.scheduler/unschedulable" not in node["metadata"]["labels"]
    assert not node["spec"].get("unschedulable")
    assert [n["name"] for n in server.get("nodepools", "h100")["status"]["nodes"]] == ["c2", "h1"]


def test_the_publish_task_writes_the_org_after_a_change_on_kubernetes(
        server: RealServer, kube_shard: SchedulingShard, gateway: KubernetesGateway,
        django_capture_on_commit_callbacks: Any) -> None:
    from kaiweb.org.tasks import publish_task

    mirror.sync_full(gateway, kube_shard.cluster)
    with django_capture_on_commit_callbacks() as callbacks:
        services.create_project({"name": "solo", "queues": [{"pool": "default"}]})
    assert callbacks  # the publish is queued for when the change commits
    assert server.get("namespaces", "kai-solo") is None

    assert publish_task() == 0

    assert server.get("namespaces", "kai-solo")["metadata"]["labels"]["kai/project"] == "solo"
    assert server.get("queues", "solo")["metadata"]["labels"] == {"project": "solo", "kai.resources/project-id": str(
        Project.objects.get(name="solo").uid)}


def test_the_commands_import_from_publish_to_and_export_to_the_cluster(
        server: RealServer, kube_shard: SchedulingShard, gateway: KubernetesGateway) -> None:
    import io

    from django.core.management import call_command

    _put(server, NODEPOOL, DEPARTMENT)
    mirror.sync_full(gateway, kube_shard.cluster)
    out = io.StringIO()
    call_command("import_krm", stdout=out)
    assert "2 KRM object(s) imported" in out.getvalue()
    services.create_project({"name": "vision", "department": "engineering",
                             "queues": [{"pool": "h100", "gpu": {"deserved": 2, "limit": 4}}]})
    call_command("publish_org", stdout=io.StringIO())
    call_command("export_krm", "--apply", stdout=io.StringIO())

    assert server.get("queues", "vision-h100")["spec"]["parentQueue"] == "engineering-h100"
    assert server.get("namespaces", "kai-vision") is not None
    assert server.get("projects", "vision")["spec"]["queues"] == [
        {"name": "vision-h100", "nodepool": "h100", "priority": 100, "resources": {
            "gpu": {"deserved": 2, "limit": 4, "overQuotaWeight": 0},
            "cpu": {"deserved": 0, "limit": 0, "overQuotaWeight": 0},
            "memory": {"deserved": 0, "limit": 0, "overQuotaWeight": 0}}}]


def test_an_overridden_namespace_is_left_alone_and_a_missing_adopted_one_is_reported(
        server: RealServer, kube_shard: SchedulingShard, gateway: KubernetesGateway) -> None:
    server.put("namespaces", {"metadata": {"name": "kai-research",
                                           "labels": {"kai.resources/resource-manual-override": "true"}}})
    try:
        _overridden_and_adopted(server, kube_shard, gateway)
    finally:  # namespaces outlive a test here (`wipe` keeps them)
        server.put("namespaces", {"metadata": {"name": "kai-research"}})


def _overridden_and_adopted(server: RealServer, kube_shard: SchedulingShard, gateway: KubernetesGateway) -> None:
    adopting = {**PROJECT, "metadata": {"name": "adopter"}, "spec": {
        "namespace": "team-ns", "queues": [{"name": "adopter", "nodepool": "default"}]}}
    _put(server, *EXAMPLES, adopting)
    mirror.sync_full(gateway, kube_shard.cluster)
    krm_sync.import_from_cluster(gateway)

    report = krm_sync.publish(gateway, kube_shard.cluster)

    assert "kai/project" not in server.get("namespaces", "kai-research")["metadata"]["labels"]
    assert server.get("namespaces", "team-ns") is None  # an adopted namespace is not made
    assert report.problems == ["Project adopter: namespace team-ns does not exist; an adopted namespace must be "
                               "made first"]
    status = server.get("projects", "adopter")["status"]
    assert (status["phase"], status["namespace"]) == ("NotReady", "team-ns")


def test_a_pools_shard_reaches_the_cluster_with_the_save_and_goes_with_the_pool(
        server: RealServer, kube_shard: SchedulingShard, gateway: KubernetesGateway) -> None:
    server.put("schedulingshards", {"metadata": {"name": "legacy"}, "spec": {"partitionLabelValue": "legacy"}})
    mirror.sync_full(gateway, kube_shard.cluster)
    pool = services.create_node_pool({"name": "h100", "label_key": GPU_PRODUCT, "label_value": "H100"}).obj
    assert server.get("schedulingshards", "h100")["spec"] == {"partitionLabelValue": "h100"}

    services.update_node_pool(pool, {"gpu_placement": "spread"})
    assert server.get("schedulingshards", "h100")["spec"]["placementStrategy"] == {"gpu": "spread"}
    # The cycle reads the cluster's shards into the database: the pool's change is already there.
    mirror.sync_full(gateway, kube_shard.cluster)
    assert SchedulingShard.objects.get(name="h100").gpu_placement == "spread"

    services.update_node_pool(NodePool.objects.get(name="h100"), {"gpu_placement": "binpack"})
    assert "placementStrategy" not in server.get("schedulingshards", "h100")["spec"]

    services.delete_node_pool(NodePool.objects.get(name="h100"))
    assert server.get("schedulingshards", "h100") is None
    krm_sync.publish(gateway, kube_shard.cluster)
    assert server.get("schedulingshards", "legacy") is not None  # a shard the org did not write stays
