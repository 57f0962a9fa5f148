"""Reclaim rules (KAI-SEMANTICS §3.7) and min-runtime resolution (§4.4), with their worked examples."""

from __future__ import annotations

import math

import pytest

from scheduler_core.proportion import GPU, UNLIMITED, QueueAttrs, compute_fair_shares
from scheduler_core.reclaimable import (
    can_reclaim,
    check_saturation,
    filter_victim_queue,
    fits_reclaim_strategy,
    leveled_queues,
    lowest_common_ancestor,
    min_runtime_end,
    path_to_root,
    preempt_min_runtime,
    reclaim_min_runtime,
    reclaim_victims,
    saturation_multiplier,
    saturation_ratio,
    validate_reclaim,
)

U = UNLIMITED


def gq(
    name: str,
    *,
    parent: str | None = None,
    quota: float = 0,
    fair: float = 0,
    allocated: float = 0,
    allocated_np: float = 0,
    limit: float = U,
    request: float = 0,
    priority: int = 100,
    creation: float = 0,
    preempt: float | None = None,
    reclaim: float | None = None,
) -> QueueAttrs:
    """GPU-governed queue, CPU/memory quota and limit -1 (as in the worked examples)."""
    return QueueAttrs(
        name=name, parent=parent, priority=priority, creation=creation,
        deserved=[U, U, quota], limit=[U, U, limit], weight=[1, 1, 1],
        request=[0, 0, request], allocated=[0, 0, allocated], allocated_np=[0, 0, allocated_np],
        fair=[0, 0, fair], preempt_min_runtime=preempt, reclaim_min_runtime=reclaim,
    )


def qmap(*qs: QueueAttrs) -> dict[str, QueueAttrs]:
    return {q.name: q for q in qs}


def gpus(n: float) -> list[float]:
    return [0.0, 0.0, float(n)]


# ---- the worked reclaim example of §3.7 ------------------------------------------------------


def test_worked_reclaim_example_first_round():
    qs = qmap(gq("qA", quota=2, allocated=8, request=12, creation=1), gq("qB", quota=2, request=2, creation=2))
    compute_fair_shares(qs, [8000, 64e9, 8])
    assert (qs["qA"].fair[GPU], qs["qB"].fair[GPU]) == (6, 2)
    assert can_reclaim(qs, "qB", gpus(2)).ok
    pre = filter_victim_queue(qs, "qB", "qA", gpus(2))
    assert (pre.ok, pre.code) == (True, "victim-over-quota")
    verdict, outcome = validate_reclaim(qs, "qB", gpus(2), [("qA", gpus(1)), ("qA", gpus(1))])
    assert verdict.ok
    assert [c.remaining_before[GPU] for c in outcome.chunks] == [8, 7]
    assert all(c.verdict.code == "maintain-fair-share" for c in outcome.chunks)
    assert outcome.chunks[0].verdict.reason == "queue qA allocated 8 GPUs > allocatable share 6 GPUs"
    assert outcome.remaining["qA"][GPU] == 6


def test_worked_reclaim_example_second_round_reaches_four_four():
    qs = qmap(gq("qA", quota=2, allocated=6, request=10, creation=1),
              gq("qB", quota=2, allocated=2, request=4, creation=2))
    compute_fair_shares(qs, [8000, 64e9, 8])
    assert (qs["qA"].fair[GPU], qs["qB"].fair[GPU]) == (4, 4)
    assert can_reclaim(qs, "qB", gpus(2)).ok
    verdict, outcome = validate_reclaim(qs, "qB", gpus(2), [("qA", gpus(1)), ("qA", gpus(1))])
    assert verdict.ok
    assert [c.remaining_before[GPU] for c in outcome.chunks] == [6, 5]


def test_worked_reclaim_example_third_job_is_not_eligible():
    qs = qmap(gq("qA", quota=2, allocated=4, request=8, creation=1),
              gq("qB", quota=2, allocated=4, request=6, creation=2))
    compute_fair_shares(qs, [8000, 64e9, 8])
    v = can_reclaim(qs, "qB", gpus(2))
    assert not v.ok
    assert v.code == "reclaimer-over-fair-share"
    assert v.numbers["fair_share"] == 4
    assert "would hold 6 GPUs (allocated 4 GPUs + job 2 GPUs) > its fair share 4 GPUs" in v.reason


