"""The list + watch loop (kaiweb.cluster.watch) with the official client, on the fake API server and,
for the tests taking ``apiserver``, on a real kube-apiserver too (marked ``kube``)."""

from __future__ import annotations

import random
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.backends.types import ObservedPod
from kaiweb.cluster.watch import ClusterWatcher, ResourceWatch, WatchEvent, resource_kinds
from tests.fakes.kube_apiserver import FakeKubeApiServer, kube_apiserver  # noqa: F401 - fixture
from tests.kube.fixtures import _real_server, apiserver, kube_cluster  # noqa: F401 - fixtures
from tests.kube.servers import FakeServer, RealServer

Server = FakeServer | RealServer


class Recorder:
    """A callback that keeps what it was handed, optionally failing once on a given event."""

    def __init__(self, fail_on: tuple[str, str] | None = None) -> None:
        self.events: list[WatchEvent] = []
        self.fail_on = fail_on

    def __call__(self, event: WatchEvent) -> None:
        if self.fail_on == (event.type, event.name):
            self.fail_on = None
            raise RuntimeError("the mirror's database write failed")
        self.events.append(event)

    def changes(self) -> list[tuple[str, str]]:
        return [(e.type, e.name) for e in self.events if e.type != "SYNCED"]

    def clear(self) -> None:
        self.events.clear()


@pytest.fixture
def gateway(request: pytest.FixtureRequest) -> KubernetesGateway:
    # On the server the test asked for: ``apiserver`` (fake, then real) or the fake alone.
    server = request.getfixturevalue("apiserver" if "apiserver" in request.fixturenames else "kube_apiserver")
    return KubernetesGateway(server.api_client, request_timeout=2.0, backoff_base=0.01, sleep=lambda _: None)


def _pod_watch(gateway: KubernetesGateway, recorder: Recorder) -> ResourceWatch:
    (kind,) = resource_kinds(gateway, ["Pod"])
    return ResourceWatch(gateway, kind, recorder, timeout_seconds=1, backoff_base=0.01, sleep=lambda _: None)


