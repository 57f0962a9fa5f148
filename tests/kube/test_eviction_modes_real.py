"""A shard's eviction mode against a PodDisruptionBudget that allows no disruption, on a real API server.

KAI deletes the victim pod (`pkg/scheduler/cache/evictor`): a budget never stops its reclaim. kaiweb's
``delete`` mode (the default) does the same, and sets DisruptionTarget first when asked (KAI's
``--update-pod-eviction-condition``); ``evict`` goes through the Eviction API, which the budget
refuses, and the victims stay. The shard's mode comes from the database or from the cluster's
SchedulingShard object (``spec.args``). Each test runs the product's cycle (`run_cycle_task`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kaiweb.cluster.models import SchedulingShard
from kaiweb.cluster.services import save_shard
from kaiweb.scheduling.choices import DecisionKind, DecisionStatus
from kaiweb.scheduling.models import Decision
from tests.kube.servers import RealServer
from tests.kube.test_real_apiserver import _borrowers, _pdb_settled, _qspec, _run_cycle, wait_for

pytestmark = [pytest.mark.kube, pytest.mark.django_db]


@pytest.fixture
def protected(server: RealServer, kube_shard: SchedulingShard) -> Iterator[RealServer]:
    """Four one-GPU borrowers fill the node, a budget keeps all four (0 disruptions allowed), and the
    owner's 2-GPU job waits: the cycle reclaims two borrowers."""
    server.add_queue("borrower", _qspec(0))
    server.add_queue("owner", _qspec(4))
    _borrowers(server, 4)
    server.add_pod("owners-job", queue="owner", requests={"cpu": "1", "nvidia.com/gpu": "2"},
                   limits={"nvidia.com/gpu": "2"})
    server.add_pdb("borrowers", {"app": "borrowed"}, min_available=4)
    wait_for("the disruption controller computes the budget", _pdb_settled(server, "borrowers", 0))
    yield server
    server.remove("schedulingshards", "default")  # not among what `wipe` empties


def _evictions() -> list[Decision]:
    return list(Decision.objects.filter(kind=DecisionKind.EVICT).order_by("pod_name"))


def _terminating(server: RealServer) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in server.list("pods") if p["metadata"].get("deletionTimestamp")}


def _disruption_target(pod: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or []
                 if c.get("type") == "DisruptionTarget"), None)


def _shard_object(server: RealServer, args: dict[str, str]) -> None:
    server.put("schedulingshards", {"metadata": {"name": "default"}, "spec": {"args": args}})


def test_delete_mode_the_default_reclaims_through_a_budget_allowing_no_disruption(
    protected: RealServer, kube_shard: SchedulingShard,
) -> None:
    _run_cycle(kube_shard)

    evictions = _evictions()
    assert len(evictions) == 2
    assert {d.status for d in evictions} == {DecisionStatus.APPLIED}
    terminating = _terminating(protected)
    assert set(terminating) == {d.pod_name for d in evictions}
    assert all(_disruption_target(p) is None for p in terminating.values())  # not asked for

    # Their kubelet finishes them: the victims are gone, and the owner's job is bound.
    protected.complete_terminations()
    _run_cycle(kube_shard)
    assert {p["metadata"]["name"] for p in protected.list("pods")} == (
        {f"borrowed-{i}" for i in range(4)} - set(terminating)) | {"owners-job"}
    assert protected.get("pods", "owners-job")["spec"].get("nodeName") == "gpu-1"


def test_delete_mode_sets_disruption_target_before_deleting_when_asked(
    protected: RealServer, kube_shard: SchedulingShard,
) -> None:
    save_shard(kube_shard, {"eviction_mode": "delete", "update_pod_eviction_condition": True})

    _run_cycle(kube_shard)

    evictions = {d.pod_name: d for d in _evictions()}
    terminating = _terminating(protected)
    assert set(terminating) == set(evictions)
    assert len(evictions) == 2
    for name, pod in terminating.items():
        condition = _disruption_target(pod)
        assert condition is not None, name
        assert (condition["status"], condition["reason"]) == ("True", "PreemptionByScheduler")
        assert condition["message"] == evictions[name].message


def test_evict_mode_is_refused_by_the_budget_and_the_victims_stay(
    protected: RealServer, kube_shard: SchedulingShard,
) -> None:
    save_shard(kube_shard, {"eviction_mode": "evict", "update_pod_eviction_condition": True})

    _run_cycle(kube_shard)

    evictions = _evictions()
    assert len(evictions) == 2
    assert {d.status for d in evictions} == {DecisionStatus.FAILED}
    assert all("PodDisruptionBudget" in d.message for d in evictions)
    assert _terminating(protected) == {}
    for i in range(4):  # still there, running, and not marked: the condition is the delete mode's
        pod = protected.get("pods", f"borrowed-{i}")
        assert pod["status"]["phase"] == "Running"
        assert _disruption_target(pod) is None


def test_the_clusters_schedulingshard_object_sets_the_mode_in_its_args(
    protected: RealServer, kube_shard: SchedulingShard,
) -> None:
    # kaiweb's own key: the Eviction API, refused by the budget.
    _shard_object(protected, {"kaiweb-eviction-mode": "evict"})
    _run_cycle(kube_shard)

    kube_shard.refresh_from_db()
    assert (kube_shard.eviction_mode, kube_shard.update_pod_eviction_condition) == ("evict", False)
    assert {d.status for d in _evictions()} == {DecisionStatus.FAILED}
    assert _terminating(protected) == {}

    # Without it, as KAI runs the object: deleted, with KAI's own flag for the condition.
    _shard_object(protected, {"update-pod-eviction-condition": "true"})
    _run_cycle(kube_shard)

    kube_shard.refresh_from_db()
    assert (kube_shard.eviction_mode, kube_shard.update_pod_eviction_condition) == ("delete", True)
    terminating = _terminating(protected)
    assert len(terminating) == 2
    assert all((_disruption_target(p) or {}).get("reason") == "PreemptionByScheduler" for p in terminating.values())
