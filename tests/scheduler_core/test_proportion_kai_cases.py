"""KAI's own resource-division cases (the table tests of its proportion plugin), re-expressed as data.

Each case: the queues of one sibling set, the amount to divide, the expected fair shares. Units are GPUs
for the GPU cases and millicores for the CPU cases; every other resource is left out of the division
(deserved 0, request 0). Where KAI's test starts from a fair share already holding the deserved quota
and divides only the surplus, the total here is deserved + surplus, which is the same division.
"""

from __future__ import annotations

import pytest

from scheduler_core.proportion import CPU, GPU, UNLIMITED, QueueAttrs, compute_fair_shares

U = UNLIMITED


def q(name, deserved, weight, request, limit=U, priority=100, creation=0.0):
    return dict(name=name, deserved=deserved, weight=weight, request=request, limit=limit,
                priority=priority, creation=creation)


def divide(specs: list[dict], total: float, r: int, **kw) -> dict[str, float]:
    queues = {}
    for s in specs:
        vec = [0.0, 0.0, 0.0]
        deserved, limit, weight, request = list(vec), [U, U, U], list(vec), list(vec)
        deserved[r], limit[r], weight[r], request[r] = s["deserved"], s["limit"], s["weight"], s["request"]
        queues[s["name"]] = QueueAttrs(s["name"], None, s["priority"], s["creation"], deserved=deserved,
                                       limit=limit, weight=weight, request=request)
    amounts = [0.0, 0.0, 0.0]
    amounts[r] = total
    compute_fair_shares(queues, amounts, 0.0, **kw)
    return {n: x.fair[r] for n, x in queues.items()}


SINGLE_WITHIN_QUOTA = [
    ("gives requested, nothing left", q("a", 3, 0, 2), 2, 2),
    ("gives requested, some left", q("a", 3, 0, 2), 3, 2),
    ("no more than allowed", q("a", 3, 0, 2, limit=2), 3, 2),
    ("up to deserved when over-subscribed", q("a", 3, 0, 2), 1, 2),
    ("up to the full quota", q("a", 3, 0, 5), 7, 3),
    ("fractional deserved", q("a", 1.5, 0, 2), 2, 1.5),
    ("fractional request", q("a", 3, 0, 1.5), 2, 1.5),
    ("nothing without deserved or weight", q("a", 0, 0, 2), 2, 0),
]

SINGLE_OVER_QUOTA = [  # deserved 3 already granted; total = 3 + surplus
    ("surplus up to request", q("a", 3, 1, 5), 5, 5),
    ("surplus beyond request stays undivided", q("a", 3, 1, 5), 6, 5),
    ("surplus capped by limit", q("a", 3, 1, 5, limit=4), 5, 4),
    ("weight 0 gets no surplus", q("a", 3, 0, 5), 5, 3),
    ("fractional request", q("a", 3, 1, 4.5), 5, 4.5),
    ("a fractional surplus goes out in the remainder phase", q("a", 3, 1, 5), 3.5, 3.5),
    ("surplus without deserved", q("a", 0, 1, 5), 6, 5),
    ("nothing to divide", q("a", 3, 1, 5), 3, 3),
    ("weight 0 gets no surplus however much is left", q("a", 3, 0, 5), 13, 3),
]


@pytest.mark.parametrize(("case", "spec", "total", "expected"), SINGLE_WITHIN_QUOTA + SINGLE_OVER_QUOTA,
                         ids=[c[0] for c in SINGLE_WITHIN_QUOTA + SINGLE_OVER_QUOTA])
def test_single_queue(case, spec, total, expected):
    assert divide([spec], total, GPU)["a"] == pytest.approx(expected)


def two(weights=(2, 2), requests=(6, 6), limits=(U, U), priorities=(100, 100)):
    return [q("q1", 2, weights[0], requests[0], limits[0], priorities[0], 1.0),
            q("q2", 2, weights[1], requests[1], limits[1], priorities[1], 2.0)]


