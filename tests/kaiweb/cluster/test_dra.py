"""DRA's reading, CEL matching and device choice (`kaiweb.cluster.backends.kubernetes.dra`), on plain objects."""

from __future__ import annotations

from typing import Any

from kaiweb.cluster.backends.kubernetes import dra
from kaiweb.cluster.backends.kubernetes.parsing import parse_pod
from kaiweb.cluster.backends.types import Unreadable
from scheduler_core import model as m

GPU_CLASS = {"metadata": {"name": "gpu.nvidia.com"},
             "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]}}


def gpu(name: str, *, product: str = "H100", kind: str = "gpu", memory: str = "80Gi", uuid: str = "",
        profile: str = "") -> dict[str, Any]:
    attributes: dict[str, Any] = {"productName": {"string": product}, "type": {"string": kind}}
    if uuid:
        attributes["uuid"] = {"string": uuid}
    if profile:
        attributes["profile"] = {"string": profile}
    return {"name": name, "attributes": attributes, "capacity": {"memory": {"value": memory}}}


def slice_(node: str | None, devices: list[dict[str, Any]], *, pool: str = "", generation: int = 1,
           **where: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": "gpu.nvidia.com", "pool": {"name": pool or node or "shared", "generation": generation,
                                                                 "resourceSliceCount": 1},
                            "devices": devices}
    spec.update({"nodeName": node} if node else where)
    return {"metadata": {"name": f"{pool or node}-slice"}, "spec": spec}


def claim(name: str, *requests: dict[str, Any], constraints: list[dict[str, Any]] | None = None,
          status: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                                         "resourceVersion": "7"},
                            "spec": {"devices": {"requests": list(requests), "constraints": constraints or []}}}
    if status:
        body["status"] = status
    return body


def exactly(name: str = "gpu", count: int = 1, selectors: tuple[str, ...] = (), **more: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count,
                                      "selectors": [{"cel": {"expression": e}} for e in selectors], **more}}


def node(name: str, **labels: str) -> m.NodeSpec:
    return m.NodeSpec(name=name, labels=dict(labels))


def inventory(slices: list[dict[str, Any]], claims: list[dict[str, Any]] = (),  # type: ignore[assignment]
              classes: list[dict[str, Any]] | None = None) -> dra.Inventory:
    return dra.Inventory.read(classes if classes is not None else [GPU_CLASS], slices, claims)


def chosen(inv: dra.Inventory, name: str, on: m.NodeSpec, held: set[dra.DeviceKey] | None = None) -> Any:
    result = inv.allocate(inv.claims[("default", name)], on, inv.held() if held is None else held)
    return result if isinstance(result, str) else [a.device for a in result]


def test_a_claim_gets_the_first_free_devices_of_its_node_that_match_its_class_and_selectors() -> None:
    inv = inventory([slice_("n1", [gpu("gpu-0", product="A100"), gpu("gpu-1"), gpu("gpu-2")])],
                    [claim("c", exactly(count=2, selectors=('device.attributes["gpu.nvidia.com"].productName == "H100"',)))])
    assert chosen(inv, "c", node("n1")) == ["gpu-1", "gpu-2"]
    assert "not enough free matching devices on node n2" in chosen(inv, "c", node("n2"))


def test_a_device_another_claim_holds_is_never_given_again() -> None:
    taken = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]}}}
    inv = inventory([slice_("n1", [gpu("gpu-0"), gpu("gpu-1")])],
                    [claim("old", exactly(), status=taken), claim("new", exactly(count=2)), claim("one", exactly())])
    assert inv.held() == {("gpu.nvidia.com", "n1", "gpu-0")}
    assert isinstance(chosen(inv, "new", node("n1")), str)
    assert chosen(inv, "one", node("n1")) == ["gpu-1"]


def test_admin_access_takes_held_devices_and_holds_none() -> None:
    taken = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0", "adminAccess": True}]}}}
    inv = inventory([slice_("n1", [gpu("gpu-0")])],
                    [claim("watch", exactly(adminAccess=True), status=taken), claim("user", exactly())])
    assert inv.held() == set()
    assert chosen(inv, "user", node("n1")) == ["gpu-0"]
    assert chosen(inv, "watch", node("n1"), {("gpu.nvidia.com", "n1", "gpu-0")}) == ["gpu-0"]


