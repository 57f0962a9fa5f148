"""KRM's objects ↔ kaiweb's org: the strict reader naming the field, the writer, and import/export through
the org services on the database (the cluster's side is `tests/kube/test_krm_examples_real.py`)."""

from __future__ import annotations

import copy
import io
from datetime import timedelta

import pytest
import yaml
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from kaiweb.cluster.models import SchedulingShard
from kaiweb.org import krm, krm_sync, services
from kaiweb.org.models import Department, NodePool, Project
from kaiweb.queues.models import Queue
from tests.factories import ClusterFactory, NodeFactory
from tests.krm_examples import DEPARTMENT, EXAMPLES, GPU_PRODUCT, NODEPOOL, PROJECT


def test_the_examples_read_as_the_services_dicts():
    assert krm.read(NODEPOOL) == ("NodePool", {"name": "h100", "label_key": GPU_PRODUCT, "label_value": "H100"})
    kind, project = krm.read(PROJECT)
    assert kind == "Project"
    assert (project["department"], project["enforce_kai_scheduler"], project["default_node_pools"],
            project["namespace"]) == ("engineering", True, ["h100"], "")
    assert project["queues"][1] == {
        "pool": "h100", "name": "research-h100", "priority": 100,
        "gpu": {"deserved": 4, "limit": 8, "over_quota_weight": 2},
        "cpu": {"deserved": 16000, "limit": 32000, "over_quota_weight": 1},
        "memory": {"deserved": 64000, "limit": 128000, "over_quota_weight": 1}}


def test_a_pools_shard_config_reads_and_writes_back():
    obj = copy.deepcopy(NODEPOOL)
    obj["spec"]["schedulingShardConfig"] = {"placementStrategy": {"gpu": "spread"},
                                            "minRuntime": {"preemptMinRuntime": "5m", "reclaimMinRuntime": "1h30m"}}
    _, data = krm.read(obj)
    assert (data["gpu_placement"], data["preempt_min_runtime"], data["reclaim_min_runtime"]) == (
        "spread", timedelta(minutes=5), timedelta(minutes=90))
    assert krm.nodepool_object(data) == obj
    assert krm.shard_spec("h100", data) == {"partitionLabelValue": "h100", "placementStrategy": {"gpu": "spread"},
                                            "minRuntime": {"preemptMinRuntime": "5m", "reclaimMinRuntime": "1h30m"}}
    assert krm.shard_spec("default", {}) == {"partitionLabelValue": ""}


@pytest.mark.parametrize(("change", "path"), [
    (lambda o: o["spec"]["queues"][0]["resources"]["gpu"].update(limit="32Gi"), "spec.queues[0].resources.gpu.limit"),
    (lambda o: o["spec"]["queues"][1].pop("nodepool"), "spec.queues[1].nodepool"),
    (lambda o: o["spec"]["queues"][0].update(quota=3), "spec.queues[0].quota"),
    (lambda o: o["spec"].update(enforceKaiScheduler="yes"), "spec.enforceKaiScheduler"),
    (lambda o: o["spec"].update(parent=7), "spec.parent"),
    (lambda o: o["spec"]["queues"][0].update(priority=2**40), "spec.queues[0].priority"),
    (lambda o: o["metadata"].pop("name"), "metadata.name"),
    (lambda o: o.update(apiVersion="kai.resources/v1"), "apiVersion"),
    (lambda o: o.update(extra={}), "extra"),
    (lambda o: o["spec"].update(nodeSelector={}), "spec.nodeSelector"),
])
def test_a_bad_object_is_refused_with_the_field_named(change, path):
    obj = copy.deepcopy(PROJECT)
    change(obj)
    with pytest.raises(ValidationError) as e:
        krm.read(obj)
    assert path in e.value.message_dict


def test_an_unmodelled_shard_setting_is_refused_not_dropped():
    obj = copy.deepcopy(NODEPOOL)
    obj["spec"]["schedulingShardConfig"] = {"plugins": {"numa": {"enabled": True}}}
    with pytest.raises(ValidationError) as e:
        krm.read(obj)
    assert "not modelled" in e.value.message_dict["spec.schedulingShardConfig.plugins"][0]


def test_too_many_entries_are_refused_before_any_work():
    obj = copy.deepcopy(DEPARTMENT)
    obj["spec"]["queues"] = [{"nodepool": f"p{i}"} for i in range(krm.MAX_ENTRIES + 1)]
    with pytest.raises(ValidationError) as e:
        krm.read(obj)
    assert "spec.queues" in e.value.message_dict


def test_objects_are_applied_pools_first_whatever_their_order():
    kinds = [kind for kind, _ in krm.read_all([PROJECT, DEPARTMENT, NODEPOOL])]
    assert kinds == ["NodePool", "Department", "Project"]


