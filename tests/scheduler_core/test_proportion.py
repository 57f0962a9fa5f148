"""Fair-share division (KAI-SEMANTICS §3.3–3.6, §3.8): every worked example, limits, sentinels, hierarchy."""

from __future__ import annotations

import pytest

from scheduler_core.proportion import (
    GPU,
    UNLIMITED,
    FairShareInputError,
    QueueAttrs,
    compute_fair_shares,
    explain_fair_share,
    summarize_division,
    what_if_fair_shares,
)

U = UNLIMITED


def gq(
    name: str,
    *,
    quota: float = 0,
    weight: float = 1,
    limit: float = U,
    request: float = 0,
    priority: int = 100,
    parent: str | None = None,
    creation: float = 0.0,
    usage: float = 0.0,
) -> QueueAttrs:
    """A queue governing GPUs only (CPU and memory unlimited, as the shipped defaults)."""
    return QueueAttrs(
        name=name, parent=parent, priority=priority, creation=creation,
        deserved=[U, U, quota], limit=[U, U, limit], weight=[1, 1, weight],
        request=[0, 0, request], usage=[0, 0, usage],
    )


def fair_gpu(queues: list[QueueAttrs], total: float, k: float = 1.0) -> dict[str, float]:
    qs = {q.name: q for q in queues}
    compute_fair_shares(qs, [0, 0, total], k)
    return {n: q.fair[GPU] for n, q in qs.items()}


# ---- Example 1: flat, priority buckets ------------------------------------------------------


def example1(research_weight: float = 1) -> list[QueueAttrs]:
    return [
        gq("vision", quota=3, weight=2, priority=2, request=10, creation=1),
        gq("llm", quota=2, weight=1, priority=2, request=10, creation=2),
        gq("research", quota=2, weight=research_weight, priority=1, request=10, creation=3),
    ]


def test_example1_higher_priority_bucket_takes_all_surplus():
    assert fair_gpu(example1(), 10) == {"vision": 5, "llm": 3, "research": 2}


def test_example1_weight_never_beats_priority():
    assert fair_gpu(example1(research_weight=100), 10) == {"vision": 5, "llm": 3, "research": 2}


# ---- Example 2: two levels, limit, second water-filling round -------------------------------


def example2() -> list[QueueAttrs]:
    return [
        gq("dept-a", quota=8, weight=1, request=14, creation=1),
        gq("dept-b", quota=4, weight=3, limit=10, request=16, creation=2),
        gq("a1", parent="dept-a", quota=5, weight=1, request=12, creation=3),
        gq("a2", parent="dept-a", quota=3, weight=1, request=2, creation=4),
        gq("b1", parent="dept-b", quota=2, weight=2, request=6, creation=5),
        gq("b2", parent="dept-b", quota=0, weight=1, request=10, creation=6),
    ]


def test_example2_hierarchy_with_limit_and_second_round():
    assert fair_gpu(example2(), 20) == {"dept-a": 10, "dept-b": 10, "a1": 8, "a2": 2, "b1": 6, "b2": 4}


def test_example2_steps_spell_out_the_second_round():
    qs = {q.name: q for q in example2()}
    steps = compute_fair_shares(qs, [0, 0, 20])
    b2 = [s for s in steps if s.queue == "b2" and s.resource == "gpu"]
    assert [(s.phase, s.amount, s.round) for s in b2] == [("deserved", 0, 0), ("over-quota", 2, 1), ("over-quota", 2, 2)]
    assert all(s.parent == "dept-b" and s.level_total == 10 for s in b2)
    assert b2[-1].fair_after == 4
    lines = explain_fair_share(steps, "b2", "gpu")
    assert len(lines) == 3
    assert "floored to 2" in lines[1]
    assert lines[-1].endswith("→ 4")


def test_children_lists_are_filled_in_creation_order():
    qs = {q.name: q for q in example2()}
    compute_fair_shares(qs, [0, 0, 20])
    assert qs["dept-a"].children == ["a1", "a2"]
    assert qs["b1"].children == []


# ---- Example 3: flooring, remainders, priority-leftover quirk -------------------------------


def test_example3_fraction_leftover_flows_to_lower_priority_first():
    qs = [
        gq("q1", quota=2, priority=2, request=10, creation=1),
        gq("q2", quota=2, priority=2, request=10, creation=2),
        gq("q3", quota=0, priority=1, request=10, creation=3),
    ]
    assert fair_gpu(qs, 7) == {"q1": 3, "q2": 3, "q3": 1}


def test_example3_without_lower_demand_remainder_goes_to_older_queue():
    qs = [
        gq("q1", quota=2, priority=2, request=10, creation=1),
        gq("q2", quota=2, priority=2, request=10, creation=2),
        gq("q3", quota=0, priority=1, request=0, creation=3),
    ]
    assert fair_gpu(qs, 7) == {"q1": 4, "q2": 3, "q3": 0}