# ---- the saturation example of §3.7 ----------------------------------------------------------


def saturation_tree(reclaimer_alloc: float) -> dict[str, QueueAttrs]:
    return qmap(
        gq("R", quota=0, fair=4, allocated=reclaimer_alloc),
        gq("Y", quota=0, fair=5, allocated=6),
        gq("r-leaf", parent="R", quota=0, fair=4, allocated=0),
        gq("y-leaf", parent="Y", quota=0, fair=5, allocated=6),
    )


def test_saturation_example_rejected():
    qs = saturation_tree(4)
    v = check_saturation(qs, "r-leaf", gpus(2), {"Y": gpus(4), "y-leaf": gpus(4)}, {"Y": {GPU}, "y-leaf": {GPU}})
    assert not v.ok
    assert v.code == "reclaimer-more-saturated"
    assert v.numbers["ratio"] == pytest.approx(1.5)
    assert v.numbers["sibling_ratio"] == pytest.approx(0.8)


def test_saturation_example_accepted_when_reclaimer_within_fair_share():
    qs = saturation_tree(2)
    v = check_saturation(qs, "r-leaf", gpus(2), {"Y": gpus(4), "y-leaf": gpus(4)}, {"Y": {GPU}, "y-leaf": {GPU}})
    assert v.ok


def test_saturation_multiplier_makes_reclaim_stricter_and_resets_below_one():
    qs = qmap(gq("R", fair=4, allocated=4), gq("Y", fair=4, allocated=8),
              gq("r", parent="R", fair=4), gq("y", parent="Y", fair=4, allocated=8))
    rem = {"Y": gpus(6), "y": gpus(6)}
    inv = {"Y": {GPU}, "y": {GPU}}
    # ratio R = 5/4 = 1.25, ratio Y = 6/4 = 1.5
    assert check_saturation(qs, "r", gpus(1), rem, inv, multiplier=1.0).ok
    assert not check_saturation(qs, "r", gpus(1), rem, inv, multiplier=1.2).ok
    assert check_saturation(qs, "r", gpus(1), rem, inv, multiplier=0.5).ok
    assert saturation_multiplier(0.5) == 1.0
    assert saturation_multiplier(None) == 1.0
    assert saturation_multiplier(2.5) == 2.5


def test_saturation_ratio_edges():
    assert saturation_ratio(3, 0) == math.inf
    assert saturation_ratio(0, 0) == 0
    assert saturation_ratio(5, U) == 0
    assert saturation_ratio(3, 4) == 0.75


def test_non_preemptible_reclaimer_checked_at_every_level():
    qs = qmap(gq("dept", quota=2, fair=8, allocated=2, allocated_np=2),
              gq("leaf", parent="dept", quota=4, fair=8, allocated=2, allocated_np=0),
              gq("other", fair=0, allocated=6))
    assert check_saturation(qs, "leaf", gpus(1), {"other": gpus(5)}, {"other": {GPU}}).ok
    v = check_saturation(qs, "leaf", gpus(1), {"other": gpus(5)}, {"other": {GPU}}, preemptible=False)
    assert not v.ok
    assert v.code == "non-preemptible-over-quota"
    assert v.numbers["queue"] == "dept"


def test_can_reclaim_non_preemptible_needs_quota():
    qs = qmap(gq("leaf", quota=1, fair=4, allocated=0, allocated_np=0))
    assert can_reclaim(qs, "leaf", gpus(2)).ok
    v = can_reclaim(qs, "leaf", gpus(2), preemptible=False)
    assert not v.ok
    assert v.code == "non-preemptible-over-quota"


# ---- levelled queues, pre-filter, strategies -------------------------------------------------


def tree() -> dict[str, QueueAttrs]:
    return qmap(
        gq("A"), gq("B", parent="A"), gq("C", parent="B"), gq("leaf1", parent="C"), gq("leaf2", parent="C"),
        gq("D", parent="B"), gq("leaf3", parent="D"), gq("Z"), gq("zleaf", parent="Z"),
    )


