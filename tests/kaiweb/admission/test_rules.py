"""The admission rules on plain objects: the pod mutations KAI's webhook makes, and the refusals."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kaiweb.admission import rules
from kaiweb.admission.rules import Denial, QueueFacts
from kaiweb.cluster.backends.kubernetes import gpu_sharing


def pod(annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
        containers: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "train-1", "namespace": "team"}
    if annotations is not None:
        meta["annotations"] = annotations
    if labels is not None:
        meta["labels"] = labels
    return {"metadata": meta, "spec": {"schedulerName": "kai-scheduler",
                                      "containers": containers or [{"name": "main", "image": "cuda"}], **spec}}


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container.get("env", [])}


def apply_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """Enough of RFC 6902 "add" for the patches `json_patch` makes."""
    out = copy.deepcopy(obj)
    for op in ops:
        assert op["op"] == "add"
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        at: Any = out
        for part in parents:
            at = at[int(part)] if isinstance(at, list) else at[part]
        at[last] = op["value"]
    return out


def mutated(p: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    result = rules.mutate_pod(p, namespace_queue=kwargs.pop("namespace_queue", None), random=lambda n: "abcdefg"[:n])
    assert not isinstance(result, Denial), result
    out, _ = result
    assert apply_patch(p, rules.json_patch(p, out)) == out  # the patch says exactly what changed
    return out


def test_a_fractional_pod_reads_its_share_and_device_from_the_config_map_the_binder_writes():
    p = pod({"gpu-fraction": "0.5"}, containers=[{"name": "main", "env": [{"name": "GPU_PORTION", "value": "1"}]}])
    out = mutated(p)
    prefix = out["metadata"]["annotations"][gpu_sharing.CONFIG_MAP_ANNOTATION]
    assert prefix == "train-1-abcdefg-shared-gpu"
    name = f"{prefix}-0"
    assert name == gpu_sharing.config_map_name(out) == gpu_sharing.sharing_config_map(
        out, portion=0.5, gpu_memory_mib=None, device_index="3")["metadata"]["name"]
    got = env(out["spec"]["containers"][0])
    assert got["GPU_PORTION"] == {"name": "GPU_PORTION", "valueFrom": {"configMapKeyRef": {"name": name, "key": "GPU_PORTION"}}}
    assert got["NVIDIA_VISIBLE_DEVICES"]["valueFrom"]["configMapKeyRef"] == {"name": name, "key": "NVIDIA_VISIBLE_DEVICES"}
    # a fraction pod's memory limit is there only when the binder knows it
    assert got["CUDA_DEVICE_MEMORY_LIMIT"]["valueFrom"]["configMapKeyRef"]["optional"] is True
    assert len(out["spec"]["containers"][0]["env"]) == 3  # the pod's own GPU_PORTION replaced


def test_a_gpu_memory_pod_must_get_its_memory_limit():
    out = mutated(pod({"gpu-memory": "4096"}))
    ref = env(out["spec"]["containers"][0])["CUDA_DEVICE_MEMORY_LIMIT"]["valueFrom"]["configMapKeyRef"]
    assert "optional" not in ref
    assert ref["key"] == "CUDA_DEVICE_MEMORY_LIMIT"


def test_the_fraction_container_is_the_one_the_annotation_names_and_an_init_container_gets_the_i_suffix():
    p = pod({"gpu-fraction": "0.25", "gpu-fraction-container-name": "prep",
             gpu_sharing.CONFIG_MAP_ANNOTATION: "fixed-shared-gpu"},
            containers=[{"name": "main"}], initContainers=[{"name": "prep"}])
    out = mutated(p)
    assert out["metadata"]["annotations"][gpu_sharing.CONFIG_MAP_ANNOTATION] == "fixed-shared-gpu"  # kept
    assert env(out["spec"]["initContainers"][0])["GPU_PORTION"]["valueFrom"]["configMapKeyRef"]["name"] == "fixed-shared-gpu-i0"
    assert "env" not in out["spec"]["containers"][0]
    assert gpu_sharing.config_map_name(out) == "fixed-shared-gpu-i0"


def test_a_fraction_container_that_does_not_exist_is_refused_naming_the_annotation():
    result = rules.mutate_pod(pod({"gpu-fraction": "0.5", "gpu-fraction-container-name": "nope"}), namespace_queue=None)
    assert isinstance(result, Denial)
    assert result.field == "metadata.annotations[gpu-fraction-container-name]"
    assert "'nope'" in result.message


def test_mutation_is_idempotent_as_reinvocation_needs():
    once = mutated(pod({"gpu-fraction": "0.5"}))
    assert rules.json_patch(once, mutated(once)) == []


def test_a_pod_asking_for_no_gpu_has_its_devices_hidden_in_every_container():
    p = pod(containers=[{"name": "a", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}, {"name": "b"}],
            initContainers=[{"name": "init"}])
    out = mutated(p)
    for kind, index in (("containers", 0), ("containers", 1), ("initContainers", 0)):
        assert env(out["spec"][kind][index])["NVIDIA_VISIBLE_DEVICES"] == {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}


@pytest.mark.parametrize("resources", [{"limits": {"nvidia.com/gpu": "1"}}, {"requests": {"nvidia.com/mig-1g.10gb": "1"}}])
def test_a_pod_with_whole_gpus_or_mig_keeps_its_devices(resources):
    p = pod(containers=[{"name": "a", "resources": resources}])
    assert mutated(p) == p


def test_the_queue_label_comes_from_the_namespace_only_when_the_pod_names_none():
    assert mutated(pod(), namespace_queue="team-a")["metadata"]["labels"] == {"kai.scheduler/queue": "team-a"}
    own = pod(labels={"kai.scheduler/queue": "mine"})
    assert mutated(own, namespace_queue="team-a")["metadata"]["labels"] == {"kai.scheduler/queue": "mine"}
    project = pod(labels={"project": "p"})  # KAI's project label comes before the namespace's
    assert "kai.scheduler/queue" not in mutated(project, namespace_queue="team-a")["metadata"]["labels"]


def test_label_keys_with_a_slash_are_escaped_in_the_patch():
    p = pod(labels={"app": "x"})
    ops = rules.json_patch(p, mutated(p, namespace_queue="q"))
    assert {"op": "add", "path": "/metadata/labels/kai.scheduler~1queue", "value": "q"} in ops


@pytest.mark.parametrize(("annotations", "containers", "field", "words"), [
    ({"gpu-fraction": "1"}, None, "metadata.annotations[gpu-fraction]", "smaller than 1"),
    ({"gpu-fraction": "half"}, None, "metadata.annotations[gpu-fraction]", "'half'"),
    ({"gpu-fraction": "0"}, None, "metadata.annotations[gpu-fraction]", "greater than 0"),
    ({"gpu-memory": "-5"}, None, "metadata.annotations[gpu-memory]", "whole number of MiB"),
    ({"gpu-memory": "100", "gpu-fraction": "0.5"}, None, "metadata.annotations[gpu-memory]", "gpu-fraction"),
    ({"gpu-fraction": "0.5"}, [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
     "metadata.annotations[gpu-fraction]", "spec.containers[0].resources.limits[nvidia.com/gpu]"),
    ({"gpu-fraction-num-devices": "2"}, None, "metadata.annotations[gpu-fraction-num-devices]", "need a gpu-fraction"),
    ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "0"}, None, "metadata.annotations[gpu-fraction-num-devices]",
     "greater than 0"),
    ({"mps": "true"}, None, "metadata.annotations[mps]", "MPS"),
])
def test_gpu_requests_are_checked_as_kai_checks_them(annotations, containers, field, words):
    denial = rules.gpu_request_denial(pod(annotations, containers=containers))
    assert denial is not None
    assert denial.field == field
    assert words in denial.message


def test_valid_gpu_requests_pass():
    assert rules.gpu_request_denial(pod({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"})) is None
    assert rules.gpu_request_denial(pod({"gpu-memory": "2048"})) is None
    assert rules.gpu_request_denial(pod(containers=[{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2"}}}])) is None


def test_queue_rules_name_the_field_and_the_rule():
    field = "metadata.labels[kai.scheduler/queue]"
    missing = rules.queue_denial("ghost", "ns", QueueFacts(exists=False), field=field)
    assert missing is not None
    assert missing.rule == "must name an existing queue"
    assert "'ghost'" in missing.message
    parent = rules.queue_denial("dept", "ns", QueueFacts(exists=True, children=("a", "b")), field=field)
    assert parent is not None
    assert parent.rule == "must name a leaf queue"
    assert "a, b" in parent.message
    unbound = rules.queue_denial("x", "ns", QueueFacts(exists=True, bound=("a", "b")), field=field)
    assert unbound is not None
    assert unbound.rule == "must name a queue bound to the namespace"
    assert "namespace 'ns' may use only the queues bound to it (a, b), not 'x'" in unbound.message
    assert rules.queue_denial("a", "ns", QueueFacts(exists=True, bound=("a",)), field=field) is None
    assert rules.queue_denial("a", "ns", QueueFacts(exists=True), field=field) is None  # no binding: any queue


@pytest.mark.parametrize(("groups", "field", "words"), [
    ([{"name": "a"}, {"name": "a"}], "spec.subGroups[1].name", "duplicate subgroup name 'a'"),
    ([{"name": "a", "parent": "z"}], "spec.subGroups[0].parent", "parent 'z' of 'a' was not found"),
    ([{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}], "spec.subGroups", "cycle"),
    ([{"name": "a", "parent": "a"}], "spec.subGroups", "cycle"),
    ([{"minMember": 1}], "spec.subGroups[0].name", "needs a name"),
])
def test_pod_group_subgroups_are_checked_as_kais_pod_group_webhook_does(groups, field, words):
    denial = rules.subgroup_denial({"spec": {"subGroups": groups}})
    assert denial is not None
    assert denial.field == field
    assert words in denial.message


def test_a_subgroup_tree_passes_and_a_long_chain_is_checked_in_linear_time():
    tree = [{"name": "root"}, {"name": "x", "parent": "root"}, {"name": "y", "parent": "x"}]
    assert rules.subgroup_denial({"spec": {"subGroups": tree}}) is None
    chain = [{"name": f"g{i}", **({"parent": f"g{i - 1}"} if i else {})} for i in range(20000)]
    assert rules.subgroup_denial({"spec": {"subGroups": chain}}) is None
