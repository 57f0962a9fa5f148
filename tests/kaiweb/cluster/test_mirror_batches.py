"""`mirror.apply_events` (runs of pod events written together, a pod's several events in a run
coalesced into its last one) gives the same mirror as `mirror.apply_event` on each event in turn,
for any sequence of events and any way of cutting it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.parsing import parse_node, parse_pod, parse_pod_group
from kaiweb.cluster.models import Cluster, Node, UnreadableObject
from kaiweb.cluster.watch import ADDED, DELETED, MODIFIED, WatchEvent
from kaiweb.queues.models import Queue
from kaiweb.workloads.models import Pod, Workload

pytestmark = pytest.mark.django_db

NAMES = ("p0", "p1", "p2")


def pod_raw(name: str, rv: int, uid: str, node: str | None, phase: str, group: str | None, queue: str,
            gpus: int, *, deleting: bool = False) -> dict[str, Any]:
    annotations = {"pod-group-name": group} if group else {}
    spec: dict[str, Any] = {"schedulerName": "kai-scheduler",
                            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if node:
        spec["nodeName"] = node
    meta = {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": str(rv),
            "labels": {"kai.scheduler/queue": queue}, "annotations": annotations,
            "creationTimestamp": "2026-11-27T00:00:00Z"}
    if deleting:
        meta.update(deletionTimestamp="2026-11-27T00:01:00Z", deletionGracePeriodSeconds=30)
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def event(kind: str, type_: str, raw: dict[str, Any]) -> WatchEvent:
    parse = {"Pod": parse_pod, "Node": parse_node, "PodGroup": parse_pod_group}[kind]
    meta = raw["metadata"]
    parsed = parse(raw)
    problem = parsed if not hasattr(parsed, "uid") or parsed.__class__.__name__ == "Unreadable" else None
    return WatchEvent(kind, type_, meta.get("namespace", ""), meta["name"], meta["resourceVersion"],
                      None if problem else parsed, problem, copy.deepcopy(raw))


def node_raw(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv), "labels": {}},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def group_raw(name: str, rv: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": str(rv),
                         "creationTimestamp": "2026-11-27T00:00:00Z"},
            "spec": {"queue": "team-a", "minMember": 1}}


pod_step = st.tuples(st.just("pod"), st.sampled_from(NAMES), st.sampled_from((ADDED, MODIFIED, MODIFIED, DELETED)),
                     st.sampled_from(("u1", "u2")), st.sampled_from((None, None, "gpu-1", "gpu-2", "gpu-9")),
                     st.sampled_from(("Pending", "Running", "Succeeded")), st.sampled_from((None, "pg-a", "pg-x")),
                     st.sampled_from(("team-a", "team-a", "nowhere")), st.integers(0, 2))
other_step = st.sampled_from((("node", "gpu-9"), ("group", "pg-x"), ("stale",)))
steps = st.lists(st.one_of(pod_step, pod_step, pod_step, other_step), min_size=1, max_size=14)


# A pod's life as the watcher sees it in a burst: created bare, marked by the pod-grouper, bound,
# running, then done, or evicted (marked for deletion, marked again, gone). A ``life`` step moves one
# pod a stage on along its track (another uid: a new pod of that name).
START = ((ADDED, False, False, "Pending", False), (MODIFIED, True, False, "Pending", False),
         (MODIFIED, True, True, "Pending", False), (MODIFIED, True, True, "Running", False))
LIVES = {"done": (*START, (MODIFIED, True, True, "Succeeded", False)),
         "evicted": (*START, (MODIFIED, True, True, "Running", True), (MODIFIED, True, True, "Running", True),
                     (DELETED, True, True, "Running", True))}
life_step = st.tuples(st.just("life"), st.sampled_from(NAMES), st.sampled_from(("u1", "u1", "u2")),
                      st.sampled_from(("gpu-1", "gpu-1", "gpu-9")), st.sampled_from(("pg-a", "pg-a", "pg-x")),
                      st.sampled_from(("team-a", "team-a", "team-a", "nowhere")), st.sampled_from(tuple(LIVES)))
lives = st.lists(st.one_of(life_step, life_step, life_step, life_step, pod_step, other_step), min_size=1, max_size=24)


def to_events(plan: list[tuple[Any, ...]]) -> list[WatchEvent]:
    out, rv, last = [], 100, {}
    alive: dict[str, list[Any]] = {}  # pod name → [uid, stage, node, group, queue]
    for step in plan:
        rv += 1
        if step[0] == "life":
            _, name, uid, node, group, queue, track = step
            state = alive.get(name)
            if state is None or state[0] != uid:
                state = alive[name] = [uid, -1, node, group, queue, LIVES[track]]
            state[1] = min(state[1] + 1, len(state[5]) - 1)
            type_, grouped, bound, phase, deleting = state[5][state[1]]
            raw = pod_raw(name, rv, uid, state[2] if bound else None, phase, state[3] if grouped else None,
                          state[4], 1, deleting=deleting)
            last[name] = raw
            out.append(event("Pod", type_, raw))
        elif step[0] == "pod":
            _, name, type_, uid, node, phase, group, queue, gpus = step
            raw = pod_raw(name, rv, uid, node, phase, group, queue, gpus)
            last[name] = raw
            out.append(event("Pod", type_, raw))
        elif step[0] == "node":
            out.append(event("Node", ADDED, node_raw(step[1], rv)))
        elif step[0] == "group":
            out.append(event("PodGroup", ADDED, group_raw(step[1], rv)))
        elif last:  # an old event of some pod arrives again (a replay after a reconnect)
            name = sorted(last)[rv % len(last)]
            out.append(event("Pod", MODIFIED, last[name]))
    return out


def view(cluster: Cluster) -> dict[str, Any]:
    return {
        "workloads": sorted(Workload.objects.filter(cluster=cluster).values_list("namespace", "name", "state")),
        "pods": sorted((*row[:-2], row[-2] is None, row[-1] is None) for row in Pod.objects.filter(
            workload__cluster=cluster).values_list("workload__name", "name", "uid", "state", "node__name", "gpu",
                                                   "resource_version", "started_at", "finished_at")),
        "problems": sorted(UnreadableObject.objects.filter(cluster=cluster).values_list(
            "kind", "namespace", "name", "field", "deferred")),
        "nodes": sorted(Node.objects.filter(cluster=cluster).values_list("name", "allocatable_gpu")),
    }


def fresh(name: str) -> Cluster:
    cluster = mirror.kubernetes_cluster(name)
    Workload.objects.filter(cluster=cluster).delete()
    UnreadableObject.objects.filter(cluster=cluster).delete()
    Node.objects.filter(cluster=cluster).delete()
    for i, node in enumerate(("gpu-1", "gpu-2"), 1):
        mirror.apply_event(event("Node", ADDED, node_raw(node, i)), cluster)
    mirror.apply_event(event("PodGroup", ADDED, group_raw("pg-a", 3)), cluster)
    return cluster


def apply_both_ways(events: list[WatchEvent], cuts: list[int]) -> tuple[Cluster, Cluster]:
    """The same events into two fresh clusters: cut into runs at ``cuts`` (`apply_events`), and one
    by one (`apply_event`)."""
    Queue.objects.get_or_create(name="team-a", defaults={"gpu_quota": 8})
    one, batched = fresh("one-by-one"), fresh("batched")
    for e in events:
        mirror.apply_event(e, one)
    bounds = sorted({0, len(events), *(c for c in cuts if c < len(events))})
    for start, end in zip(bounds, bounds[1:], strict=False):
        mirror.apply_events(events[start:end], batched)
    return batched, one


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
          deadline=None)
@given(plan=steps, cuts=st.lists(st.integers(0, 14), max_size=4))
def test_runs_of_pod_events_give_the_mirror_the_events_give_one_by_one(plan: list[tuple[Any, ...]],
                                                                      cuts: list[int]) -> None:
    batched, one = apply_both_ways(to_events(plan), cuts)
    assert view(batched) == view(one)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
          deadline=None)
@given(plan=lives, cuts=st.lists(st.integers(0, 24), max_size=2))
def test_pods_with_several_events_in_a_run_give_the_mirror_the_events_give_one_by_one(
        plan: list[tuple[Any, ...]], cuts: list[int]) -> None:
    batched, one = apply_both_ways(to_events(plan), cuts)
    assert view(batched) == view(one)


def burst(count: int) -> list[WatchEvent]:
    """Bare pods as in a burst: created, their PodGroup created and the pod marked a little later."""
    out: list[WatchEvent] = []
    for i in range(count + 2):
        if i < count:
            out.append(event("Pod", ADDED, pod_raw(f"b{i}", 1000 + 3 * i, f"v{i}", None, "Pending", None,
                                                   "team-a", 1)))
        if i >= 2:
            j = i - 2
            out.append(event("PodGroup", ADDED, {**group_raw(f"pg-b{j}", 1001 + 3 * j)}))
            out.append(event("Pod", MODIFIED, pod_raw(f"b{j}", 1002 + 3 * j, f"v{j}", None, "Pending", f"pg-b{j}",
                                                      "team-a", 1)))
    return out


def test_a_burst_of_new_pods_and_their_marks_is_coalesced_into_one_run(django_assert_max_num_queries) -> None:
    Queue.objects.create(name="team-a", gpu_quota=8)
    one, batched = fresh("one-by-one"), fresh("batched")
    events = burst(200)
    for e in events:
        mirror.apply_event(e, one)
    with django_assert_max_num_queries(60):
        mirror.apply_events(events, batched)
    assert view(batched) == view(one)
    assert sorted(Pod.objects.filter(workload__cluster=batched).values_list("workload__name", flat=True)) == \
        sorted(f"pg-b{i}" for i in range(200))
    assert not Workload.objects.filter(cluster=batched, labels__has_key=mirror.IMPLICIT_GROUP_LABEL).exists()


def test_a_run_of_new_pods_is_one_transaction_of_a_bounded_number_of_queries(django_assert_max_num_queries) -> None:
    Queue.objects.create(name="team-a", gpu_quota=8)
    cluster = fresh("k8s")
    events = [event("Pod", ADDED, pod_raw(f"p{i}", 200 + i, f"u{i}", None, "Pending", None, "team-a", 1))
              for i in range(300)]
    with django_assert_max_num_queries(40):
        mirror.apply_events(events, cluster)
    assert Pod.objects.filter(workload__cluster=cluster).count() == 300
    assert Workload.objects.filter(cluster=cluster).count() == 301  # one implicit workload each, and pg-a


@pytest.mark.django_db(transaction=True)
def test_the_event_writer_writes_everything_handed_over_in_order_and_retries_a_failed_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from django.db import connection

    Queue.objects.create(name="team-a", gpu_quota=8)
    cluster = fresh("k8s")
    real = mirror.apply_events
    calls: list[int] = []

    def flaky(events: list[Any], c: Cluster, gateway: Any = None) -> None:
        calls.append(len(events))
        try:
            if len(calls) == 1:
                raise RuntimeError("the database went away for a moment")
            real(events, c, gateway)
        finally:
            connection.close()  # the writer's thread has its own connection

    monkeypatch.setattr(mirror, "apply_events", flaky)
    writer = mirror.EventWriter(cluster, batch=40, pause=0.01)
    for i in range(100):
        writer.put(event("Pod", ADDED, pod_raw(f"p{i}", 200 + i, f"u{i}", None, "Pending", None, "team-a", 1)))
    # p7 is bound then, later, deleted: the writer keeps the order of what it was handed
    writer.put(event("Pod", MODIFIED, pod_raw("p7", 400, "u7", "gpu-1", "Running", None, "team-a", 1)))
    writer.put(event("Pod", DELETED, pod_raw("p8", 401, "u8", None, "Pending", None, "team-a", 1)))
    writer.start()
    assert writer.flush(timeout=60)
    writer.stop()
    writer.join(timeout=10)

    assert writer.failures == 1
    assert writer.written == 102
    assert sum(calls[1:]) == 102
    assert max(calls) <= 40
    names = set(Pod.objects.filter(workload__cluster=cluster).values_list("name", flat=True))
    assert names == {f"p{i}" for i in range(100)} - {"p8"}
    assert Pod.objects.get(name="p7").state == "Running"


def test_the_event_writer_drops_a_pod_group_echo_that_says_nothing_new_and_keeps_every_change() -> None:
    """Our own status and stamp writes come back as PodGroup MODIFIED events with nothing the mirror
    reads changed: the writer does not queue them. A change of spec, a new stamp on a PodGroup first
    seen, a DELETED, and a PodGroup made again are all handed over."""
    writer = mirror.EventWriter(fresh("k8s"))
    first = group_raw("pg-a", 10)
    assert writer.put(event("PodGroup", ADDED, first))
    echo = copy.deepcopy(first)
    echo["metadata"]["resourceVersion"] = "11"
    echo["metadata"]["annotations"] = {"kai.scheduler/last-start-timestamp": "2026-11-27T01:00:00Z"}
    echo["status"] = {"schedulingConditions": [{"type": "UnschedulableOnNodePool", "status": "True"}]}
    assert not writer.put(event("PodGroup", MODIFIED, echo))
    changed = copy.deepcopy(echo)
    changed["metadata"]["resourceVersion"] = "12"
    changed["spec"]["minMember"] = 3
    assert writer.put(event("PodGroup", MODIFIED, changed))
    same_again = copy.deepcopy(changed)
    same_again["metadata"]["resourceVersion"] = "13"
    assert not writer.put(event("PodGroup", MODIFIED, same_again))
    assert writer.put(event("PodGroup", DELETED, same_again))
    again = copy.deepcopy(changed)
    again["metadata"]["resourceVersion"] = "14"
    assert writer.put(event("PodGroup", MODIFIED, again))  # after a DELETED nothing is taken as known
    other = copy.deepcopy(again)
    other["metadata"].update(uid="uid-pg-a-2", resourceVersion="15")
    assert writer.put(event("PodGroup", MODIFIED, other))  # another incarnation under the same name
    assert writer.echoes == 2
    assert [e.resource_version for e in list(writer.events.queue)] == ["10", "12", "13", "14", "15"]


def test_the_event_writer_drops_a_node_heartbeat_and_keeps_a_change_of_what_the_mirror_reads() -> None:
    """A node's status heartbeat (a newer resourceVersion, nothing the mirror reads changed) is not
    queued: 2,000 nodes send about a hundred a second. A node going not ready is."""
    writer = mirror.EventWriter(fresh("k8s"))
    raw = node_raw("gpu-5", 20)
    assert writer.put(event("Node", ADDED, raw))
    beat = copy.deepcopy(raw)
    beat["metadata"]["resourceVersion"] = "21"
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-27T00:00:40Z"
    assert not writer.put(event("Node", MODIFIED, beat))
    down = copy.deepcopy(beat)
    down["metadata"]["resourceVersion"] = "22"
    down["status"]["conditions"][0]["status"] = "False"
    assert writer.put(event("Node", MODIFIED, down))
    assert writer.put(event("Node", MODIFIED, beat | {"metadata": {**beat["metadata"], "resourceVersion": "23"}}))
    assert writer.echoes == 1
    assert [e.resource_version for e in list(writer.events.queue)] == ["20", "22", "23"]


def test_evicted_pods_marked_for_deletion_then_gone_are_written_in_one_run(django_assert_max_num_queries) -> None:
    """An eviction of hundreds of pods comes back as each pod marked for deletion, then gone,
    interleaved: one run, the same mirror as one by one."""
    Queue.objects.create(name="team-a", gpu_quota=800)
    one, batched = fresh("one-by-one"), fresh("batched")
    start = [event("Pod", ADDED, pod_raw(f"v{i}", 2000 + i, f"w{i}", "gpu-1", "Running", None, "team-a", 0))
             for i in range(200)]
    evicted: list[WatchEvent] = []
    for i in range(201):
        if i < 200:
            evicted.append(event("Pod", MODIFIED, pod_raw(f"v{i}", 3000 + 2 * i, f"w{i}", "gpu-1", "Running", None,
                                                          "team-a", 0, deleting=True)))
        if i >= 1:
            j = i - 1
            evicted.append(event("Pod", DELETED, pod_raw(f"v{j}", 3001 + 2 * j, f"w{j}", "gpu-1", "Running", None,
                                                         "team-a", 0, deleting=True)))
    for cluster in (one, batched):
        mirror.apply_events(start, cluster)
    for e in evicted:
        mirror.apply_event(e, one)
    with django_assert_max_num_queries(40):
        mirror.apply_events(evicted, batched)
    assert view(batched) == view(one)
    assert not Pod.objects.filter(workload__cluster=batched).exists()
    assert Workload.objects.filter(cluster=batched).count() == 1  # pg-a; the implicit workloads went with their pods
