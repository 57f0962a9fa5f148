"""What the engine is given of a pod's ResourceClaims (`kaiweb.scheduling.dra._task_with_claims`): its
claimed GPUs as its GPU request, counted once per shared claim and per device, and the nodes it may go to."""

from __future__ import annotations

from typing import Any

from kaiweb.cluster.backends.kubernetes import dra
from kaiweb.scheduling.dra import _task_with_claims
from scheduler_core import model as m
from tests.kaiweb.cluster.test_dra import GPU_CLASS, claim, exactly, gpu, slice_

NODES = (m.NodeSpec(name="n1", gpus=0), m.NodeSpec(name="n2", gpus=0))


def allocated(*devices: tuple[str, str], node: str = "n1") -> dict[str, Any]:
    return {"allocation": dra.allocation_status(
        tuple(dra.Allocated("gpu", "gpu.nvidia.com", pool, d) for pool, d in devices), node)}


def inventory(*claims: dict[str, Any]) -> dra.Inventory:
    return dra.Inventory.read([GPU_CLASS], [slice_("n1", [gpu("gpu-0"), gpu("gpu-1")]),
                                            slice_("n2", [gpu("gpu-0"), gpu("gpu-1")])], claims)


def given(inv: dra.Inventory, *claim_names: str, state: str = m.PENDING,
          counted: tuple[set[Any], set[Any]] | None = None) -> tuple[m.TaskSpec, tuple[str, ...], str]:
    claims, devices = counted if counted is not None else (set(), set())
    task = m.TaskSpec(name="t", state=state, request=m.TaskRequest(cpu_millis=1000))
    entries = [[f"e{i}", n, ""] for i, n in enumerate(claim_names)]
    return _task_with_claims(task, "default", entries, inv, NODES, claims, devices)


def nodes_of(task: m.TaskSpec) -> tuple[str, ...]:
    assert task.required_node_affinity is not None
    return task.required_node_affinity[0].match_fields[-1].values


def test_each_unallocated_claim_asks_for_its_own_devices() -> None:
    inv = inventory(claim("a", exactly(count=2)), claim("b", exactly(count=2)))
    counted: tuple[set[Any], set[Any]] = (set(), set())
    first, _, _ = given(inv, "a", counted=counted)
    second, _, _ = given(inv, "b", counted=counted)
    assert (first.request.gpus, second.request.gpus) == (2, 2)
    assert first.request.gpu_kind == m.GPU_WHOLE
    assert nodes_of(first) == ("n1", "n2")


def test_a_shared_claim_is_counted_at_its_first_consumer_and_pins_both_to_its_node() -> None:
    inv = inventory(claim("shared", exactly(count=2), status=allocated(("n2", "gpu-0"), ("n2", "gpu-1"), node="n2")))
    counted: tuple[set[Any], set[Any]] = (set(), set())
    first, _, _ = given(inv, "shared", counted=counted)
    second, _, _ = given(inv, "shared", counted=counted)
    assert (first.request.gpus, second.request.gpus) == (2, 0)
    assert nodes_of(first) == nodes_of(second) == ("n2",)


def test_a_device_held_by_two_claims_counts_once() -> None:
    inv = inventory(claim("x", exactly(), status=allocated(("n1", "gpu-0"))),
                    claim("y", exactly(count=2), status=allocated(("n1", "gpu-0"), ("n1", "gpu-1"))))
    counted: tuple[set[Any], set[Any]] = (set(), set())
    first, _, _ = given(inv, "x", state=m.RUNNING, counted=counted)
    second, _, _ = given(inv, "y", state=m.RUNNING, counted=counted)
    assert (first.request.gpus, second.request.gpus) == (1, 1)


def test_a_claim_that_cannot_be_had_offers_no_node_and_says_why() -> None:
    inv = inventory(claim("big", exactly(count=3)))
    task, _, problem = given(inv, "big")
    assert nodes_of(task) == ()
    assert "no node has the devices it asks for" in problem
    missing, _, why = given(inv, "gone")
    assert nodes_of(missing) == ()
    assert why == 'resourceclaim "default/gone" not found'


def test_a_template_whose_claim_is_not_made_yet_waits() -> None:
    task = m.TaskSpec(name="t", request=m.TaskRequest(cpu_millis=1000))
    pending, names, problem = _task_with_claims(task, "default", [["gpu", "", "one-gpu"]], inventory(), NODES,
                                                set(), set())
    assert names == ()
    assert nodes_of(pending) == ()
    assert "template default/one-gpu" in problem


def test_when_the_dra_objects_cannot_be_read_a_pod_with_claims_waits_and_says_why() -> None:
    task = m.TaskSpec(name="t", request=m.TaskRequest(cpu_millis=1000))
    waiting, _, problem = _task_with_claims(task, "default", [["gpu", "c", ""]], dra.Inventory({}, (), {}), NODES,
                                            set(), set(), "the cluster's DRA objects cannot be read: 403")
    assert nodes_of(waiting) == ()
    assert problem == "the cluster's DRA objects cannot be read: 403"
