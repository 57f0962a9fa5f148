"""Shared GPUs: the reservation pod that holds a device, the sharer's ConfigMap, and clean-up."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaiweb.cluster.backends.kubernetes import gpu_sharing as gs


def test_a_reservation_pod_holds_one_gpu_of_its_node_for_its_group_and_is_not_ours_to_schedule():
    pod = gs.reservation_pod(namespace="kai-resource-reservation", node="node-1", group="g1", image="pause:1",
                             tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
    assert pod["spec"]["nodeName"] == "node-1"
    assert "schedulerName" not in pod["spec"]  # the mirror lists only pods of our scheduler
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert pod["metadata"]["labels"] == {"app": gs.RESERVATION_APP, "runai-gpu-group": "g1"}
    assert pod["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]


def test_reservation_names_are_stable_per_node_and_group_and_valid():
    a = gs.reservation_name("node-1", "g1")
    assert a == gs.reservation_name("node-1", "g1")
    assert a != gs.reservation_name("node-1", "g2")
    assert a != gs.reservation_name("node-2", "g1")
    assert len(gs.reservation_name("n" * 200, "g")) <= 63


def test_the_config_map_is_named_as_kais_webhook_names_it_and_owned_by_the_pod():
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1",
                        "annotations": {gs.CONFIG_MAP_ANNOTATION: "train-abc1234-shared-gpu"}}}
    cm = gs.sharing_config_map(pod, portion=0.5, gpu_memory_mib=None, device_index="3")
    assert cm["metadata"]["name"] == "train-abc1234-shared-gpu-0"
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert cm["data"] == {"GPU_PORTION": "0.5", "NVIDIA_VISIBLE_DEVICES": "3"}


def test_a_gpu_memory_sharer_gets_its_memory_limit_and_a_name_without_the_annotation():
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1",
                        "ownerReferences": [{"name": "my-job", "uid": "o"}]}}
    cm = gs.sharing_config_map(pod, portion=0.25, gpu_memory_mib=10240, device_index=None)
    assert cm["data"] == {"GPU_PORTION": "0.25", "CUDA_DEVICE_MEMORY_LIMIT": "10240M"}
    assert cm["metadata"]["name"].startswith("my-job-")
    assert cm["metadata"]["name"].endswith("-shared-gpu-0")


def test_a_reservation_is_released_when_its_last_sharer_has_left():
    def sharer(node, group, **extra):
        return {"metadata": {"labels": {"runai-gpu-group": group}, **extra.get("meta", {})},
                "spec": {"nodeName": node}, "status": {"phase": extra.get("phase", "Running")}}

    holders = [{"metadata": {"name": name, "labels": {"runai-gpu-group": group}}, "spec": {"nodeName": node}}
               for name, node, group in (("r1", "n1", "g1"), ("r2", "n1", "g2"), ("r3", "n2", "g3"))]
    sharers = [sharer("n1", "g1"), sharer("n1", "g2", phase="Succeeded"),
               sharer("n2", "g3", meta={"deletionTimestamp": "2026-01-01T00:00:00Z"})]
    assert gs.orphaned_reservations(holders, sharers) == ["r2", "r3"]


_NAMES = st.from_regex(gs.GROUP_NAME, fullmatch=True)


@given(st.lists(_NAMES, min_size=1, max_size=8, unique=True))
def test_the_labels_of_a_pods_groups_read_back_as_the_same_groups(groups: list[str]) -> None:
    labels = gs.group_labels(groups)

    assert sorted(gs.groups_of(labels)) == sorted(groups)
    assert all(gs.is_group_label(k) for k in labels)
    # What KAI writes: the plain label for one device; one label per device, and no plain one, for several.
    assert ("runai-gpu-group" in labels) == (len(groups) == 1)
    assert len(labels) == len(groups)


def test_labels_for_several_devices_are_keyed_by_group_as_kais_binder_writes_them() -> None:
    assert gs.group_labels(["g1"]) == {"runai-gpu-group": "g1"}
    assert gs.group_labels(["g1", "g2"]) == {"runai-gpu-group/g1": "g1", "runai-gpu-group/g2": "g2"}
    assert gs.groups_of({"runai-gpu-group/g2": "g2", "runai-gpu-group/g1": "g1", "app": "x"}) == ("g1", "g2")
    assert gs.groups_of({"runai-gpu-group": "g1"}) == ("g1",)
    assert gs.groups_of({}) == ()


@pytest.mark.parametrize(("groups", "rule"), [
    ([], "at least one"),
    (["g1", "g1"], "one device twice"),
    (["g1,g2"], "not a label value"),
    (["g" * 64], "not a label value"),
])
def test_groups_that_cannot_be_labels_or_name_a_device_twice_are_refused(groups: list[str], rule: str) -> None:
    with pytest.raises(ValueError, match=rule):
        gs.group_labels(groups)


def test_a_reservation_stays_while_a_sharer_on_several_devices_holds_it() -> None:
    holders = [{"metadata": {"name": name, "labels": {"runai-gpu-group": group}}, "spec": {"nodeName": "n1"}}
               for name, group in (("r1", "g1"), ("r2", "g2"), ("r3", "g3"))]
    spread = {"metadata": {"labels": gs.group_labels(["g1", "g2"])}, "spec": {"nodeName": "n1"},
              "status": {"phase": "Running"}}

    assert gs.orphaned_reservations(holders, [spread]) == ["r3"]
