"""The invariants read from the cluster's own objects (`kaiweb.cluster.invariants`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kaiweb.cluster.invariants import violations

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def node(name: str, gpus: int = 8, pods: int = 110) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": {
        "nvidia.com/gpu": str(gpus), "cpu": "32", "memory": "256Gi", "pods": str(pods), "nvidia.com/mig-1g.10gb": "2"}}}


def pod(name: str, node_name: str | None, *, gpus: int = 1, phase: str = "Running", group: str | None = None,
        labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        bound_at: datetime = NOW - timedelta(minutes=5), resources: dict[str, str] | None = None,
        deleting: bool = False) -> dict[str, Any]:
    ann = dict(annotations or {})
    if group:
        ann["pod-group-name"] = group
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "labels": dict(labels or {}), "annotations": ann}
    if deleting:
        meta["deletionTimestamp"] = NOW.isoformat()
    limits = dict(resources) if resources is not None else ({"nvidia.com/gpu": str(gpus)} if gpus else {})
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": limits}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": meta, "spec": spec, "status": {"phase": phase, "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": bound_at.isoformat()}]}}


def group(name: str, min_member: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"minMember": min_member}}


def rules(found: list[Any]) -> list[tuple[str, str]]:
    return [(v.rule, v.subject) for v in found]


def test_a_node_holding_more_gpus_than_it_has_is_a_violation_and_finished_pods_do_not_count() -> None:
    pods = [pod(f"p{i}", "n1") for i in range(8)] + [pod("done", "n1", phase="Succeeded"),
                                                       pod("pending", None)]
    assert violations([node("n1")], pods, now=NOW) == []
    found = violations([node("n1")], [*pods, pod("extra", "n1")], now=NOW)
    assert rules(found) == [("capacity", "Node n1")]
    assert "requesting 9 nvidia.com/gpu, over its allocatable 8" in found[0].message


def test_cpu_memory_pod_count_and_mig_slices_are_checked_too() -> None:
    heavy = pod("cpu", "n1", resources={"cpu": "33"})
    mig = [pod(f"m{i}", "n1", resources={"nvidia.com/mig-1g.10gb": "1"}) for i in range(3)]
    crowd = [pod(f"c{i}", "n2", gpus=0) for i in range(3)]
    found = violations([node("n1"), node("n2", pods=2)], [heavy, *mig, *crowd], now=NOW)
    assert sorted(v.message.split(" requesting ")[1].split(",")[0] for v in found) == [
        "3 nvidia.com/mig-1g.10gb", "3 pods", "33 cpu"]


def test_a_shared_gpu_given_more_than_one_device_is_a_violation() -> None:
    def sharer(name: str, portion: str) -> dict[str, Any]:
        return pod(name, "n1", gpus=0, labels={"runai-gpu-group": "g1"}, annotations={"gpu-fraction": portion})

    assert violations([node("n1")], [sharer("a", "0.5"), sharer("b", "0.5")], now=NOW) == []
    found = violations([node("n1")], [sharer("a", "0.5"), sharer("b", "0.5"), sharer("c", "0.125")], now=NOW)
    assert rules(found) == [("shared-device", "Node n1")]
    assert "given 1.125 of one device" in found[0].message


def test_a_gang_left_below_its_minimum_is_a_violation_once_its_binds_have_settled() -> None:
    nodes = [node("n1")]
    whole = [pod(f"w{i}", "n1", group="whole") for i in range(3)]
    half = [pod("h0", "n1", group="half"), pod("h1", None, group="half", phase="Pending")]
    binding = [pod("b0", "n1", group="binding", bound_at=NOW - timedelta(seconds=2)),
               pod("b1", None, group="binding", phase="Pending")]
    pending = [pod(f"q{i}", None, group="pending", phase="Pending") for i in range(2)]
    groups = [group("whole", 3), group("half", 2), group("binding", 2), group("pending", 2)]
    found = violations(nodes, [*whole, *half, *binding, *pending], groups, now=NOW)
    assert rules(found) == [("gang", "PodGroup ns/half")]
    assert "1 bound pods, below its minMember 2" in found[0].message


def test_a_gang_whose_pods_finish_one_by_one_is_not_broken_but_one_that_lost_a_pod_is() -> None:
    ending = [pod("e0", "n1", group="ending", phase="Succeeded"), pod("e1", "n1", group="ending", phase="Succeeded"),
              pod("e2", "n1", group="ending")]
    failed = [pod("f0", "n1", group="failed", phase="Failed"), pod("f1", "n1", group="failed")]
    gone = [pod("g0", "n1", group="gone")]  # its sibling was deleted: one left of two
    groups = [group("ending", 3), group("failed", 2), group("gone", 2)]
    found = violations([node("n1")], [*ending, *failed, *gone], groups, now=NOW)
    assert rules(found) == [("gang", "PodGroup ns/failed"), ("gang", "PodGroup ns/gone")]


def test_a_pod_on_several_shared_gpus_counts_its_portion_on_each_and_must_hold_what_it_asks_for() -> None:
    def spread(name: str, groups: dict[str, str], devices: str = "2") -> dict[str, Any]:
        return pod(name, "n1", gpus=0, labels={f"runai-gpu-group/{g}": v for g, v in groups.items()},
                   annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": devices})

    def single(name: str, group: str) -> dict[str, Any]:
        return pod(name, "n1", gpus=0, labels={"runai-gpu-group": group}, annotations={"gpu-fraction": "0.5"})

    fine = [spread("a", {"g1": "g1", "g2": "g2"}), single("b", "g1"), single("c", "g2")]
    assert violations([node("n1")], fine, now=NOW) == []

    over = violations([node("n1")], [*fine, single("d", "g2")], now=NOW)
    assert [(v.rule, v.message.split(" is given ")[1]) for v in over] == [("shared-device", "1.5 of one device")]

    short = violations([node("n1")], [spread("e", {"g1": "g1"})], now=NOW)
    assert [v.message for v in short] == ["pod e asks for 2 shared GPUs and holds 1 (g1)"]

    both = {"runai-gpu-group": "g1", "runai-gpu-group/g1": "g1"}
    twice = violations([node("n1")], [pod("f", "n1", gpus=0, labels=both, annotations={"gpu-fraction": "0.5"})],
                       now=NOW)
    assert [v.subject for v in twice] == ["Pod ns/f"]
    assert "names one shared GPU twice" in twice[0].message


def claim(name: str, devices: list[str] | None, *, node_name: str | None = "n1", reserved: tuple[str, ...] = (),
          admin: bool = False) -> dict[str, Any]:
    """A ResourceClaim of one GPU request; ``devices``: what its allocation holds (None: not allocated)."""
    status: dict[str, Any] = {}
    if devices is not None:
        allocation: dict[str, Any] = {"devices": {"results": [
            {"request": "gpu", "driver": "gpu.example.com", "pool": "p", "device": d, "adminAccess": admin}
            for d in devices]}}
        if node_name:
            allocation["nodeSelector"] = {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
        status["allocation"] = allocation
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": u, "uid": u} for u in reserved]
    return {"metadata": {"name": name, "namespace": "ns"}, "status": status, "spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}


def claiming(name: str, node_name: str | None, claim_name: str) -> dict[str, Any]:
    p = pod(name, node_name, gpus=0)
    p["metadata"]["uid"] = name
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    return p


def test_a_dra_device_in_two_claims_is_a_violation_but_admin_access_holds_none() -> None:
    pods = [claiming("a", "n1", "ca"), claiming("b", "n1", "cb")]
    good = [claim("ca", ["gpu-0"], reserved=("a",)), claim("cb", ["gpu-1"], reserved=("b",)),
            claim("watch", ["gpu-0"], admin=True)]
    assert violations([node("n1")], pods, claims=good, now=NOW) == []

    twice = [claim("ca", ["gpu-0"], reserved=("a",)), claim("cb", ["gpu-0"], reserved=("b",))]
    found = violations([node("n1")], pods, claims=twice, now=NOW)
    assert rules(found) == [("dra-device", "Device gpu.example.com/p/gpu-0")]
    assert "allocated to 2 ResourceClaims: ns/ca, ns/cb" in found[0].message


def test_a_bound_pod_whose_claim_is_not_allocated_reserved_or_on_its_node_is_a_violation() -> None:
    pods = [claiming("a", "n1", "ca"), claiming("b", "n1", "cb"), claiming("c", "n1", "cc"),
            claiming("waiting", None, "cw"), claiming("done", "n1", "cd")]
    pods[-1]["status"]["phase"] = "Succeeded"
    claims = [claim("ca", None), claim("cb", ["gpu-1"], reserved=("someone-else",)),
              claim("cc", ["gpu-2"], node_name="n2", reserved=("c",)), claim("cw", None), claim("cd", None)]
    found = violations([node("n1"), node("n2")], pods, claims=claims, now=NOW)
    assert rules(found) == [("dra-device", "Pod ns/a"), ("dra-device", "Pod ns/b"), ("dra-device", "Pod ns/c")]
    assert [v.message.split("ResourceClaim ")[1] for v in found] == [
        "ca is not allocated", "cb is not reserved for it", "cc is allocated on node n2"]