def test_the_first_step_lists_and_hands_out_every_object_then_synced(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    apiserver.add_pod("a")
    apiserver.add_pod("b", namespace="ml")
    apiserver.add_pod("not-ours", scheduler="default-scheduler")
    recorder = Recorder()
    watch = _pod_watch(gateway, recorder)

    assert watch.step() is True

    assert recorder.changes() == [("ADDED", "a"), ("ADDED", "b")]
    assert recorder.events[-1].type == "SYNCED"
    assert apiserver.resource_version_is_current(watch.resource_version)
    assert isinstance(recorder.events[0].obj, ObservedPod)
    assert recorder.events[1].namespace == "ml"


def test_the_watch_sees_additions_changes_and_deletions(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    kube_apiserver.add_pod("a")
    kube_apiserver.add_pod("b")
    recorder = Recorder()
    watch = _pod_watch(gateway, recorder)
    watch.step()
    recorder.clear()
    kube_apiserver.add_pod("c")
    pod = kube_apiserver.get("pods", "a")
    pod["spec"]["nodeName"] = "gpu-1"
    kube_apiserver.put("pods", pod)
    kube_apiserver.remove("pods", "b")

    assert watch.step() is True

    assert recorder.changes() == [("ADDED", "c"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert recorder.events[1].obj.node == "gpu-1"
    assert recorder.events[2].obj.name == "b"  # a deletion carries the last state
    assert watch.resource_version == str(kube_apiserver.resource_version)
    assert set(watch.known) == {("default", "a"), ("default", "c")}
    # The watch asked for bookmarks and resumed from the list's resourceVersion.
    (request,) = [r for r in kube_apiserver.requests if "watch" in r.query]
    assert request.query["allowWatchBookmarks"][0].lower() == "true"
    assert request.query["resourceVersion"] == [str(kube_apiserver.resource_version - 3)]


def test_after_410_gone_it_relists_without_losing_or_duplicating_objects(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    for name in ("keep", "change", "drop"):
        kube_apiserver.add_pod(name)
    recorder = Recorder()
    watch = _pod_watch(gateway, recorder)
    watch.step()
    recorder.clear()
    # Changes happen while the watcher is away, then the server compacts its history.
    kube_apiserver.add_pod("new")
    pod = kube_apiserver.get("pods", "change")
    pod["status"]["phase"] = "Running"
    kube_apiserver.put("pods", pod)
    kube_apiserver.remove("pods", "drop")
    kube_apiserver.compact()

    assert watch.step() is True

    assert recorder.changes() == [("MODIFIED", "change"), ("ADDED", "new"), ("DELETED", "drop")]
    assert recorder.events[-1].type == "SYNCED"
    assert watch.relists == 2
    assert watch.resource_version == str(kube_apiserver.resource_version)
    assert set(watch.known) == {("default", "keep"), ("default", "change"), ("default", "new")}
    # And the watch goes on from the new list's resourceVersion.
    recorder.clear()
    kube_apiserver.add_pod("later")
    watch.step()
    assert recorder.changes() == [("ADDED", "later")]


def test_bookmarks_advance_the_resource_version_without_events(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    kube_apiserver.add_pod("a")
    recorder = Recorder()
    watch = _pod_watch(gateway, recorder)
    watch.step()
    recorder.clear()
    listed_rv = watch.resource_version
    for i in range(3):
        kube_apiserver.add_node(f"n{i}")  # other kinds move the shared resourceVersion
    bookmark_rv = kube_apiserver.bookmark("pods")

    watch.step()

    assert recorder.events == []
    assert int(watch.resource_version) == bookmark_rv > int(listed_rv)


def test_a_watch_cut_abruptly_reconnects_from_the_last_event_without_duplicates(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    recorder = Recorder()
    watch = _pod_watch(gateway, recorder)
    watch.step()
    for name in ("p1", "p2", "p3"):
        kube_apiserver.add_pod(name)
    kube_apiserver.break_next_watch(after_events=1)

    assert watch.step() is False  # the stream broke
    assert watch.errors == 1
    assert watch.step() is True

    assert recorder.changes() == [("ADDED", "p1"), ("ADDED", "p2"), ("ADDED", "p3")]
    assert watch.relists == 1


def test_replayed_events_are_not_handed_out_twice(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    recorder = Recorder()
    watch = _pod_watch(gateway, recorder)
    watch.step()
    start = watch.resource_version
    kube_apiserver.add_pod("p1")
    watch.step()
    # A server may replay from an older version after a reconnect.
    watch.resource_version = start
    kube_apiserver.add_pod("p2")

    watch.step()

    assert recorder.changes() == [("ADDED", "p1"), ("ADDED", "p2")]


def test_server_errors_on_the_watch_are_survived(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    recorder = Recorder()
    watch = _pod_watch(gateway, recorder)
    watch.step()
    kube_apiserver.add_pod("p1")
    kube_apiserver.fail_next(1, status=500, path_contains="/pods")

    assert watch.step() is False
    assert watch.step() is True

    assert recorder.changes() == [("ADDED", "p1")]


def test_a_failing_callback_gets_the_event_again(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    recorder = Recorder(fail_on=("ADDED", "p2"))
    watch = _pod_watch(gateway, recorder)
    watch.step()
    apiserver.add_pod("p1")
    apiserver.add_pod("p2")

    with pytest.raises(RuntimeError):
        watch.step()
    watch.step()

    assert recorder.changes() == [("ADDED", "p1"), ("ADDED", "p2")]


def test_an_unreadable_pod_arrives_as_a_problem(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    recorder = Recorder()
    watch = _pod_watch(gateway, recorder)
    watch.step()
    apiserver.add_pod("bad", annotations={"gpu-fraction": "1.5"})

    watch.step()

    (event,) = [e for e in recorder.events if e.type != "SYNCED"]
    assert event.obj is None
    assert event.problem is not None
    assert event.problem.field == "metadata.annotations[gpu-fraction]"


def test_the_cluster_watcher_follows_every_kind_for_a_bounded_time(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    apiserver.add_node("n1")
    apiserver.add_pod("p1")
    apiserver.add_pod_group("pg", {"queue": "team-a", "minMember": 2})
    apiserver.add_queue("team-a", {"resources": {}})
    recorder = Recorder()
    watcher = ClusterWatcher(gateway, recorder, timeout_seconds=1, backoff_base=0.01)

    watcher.run_once()

    assert sorted((e.kind, e.name) for e in recorder.events if e.type == "ADDED") == [
        ("Node", "n1"), ("Pod", "p1"), ("PodGroup", "pg"), ("Queue", "team-a")]
    assert sorted(e.kind for e in recorder.events if e.type == "SYNCED") == ["Node", "OtherPod", "Pod", "PodGroup", "Queue"]


def test_the_cluster_watcher_runs_its_threads_until_the_deadline(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    apiserver.add_node("n1")
    recorder = Recorder()
    watcher = ClusterWatcher(gateway, recorder, kinds=["Node", "Queue"], timeout_seconds=1, backoff_base=0.01)

    watcher.run(max_seconds=0.3)

    assert ("ADDED", "n1") in recorder.changes()
    assert watcher.stop_event.is_set()


def test_unknown_kinds_are_refused_by_name(gateway: KubernetesGateway) -> None:
    with pytest.raises(ValueError, match=r"kinds: unknown kind\(s\) \['Deployment'\]"):
        resource_kinds(gateway, ["Pod", "Deployment"])


@pytest.mark.django_db
def test_watch_cluster_command_once_against_a_server(
    kube_apiserver: FakeKubeApiServer,  # noqa: F811
) -> None:
    from kaiweb.cluster.models import Node, UnreadableObject

    kube_apiserver.add_node("n1")
    kube_apiserver.add_pod("p1")
    out = StringIO()

    call_command("watch_cluster", "--once", "--host", kube_apiserver.url, "--kinds", "Node,Pod",
                 "--verbosity", "2", stdout=out)

    text = out.getvalue()
    assert "watching Node, Pod on Kubernetes v1.31.0-fake" in text
    assert "ADDED Node n1" in text
    assert "ADDED Pod default/p1" in text
    # The pod-grouper gave the pod its PodGroup: the pod's update is the one MODIFIED event.
    assert "watch ended: ADDED 2, MODIFIED 1, SYNCED 2" in text
    (group,) = kube_apiserver.list("podgroups")
    assert kube_apiserver.get("pods", "p1", "default")["metadata"]["annotations"]["pod-group-name"] == \
        group["metadata"]["name"]
    # The changes reached the database mirror: the node, and the pod waiting (for its queue).
    assert list(Node.objects.filter(cluster__name="kubernetes").values_list("name", flat=True)) == ["n1"]
    assert UnreadableObject.objects.get(name="p1").deferred


def test_watch_cluster_command_stops_after_max_seconds(
    kube_apiserver: FakeKubeApiServer,  # noqa: F811
) -> None:
    kube_apiserver.add_queue("team-a", {"resources": {}})
    out = StringIO()

    call_command("watch_cluster", "--max-seconds", "0.5", "--host", kube_apiserver.url, "--kinds", "Queue",
                 "--log-only", stdout=out)

    assert "watch ended: ADDED 1, SYNCED 1" in out.getvalue()


@pytest.mark.django_db
def test_watch_cluster_command_refuses_bad_options(kube_apiserver: FakeKubeApiServer, settings: object) -> None:  # noqa: F811
    settings.KAI_CLUSTER_BACKEND = "simulated"  # type: ignore[attr-defined]
    with pytest.raises(CommandError, match="needs KAI_CLUSTER_BACKEND=kubernetes"):
        call_command("watch_cluster", "--once")
    with pytest.raises(CommandError, match="unknown kind"):
        call_command("watch_cluster", "--once", "--host", kube_apiserver.url, "--kinds", "Pods")
    with pytest.raises(CommandError, match="--max-seconds must be greater than 0"):
        call_command("watch_cluster", "--host", kube_apiserver.url, "--max-seconds", "0")


def test_a_410_answer_to_the_watch_request_itself_also_relists(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    kube_apiserver.add_pod("a")
    recorder = Recorder()
    watch = _pod_watch(gateway, recorder)
    watch.step()
    kube_apiserver.add_pod("b")
    kube_apiserver.fail_next(1, status=410, path_contains="/pods")

    assert watch.step() is True

    assert recorder.changes() == [("ADDED", "a"), ("ADDED", "b")]
    assert watch.relists == 2


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_mirror_matches_the_cluster_after_random_changes_compactions_and_cut_streams(seed: int) -> None:
    rng = random.Random(seed)
    mirror: dict[tuple[str, str], str] = {}

    def apply(event: WatchEvent) -> None:
        key = (event.namespace, event.name)
        if event.type == "ADDED":
            assert key not in mirror, f"duplicate ADDED for {key}"
            mirror[key] = event.resource_version
        elif event.type == "MODIFIED":
            assert mirror.get(key) not in (None, event.resource_version), f"repeated or unknown MODIFIED {key}"
            mirror[key] = event.resource_version
        elif event.type == "DELETED":
            assert mirror.pop(key, None) is not None, f"DELETED for unknown {key}"

    with FakeKubeApiServer(watch_timeout_cap=0.05) as server:
        gateway = KubernetesGateway(server.api_client, backoff_base=0.01, sleep=lambda _: None)
        (kind,) = resource_kinds(gateway, ["Pod"])
        watch = ResourceWatch(gateway, kind, apply, timeout_seconds=1, sleep=lambda _: None)
        names = [f"p{i}" for i in range(8)]
        for _ in range(12):
            for _ in range(rng.randint(1, 5)):
                name = rng.choice(names)
                pod = server.get("pods", name)
                roll = rng.random()
                if pod is None:
                    server.add_pod(name, namespace=rng.choice(["a", "b"]) if roll < 0.5 else "default")
                elif roll < 0.3:
                    server.remove("pods", name, pod["metadata"]["namespace"])
                else:
                    pod["status"]["phase"] = rng.choice(["Pending", "Running"])
                    pod["metadata"].setdefault("labels", {})["tick"] = str(rng.random())
                    server.put("pods", pod)
                server.add_node(f"n{rng.randint(0, 3)}")  # moves the shared resourceVersion
            fault = rng.random()
            if fault < 0.25:
                server.compact()
            elif fault < 0.45:
                server.break_next_watch(after_events=rng.randint(0, 2))
            elif fault < 0.55:
                server.bookmark("pods")
            watch.step()
        while not watch.step():
            pass  # a final step that went through
        watch.step()

        expected = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["metadata"]["resourceVersion"]
                    for p in server.list("pods")}
    assert mirror == expected
    assert watch.relists > 1
    assert watch.errors > 0