def test_all_mode_takes_every_matching_device_and_fails_when_one_is_held() -> None:
    inv = inventory([slice_("n1", [gpu("gpu-0"), gpu("gpu-1"), gpu("mig-0", kind="mig")])],
                    [claim("all", {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All",
                                                             "selectors": [{"cel": {"expression":
                                                                 'device.attributes["gpu.nvidia.com"].type == "gpu"'}}]}})])
    assert chosen(inv, "all", node("n1")) == ["gpu-0", "gpu-1"]
    assert isinstance(chosen(inv, "all", node("n1"), {("gpu.nvidia.com", "n1", "gpu-1")}), str)


def test_match_attribute_makes_the_requests_agree() -> None:
    devices = [gpu("gpu-0", product="A100"), gpu("gpu-1", product="H100"), gpu("gpu-2", product="H100")]
    inv = inventory([slice_("n1", devices)],
                    [claim("pair", exactly("a"), exactly("b"),
                           constraints=[{"matchAttribute": "gpu.nvidia.com/productName"}])])
    # A100 first by value order, but only one A100: the H100 pair is the first complete choice
    assert chosen(inv, "pair", node("n1")) == ["gpu-1", "gpu-2"]


def test_mig_devices_are_chosen_by_their_attributes() -> None:
    inv = inventory([slice_("n1", [gpu("gpu-0"), gpu("mig-1g", kind="mig", profile="1g.10gb"),
                                   gpu("mig-3g", kind="mig", profile="3g.40gb")])],
                    [claim("mig", exactly(selectors=('device.attributes["gpu.nvidia.com"].type == "mig"',
                                                     'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"')))])
    assert chosen(inv, "mig", node("n1")) == ["mig-3g"]


def test_capacity_compares_as_a_quantity() -> None:
    inv = inventory([slice_("n1", [gpu("small", memory="40Gi"), gpu("big", memory="80Gi")])],
                    [claim("c", exactly(selectors=(
                        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("64Gi")) >= 0',)))])
    assert chosen(inv, "c", node("n1")) == ["big"]


def test_a_selector_that_does_not_compile_or_a_missing_class_is_said_never_raised() -> None:
    inv = inventory([slice_("n1", [gpu("gpu-0")])],
                    [claim("bad", exactly(selectors=("device.driver ==",))),
                     claim("nocls", {"name": "x", "exactly": {"deviceClassName": "nope"}})])
    assert "does not compile" in chosen(inv, "bad", node("n1"))
    assert 'deviceclass "nope" not found' in chosen(inv, "nocls", node("n1"))


def test_a_selector_failing_on_a_device_leaves_that_device_out() -> None:
    inv = inventory([slice_("n1", [{"name": "bare"}, gpu("gpu-1")])],
                    [claim("c", exactly(selectors=('device.attributes["gpu.nvidia.com"].productName == "H100"',)))])
    assert chosen(inv, "c", node("n1")) == ["gpu-1"]


def test_a_malformed_claim_is_a_problem_not_an_exception() -> None:
    bad = dra.read_claim({"metadata": {"name": "c", "namespace": "ns"}, "spec": {"devices": {"requests": [
        {"name": "r", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 0}}]}}})
    assert "count must be a whole number" in bad.problem
    empty = dra.read_claim({"metadata": {"name": "c", "namespace": "ns"}, "spec": "nonsense"})
    assert empty.problem


def test_node_selection_by_node_name_selector_and_all_nodes() -> None:
    inv = inventory([slice_("n1", [gpu("local")]),
                     slice_(None, [gpu("rack")], pool="rack-a",
                            nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [
                                {"key": "rack", "operator": "In", "values": ["a"]}]}]}),
                     slice_(None, [gpu("any")], pool="fabric", allNodes=True)])
    assert [d.name for d in inv.on_node(node("n1", rack="a"))] == ["any", "local", "rack"]
    assert [d.name for d in inv.on_node(node("n2", rack="b"))] == ["any"]
    assert inv.gpus_on(node("n1", rack="a")) == 3