def test_example3_remainder_tie_falls_to_name_when_created_together():
    qs = [
        gq("zeta", quota=2, priority=2, request=10, creation=5),
        gq("alpha", quota=2, priority=2, request=10, creation=5),
    ]
    assert fair_gpu(qs, 7) == {"alpha": 4, "zeta": 3}


def test_example3_fractional_request_remainders():
    qs = [
        gq("q1", weight=1, request=10, creation=1),
        gq("q2", weight=2, request=10, creation=2),
        gq("q3", weight=4, request=1.5, creation=3),
    ]
    got = fair_gpu(qs, 10)
    assert got == pytest.approx({"q1": 3, "q2": 5.5, "q3": 1.5})


# ---- Example 4: time-based adjustment -------------------------------------------------------


@pytest.mark.parametrize(("k", "fair_a", "fair_b"), [(0, 8, 8), (0.5, 6, 10), (1, 4, 12), (10, 0, 16)])
def test_example4_usage_moves_surplus_from_heavy_past_users(k, fair_a, fair_b):
    qs = [gq("A", request=16, usage=0.75, creation=1), gq("B", request=16, usage=0.25, creation=2)]
    assert fair_gpu(qs, 16, k) == {"A": fair_a, "B": fair_b}


def test_example4_mixed_usage_never_touches_deserved():
    qs = [
        gq("A", quota=4, weight=1, request=16, usage=0.6, creation=1),
        gq("B", quota=0, weight=1, request=16, usage=0.0, creation=2),
        gq("C", quota=0, weight=2, request=3, usage=0.1, creation=3),
    ]
    assert fair_gpu(qs, 16, 1) == {"A": 5, "B": 8, "C": 3}


def test_negative_k_turns_the_adjustment_off():
    qs = [gq("A", request=16, usage=0.75, creation=1), gq("B", request=16, usage=0.25, creation=2)]
    assert fair_gpu(qs, 16, -3) == {"A": 8, "B": 8}


# ---- Limits, sentinels, over-subscription ---------------------------------------------------


def test_limit_zero_means_no_share_even_with_quota():
    qs = [gq("capped", quota=4, limit=0, request=8, creation=1), gq("other", request=8, creation=2)]
    assert fair_gpu(qs, 8) == {"capped": 0, "other": 8}


def test_weight_zero_gets_deserved_but_no_surplus():
    qs = [gq("w0", quota=2, weight=0, request=10, creation=1), gq("w1", quota=0, weight=1, request=3, creation=2)]
    assert fair_gpu(qs, 10) == {"w0": 2, "w1": 3}


def test_unlimited_deserved_takes_the_whole_amount_up_to_request():
    qs = [gq("all", quota=U, request=6, creation=1), gq("rest", quota=0, request=10, creation=2)]
    assert fair_gpu(qs, 10) == {"all": 6, "rest": 4}


def test_unlimited_child_deserved_means_up_to_parent_share():
    qs = [
        gq("dept", quota=4, weight=0, request=100, creation=1),
        gq("leaf", parent="dept", quota=U, request=100, creation=2),
        gq("other", quota=0, request=100, creation=3),
    ]
    assert fair_gpu(qs, 10) == {"dept": 4, "leaf": 4, "other": 6}


def test_oversubscribed_quotas_are_all_granted():
    qs = [gq("a", quota=6, request=10, creation=1), gq("b", quota=6, request=10, creation=2)]
    assert fair_gpu(qs, 8) == {"a": 6, "b": 6}


def test_deserved_limited_by_request():
    qs = [gq("a", quota=6, request=1, weight=0, creation=1), gq("b", quota=0, request=10, weight=0, creation=2)]
    assert fair_gpu(qs, 8) == {"a": 1, "b": 0}


def test_limit_caps_surplus():
    qs = [gq("a", limit=3, request=10, creation=1), gq("b", request=10, creation=2)]
    assert fair_gpu(qs, 10) == {"a": 3, "b": 7}


def test_each_resource_divided_independently():
    a = QueueAttrs("a", None, 100, 1, deserved=[1000, 0, 0], limit=[U, U, U], weight=[1, 0, 3],
                   request=[4000, 10, 8])
    b = QueueAttrs("b", None, 100, 2, deserved=[0, 0, 0], limit=[U, U, U], weight=[1, 1, 1],
                   request=[4000, 10, 8])
    qs = {"a": a, "b": b}
    compute_fair_shares(qs, [4000, 10, 8])
    assert a.fair == [2500, 0, 6]
    assert b.fair == [1500, 10, 2]


def test_three_levels_deep():
    qs = [
        gq("org", quota=10, request=20, creation=1),
        gq("dept", parent="org", quota=U, request=20, creation=2),
        gq("team1", parent="dept", quota=3, weight=1, request=10, creation=3),
        gq("team2", parent="dept", quota=1, weight=1, request=10, creation=4),
    ]
    assert fair_gpu(qs, 10) == {"org": 10, "dept": 10, "team1": 6, "team2": 4}


