"""The org services on the database: pools and their shards and nodes, departments' and projects' queues."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from kaiweb.audit.models import AuditEntry
from kaiweb.cluster.models import SchedulingShard
from kaiweb.org import services
from kaiweb.org.choices import NODE_POOL_LABEL
from kaiweb.org.models import NodePool, OwnerQueue
from kaiweb.queues.models import Queue
from kaiweb.workloads.choices import PodState, WorkloadState
from tests.factories import ClusterFactory, NodeFactory, PodFactory, WorkloadFactory

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu.product"


@pytest.fixture
def cluster():
    cluster = ClusterFactory()
    SchedulingShard.objects.get_or_create(cluster=cluster, name="default")
    return cluster


@pytest.fixture
def pools(cluster):
    NodeFactory(cluster=cluster, name="h1", labels={GPU: "H100"})
    NodeFactory(cluster=cluster, name="a1", labels={GPU: "A100"})
    NodeFactory(cluster=cluster, name="c1", labels={})
    services.create_node_pool({"name": "h100", "label_key": GPU, "label_value": "H100", "gpu_placement": "spread"})
    services.create_node_pool({"name": "a100", "label_key": GPU, "label_value": "A100"})
    return {p.name: p for p in NodePool.objects.all()}


def test_a_pool_gets_its_own_shard_and_its_nodes_the_pool_label(cluster, pools):
    assert set(pools) == {"default", "h100", "a100"}
    h100 = pools["h100"]
    assert (h100.shard.partition_label_key, h100.shard.partition_label_value) == (NODE_POOL_LABEL, "h100")
    assert h100.shard.gpu_placement == "spread"
    assert pools["default"].shard.name == "default"
    assert pools["default"].shard.partition_label_value == ""
    labels = {n.name: n.labels for n in cluster.nodes.all()}
    assert labels["h1"][NODE_POOL_LABEL] == "h100"
    assert labels["a1"][NODE_POOL_LABEL] == "a100"
    assert NODE_POOL_LABEL not in labels["c1"]
    assert {p.name: p.phase for p in NodePool.objects.all()} == {"default": "Ready", "h100": "Ready", "a100": "Ready"}
    assert h100.shard.matches(labels["h1"])
    assert not h100.shard.matches(labels["a1"])


def test_pool_rules_are_refused_with_the_field_named(cluster, pools):
    with pytest.raises(ValidationError) as e:
        services.create_node_pool({"name": "dup", "label_key": GPU, "label_value": "H100"})
    assert "label_value" in e.value.message_dict
    with pytest.raises(ValidationError) as e:
        services.update_node_pool(pools["h100"], {"label_value": "H200"})
    assert "cannot change" in e.value.message_dict["label_key"][0]
    with pytest.raises(ValidationError) as e:
        services.create_node_pool({"name": "nolabel"})
    assert "label_key" in e.value.message_dict
    with pytest.raises(ValidationError) as e:
        services.delete_node_pool(pools["default"])
    assert "cannot be deleted" in e.value.message_dict["node_pool"][0]
    assert NodePool.objects.count() == 3


def test_a_department_and_two_projects_give_queues_per_pool_under_the_department(cluster, pools):
    services.create_department({"name": "research", "queues": [
        {"pool": "h100", "gpu": {"deserved": 4, "limit": 8, "over_quota_weight": 1}},
        {"pool": "default", "gpu": {"deserved": 0, "limit": -1}}]})
    change = services.create_project({"name": "vision", "department": "research", "default_node_pools": ["h100"],
                                      "queues": [{"pool": "h100", "gpu": {"deserved": 2, "limit": 6}},
                                                 {"pool": "a100", "gpu": {"deserved": 1, "limit": -1}}]})
    services.create_project({"name": "nlp", "department": "research",
                             "queues": [{"pool": "h100", "gpu": {"deserved": 2, "limit": 8}}]})
    queues = {q.name: q for q in Queue.objects.select_related("parent")}
    assert queues["vision-h100"].parent.name == "research-h100"
    assert queues["nlp-h100"].parent.name == "research-h100"
    assert queues["vision-a100"].parent is None
    assert (queues["vision-h100"].gpu_quota, queues["vision-h100"].gpu_limit) == (2, 6)
    assert queues["vision-h100"].labels[NODE_POOL_LABEL] == "h100"
    assert any("no queue in a100" in w for w in change.warnings)
    assert change.obj.namespace_name == "kai-vision"
    # Changing a number changes the queue in place; removing an entry deletes its queue.
    services.update_project(change.obj, {"queues": [{"pool": "h100", "gpu": {"deserved": 3, "limit": 6}}]})
    assert Queue.objects.get(name="vision-h100").gpu_quota == 3
    assert not Queue.objects.filter(name="vision-a100").exists()
    assert AuditEntry.objects.filter(object_type="org.project", object_repr="vision").count() == 2


def test_project_rules_are_refused_and_nothing_is_written(cluster, pools):
    before = Queue.objects.count()
    for data, field in [
        ({"name": "p", "queues": [{"pool": "nope"}]}, "queues"),
        ({"name": "p", "department": "nope", "queues": []}, "department"),
        ({"name": "p", "default_node_pools": ["h100"], "queues": []}, "default_node_pools"),
        ({"name": "p", "queues": [{"pool": "h100", "gpu": {"deserved": "32Gi"}}]}, "queues"),
        ({"name": "p", "queues": [{"pool": "h100", "gpu": {"deserved": 4, "limit": 2}}]}, "queues"),
        ({"name": "P_bad", "queues": []}, "name"),
        ({"name": "p", "queues": [], "colour": "red"}, "colour"),
    ]:
        with pytest.raises(ValidationError) as e:
            services.create_project(data)
        assert field in e.value.message_dict, (data, e.value.message_dict)
    assert Queue.objects.count() == before
    assert not OwnerQueue.objects.exists()


def test_a_project_with_running_work_is_not_deleted_and_a_department_with_projects_is_not(cluster, pools):
    dept = services.create_department({"name": "d", "queues": [{"pool": "h100", "gpu": {"limit": -1}}]}).obj
    project = services.create_project({"name": "p", "department": "d", "queues": [{"pool": "h100"}]}).obj
    WorkloadFactory(cluster=cluster, queue=Queue.objects.get(name="p-h100"), state=WorkloadState.RUNNING,
                    name="train")
    with pytest.raises(ValidationError) as e:
        services.delete_project(project)
    assert "team/train" in e.value.message_dict["project"][0]
    with pytest.raises(ValidationError) as e:
        services.delete_department(dept)
    assert "still has project(s) p" in e.value.message_dict["department"][0]
    with pytest.raises(ValidationError) as e:
        services.update_project(project, {"queues": []})
    assert "must end" in e.value.message_dict["queues"][0]
    assert Queue.objects.filter(name="p-h100").exists()


def test_a_relabelled_node_with_pods_of_its_old_pool_is_held_cordoned_until_they_end(cluster, pools):
    node = cluster.nodes.get(name="c1")
    pod = PodFactory(workload__cluster=cluster, node=node, state=PodState.RUNNING)
    node.labels = {GPU: "H100"}
    node.save()
    assert services.sync() == ["c1"]
    node.refresh_from_db()
    assert NODE_POOL_LABEL not in node.labels
    assert node.unschedulable
    pod.state = PodState.SUCCEEDED
    pod.save()
    assert services.sync() == []
    node.refresh_from_db()
    assert node.labels[NODE_POOL_LABEL] == "h100"
