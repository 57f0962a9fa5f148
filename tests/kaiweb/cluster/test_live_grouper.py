"""watch_cluster's pod-grouper (`kaiweb.cluster.podgrouper.controller.LiveGrouper`): pods handed over by the Pod
watch are grouped by worker threads, with no PodGroup list, namespaces and owners read once per
cache period, and PodGroups taken from the PodGroup watch and from what the grouper wrote.

Tests taking ``apiserver`` run on the fake API server and on a real kube-apiserver (marked ``kube``);
those counting requests run on the fake, which records them.
"""

from __future__ import annotations

from typing import Any

import pytest

from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.podgrouper.controller import LiveGrouper, PodGroupCache
from kaiweb.cluster.watch import WatchEvent
from tests.fakes.kube_apiserver import FakeKubeApiServer, kube_apiserver  # noqa: F401 - fixture
from tests.kube.fixtures import _real_server, apiserver, kube_cluster  # noqa: F401 - fixtures
from tests.kube.servers import FakeServer, RealServer

Server = FakeServer | RealServer
QUEUE_LABEL = "kai.scheduler/queue"


@pytest.fixture
def gateway(request: pytest.FixtureRequest) -> KubernetesGateway:
    server = request.getfixturevalue("apiserver" if "apiserver" in request.fixturenames else "kube_apiserver")
    return KubernetesGateway(server.api_client, request_timeout=5.0, backoff_base=0.01, sleep=lambda _: None)


def _namespace(server: Any, name: str, queue: str) -> None:
    server.put("namespaces", {"metadata": {"name": name, "labels": {QUEUE_LABEL: queue}}})


def _synced() -> WatchEvent:
    return WatchEvent("PodGroup", "SYNCED", "", "", "1")


def _requests(server: FakeKubeApiServer, method: str, fragment: str) -> list[str]:
    return [r.path for r in server.requests if r.method == method and fragment in r.path and "watch" not in r.query]


def _group_of(server: Any, pod: str, namespace: str) -> dict[str, Any]:
    name = server.get("pods", pod, namespace)["metadata"]["annotations"]["pod-group-name"]
    group = server.get("podgroups", name, namespace)
    assert group is not None, f"pod {pod} names PodGroup {name}, which does not exist"
    return dict(group)


def test_pods_handed_over_are_grouped_by_the_workers(apiserver: Server, gateway: KubernetesGateway) -> None:  # noqa: F811
    _namespace(apiserver, "ml", "team-a")
    for i in range(6):
        apiserver.add_pod(f"p{i}", namespace="ml", queue=None)
    grouper = LiveGrouper(gateway, workers=2).start()

    for pod in apiserver.list("pods", "ml"):
        grouper.submit(pod)
    assert grouper.drain(timeout=60)
    grouper.stop()

    groups = {_group_of(apiserver, f"p{i}", "ml")["metadata"]["name"] for i in range(6)}
    assert len(groups) == 6  # a bare pod is its own PodGroup
    assert {_group_of(apiserver, f"p{i}", "ml")["spec"]["queue"] for i in range(6)} == {"team-a"}
    assert grouper.counts["pod_groups_written"] == 6
    assert grouper.counts["pods_marked"] == 6
    # The namespace is read once per worker at most; PodGroups only one by one, never listed.
    assert grouper.counts["namespace_reads"] <= 2
    if isinstance(apiserver, FakeServer):
        assert [p for p in _requests(apiserver.fake, "GET", "/podgroups") if p.endswith("/podgroups")] == []


