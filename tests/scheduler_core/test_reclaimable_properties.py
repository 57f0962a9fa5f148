"""Hypothesis properties of the reclaim rules (KAI-SEMANTICS §8 invariants 15, 16, 17)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core.proportion import GPU, UNLIMITED, QueueAttrs, allocatable_share
from scheduler_core.reclaimable import (
    can_reclaim,
    check_saturation,
    fits_reclaim_strategy,
    reclaim_victims,
    saturation_ratio,
    validate_reclaim,
)

U = UNLIMITED
amounts = st.integers(0, 12).map(float)


def gq(name: str, parent: str | None, deserved: float, fair: float, allocated: float, limit: float = U) -> QueueAttrs:
    return QueueAttrs(name=name, parent=parent, priority=100, creation=0, deserved=[U, U, deserved],
                      limit=[U, U, limit], weight=[1, 1, 1], allocated=[0, 0, allocated], fair=[0, 0, fair])


@settings(max_examples=60, deadline=None)
@given(fair=amounts, allocated=amounts, req=st.integers(1, 4).map(float))
def test_reclaimer_never_passes_eligibility_above_its_fair_share(fair, allocated, req):
    qs = {"r": gq("r", None, 0, fair, allocated)}
    assert can_reclaim(qs, "r", [0, 0, req]).ok == (allocated + req <= fair)


@settings(max_examples=80, deadline=None)
@given(deserved=amounts, fair=amounts, limit=st.one_of(st.just(U), amounts), remaining=amounts,
       r_deserved=amounts, r_alloc=amounts, req=st.integers(1, 4).map(float))
def test_a_queue_within_quota_and_allocatable_share_never_gives_anything(
    deserved, fair, limit, remaining, r_deserved, r_alloc, req
):
    victim = gq("v", None, deserved, fair, remaining, limit)
    reclaimer = gq("r", None, r_deserved, 0, r_alloc)
    within_both = remaining <= deserved and (allocatable_share(victim)[GPU] == U
                                             or remaining <= allocatable_share(victim)[GPU])
    if within_both:
        assert not fits_reclaim_strategy(reclaimer, victim, [0, 0, req], [0, 0, remaining]).ok


@settings(max_examples=80, deadline=None)
@given(v_alloc=amounts, v_fair=amounts, v_deserved=amounts, chunks=st.lists(st.integers(1, 3).map(float), max_size=5))
def test_each_chunk_is_taken_only_while_the_victim_is_still_over(v_alloc, v_fair, v_deserved, chunks):
    qs = {"r": gq("r", None, 0, 4, 0), "v": gq("v", None, v_deserved, v_fair, v_alloc)}
    outcome = reclaim_victims(qs, "r", [0, 0, 1], [("v", [0, 0, c]) for c in chunks])
    cap = max(v_deserved, v_fair)
    for check in outcome.chunks:
        # the reclaimer is over its (zero) quota, so only MaintainFairShare can allow a chunk
        assert check.verdict.ok == (check.remaining_before[GPU] > cap)
    if outcome.verdict.ok:
        assert len(outcome.chunks) == len(chunks)
    else:
        assert not outcome.chunks[-1].verdict.ok


@settings(max_examples=80, deadline=None)
@given(x_alloc=amounts, x_fair=amounts, y_rem=amounts, y_fair=amounts, req=st.integers(1, 4).map(float),
       m=st.sampled_from([0.5, 1.0, 1.5, 3.0]))
def test_saturation_verdict_matches_the_rule(x_alloc, x_fair, y_rem, y_fair, req, m):
    qs = {"X": gq("X", None, 0, x_fair, x_alloc), "x": gq("x", "X", 0, 1e6, 0),
          "Y": gq("Y", None, 0, y_fair, y_rem + 1), "y": gq("y", "Y", 0, 1e6, y_rem + 1)}
    v = check_saturation(qs, "x", [0, 0, req], {"Y": [0, 0, y_rem], "y": [0, 0, y_rem]}, {"Y": {GPU}, "y": {GPU}},
                         multiplier=m)
    rx = saturation_ratio(x_alloc + req, x_fair)
    ry = saturation_ratio(y_rem, y_fair)
    mult = max(1.0, m)
    assert v.ok == (not (rx > 1 and y_fair > 0 and rx * mult >= ry))


@settings(max_examples=50, deadline=None)
@given(alloc=st.lists(amounts, min_size=2, max_size=2), fair=st.lists(amounts, min_size=2, max_size=2),
       chunk=st.integers(1, 3).map(float))
def test_validation_is_deterministic_and_does_not_change_the_queues(alloc, fair, chunk):
    qs = {"r": gq("r", None, 2, fair[0], alloc[0]), "v": gq("v", None, 2, fair[1], alloc[1])}
    before = {n: (list(q.allocated), list(q.fair)) for n, q in qs.items()}
    first = validate_reclaim(qs, "r", [0, 0, 1], [("v", [0, 0, chunk])])
    second = validate_reclaim(qs, "r", [0, 0, 1], [("v", [0, 0, chunk])])
    assert first[0] == second[0]
    assert {n: (list(q.allocated), list(q.fair)) for n, q in qs.items()} == before


def test_a_victim_taken_below_zero_is_not_read_as_unlimited():
    # Found by the property above: after a chunk larger than what is left, the remaining allocation
    # is -1, which must not be mistaken for the "unlimited" sentinel and let the next chunk through.
    qs = {"r": gq("r", None, 0, 4, 0), "v": gq("v", None, 0, 0, 1)}
    outcome = reclaim_victims(qs, "r", [0, 0, 1], [("v", [0, 0, 2]), ("v", [0, 0, 1])])
    assert [c.verdict.ok for c in outcome.chunks] == [True, False]
    assert outcome.chunks[1].remaining_before[GPU] == -1.0
    assert not outcome.verdict.ok
