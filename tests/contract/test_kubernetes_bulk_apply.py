"""The Kubernetes gateway's bulk path (`KubernetesGateway.apply`): a cycle's evictions, then its binds,
on concurrent API calls, with the same results as `evict` and `bind` called one after another.

Tests taking ``apiserver`` run on the fake API server and on a real kube-apiserver (marked ``kube``).
"""

from __future__ import annotations

import threading
from typing import Any, cast

import pytest

from kaiweb.cluster.backends.kubernetes import transport
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.backends.types import ActionOutcome, ActionResult, BindAction, EvictAction
from kaiweb.cluster.errors import Capability, ClusterRejected
from tests.fakes.kube_apiserver import FakeKubeApiServer, kube_apiserver  # noqa: F401 - fixture
from tests.kube.fixtures import _real_server, apiserver, kube_cluster  # noqa: F401 - fixtures
from tests.kube.servers import FakeServer, RealServer

Server = FakeServer | RealServer


def _gateway(server: Any, concurrency: int) -> KubernetesGateway:
    return KubernetesGateway(server.api_client, request_timeout=5.0, max_attempts=4, backoff_base=0.01,
                             backoff_max=0.05, sleep=lambda _s: None, bind_concurrency=concurrency)


def _scene(server: Server, ns: str) -> tuple[list[BindAction], list[EvictAction]]:
    """The same actions in namespace ``ns``: pods to bind, one already on its node, one bound
    elsewhere, one missing, one replaced by a newer incarnation, a shared-GPU pod; a victim to
    evict and one that is gone."""
    binds = []
    for i in range(8):
        uid = server.add_pod(f"p{i}", namespace=ns)["metadata"]["uid"]
        binds.append(BindAction(ns, f"p{i}", uid, f"gpu-{i % 3}", idempotency_key=f"c1/bind/{ns}/p{i}"))
    uid = server.add_pod("here", namespace=ns, node="gpu-1")["metadata"]["uid"]
    binds.append(BindAction(ns, "here", uid, "gpu-1"))
    uid = server.add_pod("elsewhere", namespace=ns, node="gpu-2")["metadata"]["uid"]
    binds.append(BindAction(ns, "elsewhere", uid, "gpu-1"))
    binds.append(BindAction(ns, "ghost", "uid-of-a-pod-that-never-was", "gpu-1"))
    server.add_pod("replaced", namespace=ns)
    binds.append(BindAction(ns, "replaced", "uid-of-an-older-pod", "gpu-1"))
    uid = server.add_pod("frac", namespace=ns, annotations={"gpu-fraction": "0.5"})["metadata"]["uid"]
    binds.append(BindAction(ns, "frac", uid, "gpu-0", gpu_groups=(f"grp-{ns}",), gpu_portion=0.5))
    victim = server.add_pod("victim", namespace=ns, node="gpu-0", phase="Running")["metadata"]["uid"]
    evicts = [EvictAction(ns, "victim", victim, grace_seconds=0, reason="Preempted", message="preempted by a test"),
              EvictAction(ns, "never-was", "uid-x", grace_seconds=0)]
    return binds, evicts


def _shape(results: list[ActionResult | Exception], ns: str) -> list[tuple[str, Any]]:
    return [(r.outcome, r.message.replace(ns, "NS")) if isinstance(r, ActionResult)
            else (type(r).__name__, getattr(r, "status", None)) for r in results]


def _serially(gateway: KubernetesGateway, binds: list[BindAction],
              evicts: list[EvictAction]) -> list[ActionResult | Exception]:
    """What the cycle's serial path does: each action, evictions first, its error as its result."""
    results: list[ActionResult | Exception] = []
    actions: list[EvictAction | BindAction] = [*evicts, *binds]
    for action in actions:
        try:
            results.append(gateway.evict(action) if isinstance(action, EvictAction) else gateway.bind(action))
        except Exception as exc:  # noqa: BLE001 - as apply_decisions records it
            results.append(exc)
    return results


def _cluster_state(server: Server, ns: str) -> dict[str, Any]:
    pods = {p["metadata"]["name"]: (p["spec"].get("nodeName"),
                                    {k: v.replace(ns, "NS") for k, v in (p["metadata"].get("annotations") or {}).items()},
                                    {k: v.replace(ns, "NS") for k, v in (p["metadata"].get("labels") or {}).items()})
            for p in server.list("pods", ns)}
    events = sorted((e["reason"], e["involvedObject"]["name"]) for e in server.list("events", ns))
    return {"pods": pods, "events": events}


