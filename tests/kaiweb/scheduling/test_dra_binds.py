"""The claims written before the binds (`kaiweb.scheduling.dra.allocate`, `release_failed`), against claims
kept in memory as the API server keeps them (a write guarded by the resourceVersion it read)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kaiweb.cluster.backends.kubernetes import dra
from kaiweb.cluster.errors import ClusterRejected
from kaiweb.scheduling.dra import Plan, PodClaims, allocate, release_failed
from tests.kaiweb.cluster.test_dra import GPU_CLASS, claim, exactly, gpu, slice_

pytestmark = pytest.mark.django_db  # a node's labels are read from the mirror


class Claims:
    """ResourceClaims as the API server keeps them: each write checks and moves the resourceVersion."""

    def __init__(self, *claims: dict[str, Any]) -> None:
        self.items = {c["metadata"]["name"]: copy.deepcopy(c) for c in claims}
        self.version = 10

    def list_resource_claims_raw(self) -> list[dict[str, Any]]:
        return copy.deepcopy(list(self.items.values()))

    def _write(self, c: dra.Claim, change: Any) -> dict[str, Any]:
        current = self.items[c.name]
        if current["metadata"]["resourceVersion"] != c.resource_version:
            raise ClusterRejected("write", "409 Conflict", status=409)
        change(current)
        self.version += 1
        current["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(current)

    def write_claim_status(self, c: dra.Claim, status: dict[str, Any]) -> dict[str, Any]:
        return self._write(c, lambda current: current.__setitem__("status", copy.deepcopy(status)))

    def write_claim_finalizers(self, c: dra.Claim, finalizers: list[str]) -> dict[str, Any]:
        return self._write(c, lambda current: current["metadata"].__setitem__("finalizers", list(finalizers)))

    def allocated(self, name: str) -> list[str]:
        status = self.items[name].get("status") or {}
        return [r["device"] for r in ((status.get("allocation") or {}).get("devices") or {}).get("results", [])]

    def reserved(self, name: str) -> list[str]:
        return [c["name"] for c in (self.items[name].get("status") or {}).get("reservedFor") or []]


def plan_for(claims: Claims, pods: dict[str, tuple[str, ...]], job: str = "default/gang") -> Plan:
    inventory = dra.Inventory.read([GPU_CLASS], [slice_("n1", [gpu("gpu-0"), gpu("gpu-1")])],
                                   claims.list_resource_claims_raw())
    return Plan(inventory, {uid: PodClaims(uid, "default", uid, job, names) for uid, names in pods.items()})


def test_a_bound_pod_s_claim_is_allocated_protected_and_reserved() -> None:
    claims = Claims(claim("a", exactly()))
    plan = plan_for(claims, {"p1": ("a",)})

    assert allocate(claims, plan, [("p1", "default/gang", "n1")]) == {}

    assert claims.allocated("a") == ["gpu-0"]
    assert claims.reserved("a") == ["p1"]
    assert claims.items["a"]["metadata"]["finalizers"] == [dra.FINALIZER]


def test_a_gang_whose_second_claim_cannot_be_had_is_not_bound_and_the_first_claim_is_taken_back() -> None:
    taken = {"allocation": dra.allocation_status((dra.Allocated("gpu", "gpu.nvidia.com", "n1", "gpu-1"),), "n1")}
    claims = Claims(claim("a", exactly()), claim("b", exactly()), claim("other", exactly(), status=taken))
    plan = plan_for(claims, {"p1": ("a",), "p2": ("b",)})

    refused = allocate(claims, plan, [("p1", "default/gang", "n1"), ("p2", "default/gang", "n1")])

    assert set(refused) == {"p1", "p2"}
    assert "not enough free matching devices" in str(refused["p2"])
    assert claims.allocated("a") == []
    assert claims.reserved("a") == []
    assert claims.items["a"]["metadata"].get("finalizers") == []
    assert claims.allocated("other") == ["gpu-1"]  # never given twice


def test_a_claim_allocated_elsewhere_refuses_a_pod_placed_on_another_node() -> None:
    there = {"allocation": dra.allocation_status((dra.Allocated("gpu", "gpu.nvidia.com", "n1", "gpu-0"),), "n1"),
             "reservedFor": [{"resource": "pods", "name": "p0", "uid": "p0"}]}
    claims = Claims(claim("shared", exactly(), status=there))
    plan = plan_for(claims, {"p1": ("shared",)})

    refused = allocate(claims, plan, [("p1", "default/one", "n2")])

    assert "allocated on node n1, not n2" in str(refused["p1"])
    assert claims.reserved("shared") == ["p0"]


def test_a_failed_bind_gives_its_claims_back_and_keeps_a_sharer_s() -> None:
    there = {"allocation": dra.allocation_status((dra.Allocated("gpu", "gpu.nvidia.com", "n1", "gpu-0"),), "n1"),
             "reservedFor": [{"resource": "pods", "name": "p0", "uid": "p0"}]}
    claims = Claims(claim("mine", exactly()), claim("shared", exactly(), status=there))
    plan = plan_for(claims, {"p1": ("mine", "shared")})
    assert allocate(claims, plan, [("p1", "default/one", "n1")]) == {}
    assert claims.reserved("shared") == ["p0", "p1"]

    release_failed(claims, plan, ["p1"])

    assert claims.allocated("mine") == []
    assert claims.reserved("mine") == []
    assert claims.allocated("shared") == ["gpu-0"]
    assert claims.reserved("shared") == ["p0"]