def test_only_a_pools_newest_generation_counts() -> None:
    inv = inventory([slice_("n1", [gpu("old")], generation=1), slice_("n1", [gpu("new")], generation=2)])
    assert [d.name for d in inv.devices] == ["new"]


def test_an_allocation_pins_its_consumers_to_its_node() -> None:
    status = {"allocation": dra.allocation_status(
        (dra.Allocated("gpu", "gpu.nvidia.com", "n1", "gpu-0"),), "n1"),
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}
    read = dra.read_claim(claim("c", exactly(), status=status))
    assert read.node == "n1"
    assert read.reserved_for == (("p", "u"),)
    assert read.allocated == (dra.Allocated("gpu", "gpu.nvidia.com", "n1", "gpu-0"),)


def test_a_pod_s_claims_are_read_with_the_claim_made_from_its_template() -> None:
    raw = {"metadata": {"name": "p", "namespace": "default", "uid": "u", "labels": {"kai.scheduler/queue": "q"}},
           "spec": {"containers": [{"name": "c"}],
                    "resourceClaims": [{"name": "shared", "resourceClaimName": "c1"},
                                       {"name": "own", "resourceClaimTemplateName": "t1"}]},
           "status": {"resourceClaimStatuses": [{"name": "own", "resourceClaimName": "p-own-abcde"}]}}
    pod = parse_pod(raw)
    assert not isinstance(pod, Unreadable)
    assert pod.resource_claims == (("shared", "c1", ""), ("own", "p-own-abcde", "t1"))
    both = parse_pod({**raw, "spec": {**raw["spec"], "resourceClaims": [
        {"name": "x", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}]}})
    assert isinstance(both, Unreadable)
    assert both.field == "spec.resourceClaims[0]"


def test_the_choice_under_many_constraints_is_bounded() -> None:
    devices = [gpu(f"gpu-{i}", uuid=f"u{i}") for i in range(12)]
    requests = [exactly(f"r{i}") for i in range(8)]
    constraints = [{"requests": [f"r{i}"], "matchAttribute": "gpu.nvidia.com/uuid"} for i in range(8)]
    inv = inventory([slice_("n1", devices)], [claim("many", *requests, constraints=constraints)])
    # each request alone on its own uuid: the first choice fits; the work stays within MAX_CHOICES
    assert len(chosen(inv, "many", node("n1"))) == 8
    impossible = [{"matchAttribute": "gpu.nvidia.com/uuid"}] * 8  # eight requests on one device: never
    inv = inventory([slice_("n1", devices)], [claim("never", *requests, constraints=impossible)])
    assert isinstance(chosen(inv, "never", node("n1")), str)


def test_a_node_s_devices_say_which_claim_holds_each_and_for_which_pods() -> None:
    def allocated(device: str, *, admin: bool = False, pods: tuple[str, ...] = ()) -> dict[str, Any]:
        return {"allocation": dra.allocation_status((dra.Allocated("gpu", "gpu.nvidia.com", "n1", device, admin),), "n1"),
                "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods]}

    inv = inventory([slice_("n1", [gpu("gpu-0"), gpu("gpu-1"), gpu("gpu-2")]), slice_("n2", [gpu("gpu-0")])],
                    [claim("a-watch", exactly(adminAccess=True), status=allocated("gpu-0", admin=True)),
                     claim("train", exactly(), status=allocated("gpu-0", pods=("w-0", "w-1"))),
                     claim("z-watch", exactly(adminAccess=True), status=allocated("gpu-1", admin=True))])

    rows = inv.node_devices(node("n1"))

    assert [(r["device"], r["claim"], r["pods"], r["admin_access"]) for r in rows] == [
        ("gpu-0", "default/train", ["default/w-0", "default/w-1"], False),  # the holder, not the admin claim
        ("gpu-1", "default/z-watch", [], True),
        ("gpu-2", "", [], False)]
    assert all(r["gpu"] and (r["driver"], r["pool"]) == ("gpu.nvidia.com", "n1") for r in rows)
    assert [r["device"] for r in inv.node_devices(node("n2"))] == ["gpu-0"]