def test_apply_gives_what_binding_one_by_one_gives(apiserver: Server) -> None:  # noqa: F811
    serial_gateway, bulk_gateway = _gateway(apiserver, 1), _gateway(apiserver, 8)
    assert Capability.BULK_APPLY in bulk_gateway.capabilities
    serial_binds, serial_evicts = _scene(apiserver, "serial")
    bulk_binds, bulk_evicts = _scene(apiserver, "bulk")

    serial = _serially(serial_gateway, serial_binds, serial_evicts)
    bulk = bulk_gateway.apply(binds=bulk_binds, evicts=bulk_evicts)

    assert _shape(bulk, "bulk") == _shape(serial, "serial")
    # The expected answers, evictions first, in the order given.
    assert [r.outcome if isinstance(r, ActionResult) else getattr(r, "status", None) for r in bulk] == [
        ActionOutcome.EVICTED, ActionOutcome.ALREADY_GONE, *[ActionOutcome.BOUND] * 8,
        ActionOutcome.ALREADY_BOUND, 409, 404, 409, ActionOutcome.BOUND]
    assert all(isinstance(r, ClusterRejected) for r in bulk if not isinstance(r, ActionResult))
    # The cluster ends the same: nodes, bind keys, GPU group, and the events (Scheduled, Preempted).
    assert _cluster_state(apiserver, "bulk") == _cluster_state(apiserver, "serial")
    events = _cluster_state(apiserver, "bulk")["events"]
    assert ("Preempted", "victim") in events
    assert sorted(name for reason, name in events if reason == "Scheduled") == sorted(
        [f"p{i}" for i in range(8)] + ["frac"])


def test_apply_with_nothing_to_do_calls_nothing(kube_apiserver: FakeKubeApiServer) -> None:  # noqa: F811
    before = len(kube_apiserver.requests)
    assert _gateway(kube_apiserver, 8).apply() == []
    assert len(kube_apiserver.requests) == before


def test_apply_binds_concurrently_up_to_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # Four binds that each wait for the other three: they meet only if four run at once.
    barrier = threading.Barrier(4, timeout=30)
    running, most = [0], [0]
    guard = threading.Lock()

    def fake_bind(self: KubernetesGateway, action: BindAction, later: Any) -> ActionResult:
        with guard:
            running[0] += 1
            most[0] = max(most[0], running[0])
        barrier.wait()
        with guard:
            running[0] -= 1
        if action.name == "bad":
            raise ClusterRejected("bind", "refused", status=409)
        return ActionResult(ActionOutcome.BOUND, action.name)

    monkeypatch.setattr(KubernetesGateway, "_bind", fake_bind)
    gateway = KubernetesGateway(api_client=cast(Any, _NoClient()), bind_concurrency=4)
    names = ["a", "bad", "c", "d", "e", "f", "g", "h"]

    results = gateway.apply(binds=[BindAction("ns", n, "", "node") for n in names])

    assert most[0] == 4
    assert [r.message if isinstance(r, ActionResult) else "refused" for r in results] == [
        "a", "refused", "c", "d", "e", "f", "g", "h"]


class _NoClient:
    """Enough of an ApiClient for a gateway that makes no call."""

    configuration = None


def test_the_client_pool_holds_the_concurrent_calls(settings: Any) -> None:
    configuration = transport.load_configuration("http://127.0.0.1:1", concurrency=64)
    assert configuration.connection_pool_maxsize >= 64

    settings.KAI_BIND_CONCURRENCY = 48
    assert transport.bind_concurrency() == 48
    assert transport.load_configuration("http://127.0.0.1:1").connection_pool_maxsize >= 48
    settings.KAI_KUBERNETES_HOST = "http://127.0.0.1:1"
    gateway = KubernetesGateway.from_settings()
    assert gateway.bind_concurrency == 48
    assert gateway.api_client.configuration.connection_pool_maxsize >= 48


def test_a_bind_on_a_current_server_is_the_binding_and_its_event(kube_apiserver: FakeKubeApiServer) -> None:  # noqa: F811
    # Since Kubernetes 1.27 the binding subresource refuses another incarnation of the pod itself
    # (its uid is a precondition): the pod is not read first.
    uids = [kube_apiserver.add_pod(f"p{i}")["metadata"]["uid"] for i in range(3)]
    gateway = _gateway(kube_apiserver, 4)
    before = len(kube_apiserver.requests)

    gateway.apply(binds=[BindAction("default", f"p{i}", uid, "gpu-1") for i, uid in enumerate(uids)])

    made = sorted((r.method, r.path.rstrip("/").rsplit("/", 1)[-1]) for r in kube_apiserver.requests[before:])
    assert made == [("GET", "version"), *[("POST", "binding")] * 3, *[("POST", "events")] * 3]


