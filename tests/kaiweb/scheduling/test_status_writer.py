"""PodGroup status and events as KAI writes them: the parts that decide what to say."""

from __future__ import annotations

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