TWO_QUEUES = [
    ("many available", two(), 15, (6, 6)),
    ("exactly the requests", two(), 12, (6, 6)),
    ("proportional to weight", two(weights=(1, 3)), 8, (3, 5)),
    ("no more than allowed", two(limits=(5, U)), 12, (5, 6)),
    ("remainder to the largest fraction", two(weights=(1, 4), requests=(10, 10)), 11, (3, 8)),
    ("remainder tie to the older queue", two(), 11, (6, 5)),
    ("priority does not affect deserved", two(priorities=(1, 2)), 4, (2, 2)),
    ("priority decides the surplus", two(priorities=(1, 2)), 6, (2, 4)),
    ("priority beats weight", two(weights=(100, 1), priorities=(1, 2)), 6, (2, 4)),
]


@pytest.mark.parametrize(("case", "specs", "total", "expected"), TWO_QUEUES, ids=[c[0] for c in TWO_QUEUES])
def test_two_queues(case, specs, total, expected):
    got = divide(specs, total, GPU)
    assert (got["q1"], got["q2"]) == expected


def test_remainder_reaches_a_higher_priority_queue_even_when_a_lower_one_wants_nothing():
    specs = [q("q1", 2, 2, 5, priority=2, creation=1), q("q2", 2, 2, 5, priority=2, creation=2),
             q("q3", 1, 2, 0, priority=1, creation=3)]
    assert divide(specs, 5, GPU) == {"q1": 3, "q2": 2, "q3": 0}


def three_high_low():
    return [q("high-1", 1, 1, 5, priority=2, creation=1), q("high-2", 1, 1, 5, priority=2, creation=2),
            q("low-1", 1, 1, 5, priority=1, creation=3)]


def test_reference_release_lets_rounding_leftovers_reach_lower_priority_first():
    # Quirk Q1 of the reference release: the fraction left by the priority-2 bucket goes to low-1.
    assert divide(three_high_low(), 6, GPU) == {"high-1": 2, "high-2": 2, "low-1": 2}


def test_newer_release_keeps_rounding_leftovers_inside_the_priority():
    got = divide(three_high_low(), 6, GPU, remainder_per_priority=True)
    assert got["low-1"] == 1
    assert got["high-1"] + got["high-2"] == 5
    assert min(got["high-1"], got["high-2"]) >= 2


def cpu3(requests=(5000, 5000, 5000), deserved=(5000, 5000, 5000), limits=(U, U, U)):
    return [q(f"q{i + 1}", deserved[i], 5000, requests[i], limits[i], creation=float(i)) for i in range(3)]


CPU_CASES = [
    ("one queue gets its request", [q("q1", 3000, 3000, 2000)], 3000, {"q1": 2000}),
    ("one queue over-subscribed", [q("q1", 3000, 3000, 2000)], 1000, {"q1": 2000}),
    ("no deserved and no weight gets nothing",
     [q("q1", 5000, 5000, 10000, creation=0), q("q2", 0, 0, 5000, creation=1)], 10000,
     {"q1": 10000, "q2": 0}),
    ("three over-subscribed", cpu3(), 10000, {"q1": 5000, "q2": 5000, "q3": 5000}),
    ("three over quota", cpu3(requests=(6000, 6000, 6000)), 18000, {"q1": 6000, "q2": 6000, "q3": 6000}),
    ("unneeded share moves to the queue that wants it", cpu3(requests=(7000, 2000, 2000)), 10000,
     {"q1": 6000, "q2": 2000, "q3": 2000}),
    ("deserved first, then the rest", cpu3(requests=(7000, 5000, 2000)), 10000,
     {"q1": 5000, "q2": 5000, "q3": 2000}),
    ("limit above what is left", cpu3(requests=(7000, 2000, 2000), limits=(7000, U, U)), 10000,
     {"q1": 6000, "q2": 2000, "q3": 2000}),
    ("no deserved in a full cluster", cpu3(deserved=(5000, 0, 5000)), 10000,
     {"q1": 5000, "q2": 0, "q3": 5000}),
]


@pytest.mark.parametrize(("case", "specs", "total", "expected"), CPU_CASES, ids=[c[0] for c in CPU_CASES])
def test_cpu_millicores(case, specs, total, expected):
    assert divide(specs, total, CPU) == expected