def test_the_sharers_of_one_gpu_find_or_make_its_reservation_pod_once(apiserver: Server) -> None:  # noqa: F811
    """Eight sharers of one device, bound in one `apply`: one look for the reservation pod and one
    reservation pod; each sharer then has its ConfigMap and its Binding (four GPUs, four groups, in
    a second apply, make four more)."""
    apiserver.add_node("gpu-0", gpus=8)
    uids = [apiserver.add_pod(f"s{i}", annotations={"gpu-fraction": "0.125"})["metadata"]["uid"] for i in range(8)]
    gateway = _gateway(apiserver, 8)

    results = gateway.apply(binds=[BindAction("default", f"s{i}", uid, "gpu-0", gpu_groups=("grp-a",), gpu_portion=0.125)
                                   for i, uid in enumerate(uids)])

    assert [r.outcome for r in results] == [ActionOutcome.BOUND] * 8  # type: ignore[union-attr]
    held = apiserver.list("pods", "kai-resource-reservation")
    assert [(p["spec"]["nodeName"], p["metadata"]["labels"]["runai-gpu-group"]) for p in held] == [("gpu-0", "grp-a")]
    assert all(apiserver.get("pods", f"s{i}", "default")["spec"]["nodeName"] == "gpu-0" for i in range(8))

    more = [apiserver.add_pod(f"t{i}", annotations={"gpu-fraction": "0.5"})["metadata"]["uid"] for i in range(8)]
    gateway.apply(binds=[BindAction("default", f"t{i}", uid, "gpu-0", gpu_groups=(f"grp-{i // 2}",), gpu_portion=0.5)
                         for i, uid in enumerate(more)])
    groups = sorted(p["metadata"]["labels"]["runai-gpu-group"] for p in apiserver.list("pods", "kai-resource-reservation"))
    assert groups == ["grp-0", "grp-1", "grp-2", "grp-3", "grp-a"]


def test_one_reservation_list_per_apply_whatever_the_number_of_groups(kube_apiserver: FakeKubeApiServer) -> None:  # noqa: F811
    """Sixteen sharers on four groups of two nodes, one group already held by a reservation pod
    another scheduler named its own way: one list of the reservation pods for the whole apply, the
    foreign holder reused, and one reservation pod made for each of the other three groups."""
    for node in ("gpu-0", "gpu-1"):
        kube_apiserver.add_node(node, gpus=8)
    kube_apiserver.add_pod("kai-made-holder", namespace="kai-resource-reservation", node="gpu-1", queue=None,
                           labels={"app": "kai-resource-reservation", "runai-gpu-group": "grp-3"})
    uids = [kube_apiserver.add_pod(f"s{i}", annotations={"gpu-fraction": "0.25"})["metadata"]["uid"] for i in range(16)]
    gateway = _gateway(kube_apiserver, 8)
    before = len(kube_apiserver.requests)

    results = gateway.apply(binds=[BindAction("default", f"s{i}", uid, f"gpu-{i // 8}", gpu_groups=(f"grp-{i // 4}",),
                                              gpu_portion=0.25) for i, uid in enumerate(uids)])

    assert [r.outcome for r in results] == [ActionOutcome.BOUND] * 16  # type: ignore[union-attr]
    listed = [r for r in kube_apiserver.requests[before:]
              if r.method == "GET" and r.path.endswith("/namespaces/kai-resource-reservation/pods")]
    made = [r for r in kube_apiserver.requests[before:]
            if r.method == "POST" and r.path.endswith("/namespaces/kai-resource-reservation/pods")]
    assert (len(listed), len(made)) == (1, 3)
    held = sorted((p["spec"]["nodeName"], p["metadata"]["labels"]["runai-gpu-group"])
                  for p in kube_apiserver.list("pods", "kai-resource-reservation"))
    assert held == [("gpu-0", "grp-0"), ("gpu-0", "grp-1"), ("gpu-1", "grp-2"), ("gpu-1", "grp-3")]


def test_binds_that_may_wait_for_devices_start_in_turns_one_sharer_of_each_device_at_a_time() -> None:
    from kaiweb.cluster.backends.kubernetes.binding import _in_turns

    binds = [BindAction("ns", f"p{i}", "", node, gpu_groups=groups) for i, (node, groups) in enumerate([
        ("n1", ("a",)), ("n1", ("a",)), ("n1", ("a",)), ("n1", ()), ("n2", ("a",)), ("n1", ("b", "c")),
        ("n1", ("b", "c")), ("n2", ("a",))])]

    assert _in_turns(binds) == [0, 3, 4, 5, 1, 6, 7, 2]
