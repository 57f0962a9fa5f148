"""Topology level aliases on a real kube-apiserver, through the product's Kubernetes path (objects
applied with the official client, then pod-grouper, mirror, cycle, binder and status writer; see
``test_kai_path_regressions``): a PodGroup whose topology constraint names a level by its alias is
placed within one domain of that level, and one naming a level the Topology does not have stays
pending, saying why on its pods and in its ``UnschedulableOnNodePool`` condition."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kube.test_kai_path_regressions import (  # noqa: F401 - fixtures
    base,
    bound,
    kwok_cluster,
    node,
    play,
    pod,
    pods_of,
    unschedulable_message,
)

pytestmark = [pytest.mark.kube, pytest.mark.django_db(transaction=True)]

ZONE, RACK = "example.com/zone", "example.com/rack"
# Rack r1 has 5 GPUs (node-0 only 1), rack r2 has 8. Packing alone would start a gang of 3 × 2 GPUs
# on node-1 and put its third pod in r2; only the rack constraint keeps all three in r2.
RACK_OF = {"node-0": "r1", "node-1": "r1", "node-2": "r2", "node-3": "r2"}


def _nodes() -> list[dict[str, Any]]:
    return [node(name, gpus=1 if name == "node-0" else 4, labels={ZONE: "z1", RACK: rack})
            for name, rack in RACK_OF.items()]


def _topology() -> dict[str, Any]:
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "dc"},
            "spec": {"levels": [{"nodeLabel": ZONE, "alias": "zone"}, {"nodeLabel": RACK, "alias": "rack"},
                                {"nodeLabel": "kubernetes.io/hostname"}]}}


def _gang(name: str, constraint: dict[str, str], pods: int = 3) -> list[dict[str, Any]]:
    group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
             "metadata": {"name": name, "namespace": "team"},
             "spec": {"queue": "q", "minMember": pods, "topologyConstraint": {"topology": "dc", **constraint}}}
    members = [pod(f"{name}-{i}", gpus=2, annotations={"pod-group-name": name}, labels={"pod-group-name": name})
               for i in range(pods)]
    return [group, *members]


def test_a_pod_group_naming_a_level_by_its_alias_is_placed_within_one_domain(play):  # noqa: F811
    obs = play([{"apply": [*base(*_nodes()), _topology(), *_gang("train", {"requiredTopologyLevel": "rack"})]},
                {"cycles": 2}])

    assert bound(obs) == {"train-0", "train-1", "train-2"}
    assert {RACK_OF[p["nodeName"]] for p in pods_of(obs).values()} == {"r2"}


def test_a_pod_group_naming_an_unknown_level_stays_pending_and_says_why(play):  # noqa: F811
    gang = _gang("train", {"requiredTopologyLevel": "rakc"}, pods=1)
    obs = play([{"apply": [*base(*_nodes()), _topology(), *gang]}, {"cycles": 2}])

    assert bound(obs) == set()
    (group,) = [g for g in obs["podgroups"] if g["metadata"]["name"] == "train"]
    (condition,) = group["status"]["schedulingConditions"]
    assert condition["type"] == "UnschedulableOnNodePool"
    message = condition["message"]
    assert "'rakc' is its required topology level" in message
    assert f"{ZONE} (alias zone), {RACK} (alias rack), kubernetes.io/hostname" in message
    assert "'rakc'" in unschedulable_message(pods_of(obs)["train-0"])