def test_with_the_pod_group_watch_listed_a_new_pod_costs_a_create_and_a_patch(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    _namespace(kube_apiserver, "ml", "team-a")
    first = kube_apiserver.add_pod("first", namespace="ml", queue=None)
    second = kube_apiserver.add_pod("second", namespace="ml", queue=None)
    grouper = LiveGrouper(gateway, workers=1)
    grouper.observe(_synced())

    grouper.group([first])
    before = len(kube_apiserver.requests)
    grouper.group([second])
    made = [(r.method, r.path) for r in kube_apiserver.requests[before:]]

    # The namespace was read for the first pod; the second pod costs its PodGroup and its mark.
    assert [m for m, _ in made] == ["POST", "PATCH"]
    assert made[0][1].endswith("/namespaces/ml/podgroups")
    assert made[1][1].endswith("/namespaces/ml/pods/second")
    assert grouper.counts["pod_group_reads"] == 0
    assert _group_of(kube_apiserver, "second", "ml")["spec"]["queue"] == "team-a"


def test_pods_of_one_owner_read_it_once_and_share_its_pod_group(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    kube_apiserver.register("jobs", "Job", "batch/v1", namespaced=True)
    job = kube_apiserver.put("jobs", {"metadata": {"name": "train", "namespace": "ml",
                                                   "labels": {QUEUE_LABEL: "team-a"}},
                                      "spec": {"parallelism": 3, "completions": 3}})
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": job["metadata"]["uid"],
             "controller": True}
    for i in range(3):
        kube_apiserver.put("pods", {"metadata": {"name": f"train-{i}", "namespace": "ml", "ownerReferences": [owner]},
                                    "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]}})
    grouper = LiveGrouper(gateway, workers=4).start()
    grouper.observe(_synced())

    for pod in kube_apiserver.list("pods", "ml"):
        grouper.submit(pod)
    assert grouper.drain(timeout=30)
    grouper.stop()

    names = {_group_of(kube_apiserver, f"train-{i}", "ml")["metadata"]["name"] for i in range(3)}
    assert len(names) == 1
    # One worker takes the pods of one owner: the Job is read once, its PodGroup written once.
    assert len(_requests(kube_apiserver, "GET", "/jobs/train")) == 1
    assert len(_requests(kube_apiserver, "POST", "/podgroups")) == 1


def test_a_pod_group_made_meanwhile_is_read_and_its_queue_kept(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    pod = kube_apiserver.add_pod("p", namespace="ml", queue="team-a")
    LiveGrouper(gateway, workers=1).group([pod])
    group = _group_of(kube_apiserver, "p", "ml")
    group["spec"]["queue"] = "team-b"  # someone moved it; KAI never moves a PodGroup it made
    kube_apiserver.put("podgroups", group)
    # A grouper that believes it knows every PodGroup, and does not know this one.
    grouper = LiveGrouper(gateway, workers=1)
    grouper.observe(_synced())

    report = grouper.group([pod])  # the pod as first seen, before its mark

    assert report.problems == []
    assert grouper.counts["pod_group_reads"] == 1  # the create found it: read once
    assert _group_of(kube_apiserver, "p", "ml")["spec"]["queue"] == "team-b"
    assert len(_requests(kube_apiserver, "PATCH", "/podgroups/")) == 0


def test_a_pod_group_made_by_hand_is_honoured_before_its_event_arrives(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    kube_apiserver.register("jobs", "Job", "batch/v1", namespaced=True)
    kube_apiserver.add_pod_group("by-hand", {"queue": "team-a", "minMember": 2}, namespace="ml")
    job = kube_apiserver.put("jobs", {"metadata": {"name": "train", "namespace": "ml"}, "spec": {}})
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": job["metadata"]["uid"]}
    pod = kube_apiserver.put("pods", {
        "metadata": {"name": "train-0", "namespace": "ml", "ownerReferences": [ref],
                     "annotations": {"pod-group-name": "by-hand"}, "labels": {QUEUE_LABEL: "team-a"}},
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]}})
    grouper = LiveGrouper(gateway, workers=1)
    grouper.observe(_synced())  # the PodGroup watch listed before the PodGroup was made

    report = grouper.group([pod])

    assert report.skipped == 1
    assert report.grouped == 0
    assert kube_apiserver.get("pods", "train-0", "ml")["metadata"]["annotations"]["pod-group-name"] == "by-hand"
    assert [g["metadata"]["name"] for g in kube_apiserver.list("podgroups", "ml")] == ["by-hand"]


def test_namespace_labels_and_owners_are_read_again_after_the_cache_time(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    now = [0.0]
    _namespace(kube_apiserver, "ml", "team-a")
    grouper = LiveGrouper(gateway, workers=1, cache_seconds=5.0, clock=lambda: now[0])
    grouper.observe(_synced())
    grouper.group([kube_apiserver.add_pod("a", namespace="ml", queue=None)])
    _namespace(kube_apiserver, "ml", "team-b")

    now[0] = 4.0
    grouper.group([kube_apiserver.add_pod("b", namespace="ml", queue=None)])
    now[0] = 10.0
    grouper.group([kube_apiserver.add_pod("c", namespace="ml", queue=None)])

    queues = [_group_of(kube_apiserver, name, "ml")["spec"]["queue"] for name in ("a", "b", "c")]
    assert queues == ["team-a", "team-a", "team-b"]
    assert grouper.counts["namespace_reads"] == 2


def test_the_owner_cache_is_bounded(kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway) -> None:  # noqa: F811
    kube_apiserver.register("jobs", "Job", "batch/v1", namespaced=True)
    grouper = LiveGrouper(gateway, workers=1, cache_limit=2)
    grouper.observe(_synced())
    for i in range(5):
        job = kube_apiserver.put("jobs", {"metadata": {"name": f"j{i}", "namespace": "ml",
                                                       "labels": {QUEUE_LABEL: "team-a"}}, "spec": {}})
        ref = {"apiVersion": "batch/v1", "kind": "Job", "name": f"j{i}", "uid": job["metadata"]["uid"]}
        grouper.group([kube_apiserver.put("pods", {
            "metadata": {"name": f"j{i}-0", "namespace": "ml", "ownerReferences": [ref]},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]}})])
    assert len(grouper.objects) == 2
    assert grouper.counts["grouped"] == 5


def test_the_pod_group_cache_keeps_the_newer_version() -> None:
    cache = PodGroupCache()

    def raw(rv: str, queue: str) -> dict[str, Any]:
        return {"metadata": {"namespace": "ml", "name": "pg", "resourceVersion": rv}, "spec": {"queue": queue}}

    assert cache.get(("ml", "pg")) == (False, None)  # not listed yet: the caller must read it
    cache.put(raw("12", "written-by-us"))
    cache.observe(WatchEvent("PodGroup", "MODIFIED", "ml", "pg", "9", raw=raw("9", "an-older-event")))
    assert (cache.get(("ml", "pg"))[1] or {}).get("spec") == {"queue": "written-by-us"}
    cache.observe(WatchEvent("PodGroup", "DELETED", "ml", "pg", "10", raw=raw("10", "x")))
    assert cache.get(("ml", "pg"))[1] is not None  # made again (rv 12) after that deletion
    cache.observe(WatchEvent("PodGroup", "DELETED", "ml", "pg", "13", raw=raw("13", "x")))
    cache.observe(_synced())
    assert cache.get(("ml", "pg")) == (True, None)  # listed: absent means absent


@pytest.mark.django_db(transaction=True)
def test_watch_cluster_groups_and_mirrors_pods_off_the_watch_threads(
    kube_apiserver: FakeKubeApiServer,  # noqa: F811
) -> None:
    from django.core.management import call_command

    from kaiweb.workloads.models import Pod

    kube_apiserver.add_queue("team-a", {"resources": {}})
    for i in range(5):
        kube_apiserver.add_pod(f"p{i}", namespace="ml")

    # Watching for good: the grouper's workers write the PodGroups, the mirror writer the rows.
    call_command("watch_cluster", "--max-seconds", "3", "--host", kube_apiserver.url, "--timeout-seconds", "1")

    names = {_group_of(kube_apiserver, f"p{i}", "ml")["metadata"]["name"] for i in range(5)}
    rows = dict(Pod.objects.filter(workload__namespace="ml").values_list("name", "workload__name"))
    assert rows == {f"p{i}": _group_of(kube_apiserver, f"p{i}", "ml")["metadata"]["name"] for i in range(5)}
    assert len(names) == 5