def test_paths_lca_and_levelled_queues():
    qs = tree()
    assert path_to_root(qs, "leaf3") == ["A", "B", "D", "leaf3"]
    assert lowest_common_ancestor(qs, "leaf1", "leaf3") == "B"
    assert lowest_common_ancestor(qs, "leaf1", "zleaf") is None
    assert leveled_queues(qs, "leaf1", "leaf3") == ("C", "D")
    assert leveled_queues(qs, "leaf1", "leaf2") == ("leaf1", "leaf2")
    assert leveled_queues(qs, "leaf1", "zleaf") == ("A", "Z")
    with pytest.raises(ValueError, match="'nope' does not exist"):
        path_to_root(qs, "nope")


def test_prefilter_when_reclaimer_over_quota_needs_victim_over_allocatable():
    qs = qmap(gq("r", quota=1, fair=4, allocated=1), gq("v", quota=2, fair=4, allocated=4))
    v = filter_victim_queue(qs, "r", "v", gpus(1))
    assert (v.ok, v.code) == (False, "victim-within-allocatable")
    qs["v"].allocated[GPU] = 5
    v = filter_victim_queue(qs, "r", "v", gpus(1))
    assert (v.ok, v.code) == (True, "victim-over-allocatable")


def test_prefilter_reclaimer_within_quota_victim_under_at_or_over_quota():
    qs = qmap(gq("r", quota=4, fair=4), gq("v", quota=3, fair=4, allocated=2))
    assert filter_victim_queue(qs, "r", "v", gpus(1)).code == "victim-under-quota"
    qs["v"].allocated[GPU] = 3
    assert filter_victim_queue(qs, "r", "v", gpus(1)).code == "victim-at-quota"
    qs["v"].allocated[GPU] = 4
    assert filter_victim_queue(qs, "r", "v", gpus(1)).code == "victim-over-quota"


def test_prefilter_ignores_resources_the_job_does_not_request():
    qs = qmap(gq("r", quota=4, fair=4), gq("v", quota=3, fair=4, allocated=2))
    qs["v"].deserved[0], qs["v"].allocated[0] = 1000, 5000  # far over its CPU quota
    assert filter_victim_queue(qs, "r", "v", gpus(1)).code == "victim-under-quota"
    assert filter_victim_queue(qs, "r", "v", [500, 0, 1]).code == "victim-over-quota"


def test_strategy_guarantee_deserved_quota_only_for_reclaimer_within_quota():
    rq = gq("r", quota=2, fair=2, allocated=0)
    v = gq("v", quota=2, fair=6, allocated=5)
    # remaining 5 ≤ allocatable 6, but > deserved 2 and the reclaimer stays within its quota
    assert fits_reclaim_strategy(rq, v, gpus(2), gpus(5)).code == "guarantee-deserved-quota"
    assert not fits_reclaim_strategy(rq, v, gpus(3), gpus(5)).ok
    assert not fits_reclaim_strategy(rq, v, gpus(2), gpus(2)).ok


def test_in_quota_queue_priority_option():
    rq = gq("r", quota=2, fair=2, priority=200)
    v = gq("v", quota=2, fair=2, allocated=2, priority=100)
    assert not fits_reclaim_strategy(rq, v, gpus(1), gpus(2)).ok
    assert fits_reclaim_strategy(rq, v, gpus(1), gpus(2), queue_priority_in_quota_reclaim=True).ok


def test_last_chunk_may_take_victim_below_its_share_but_not_further():
    qs = qmap(gq("r", quota=0, fair=4), gq("v", quota=0, fair=4, allocated=5))
    outcome = reclaim_victims(qs, "r", gpus(2), [("v", gpus(2)), ("v", gpus(1))])
    assert not outcome.verdict.ok
    assert outcome.verdict.code == "victim-protected"
    assert [c.verdict.ok for c in outcome.chunks] == [True, False]
    assert outcome.chunks[1].remaining_before[GPU] == 3


def test_chunks_subtract_along_the_whole_victim_path_and_record_involved_resources():
    qs = qmap(gq("R", fair=4), gq("r", parent="R", fair=4),
              gq("V", fair=4, allocated=8), gq("v1", parent="V", fair=2, allocated=5),
              gq("v2", parent="V", fair=2, allocated=3))
    outcome = reclaim_victims(qs, "r", gpus(2), [("v1", gpus(1)), ("v2", [100, 0, 1])])
    assert outcome.verdict.ok
    assert outcome.remaining["V"][GPU] == 6
    assert outcome.remaining["v1"][GPU] == 4
    assert outcome.remaining["v2"] == [-100, 0, 2]
    assert outcome.involved["V"] == {0, GPU}
    assert [c.victim_level for c in outcome.chunks] == ["V", "V"]