def test_recomputing_resets_previous_fair_shares():
    qs = {q.name: q for q in example2()}
    compute_fair_shares(qs, [0, 0, 20])
    compute_fair_shares(qs, [0, 0, 0])
    # deserved is granted even with no capacity, and each department's share is then divided anew
    got = {n: q.fair[GPU] for n, q in qs.items()}
    assert got == {"dept-a": 8, "dept-b": 4, "a1": 6, "a2": 2, "b1": 3, "b2": 1}


# ---- Bad input -------------------------------------------------------------------------------


def test_bad_input_names_queue_field_and_rule_and_changes_nothing():
    good = gq("good", request=4, creation=1)
    good.fair = [1.0, 2.0, 3.0]
    bad = gq("bad", request=4, creation=2)
    bad.deserved = [U, U, -2]
    orphan = gq("orphan", parent="missing", creation=3)
    with pytest.raises(FairShareInputError) as err:
        compute_fair_shares({"good": good, "bad": bad, "orphan": orphan}, [0, 0, 8])
    msg = str(err.value)
    assert "queue bad: deserved[gpu] = -2 must be ≥ 0 or -1 (unlimited)" in msg
    assert "queue orphan: parent 'missing' does not exist" in msg
    assert good.fair == [1.0, 2.0, 3.0]


def test_parent_cycle_and_bad_total_are_reported():
    a = gq("a", parent="b")
    b = gq("b", parent="a")
    with pytest.raises(FairShareInputError) as err:
        compute_fair_shares({"a": a, "b": b}, [0, -1, 8])
    assert any("loops" in p for p in err.value.problems)
    assert any(p.startswith("total[memory]") for p in err.value.problems)


def test_wrong_vector_length_is_reported():
    a = gq("a")
    a.weight = [1, 1]
    with pytest.raises(FairShareInputError, match="weight must have 3 entries"):
        compute_fair_shares({"a": a}, [0, 0, 8])


def test_steps_explain_a_zero_over_quota_share():
    qs = {q.name: q for q in [
        gq("q1", quota=2, weight=2, priority=2, request=5, creation=1),
        gq("q2", quota=2, weight=2, priority=2, request=5, creation=2),
        gq("w0", quota=0, weight=0, priority=2, request=5, creation=3),
    ]}
    steps = compute_fair_shares(qs, [0, 0, 5])
    q2 = [(s.phase, s.amount) for s in steps if s.queue == "q2" and s.resource == "gpu"]
    assert q2 == [("deserved", 2), ("over-quota", 0)]
    assert "proportional 0.50 floored to 0" in explain_fair_share(steps, "q2")[1]
    q1 = [(s.phase, s.amount) for s in steps if s.queue == "q1" and s.resource == "gpu"]
    assert q1 == [("deserved", 2), ("over-quota", 0), ("remainder", 1)]
    w0 = explain_fair_share(steps, "w0")
    assert w0[-1].startswith("over-quota: +0 (priority 2: over-quota weight 0")


def test_summary_adds_up_each_phase():
    qs = {q.name: q for q in example2()}
    summary = summarize_division(compute_fair_shares(qs, [0, 0, 20]))
    b2 = summary["b2"]["gpu"]
    assert (b2["deserved"], b2["over_quota"], b2["remainder"], b2["fair_share"]) == (0, 4, 0, 4)
    assert b2["parent"] == "dept-b"
    assert b2["divided_among_siblings"] == 10
    assert len(b2["lines"]) == 3


def test_what_if_changes_nothing_in_the_live_queues():
    qs = {q.name: q for q in example1()}
    compute_fair_shares(qs, [0, 0, 10])
    fair, _ = what_if_fair_shares(qs, [0, 0, 10], changes={"research": {"priority": 3}})
    assert (fair["vision"][GPU], fair["llm"][GPU], fair["research"][GPU]) == (3, 2, 5)
    assert qs["research"].priority == 1
    assert qs["research"].fair[GPU] == 2


def test_what_if_adding_a_leaf_rolls_its_request_up_to_the_parent():
    qs = {q.name: q for q in example2()}
    new_leaf = {"parent": "dept-a", "priority": 100, "creation": 9, "deserved": [U, U, 0], "limit": [U, U, U],
                "weight": [1, 1, 1], "request": [0, 0, 6]}
    fair, _ = what_if_fair_shares(qs, [0, 0, 20], changes={"a3": new_leaf, "b2": None})
    assert "b2" not in fair
    # dept-a now requests 20: it keeps its quota 8 and, with b2 gone, dept-b wants only 6
    assert fair["dept-a"][GPU] == 14
    assert fair["dept-b"][GPU] == 6
    assert qs["dept-a"].request[GPU] == 14  # the live tree is untouched


def test_what_if_rejects_unknown_or_fixed_fields():
    qs = {q.name: q for q in example1()}
    with pytest.raises(FairShareInputError, match="queue llm: colour cannot be changed"):
        what_if_fair_shares(qs, [0, 0, 10], changes={"llm": {"colour": "red"}})
    with pytest.raises(FairShareInputError, match="queue llm: deserved\\[gpu\\] = -5"):
        what_if_fair_shares(qs, [0, 0, 10], changes={"llm": {"deserved": [U, U, -5]}})
