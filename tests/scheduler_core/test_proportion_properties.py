"""Hypothesis properties of the fair-share division (KAI-SEMANTICS §8 invariants 3, 4, 26, conservation,
determinism) over random two-level queue trees."""

from __future__ import annotations

import copy
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core.proportion import (
    GPU,
    UNLIMITED,
    QueueAttrs,
    children_of,
    compute_fair_shares,
    requestable,
)

U = UNLIMITED
EPS = 1e-6


@st.composite
def queue_trees(draw, integral: bool = True, with_usage: bool = False, all_weighted: bool = False):
    """A random tree (top-level queues with 0–3 leaf children), GPU requests rolled up to parents."""
    queues: dict[str, QueueAttrs] = {}
    n_top = draw(st.integers(1, 4))
    creation = 0

    def make(name: str, parent: str | None, request: float) -> QueueAttrs:
        nonlocal creation
        creation += 1
        quota = draw(st.one_of(st.just(U), st.integers(0, 6)).map(float))
        limit = draw(st.one_of(st.just(U), st.just(U), st.integers(0, 14)).map(float))
        weight = float(draw(st.integers(1 if all_weighted else 0, 3)))
        usage = draw(st.floats(0, 1)) if with_usage else 0.0
        return QueueAttrs(
            name=name, parent=parent, priority=draw(st.sampled_from([1, 2, 3])), creation=creation,
            deserved=[U, U, quota], limit=[U, U, limit], weight=[1, 1, weight],
            request=[0, 0, request], usage=[0, 0, usage],
        )

    req = st.integers(0, 12).map(float) if integral else st.sampled_from([0.0, 0.5, 1.5, 2.0, 3.25, 7.0])
    for i in range(n_top):
        top = f"t{i}"
        kids = [(f"{top}-c{j}", draw(req)) for j in range(draw(st.integers(0, 3)))]
        own = sum(r for _, r in kids) if kids else draw(req)
        queues[top] = make(top, None, own)
        for name, r in kids:
            queues[name] = make(name, top, r)
    total = float(draw(st.integers(0, 30)))
    return queues, total


def _levels(queues: dict[str, QueueAttrs], total: float):
    """(amount divided, siblings) for every sibling set, after the division."""
    kids = children_of(queues)
    for parent, names in kids.items():
        if not names:
            continue
        amount = total if parent is None else queues[parent].fair[GPU]
        yield amount, [queues[n] for n in names]


def _deserved_part(q: QueueAttrs, amount: float) -> float:
    d = amount if q.deserved[GPU] == U else q.deserved[GPU]
    return min(d, requestable(q, GPU))


@settings(max_examples=40, deadline=None)
@given(tree=queue_trees(with_usage=True), k=st.sampled_from([0.0, 0.5, 1.0, 3.0]))
def test_deserved_is_granted_first_whatever_priority_and_usage(tree, k):
    queues, total = tree
    compute_fair_shares(queues, [0, 0, total], k)
    for amount, siblings in _levels(queues, total):
        for q in siblings:
            assert q.fair[GPU] >= _deserved_part(q, amount) - EPS


@settings(max_examples=40, deadline=None)
@given(tree=queue_trees(with_usage=True), k=st.sampled_from([0.0, 1.0]))
def test_weight_zero_gets_no_surplus_and_integral_inputs_never_exceed_requestable(tree, k):
    queues, total = tree
    compute_fair_shares(queues, [0, 0, total], k)
    for amount, siblings in _levels(queues, total):
        for q in siblings:
            if q.weight[GPU] == 0:
                assert abs(q.fair[GPU] - _deserved_part(q, amount)) < EPS
            assert q.fair[GPU] <= requestable(q, GPU) + EPS


@settings(max_examples=40, deadline=None)
@given(tree=queue_trees(integral=False))
def test_fractional_requests_exceed_requestable_by_less_than_one_unit(tree):
    queues, total = tree
    compute_fair_shares(queues, [0, 0, total], 0.0)
    for _amount, siblings in _levels(queues, total):
        for q in siblings:
            assert q.fair[GPU] < requestable(q, GPU) + 1


@settings(max_examples=40, deadline=None)
@given(tree=queue_trees())
def test_lower_priorities_get_only_fractional_leftovers_while_higher_ones_want_more(tree):
    queues, total = tree
    compute_fair_shares(queues, [0, 0, total], 0.0)
    for amount, siblings in _levels(queues, total):
        for p in {q.priority for q in siblings}:
            higher = [q for q in siblings if q.priority >= p and q.weight[GPU] > 0]
            wanting = [q for q in higher if q.fair[GPU] < requestable(q, GPU) - EPS]
            if not wanting:
                continue
            lower_surplus = sum(q.fair[GPU] - _deserved_part(q, amount) for q in siblings if q.priority < p)
            assert lower_surplus < len(higher)


@settings(max_examples=40, deadline=None)
@given(tree=queue_trees(integral=False, with_usage=True), k=st.sampled_from([0.0, 1.0]))
def test_children_never_share_more_than_their_parent_unless_quotas_oversubscribe(tree, k):
    queues, total = tree
    compute_fair_shares(queues, [0, 0, total], k)
    for amount, siblings in _levels(queues, total):
        if sum(_deserved_part(q, amount) for q in siblings) <= amount:
            assert sum(q.fair[GPU] for q in siblings) <= amount + EPS


@settings(max_examples=40, deadline=None)
@given(tree=queue_trees(all_weighted=True))
def test_division_is_work_conserving_when_demand_covers_the_amount(tree):
    queues, total = tree
    compute_fair_shares(queues, [0, 0, total], 0.0)
    for amount, siblings in _levels(queues, total):
        if sum(_deserved_part(q, amount) for q in siblings) > amount:
            continue
        demand = sum(requestable(q, GPU) for q in siblings)
        assert abs(sum(q.fair[GPU] for q in siblings) - min(amount, demand)) < EPS


@settings(max_examples=30, deadline=None)
@given(tree=queue_trees(integral=False, with_usage=True), seed=st.integers(0, 1000))
def test_same_input_in_any_order_gives_the_same_shares_and_steps(tree, seed):
    queues, total = tree
    shuffled_items = list(copy.deepcopy(queues).items())
    random.Random(seed).shuffle(shuffled_items)
    shuffled = dict(shuffled_items)
    steps_a = compute_fair_shares(queues, [0, 0, total], 1.0)
    steps_b = compute_fair_shares(shuffled, [0, 0, total], 1.0)
    assert {n: q.fair for n, q in queues.items()} == {n: q.fair for n, q in shuffled.items()}
    assert steps_a == steps_b


@settings(max_examples=30, deadline=None)
@given(tree=queue_trees(with_usage=True))
def test_usage_changes_only_over_quota_weights(tree):
    queues, total = tree
    without = copy.deepcopy(queues)
    for q in without.values():
        q.usage = [0.0, 0.0, 0.0]
    steps_with = compute_fair_shares(queues, [0, 0, total], 1.0)
    steps_without = compute_fair_shares(without, [0, 0, total], 1.0)
    # The deserved phase at the top level is identical step for step: usage never touches it.
    top_deserved = [s for s in steps_with if s.phase == "deserved" and s.parent is None]
    assert top_deserved == [s for s in steps_without if s.phase == "deserved" and s.parent is None]
    for n, q in queues.items():
        if q.weight[GPU] == 0 and q.parent is None:
            assert q.fair[GPU] == without[n].fair[GPU]