# ---- min runtime (§4.4) ----------------------------------------------------------------------


def minruntime_tree() -> dict[str, QueueAttrs]:
    return qmap(
        gq("A"), gq("B", parent="A", reclaim=600, preempt=600), gq("C", parent="B"),
        gq("leaf1", parent="C", reclaim=0), gq("leaf2", parent="C", reclaim=180),
        gq("D", parent="B", reclaim=60), gq("leaf3", parent="D"),
        gq("X", reclaim=30), gq("xleaf", parent="X", reclaim=5), gq("Y"), gq("yleaf", parent="Y"),
    )


def test_reclaim_min_runtime_lca_worked_examples():
    qs = minruntime_tree()
    assert reclaim_min_runtime(qs, "leaf1", "leaf3").seconds == 60
    assert reclaim_min_runtime(qs, "leaf1", "leaf3").source == "D"
    assert reclaim_min_runtime(qs, "leaf1", "leaf2").seconds == 180


def test_reclaim_min_runtime_lca_walks_up_from_the_step_below_the_lca():
    qs = minruntime_tree()
    qs["leaf2"].reclaim_min_runtime = None
    got = reclaim_min_runtime(qs, "leaf1", "leaf2")
    assert (got.seconds, got.source) == (600, "B")


def test_reclaim_min_runtime_different_top_level_trees_uses_victim_top_level_value():
    qs = minruntime_tree()
    got = reclaim_min_runtime(qs, "leaf1", "xleaf", default=7)
    assert (got.seconds, got.source) == (30, "X")  # not the leaf's 5
    got = reclaim_min_runtime(qs, "leaf1", "yleaf", default=7)
    assert (got.seconds, got.source) == (7, "default")


def test_reclaim_min_runtime_queue_method_and_bad_method():
    qs = minruntime_tree()
    assert reclaim_min_runtime(qs, "leaf1", "xleaf", method="queue").seconds == 5
    assert reclaim_min_runtime(qs, "leaf1", "leaf3", method="queue").seconds == 60
    with pytest.raises(ValueError, match="method 'nearest'"):
        reclaim_min_runtime(qs, "leaf1", "leaf3", method="nearest")


def test_preempt_min_runtime_first_value_up_from_victim_leaf():
    qs = minruntime_tree()
    assert preempt_min_runtime(qs, "leaf3").seconds == 600
    got = preempt_min_runtime(qs, "yleaf", default=12)
    assert (got.seconds, got.source) == (12, "default")


def test_min_runtime_protection_window():
    assert min_runtime_end(100.0, 60.0) == 160.0
    assert min_runtime_end(None, 60.0) is None


def test_infinite_saturation_is_reported_json_safe():
    import json

    qs = qmap(gq("R", fair=0, allocated=0), gq("Y", fair=4, allocated=8),
              gq("r", parent="R", fair=4), gq("y", parent="Y", fair=4, allocated=8))
    v = check_saturation(qs, "r", gpus(1), {"Y": gpus(7), "y": gpus(7)}, {"Y": {GPU}, "y": {GPU}})
    assert not v.ok
    assert v.numbers["ratio"] == "inf"
    assert "= ∞ of its fair share" in v.reason
    json.dumps(v.numbers, allow_nan=False)


def test_explanations_quote_the_resource_the_job_asks_for():
    cpu = [2000.0, 0.0, 0.0]
    r = QueueAttrs("r", None, 100, 0, deserved=[0, U, U], limit=[U, U, U], weight=[1, 1, 1], fair=[4000, 0, 0])
    v = QueueAttrs("v", None, 100, 1, deserved=[3000, U, U], limit=[U, U, U], weight=[1, 1, 1],
                   fair=[4000, 0, 0], allocated=[3000, 0, 0])
    verdict = fits_reclaim_strategy(r, v, cpu, [3000, 0, 0])
    assert not verdict.ok
    assert verdict.reason.startswith("queue v allocated 3 cores is within its allocatable share 4 cores")
    pre = filter_victim_queue({"r": r, "v": v}, "r", "v", cpu)
    assert pre.code == "victim-within-allocatable"
    assert "allocatable share 4 cores (allocated 3 cores)" in pre.reason
