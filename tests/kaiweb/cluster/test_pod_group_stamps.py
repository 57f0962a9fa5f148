"""KAI's stamps on PodGroups (last start, last eviction, stale since): read as KAI reads them, merged
with the workloads (the later time wins), written back as KAI writes them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from kaiweb.cluster import mirror, stamps
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.backends.kubernetes.parsing import parse_pod_group, read_stamp, stamp_text
from kaiweb.cluster.backends.types import ObservedPodGroup
from kaiweb.cluster.models import Cluster, SchedulingShard
from kaiweb.cluster.watch import ADDED, MODIFIED, WatchEvent
from kaiweb.core import clock
from kaiweb.scheduling import write_back
from kaiweb.scheduling.choices import DecisionKind, DecisionStatus
from kaiweb.workloads.choices import PodState
from kaiweb.workloads.models import Workload
from tests.factories import DecisionFactory, PodFactory, SchedulingCycleFactory, recorded_of
from tests.fakes.kube_apiserver import FakeKubeApiServer, kube_apiserver  # noqa: F401 - fixture
from tests.kaiweb.cluster.test_mirror import cluster, gateway  # noqa: F401 - fixtures

START = "kai.scheduler/last-start-timestamp"
EVICTION = "kai.scheduler/last-eviction-timestamp"
STALE = "kai.scheduler/stale-podgroup-timestamp"
T = datetime(2025, 3, 1, 10, 0, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
QUEUE = {"priority": 100, "resources": {"gpu": {"quota": 4, "limit": -1, "overQuotaWeight": 1},
                                        "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}


def _pg(annotations: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "pg", "namespace": "ns", "uid": "u1", "annotations": annotations},
            "spec": {"queue": "q"}}


def _row(start: datetime | None = None, eviction: datetime | None = None,
         stale: datetime | None = None) -> dict[str, datetime | None]:
    return {"last_start_at": start, "last_eviction_at": eviction, "stale_since": stale}


# -- reading ------------------------------------------------------------------------------------


def test_the_stamps_are_read_as_kai_reads_them():
    pg = parse_pod_group(_pg({START: "2025-03-01T10:00:00Z", EVICTION: "2025-03-01T12:00:00+02:00",
                              STALE: "2025-03-01T10:00:00.25Z"}))

    assert isinstance(pg, ObservedPodGroup)
    assert (pg.last_start_at, pg.last_eviction_at, pg.stale_since) == (T, T, T + timedelta(seconds=0.25))
    assert pg.notes == ()


def test_a_pod_group_without_stamps_has_none():
    pg = parse_pod_group(_pg({}))

    assert (pg.last_start_at, pg.last_eviction_at, pg.stale_since, pg.notes) == (None, None, None, ())


@pytest.mark.parametrize("text", ["yesterday", "2025-03-01", "2025-03-01 10:00:00Z", "2025-03-01T10:00:00",
                                  "2025-13-01T10:00:00Z", "1740823200"])
def test_a_stamp_that_is_not_an_rfc3339_time_is_ignored_as_kai_ignores_it_with_a_note_naming_the_field(text):
    pg = parse_pod_group(_pg({START: text, STALE: "2025-03-01T10:00:00Z"}))

    assert isinstance(pg, ObservedPodGroup)  # still scheduled, as KAI schedules it
    assert (pg.last_start_at, pg.stale_since) == (None, T)
    assert pg.notes == (f"PodGroup ns/pg: metadata.annotations[{START}] = {text!r} must be an RFC 3339 time "
                        "such as 2025-01-02T15:04:05Z; ignored, as KAI ignores it",)


def test_a_stamp_is_written_as_go_writes_time_rfc3339_of_a_utc_time():
    two_hours_east = timezone(timedelta(hours=2))

    assert stamp_text(datetime(2025, 3, 1, 12, 0, 0, 999_999, tzinfo=two_hours_east)) == "2025-03-01T10:00:00Z"
    assert read_stamp(stamp_text(T)) == T


# -- the rule: the later time wins ----------------------------------------------------------------


def test_where_the_row_and_the_pod_group_disagree_the_later_time_wins():
    group = parse_pod_group(_pg({START: stamp_text(T), EVICTION: stamp_text(T), STALE: stamp_text(T)}))

    assert stamps.merged(_row(start=T - HOUR, eviction=T + HOUR, stale=None), group) == {
        "last_start_at": T, "stale_since": T}
    # Our own stamp read back, to the second, is no news.
    assert stamps.merged(_row(start=T + timedelta(seconds=0.7), eviction=T, stale=T), group) == {}


def test_the_write_back_writes_only_times_later_than_the_pod_group_says():
    annotations = {START: "2025-03-01T10:00:00Z", EVICTION: "2025-03-01T10:00:00Z"}

    wanted = stamps.annotations_wanted(_row(start=T + timedelta(seconds=0.7), eviction=T + HOUR, stale=T),
                                       annotations)

    assert wanted == {EVICTION: "2025-03-01T11:00:00Z", STALE: "2025-03-01T10:00:00Z"}


def test_a_later_stamp_on_the_pod_group_is_left_for_the_mirror_to_take():
    later = stamp_text(T + HOUR)

    assert stamps.annotations_wanted(_row(T, T, T), {START: later, EVICTION: later, STALE: later}) == {}


def test_a_gang_no_longer_stale_loses_its_stale_stamp_and_a_start_or_an_eviction_is_never_taken_away():
    annotations = {START: stamp_text(T), EVICTION: stamp_text(T), STALE: stamp_text(T)}

    assert stamps.annotations_wanted(_row(), annotations) == {STALE: None}


def test_a_stamp_that_cannot_be_read_is_replaced_or_taken_away_as_kai_does():
    wanted = stamps.annotations_wanted(_row(start=T), {START: "soon", EVICTION: "later"})

    assert wanted == {START: "2025-03-01T10:00:00Z", EVICTION: None}


# -- the mirror ------------------------------------------------------------------------------------


def _times(name: str) -> tuple[datetime | None, datetime | None, datetime | None]:
    w = Workload.objects.get(name=name)
    return (w.last_start_at, w.last_eviction_at, w.stale_since)


def _stamped_group(server: FakeKubeApiServer, name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return server.put("podgroups", {"metadata": {"name": name, "namespace": "default", "annotations": annotations},
                                    "spec": {"queue": "team-a", "minMember": 1}})


@pytest.mark.django_db
def test_a_full_sync_takes_kais_stamps_into_the_workload(kube_apiserver: FakeKubeApiServer,  # noqa: F811
                                                        gateway: KubernetesGateway, cluster: Cluster) -> None:  # noqa: F811
    kube_apiserver.add_queue("team-a", QUEUE)
    _stamped_group(kube_apiserver, "train", {START: stamp_text(T), EVICTION: stamp_text(T + HOUR),
                                             STALE: stamp_text(T - HOUR)})

    mirror.sync_full(gateway, cluster)

    assert _times("train") == (T, T + HOUR, T - HOUR)


def _watch_event(type_: str, raw: dict[str, Any]) -> WatchEvent:
    meta = raw["metadata"]
    return WatchEvent("PodGroup", type_, meta["namespace"], meta["name"], meta.get("resourceVersion", ""),
                      parse_pod_group(raw), None, raw)


@pytest.mark.django_db
def test_a_pod_group_the_watcher_sees_added_brings_its_later_stamps_and_a_change_brings_none(
        kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster) -> None:  # noqa: F811
    kube_apiserver.add_queue("team-a", QUEUE)
    _stamped_group(kube_apiserver, "train", {})
    mirror.sync_full(gateway, cluster)
    Workload.objects.filter(name="train").update(last_start_at=T + HOUR, last_eviction_at=T - HOUR)
    raw = _stamped_group(kube_apiserver, "train", {START: stamp_text(T), EVICTION: stamp_text(T),
                                                   STALE: stamp_text(T)})

    # A change on the watch may predate what the cycle wrote since (a gang no longer stale): not taken.
    mirror.apply_events([_watch_event(MODIFIED, raw)], cluster)
    assert _times("train") == (T + HOUR, T - HOUR, None)

    # What the watcher lists when it starts (what KAI left): taken where later.
    mirror.apply_events([_watch_event(ADDED, raw)], cluster)
    assert _times("train") == (T + HOUR, T, T)  # our later start stays; KAI's later eviction and staleness come


@pytest.mark.django_db
def test_the_stamps_of_another_incarnation_of_the_pod_group_are_not_taken(
        kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster) -> None:  # noqa: F811
    kube_apiserver.add_queue("team-a", QUEUE)
    _stamped_group(kube_apiserver, "train", {})
    mirror.sync_full(gateway, cluster)
    Workload.objects.filter(name="train").update(uid="an-older-one")
    group = parse_pod_group(_stamped_group(kube_apiserver, "train", {START: stamp_text(T)}))

    assert mirror.merge_stamps(cluster, [group]) == 0
    assert _times("train") == (None, None, None)


@pytest.mark.django_db
def test_an_applied_eviction_stamps_its_workload_and_never_moves_a_later_stamp_back(cluster: Cluster) -> None:  # noqa: F811
    shard = SchedulingShard.objects.get(cluster=cluster)
    evicted = PodFactory(workload__cluster=cluster, state=PodState.RUNNING)
    ahead = PodFactory(workload__cluster=cluster, state=PodState.RUNNING)
    Workload.objects.filter(pk=ahead.workload_id).update(last_eviction_at=clock.now() + HOUR)
    failed = PodFactory(workload__cluster=cluster, state=PodState.RUNNING)
    cycle = SchedulingCycleFactory(shard=shard)
    for pod, status in ((evicted, DecisionStatus.APPLIED), (ahead, DecisionStatus.APPLIED),
                        (failed, DecisionStatus.FAILED)):
        DecisionFactory(cycle=cycle, kind=DecisionKind.EVICT, status=status, pod=pod)
    before = clock.now()

    write_back.record_actions(list(cycle.decisions.filter(status=DecisionStatus.APPLIED)))

    assert Workload.objects.get(pk=evicted.workload_id).last_eviction_at >= before
    assert Workload.objects.get(pk=ahead.workload_id).last_eviction_at > clock.now()
    assert Workload.objects.get(pk=failed.workload_id).last_eviction_at is None


@pytest.mark.django_db
def test_the_write_back_puts_the_workloads_stamps_on_its_pod_group_once(
        kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster) -> None:  # noqa: F811
    kube_apiserver.add_queue("team-a", QUEUE)
    _stamped_group(kube_apiserver, "train", {"kept": "yes"})
    mirror.sync_full(gateway, cluster)
    shard = SchedulingShard.objects.get(cluster=cluster)
    Workload.objects.filter(name="train").update(last_start_at=T, last_eviction_at=T + HOUR,
                                                 stale_since=T + 2 * HOUR)

    def no_listing() -> None:
        raise AssertionError("the write-back judges from the mirror, it lists no PodGroups")

    gateway.list_pod_groups_raw = no_listing  # type: ignore[method-assign]  # the write-back must not call it
    first = write_back.write_back(gateway, *recorded_of(SchedulingCycleFactory(shard=shard)))

    assert (first.pod_group_stamps, first.errors) == (1, [])
    annotations = kube_apiserver.get("podgroups", "train", "default")["metadata"]["annotations"]
    assert annotations == {"kept": "yes", START: "2025-03-01T10:00:00Z", EVICTION: "2025-03-01T11:00:00Z",
                           STALE: "2025-03-01T12:00:00Z"}
    # The row keeps what was written, so the next cycle judges without listing the PodGroups.
    assert Workload.objects.get(name="train").pod_group_said["annotations"] == {
        k: v for k, v in annotations.items() if k != "kept"}
    assert write_back.write_back(gateway, *recorded_of(SchedulingCycleFactory(shard=shard))).pod_group_stamps == 0  # steady

    Workload.objects.filter(name="train").update(stale_since=None)  # the gang is whole again
    write_back.write_back(gateway, *recorded_of(SchedulingCycleFactory(shard=shard)))

    annotations = kube_apiserver.get("podgroups", "train", "default")["metadata"]["annotations"]
    assert STALE not in annotations
    assert annotations[START] == "2025-03-01T10:00:00Z"


@pytest.mark.django_db
def test_a_burst_of_stamps_is_written_over_several_cycles_at_most_the_budget_each(
        kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster,  # noqa: F811
        settings: Any) -> None:
    settings.KAI_STAMP_WRITES_PER_CYCLE = 2
    kube_apiserver.add_queue("team-a", QUEUE)
    for name in ("a", "b", "c"):
        _stamped_group(kube_apiserver, name, {})
    mirror.sync_full(gateway, cluster)
    shard = SchedulingShard.objects.get(cluster=cluster)
    Workload.objects.filter(name__in=("a", "b", "c")).update(last_start_at=T)

    def started() -> list[str]:
        return [n for n in ("a", "b", "c")
                if START in (kube_apiserver.get("podgroups", n, "default")["metadata"].get("annotations") or {})]

    assert write_back.write_back(gateway, *recorded_of(SchedulingCycleFactory(shard=shard))).pod_group_stamps == 2
    assert started() == ["a", "b"]
    assert write_back.write_back(gateway, *recorded_of(SchedulingCycleFactory(shard=shard))).pod_group_stamps == 1
    assert started() == ["a", "b", "c"]
    assert write_back.write_back(gateway, *recorded_of(SchedulingCycleFactory(shard=shard))).pod_group_stamps == 0


def test_a_cycle_that_bound_or_evicted_writes_a_tenth_of_the_stamp_budget(settings: Any) -> None:
    settings.KAI_STAMP_WRITES_PER_CYCLE = 200
    assert write_back.stamp_budget(SchedulingCycleFactory.build(binds=0, evictions=0)) == 200
    assert write_back.stamp_budget(SchedulingCycleFactory.build(binds=4000, evictions=0)) == 20
    assert write_back.stamp_budget(SchedulingCycleFactory.build(binds=0, evictions=3)) == 20
    settings.KAI_STAMP_WRITES_PER_CYCLE = 5
    assert write_back.stamp_budget(SchedulingCycleFactory.build(binds=1, evictions=0)) == 1


# -- the pod-grouper leaves the stamps alone ------------------------------------------------------


def test_the_pod_grouper_does_not_rewrite_a_pod_group_for_the_stamps_beside_its_annotations(
        kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway) -> None:  # noqa: F811
    manifest = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                "metadata": {"name": "pg-train", "namespace": "default", "labels": {"app": "train"},
                             "annotations": {"kai.scheduler/top-owner-metadata": "name: train\n"}},
                "spec": {"queue": "team-a", "minMember": 2}}
    gateway.upsert_pod_group(manifest)
    current = kube_apiserver.get("podgroups", "pg-train", "default")
    current["metadata"]["annotations"].update({START: stamp_text(T), STALE: stamp_text(T)})
    kube_apiserver.put("podgroups", current)
    before = len(kube_apiserver.requests)

    gateway.upsert_pod_group(manifest)

    assert [r.method for r in kube_apiserver.requests[before:]] == ["POST", "GET"]  # no PATCH
    assert kube_apiserver.get("podgroups", "pg-train", "default")["metadata"]["annotations"][START] == stamp_text(T)


@pytest.mark.django_db
def test_the_write_back_judges_pod_group_status_from_the_mirror_and_writes_a_condition_once(
        kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster) -> None:  # noqa: F811
    """The scheduling condition is judged against what the PodGroup said when the mirror saw it, then
    against what the write-back wrote: written once, not again while it says the same, and a PodGroup
    that already carries it (a cluster moved from KAI) is not written at all."""
    from kaiweb.scheduling.models import PendingReason
    from tests.factories import PendingReasonFactory

    kube_apiserver.add_queue("team-a", QUEUE)
    for name in ("waits", "carried"):
        _stamped_group(kube_apiserver, name, {})
        kube_apiserver.add_pod(f"{name}-0", queue=None, pod_group=name)
    mirror.sync_full(gateway, cluster)
    shard = SchedulingShard.objects.get(cluster=cluster)
    gateway.list_pod_groups_raw = lambda: pytest.fail("no PodGroup listing")  # type: ignore[method-assign]  # must not be called

    def cycle() -> Any:
        c = SchedulingCycleFactory(shard=shard)
        PendingReason.objects.update(is_current=False)
        for w in Workload.objects.filter(name__in=("waits", "carried")):
            PendingReasonFactory(workload=w, cycle=c, reason="no-node-fits", message="no node has 1 free GPU")
        return c

    first = write_back.write_back(gateway, *recorded_of(cycle()))
    assert (first.pod_group_statuses, first.errors) == (2, [])
    conditions = kube_apiserver.get("podgroups", "waits", "default")["status"]["schedulingConditions"]
    assert [c["message"] for c in conditions] == ["no node has 1 free GPU"]
    assert Workload.objects.get(name="waits").pod_group_said["conditions"] == conditions
    assert write_back.write_back(gateway, *recorded_of(cycle())).pod_group_statuses == 0  # says the same: not written again

    # A PodGroup first seen carrying that condition (written by KAI before the move) is left as it is.
    Workload.objects.filter(name="carried").delete()
    mirror.sync_full(gateway, cluster)
    assert Workload.objects.get(name="carried").pod_group_said["conditions"] == \
        kube_apiserver.get("podgroups", "carried", "default")["status"]["schedulingConditions"]
    assert write_back.write_back(gateway, *recorded_of(cycle())).pod_group_statuses == 0
