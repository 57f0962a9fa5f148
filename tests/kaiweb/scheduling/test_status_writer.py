"""PodGroup status and events as KAI writes them: the parts that decide what to say."""

from __future__ import annotations

import pytest

from kaiweb.scheduling import status_writer as sw
from kaiweb.workloads.choices import PodState


def test_a_gang_with_fewer_pods_than_its_minimum_is_not_ready_with_kais_message():
    counts = sw.gang_counts(3, [], [(PodState.PENDING, ""), (PodState.GATED, "")])
    assert sw.not_ready_message(counts) == (
        "Job is not ready for scheduling. Waiting for 3 pods, currently 2 exist, 1 are gated")


def test_a_gang_with_enough_pods_is_ready():
    counts = sw.gang_counts(2, [], [(PodState.PENDING, ""), (PodState.RUNNING, "")])
    assert sw.not_ready_message(counts) is None


def test_finished_pods_do_not_count_towards_the_gang():
    counts = sw.gang_counts(2, [], [(PodState.PENDING, ""), (PodState.SUCCEEDED, "")])
    assert sw.not_ready_message(counts) is not None


def test_subgroups_are_counted_per_leaf_and_named_in_the_message():
    subgroups = [{"name": "root", "parent": None}, {"name": "workers", "parent": "root", "minMember": 2},
                 {"name": "master", "parent": "root", "minMember": 1}]
    counts = sw.gang_counts(None, subgroups, [(PodState.PENDING, "workers"), (PodState.PENDING, "master")])
    message = sw.not_ready_message(counts)
    assert message == ("Job is not ready for scheduling. Waiting for 2 pods for SubGroup workers, "
                       "currently 1 exist, 0 are gated.")


def test_our_reason_codes_map_to_kais_unschedulable_reasons():
    assert sw.kai_reason("queue-over-limit") == "OverLimit"
    assert sw.kai_reason("preempt-non-preemptible-over-quota") == "NonPreemptibleOverQuota"
    assert sw.kai_reason("no-node-fits") is None
    assert sw.kai_reason("preemption-delay") == "PreemptionDelayNotElapsed"


def test_a_reason_code_is_matched_whole_not_as_a_part_of_another():
    assert sw.kai_reason("queue-over-limit-soon") is None
    assert sw.kai_reason("not-queue-over-limit") is None
    assert sw.kai_reason("") is None


def test_the_condition_keeps_its_transition_when_it_says_the_same():
    first = sw.desired_conditions([], message="m", reason="OverLimit", node_pool="default")
    assert first[0]["type"] == "UnschedulableOnNodePool"
    assert first[0]["reasons"] == [{"reason": "OverLimit", "message": "m"}]
    assert sw.desired_conditions(first, message="m", reason="OverLimit", node_pool="default") == first


def test_a_new_message_is_a_new_transition():
    first = sw.desired_conditions([], message="m", reason=None, node_pool="default")
    second = sw.desired_conditions(first, message="other", reason=None, node_pool="default")
    assert second[0]["transitionID"] == str(int(first[0]["transitionID"]) + 1)
    assert second[0]["reasons"] == [{"reason": "Unschedulable", "message": "other"}]


def test_line_annotations_say_the_place_and_the_estimate_and_nothing_once_it_does_not_wait():
    got = sw.line_annotations([7, 3], ("2026-01-01T10:00:00Z", None, "Behind 2 jobs of team-a" + "x" * 400))
    assert got["kaiweb.io/shard-position"] == "7"
    assert got["kaiweb.io/queue-position"] == "3"
    assert got["kaiweb.io/start-estimate-p50"] == "2026-01-01T10:00:00Z"
    assert got["kaiweb.io/start-estimate-p80"] is None  # not within the horizon: no time to say
    assert got["kaiweb.io/start-estimate-reason"].startswith("Behind 2 jobs of team-a")
    assert len(got["kaiweb.io/start-estimate-reason"]) == sw.LINE_ANNOTATION_MAX
    not_estimated = sw.line_annotations([1, 1], None)
    assert not_estimated["kaiweb.io/start-estimate-p50"] is None
    assert not_estimated["kaiweb.io/queue-position"] == "1"
    assert set(sw.line_annotations(None, None).values()) == {None}


class RecordingGateway:
    def __init__(self) -> None:
        self.calls: list[list[tuple[str, str, str, dict]]] = []

    def annotate_pod_groups(self, changes):
        self.calls.append(list(changes))
        return [None] * len(changes)


def _group(name: str, annotations: dict[str, str] | None = None) -> dict:
    return {"metadata": {"namespace": "ns", "name": name, "uid": f"u-{name}", "annotations": annotations or {}},
            "line_key": f"w-{name}"}


@pytest.mark.django_db
def test_line_writes_are_bounded_per_cycle_those_that_stopped_waiting_first_then_the_head_of_the_line():
    from kaiweb.cluster.models import Cluster
    from kaiweb.scheduling.write_back import WriteBackReport, _write_annotations

    cluster = Cluster.objects.create(name="c")
    listed = {("ns", n): _group(n) for n in ("a", "b", "c", "d")}
    listed[("ns", "gone")] = _group("gone", {"kaiweb.io/queue-position": "1", "kaiweb.io/shard-position": "1"})
    listed[("ns", "same")] = _group("same", {"kaiweb.io/queue-position": "1", "kaiweb.io/shard-position": "9"})
    line = {"w-a": sw.line_annotations([4, 2], None), "w-b": sw.line_annotations([2, 1], None),
            "w-c": sw.line_annotations([3, 1], None), "w-d": sw.line_annotations([5, 3], None),
            "w-same": sw.line_annotations([9, 1], None)}
    gateway, report = RecordingGateway(), WriteBackReport()
    _write_annotations(gateway, cluster, listed, {}, line, report, stamps_budget=50, line_budget=3)
    [call] = gateway.calls
    # The one that no longer waits loses its place; then the two nearest the head; "same" says it already.
    assert {name: wanted for _, name, _, wanted in call} == {
        "gone": {"kaiweb.io/queue-position": None, "kaiweb.io/shard-position": None},
        "b": {"kaiweb.io/shard-position": "2", "kaiweb.io/queue-position": "1"},
        "c": {"kaiweb.io/shard-position": "3", "kaiweb.io/queue-position": "1"}}
    assert report.pod_group_lines == 3
    assert report.pod_group_stamps == 0
