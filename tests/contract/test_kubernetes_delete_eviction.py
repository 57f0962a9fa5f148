"""The Kubernetes gateway's eviction mode ``delete``: the victim pod is deleted, as KAI's evictor does
(`pkg/scheduler/cache/evictor`), after the DisruptionTarget condition when asked.

Tests taking ``apiserver`` run on the fake API server and on a real one; those reading what only the
fake records (which call was made) check it where ``records_requests`` is true. What a
PodDisruptionBudget does to each mode is in ``tests/kube/test_eviction_modes_real.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.backends.types import (
    EVICT_BY_DELETE,
    ActionOutcome,
    EvictAction,
    PodState,
)
from kaiweb.cluster.gateway import ClusterError, ClusterRejected
from tests.fakes.kube_apiserver import FakeKubeApiServer, kube_apiserver  # noqa: F401 - fixture
from tests.kube.fixtures import _real_server, apiserver, kube_cluster  # noqa: F401 - fixtures
from tests.kube.servers import FakeServer, RealServer

Server = FakeServer | RealServer


@pytest.fixture
def gateway(request: pytest.FixtureRequest) -> KubernetesGateway:
    server = request.getfixturevalue("apiserver" if "apiserver" in request.fixturenames else "kube_apiserver")
    return KubernetesGateway(server.api_client, request_timeout=2.0, max_attempts=2, backoff_base=0.01,
                             sleep=lambda _: None)


def delete(uid: str, name: str = "victim", **kwargs: Any) -> EvictAction:
    return EvictAction("default", name, uid, mode=EVICT_BY_DELETE, **kwargs)


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def test_delete_mode_deletes_the_pod_with_its_grace_period_and_says_why(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    uid = apiserver.add_pod("victim", node="gpu-1", phase="Running")["metadata"]["uid"]

    result = gateway.evict(delete(uid, grace_seconds=30, reason="Preempted", message="preempted by ml/urgent"))

    assert result.outcome == ActionOutcome.EVICTED
    assert result.message == "pod default/victim deleted"
    if apiserver.records_requests:
        assert apiserver.evictions == []  # not through the Eviction API
        assert apiserver.deletions == [{"namespace": "default", "name": "victim", "grace": 30}]
    pod = apiserver.get("pods", "victim")
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 30
    assert condition(pod, "DisruptionTarget") is None  # only when the shard asks for it
    assert gateway.list_pods().items[0].state == PodState.RELEASING
    events = apiserver.list("events", "default")
    assert [(e["reason"], e["message"], e["involvedObject"]["name"]) for e in events] == [
        ("Preempted", "preempted by ml/urgent", "victim")]


def test_delete_mode_with_zero_grace_removes_the_pod_and_deleting_again_is_success(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    uid = apiserver.add_pod("victim", node="gpu-1", phase="Running")["metadata"]["uid"]

    assert gateway.evict(delete(uid, grace_seconds=0)).outcome == ActionOutcome.EVICTED
    assert apiserver.get("pods", "victim") is None
    assert gateway.evict(delete(uid, grace_seconds=0)).outcome == ActionOutcome.ALREADY_GONE
    assert gateway.evict(delete("x", name="never-was")).outcome == ActionOutcome.ALREADY_GONE


def test_delete_mode_sets_disruption_target_as_kai_does_before_deleting(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    uid = apiserver.add_pod("victim", node="gpu-1", phase="Running")["metadata"]["uid"]
    message = "Pod default/victim was preempted by workload ml/urgent."

    result = gateway.evict(delete(uid, grace_seconds=30, message=message, disruption_target=True))

    assert result.outcome == ActionOutcome.EVICTED
    pod = apiserver.get("pods", "victim")
    assert pod["metadata"]["deletionTimestamp"]
    target = condition(pod, "DisruptionTarget")
    assert target is not None
    assert (target["status"], target["reason"], target["message"]) == ("True", "PreemptionByScheduler", message)
    assert target["lastTransitionTime"]
    if apiserver.records_requests:
        # Through the status subresource first, then the delete: as KAI's evictor.
        calls = [(r.method, r.path) for r in apiserver.requests if "/pods/victim" in r.path]
        assert calls == [("PATCH", "/api/v1/namespaces/default/pods/victim/status"),
                         ("DELETE", "/api/v1/namespaces/default/pods/victim")]


def test_an_old_deletion_never_touches_a_new_pod_with_the_same_name(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    apiserver.add_pod("worker-0", node="gpu-1", phase="Running")

    for marked in (False, True):
        result = gateway.evict(delete("uid-of-the-previous-worker-0", name="worker-0", grace_seconds=0,
                                      message="old", disruption_target=marked))

        assert result.outcome == ActionOutcome.ALREADY_GONE
        assert "replaced by a new pod" in result.message
    pod = apiserver.get("pods", "worker-0")
    assert "deletionTimestamp" not in pod["metadata"]
    assert condition(pod, "DisruptionTarget") is None
    if apiserver.records_requests:
        assert apiserver.deletions == []


def test_a_failed_condition_write_leaves_the_pod_undeleted(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    uid = kube_apiserver.add_pod("victim", node="gpu-1", phase="Running")["metadata"]["uid"]
    kube_apiserver.fail_next(1, status=403, path_contains="/pods/victim/status")

    with pytest.raises(ClusterRejected) as refused:
        gateway.evict(delete(uid, grace_seconds=0, disruption_target=True))

    assert refused.value.status == 403
    assert kube_apiserver.get("pods", "victim") is not None
    assert kube_apiserver.deletions == []


def test_an_unknown_mode_is_refused_before_any_call(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    uid = kube_apiserver.add_pod("victim", node="gpu-1", phase="Running")["metadata"]["uid"]
    before = len(kube_apiserver.requests)

    with pytest.raises(ClusterError, match="eviction mode must be one of delete, evict, not 'drain'"):
        gateway.evict(EvictAction("default", "victim", uid, mode="drain"))

    assert len(kube_apiserver.requests) == before


def test_the_bulk_path_deletes_as_the_serial_one(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    uids = [kube_apiserver.add_pod(f"victim-{i}", node="gpu-1", phase="Running")["metadata"]["uid"] for i in range(3)]

    results = gateway.apply(evicts=[delete(uid, name=f"victim-{i}", grace_seconds=0, message="reclaimed",
                                           disruption_target=True) for i, uid in enumerate(uids)])

    assert [r.outcome for r in results] == [ActionOutcome.EVICTED] * 3  # type: ignore[union-attr]
    assert kube_apiserver.evictions == []
    assert sorted(d["name"] for d in kube_apiserver.deletions) == ["victim-0", "victim-1", "victim-2"]
    assert kube_apiserver.list("pods") == []