# ------------------------------------------------------------------------------------------ database


@pytest.fixture
def cluster(db):
    cluster = ClusterFactory()
    SchedulingShard.objects.get_or_create(cluster=cluster, name="default")
    NodeFactory(cluster=cluster, name="h1", labels={GPU_PRODUCT: "H100"})
    NodeFactory(cluster=cluster, name="c1", labels={})
    return cluster


def test_importing_the_examples_gives_the_org_and_its_queues(cluster):
    messages = krm_sync.import_objects([PROJECT, DEPARTMENT, NODEPOOL])
    assert messages == ["NodePool h100: created", "Department engineering: created", "Project research: created"]
    research = Project.objects.get(name="research")
    assert (research.department.name, research.enforce_kai_scheduler, research.default_node_pools,
            research.namespace_name) == ("engineering", True, ["h100"], "kai-research")
    queues = {q.name: q for q in Queue.objects.all()}
    assert queues["research-h100"].parent.name == "engineering-h100"
    assert queues["research"].parent.name == "engineering"
    assert (queues["research-h100"].gpu_quota, queues["research-h100"].gpu_limit,
            queues["research-h100"].gpu_over_quota_weight) == (4, 8, 2)
    assert NodePool.objects.get(name="h100").shard.partition_label_value == "h100"


def test_a_project_keeps_the_uid_krm_gave_it(cluster):
    obj = copy.deepcopy(PROJECT)
    obj["metadata"]["uid"] = "7d6a3f7e-1b1e-4a55-9d7b-3f2a1c0e9b11"
    krm_sync.import_objects([NODEPOOL, DEPARTMENT, obj])
    assert Queue.objects.get(name="research-h100").labels["kai.resources/project-id"] == obj["metadata"]["uid"]


def test_a_bad_object_leaves_nothing_half_written(cluster):
    bad = copy.deepcopy(PROJECT)
    bad["spec"]["queues"][1]["nodepool"] = "a100"
    with pytest.raises(ValidationError) as e:
        krm_sync.import_objects([NODEPOOL, DEPARTMENT, bad])
    assert "node pool 'a100' does not exist" in e.value.message_dict["Project research: spec.queues"][0]
    assert not Department.objects.exists()
    assert not NodePool.objects.filter(name="h100").exists()


def test_export_then_import_gives_the_same_org(cluster):
    krm_sync.import_objects(EXAMPLES)
    services.update_node_pool(NodePool.objects.get(name="h100"), {"cpu_placement": "spread"})
    exported = krm_sync.export_objects()
    assert [(o["kind"], o["metadata"]["name"]) for o in exported] == [
        ("NodePool", "default"), ("NodePool", "h100"), ("Department", "engineering"), ("Project", "research")]
    services.delete_project(Project.objects.get(name="research"))
    services.delete_department(Department.objects.get(name="engineering"))
    services.delete_node_pool(NodePool.objects.get(name="h100"))
    assert not Queue.objects.exists()
    krm_sync.import_objects(exported)
    assert krm_sync.export_objects() == exported
    assert all(krm.read(o) for o in exported)  # what kaiweb writes, kaiweb reads


def test_the_commands_import_a_file_and_print_the_org_as_yaml(cluster, tmp_path):
    path = tmp_path / "org.yaml"
    path.write_text(yaml.safe_dump_all(EXAMPLES))
    out = io.StringIO()
    call_command("import_krm", str(path), stdout=out)
    assert "3 KRM object(s) imported" in out.getvalue()
    out = io.StringIO()
    call_command("export_krm", stdout=out)
    printed = list(yaml.safe_load_all(out.getvalue()))
    assert printed == krm_sync.export_objects()
    assert printed[-1]["spec"]["queues"][1]["name"] == "research-h100"


def test_the_import_command_names_the_field_and_imports_nothing(cluster, tmp_path):
    bad = copy.deepcopy(DEPARTMENT)
    bad["spec"]["queues"][1]["resources"]["gpu"]["limit"] = 4  # below deserved 8
    path = tmp_path / "org.yaml"
    path.write_text(yaml.safe_dump_all([NODEPOOL, bad]))
    err = io.StringIO()
    with pytest.raises(CommandError, match="nothing imported"):
        call_command("import_krm", str(path), stderr=err)
    assert "Department engineering: spec.queues: h100: gpu limit 4 is below deserved 8" in err.getvalue()
    assert not NodePool.objects.filter(name="h100").exists()


def test_the_publish_task_leaves_a_simulated_cluster_to_the_services(cluster):
    from kaiweb.org.tasks import publish_task

    krm_sync.import_objects(EXAMPLES)
    assert publish_task() == -1
