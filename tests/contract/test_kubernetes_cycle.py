"""End to end: the scheduling cycle on the Kubernetes backend, against the fake API server.

The cluster lives in the fake server; kaiweb is configured with ``KAI_CLUSTER_BACKEND=kubernetes``
pointed at it; the cycle runs through the Celery task's own function. What is asserted is what
reached the API server (Bindings, Evictions, Queue status, pod conditions and events) and what
the database mirror says.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from kaiweb.cluster import mirror
from kaiweb.cluster.models import Cluster, SchedulingShard, UnreadableObject
from kaiweb.scheduling import cycle as cycle_module
from kaiweb.scheduling.choices import CycleStatus, DecisionKind, DecisionStatus
from kaiweb.scheduling.models import Decision, PendingReason, QueueStatus, SchedulingCycle
from kaiweb.scheduling.tasks import run_cycle_task
from kaiweb.workloads.choices import PodState
from kaiweb.workloads.models import Pod
from tests.fakes.kube_apiserver import FakeKubeApiServer, kube_apiserver  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db


def qspec(gpu_quota: float, *, parent: str | None = None, gpu_limit: float = -1) -> dict[str, Any]:
    spec: dict[str, Any] = {"priority": 100, "resources": {
        "gpu": {"quota": gpu_quota, "limit": gpu_limit, "overQuotaWeight": 1},
        "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
    }}
    if parent:
        spec["parentQueue"] = parent
    return spec


@pytest.fixture
def shard(kube_apiserver: FakeKubeApiServer, settings: Any) -> SchedulingShard:  # noqa: F811
    """kaiweb configured for the fake server: the Kubernetes backend and a cluster with one shard."""
    settings.KAI_CLUSTER_BACKEND = "kubernetes"
    settings.KAI_KUBERNETES_HOST = kube_apiserver.url
    settings.KAI_KUBERNETES_TIMEOUT = 3.0
    cluster = mirror.kubernetes_cluster("k8s")
    return SchedulingShard.objects.get(cluster=cluster, name="default")


def run_cycle(shard: SchedulingShard) -> SchedulingCycle:
    cycle_id = run_cycle_task(shard.pk, "test")
    cycle = SchedulingCycle.objects.get(pk=cycle_id)
    assert cycle.status == CycleStatus.SUCCEEDED, cycle.error
    return cycle


def requests_to(server: FakeKubeApiServer, method: str, path_end: str) -> int:
    """Requests to a kind, but for the few reservation pods of shared GPUs that each observe step lists."""
    return sum(1 for r in server.requests if r.method == method and r.path.endswith(path_end)
               and "/namespaces/kai-resource-reservation/" not in r.path)


def test_one_cycle_binds_explains_and_writes_back_then_a_second_changes_nothing(
        kube_apiserver: FakeKubeApiServer, shard: SchedulingShard) -> None:  # noqa: F811
    s = kube_apiserver
    s.add_node("gpu-1", gpus=4, labels={"nvidia.com/gpu.product": "H100", "nvidia.com/gpu.memory": "81559"})
    s.add_node("gpu-2", gpus=4, labels={"nvidia.com/gpu.product": "H100", "nvidia.com/gpu.memory": "81559"})
    s.add_queue("org", qspec(8))
    s.add_queue("team-a", qspec(4, parent="org"))
    s.add_queue("team-b", qspec(4, parent="org"))
    s.add_pod_group("train", {"queue": "team-a", "minMember": 2})
    for i in range(2):
        s.add_pod(f"train-{i}", queue=None, pod_group="train", requests={"cpu": "4", "nvidia.com/gpu": "1"})
    s.add_pod("half", queue="team-b", requests={"cpu": "1"}, annotations={"gpu-fraction": "0.5"})
    s.add_pod("broken", queue="team-b", requests={"cpu": "1"}, annotations={"gpu-fraction": "abc"})
    s.add_pod("huge", queue="team-b", requests={"cpu": "1", "nvidia.com/gpu": "16"})
    s.add_pod("elsewhere", queue="team-a", scheduler="default-scheduler")

    cycle = run_cycle(shard)

    # Bindings for the placeable pods, none for the malformed one or another scheduler's pod.
    bound = {b["name"]: b for b in s.bindings}
    assert set(bound) == {"train-0", "train-1", "half"}
    assert all(b["node"] in ("gpu-1", "gpu-2") for b in bound.values())
    half = s.get("pods", "half")
    group = half["metadata"]["labels"]["runai-gpu-group"]
    assert group
    assert "runai-gpu-group" not in half["metadata"]["annotations"]  # KAI writes the label only
    assert bound["half"]["annotations"]["kaiweb.io/gpu-portion"] == "0.5"
    assert cycle.binds == 3

    # The malformed pod: recorded with the field and the rule, and told so on the pod itself.
    problem = UnreadableObject.objects.get(kind="Pod", name="broken")
    assert (problem.field, problem.rule) == ("metadata.annotations[gpu-fraction]", "must be a number in (0, 1]")
    broken = s.get("pods", "broken")
    condition = next(c for c in broken["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert "gpu-fraction" in condition["message"]
    assert not Pod.objects.filter(name="broken").exists()

    # The pod that cannot fit anywhere: PodScheduled=False with the engine's reason, and an event.
    huge = s.get("pods", "huge")
    condition = next(c for c in huge["status"]["conditions"] if c["type"] == "PodScheduled")
    assert condition["status"] == "False"
    assert condition["message"]
    events = [e for e in s.list("events", "default") if e["involvedObject"]["name"] == "huge"]
    assert len(events) == 1
    assert events[0]["type"] == "Warning"
    assert events[0]["message"] == condition["message"]

    # Queue status written to the CRDs, in the CRD's quantities.
    team_a = s.get("queues", "team-a")["status"]
    assert team_a["allocated"]["nvidia.com/gpu"] == "2"
    assert team_a["requested"]["nvidia.com/gpu"] == "2"
    assert s.get("queues", "org")["status"]["childQueues"] == ["team-a", "team-b"]

    # The mirror already shows the binds (as KAI's cache does) until the cluster reports more.
    assert set(Pod.objects.filter(state=PodState.BINDING).values_list("name", flat=True)) == {
        "train-0", "train-1", "half"}

    status_patches = requests_to(s, "PATCH", "/queues/team-a/status")
    second = run_cycle(shard)

    assert len(s.bindings) == 3  # nothing bound twice
    assert second.binds == 0
    assert requests_to(s, "PATCH", "/pods/huge/status") == 1  # the reason did not change: not written again
    assert requests_to(s, "PATCH", "/pods/broken/status") == 1
    assert requests_to(s, "PATCH", "/queues/team-a/status") == status_patches  # same status: not written again
    assert set(Pod.objects.filter(state=PodState.BOUND).values_list("name", flat=True)) == {
        "train-0", "train-1", "half"}
    assert Decision.objects.filter(kind=DecisionKind.BIND).count() == 3


def test_a_waiting_pod_groups_event_is_said_once_not_every_cycle_and_again_after_a_while(
        kube_apiserver: FakeKubeApiServer, shard: SchedulingShard) -> None:  # noqa: F811
    from kaiweb.core import clock
    from kaiweb.scheduling.status_writer import EVENT_REPEAT_SECONDS

    s = kube_apiserver
    s.add_node("gpu-1", gpus=4)
    s.add_queue("team-a", qspec(8))
    s.add_pod_group("big", {"queue": "team-a", "minMember": 2})
    for i in range(2):
        s.add_pod(f"big-{i}", queue=None, pod_group="big", requests={"cpu": "1", "nvidia.com/gpu": "4"})

    run_cycle(shard)
    said = requests_to(s, "POST", "/events")
    assert said >= 1  # the PodGroup's Unschedulable event (and the pods' why-pending)
    events = [e for e in s.list("events", "default") if e["involvedObject"]["kind"] == "PodGroup"]
    assert [e["reason"] for e in events] == ["Unschedulable"]

    # The same explanation: neither the pods' nor the PodGroup's event is sent again, cycle after cycle
    # (each was a round trip the API server answered "already exists").
    run_cycle(shard)
    run_cycle(shard)
    assert requests_to(s, "POST", "/events") == said

    # Events expire: after a while the PodGroup's is said again.
    try:
        clock.advance(EVENT_REPEAT_SECONDS + 1)
        run_cycle(shard)
    finally:
        clock.reset()
    assert requests_to(s, "POST", "/events") == said + 1


def test_pod_group_statuses_and_events_are_written_within_the_budget_the_rest_in_the_next_cycles(
        kube_apiserver: FakeKubeApiServer, shard: SchedulingShard, settings: Any) -> None:  # noqa: F811
    settings.KAI_PENDING_WRITES_PER_CYCLE = 2  # one PodGroup's condition and event a cycle
    s = kube_apiserver
    s.add_node("gpu-1", gpus=4)
    s.add_queue("team-a", qspec(8))
    for g in ("a", "b", "c"):
        s.add_pod_group(g, {"queue": "team-a", "minMember": 2})
        for i in range(2):
            s.add_pod(f"{g}-{i}", queue=None, pod_group=g, requests={"cpu": "1", "nvidia.com/gpu": "4"})

    def conditioned() -> list[str]:
        return [g for g in ("a", "b", "c", "d")
                if ((s.get("podgroups", g) or {}).get("status") or {}).get("schedulingConditions")]

    def left_over(cycle: SchedulingCycle) -> int:
        return cycle.write_back["pod_group_deferred"]

    first = run_cycle(shard)
    assert conditioned() == ["a"]
    assert left_over(first) == 2  # the cycle says what it left, for its page and the metrics
    run_cycle(shard)
    assert conditioned() == ["a", "b"]
    third = run_cycle(shard)
    assert conditioned() == ["a", "b", "c"]
    assert left_over(third) == 0
    events = [e["involvedObject"]["name"] for e in s.list("events", "default") if e["involvedObject"]["kind"] == "PodGroup"]
    assert sorted(events) == ["a", "b", "c"]

    # A PodGroup never told anything goes before those told before, whatever its name: here a, b and c
    # are due their event again, and d, new, still has the cycle's budget first.
    from kaiweb.core import clock
    from kaiweb.scheduling.status_writer import EVENT_REPEAT_SECONDS

    s.add_pod_group("d", {"queue": "team-a", "minMember": 2})
    for i in range(2):
        s.add_pod(f"d-{i}", queue=None, pod_group="d", requests={"cpu": "1", "nvidia.com/gpu": "4"})
    try:
        clock.advance(EVENT_REPEAT_SECONDS + 1)
        fourth = run_cycle(shard)
    finally:
        clock.reset()
    assert conditioned() == ["a", "b", "c", "d"]
    assert left_over(fourth) == 3


@pytest.mark.parametrize(("mode", "calls", "not_made"), [
    ("evict", "evictions", "deletions"),  # the Eviction API
    ("delete", "deletions", "evictions"),  # as KAI: the pod is deleted
])
def test_a_reclaim_eviction_reaches_the_cluster_as_the_shard_says_with_the_grace_period(
        kube_apiserver: FakeKubeApiServer, shard: SchedulingShard, mode: str, calls: str,  # noqa: F811
        not_made: str) -> None:
    from kaiweb.cluster.services import save_shard

    save_shard(shard, {"eviction_mode": mode})
    s = kube_apiserver
    s.add_node("gpu-1", gpus=4)
    s.add_queue("borrower", qspec(0))
    s.add_queue("owner", qspec(4))
    for i in range(4):
        s.add_pod(f"borrowed-{i}", queue="borrower", requests={"cpu": "1", "nvidia.com/gpu": "1"}, node="gpu-1",
                  phase="Running")
        pod = s.get("pods", f"borrowed-{i}")
        pod["spec"]["terminationGracePeriodSeconds"] = 45
        s.put("pods", pod)
    s.add_pod("owners-job", queue="owner", requests={"cpu": "1", "nvidia.com/gpu": "2"})

    cycle = run_cycle(shard)

    made = getattr(s, calls)
    assert cycle.evictions == 2
    assert len(made) == 2
    assert getattr(s, not_made) == []
    assert {e["name"] for e in made} <= {f"borrowed-{i}" for i in range(4)}
    assert all(e["grace"] == 45 for e in made)
    for e in made:  # terminating for its grace period, and told why
        assert s.get("pods", e["name"])["metadata"]["deletionGracePeriodSeconds"] == 45
    assert not s.bindings  # the reclaimer waits for the resources being released
    evicted = set(Pod.objects.filter(state=PodState.RELEASING).values_list("name", flat=True))
    assert evicted == {e["name"] for e in made}

    # Another cycle while the victims terminate: no second eviction.
    run_cycle(shard)
    assert len(made) == 2

    # Once they are gone the reclaimer is bound.
    s.complete_terminations()
    run_cycle(shard)
    assert [b["name"] for b in s.bindings] == ["owners-job"]


def test_a_pod_deleted_and_a_node_added_by_watch_events_change_what_the_next_cycle_sees(
        kube_apiserver: FakeKubeApiServer, shard: SchedulingShard) -> None:  # noqa: F811
    from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
    from kaiweb.cluster.watch import ClusterWatcher

    s = kube_apiserver
    s.add_node("small", gpus=1)
    s.add_queue("q", qspec(8))
    s.add_pod("blocker", queue="q", requests={"nvidia.com/gpu": "1"}, node="small", phase="Running")
    s.add_pod("wants-two", queue="q", requests={"nvidia.com/gpu": "2"})
    cluster: Cluster = shard.cluster
    gateway = KubernetesGateway(s.api_client, request_timeout=3.0)
    watcher = ClusterWatcher(gateway, lambda e: mirror.apply_event(e, cluster, gateway))
    watcher.run_once()
    assert mirror.watcher_is_current(cluster)  # the cycle trusts the watcher: it lists only queues

    run_cycle(shard)
    assert not s.bindings

    s.remove("pods", "blocker")
    s.add_node("big", gpus=8)
    watcher.run_once()
    assert not Pod.objects.filter(name="blocker").exists()
    pods_listed = requests_to(s, "GET", "/pods")
    run_cycle(shard)

    assert [(b["name"], b["node"]) for b in s.bindings] == [("wants-two", "big")]
    assert requests_to(s, "GET", "/pods") == pods_listed  # the mirror came from the watch


def test_an_interrupted_cycle_is_reconciled_against_the_api_server(
        kube_apiserver: FakeKubeApiServer, shard: SchedulingShard) -> None:  # noqa: F811
    from django.utils import timezone

    from kaiweb.scheduling.choices import DecisionStatus

    s = kube_apiserver
    s.add_node("gpu-1", gpus=2)
    s.add_queue("q", qspec(2))
    took = s.add_pod("took-effect", queue="q", requests={"nvidia.com/gpu": "1"}, node="gpu-1")
    lost = s.add_pod("never-applied", queue="q", requests={"nvidia.com/gpu": "1"})
    # A worker died between recording these binds and marking them: one reached the cluster.
    dead = SchedulingCycle.objects.create(shard=shard, started_at=timezone.now(), status=CycleStatus.RUNNING)
    for pod in (took, lost):
        meta = pod["metadata"]
        Decision.objects.create(cycle=dead, kind=DecisionKind.BIND, status=DecisionStatus.PLANNED,
                                workload_ref=f"default/pg-{meta['name']}", namespace="default",
                                pod_name=meta["name"], pod_uid=meta["uid"], node_name="gpu-1",
                                reason="Allocated", idempotency_key=f"bind:{meta['uid']}:gpu-1")

    run_cycle(shard)

    statuses = dict(Decision.objects.filter(cycle=dead).values_list("pod_name", "status"))
    assert statuses == {"took-effect": DecisionStatus.APPLIED, "never-applied": DecisionStatus.FAILED}
    assert SchedulingCycle.objects.get(pk=dead.pk).status == CycleStatus.FAILED
    # Decided afresh and bound once; the pod already bound is not bound again.
    assert [b["name"] for b in s.bindings] == ["never-applied"]


@pytest.mark.cycle_may_fail
def test_an_unreachable_api_server_fails_the_cycle_clearly_and_changes_nothing(
        kube_apiserver: FakeKubeApiServer, shard: SchedulingShard) -> None:  # noqa: F811
    from kaiweb.cluster.gateway import ClusterUnavailable

    s = kube_apiserver
    s.add_node("gpu-1", gpus=2)
    s.add_queue("q", qspec(2))
    s.add_pod("p", queue="q", requests={"nvidia.com/gpu": "1"})
    s.fail_next(10, status=503, path_contains="/pods")

    with pytest.raises(ClusterUnavailable, match="list pods"):
        run_cycle_task(shard.pk, "test")

    cycle = SchedulingCycle.objects.get(shard=shard)
    assert cycle.status == CycleStatus.FAILED
    assert "list pods" in cycle.error
    assert "503" in cycle.error
    assert not Decision.objects.exists()
    assert not s.bindings

    s.clear_faults()  # the server is back: the next cycle binds
    run_cycle(shard)
    assert [b["name"] for b in s.bindings] == ["p"]


def test_the_write_back_is_fed_what_the_cycle_recorded_and_reads_none_of_it_back(
        kube_apiserver: FakeKubeApiServer, shard: SchedulingShard, monkeypatch: Any) -> None:  # noqa: F811
    s = kube_apiserver
    s.add_node("gpu-1", gpus=2)
    s.add_queue("org", qspec(2))
    s.add_queue("team-a", qspec(2, parent="org"))
    s.add_pod("fits", queue="team-a", requests={"cpu": "1", "nvidia.com/gpu": "1"})
    s.add_pod("huge", queue="team-a", requests={"cpu": "1", "nvidia.com/gpu": "16"})
    seen: dict[str, tuple[tuple[Any, ...], list[str]]] = {}

    def watched(name: str, step: Any) -> Any:
        def run(*args: Any) -> Any:
            with CaptureQueriesContext(connection) as queries:
                out = step(*args)
            seen[name] = (args, [q["sql"] for q in queries.captured_queries])
            return out
        return run

    monkeypatch.setattr(cycle_module, "record_actions", watched("record_actions", cycle_module.record_actions))
    monkeypatch.setattr(cycle_module, "write_back", watched("write_back", cycle_module.write_back))
    cycle = run_cycle(shard)

    # Neither step reads the decisions, queue statuses or why-pending rows the cycle has just written.
    assert set(seen) == {"record_actions", "write_back"}
    for name, (_, sql) in seen.items():
        assert [q for q in sql if any(f'"{table}"' in q for table in (
            Decision._meta.db_table, QueueStatus._meta.db_table, PendingReason._meta.db_table))] == [], name
    # What they were given is what the cycle recorded.
    (applied,), _ = seen["record_actions"]
    assert sorted(d.pk for d in applied) == sorted(Decision.objects.filter(
        cycle=cycle, status=DecisionStatus.APPLIED, kind__in=(DecisionKind.BIND, DecisionKind.EVICT))
        .values_list("pk", flat=True))
    assert [d.pod_name for d in applied] == ["fits"]
    (_, _, recorded), _ = seen["write_back"]
    rows = QueueStatus.objects.filter(cycle=cycle).select_related("queue")
    assert {name: (st.allocated, st.requested) for name, st in recorded.queue_statuses.items()} == {
        st.queue.name: (st.allocated, st.requested) for st in rows}
    assert set(recorded.queue_statuses) == {"org", "team-a"}
    assert recorded.why_pending == {pr.workload_id: (pr.reason, pr.message)
                                    for pr in PendingReason.objects.current_of(shard)}
    assert [Pod.objects.get(workload_id=w).name for w in recorded.why_pending] == ["huge"]
    # And the cluster was told: the pending pod's condition, the queues' status.
    huge = s.get("pods", "huge", "default")
    assert any(c.get("reason") == "Unschedulable" for c in huge["status"]["conditions"])
    assert s.get("queues", "team-a")["status"]["allocated"]["nvidia.com/gpu"] == "1"
