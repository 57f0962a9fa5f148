"""Queue order (KAI-SEMANTICS §2.4), victim-queue order (§2.10, §4.2) and the DRF helpers."""

from __future__ import annotations

import functools

import pytest

from scheduler_core.proportion import (
    UNLIMITED,
    QueueAttrs,
    allocatable_share,
    compare_queues,
    compare_victim_queues,
    dominant_share,
    queue_order_reasons,
)

U = UNLIMITED
TOTAL = [64000, 512e9, 8]


def q(
    name: str,
    *,
    deserved: float = 0,
    fair: float = 0,
    allocated: float = 0,
    limit: float = U,
    priority: int = 100,
    creation: float = 0,
    cpu: tuple[float, float, float] = (U, 0, 0),
) -> QueueAttrs:
    """GPU-governed queue; `cpu` = (deserved, fair, allocated) for CPU, memory always unlimited and idle."""
    return QueueAttrs(
        name=name, parent=None, priority=priority, creation=creation,
        deserved=[cpu[0], U, deserved], limit=[U, U, limit], weight=[1, 1, 1],
        allocated=[cpu[2], 0, allocated], fair=[cpu[1], 0, fair],
    )


def job(gpu: float, cpu: float = 0) -> list[float]:
    return [cpu, 0, gpu]


# ---- the worked example of §2.4 --------------------------------------------------------------


def test_worked_example_starved_queue_first():
    qa = q("qA", deserved=2, fair=5, allocated=4, creation=1)
    qb = q("qB", deserved=2, fair=3, allocated=1, creation=2)
    assert queue_order_reasons(qa, qb, job(1), job(1), TOTAL) == (1, "starved")
    assert compare_queues(qb, qa, job(1), job(1), TOTAL) < 0


def test_worked_example_two_gpu_job_decided_by_share_without_job():
    qa = q("qA", deserved=2, fair=5, allocated=4, creation=1)
    qb = q("qB", deserved=2, fair=3, allocated=1, creation=2)
    assert queue_order_reasons(qa, qb, job(1), job(2), TOTAL) == (1, "dominant-share")


# ---- each rule in isolation ------------------------------------------------------------------


def test_rule1_over_utilized_in_all_resources_goes_last():
    over = q("over", deserved=0, fair=1, allocated=2, cpu=(0, 100, 200), creation=1)
    over.fair[1], over.allocated[1] = 1e9, 2e9
    under = q("under", deserved=0, fair=1, allocated=2, creation=2)  # over in GPU only
    assert queue_order_reasons(over, under, None, None, TOTAL) == (1, "over-utilized")
    assert compare_queues(under, over, None, None, TOTAL) < 0


def test_rule2_starved_first_and_unlimited_deserved_counts_as_starved():
    starved = q("s", deserved=U, fair=0, allocated=50, creation=2)
    fed = q("f", deserved=1, fair=8, allocated=1, creation=1)
    assert queue_order_reasons(starved, fed, job(1), job(1), TOTAL) == (-1, "starved")


def test_rule3_higher_queue_priority_first():
    hi = q("hi", deserved=0, fair=4, allocated=3, priority=200, creation=2)
    lo = q("lo", deserved=0, fair=4, allocated=0, priority=100, creation=1)
    assert queue_order_reasons(lo, hi, job(1), job(1), TOTAL) == (1, "priority")


def test_rule4_using_a_resource_with_zero_allocatable_share_goes_last():
    # CPU limit 0: allocatable CPU share is 0, and the job asks for CPU.
    bad = q("bad", deserved=0, fair=4, allocated=0, creation=1, cpu=(0, 0, 0))
    bad.limit[0] = 0
    good = q("good", deserved=0, fair=4, allocated=3, creation=2)
    assert queue_order_reasons(bad, good, job(1, cpu=500), job(1), TOTAL) == (1, "zero-share")


def test_rule5_smaller_dominant_share_with_job_first():
    a = q("a", deserved=0, fair=4, allocated=2, creation=1)  # (2+2)/4 = 1.0
    b = q("b", deserved=0, fair=4, allocated=2, creation=2)  # (2+1)/4 = 0.75
    assert queue_order_reasons(a, b, job(2), job(1), TOTAL) == (1, "dominant-share-with-job")


def test_rule7_smaller_allocatable_share_first():
    small = q("small", deserved=0, fair=2, allocated=0, creation=2)
    big = q("big", deserved=0, fair=4, allocated=0, creation=1)
    assert queue_order_reasons(big, small, None, None, TOTAL) == (1, "allocatable-share")


def test_rule8_older_queue_then_name():
    a = q("a", fair=4, creation=5)
    b = q("b", fair=4, creation=3)
    assert queue_order_reasons(a, b, None, None, TOTAL) == (1, "creation")
    b.creation = 5
    assert queue_order_reasons(a, b, None, None, TOTAL) == (-1, "name")
    assert compare_queues(b, a, None, None, TOTAL) == 1


def test_sorting_is_a_total_order_independent_of_input_order():
    queues = [
        q("x", deserved=1, fair=3, allocated=2, creation=3),
        q("y", deserved=2, fair=2, allocated=0, creation=1),
        q("z", deserved=0, fair=3, allocated=1, priority=150, creation=2),
        q("w", deserved=0, fair=3, allocated=1, priority=150, creation=2),
    ]
    key = functools.cmp_to_key(lambda a, b: compare_queues(a, b, job(1), job(1), TOTAL))
    first = [x.name for x in sorted(queues, key=key)]
    second = [x.name for x in sorted(reversed(queues), key=key)]
    assert first == second == ["y", "w", "z", "x"]


# ---- DRF helpers -----------------------------------------------------------------------------


def test_allocatable_share_rules():
    a = q("a", deserved=2, fair=5, limit=4)
    assert allocatable_share(a)[2] == 4  # min(limit 4, max(2, 5))
    b = q("b", deserved=U, fair=5, limit=6)
    assert allocatable_share(b)[2] == 6  # deserved -1 → the limit
    c = q("c", deserved=U, fair=5)
    assert allocatable_share(c)[2] == U


def test_dominant_share_uses_total_for_unbounded_and_penalises_zero():
    c = q("c", deserved=U, fair=0, allocated=2)
    assert dominant_share(c, TOTAL) == pytest.approx(2 / 8)
    z = q("z", deserved=0, fair=0, allocated=0, limit=0)
    assert dominant_share(z, TOTAL, add=job(1)) == 1000
    m = q("m", deserved=2, fair=4, allocated=2, cpu=(1000, 1000, 900))
    assert dominant_share(m, TOTAL) == pytest.approx(0.9)  # CPU 900/1000 dominates GPU 2/4
    assert dominant_share(m, TOTAL, remove=[400, 0, 0]) == pytest.approx(0.5)


# ---- victim mode -----------------------------------------------------------------------------


def test_victim_order_most_over_share_queue_first():
    heavy = q("heavy", deserved=2, fair=4, allocated=8, creation=1)
    light = q("light", deserved=2, fair=4, allocated=5, creation=2)
    assert compare_victim_queues(heavy, light, job(1), job(1), TOTAL) < 0


def test_victim_order_over_deserved_before_within_deserved():
    within = q("within", deserved=4, fair=4, allocated=4, creation=1)
    over = q("over", deserved=1, fair=4, allocated=2, creation=2)
    assert compare_victim_queues(within, over, job(0), job(0), TOTAL) > 0


def test_victim_order_lower_priority_first():
    hi = q("hi", deserved=0, fair=4, allocated=4, priority=200, creation=1)
    lo = q("lo", deserved=0, fair=4, allocated=1, priority=50, creation=2)
    assert compare_victim_queues(hi, lo, job(1), job(1), TOTAL) > 0


def test_victim_order_removed_amounts_change_the_dominant_share():
    a = q("a", deserved=0, fair=4, allocated=4, creation=1)
    b = q("b", deserved=0, fair=4, allocated=4, creation=2)
    # a has already given up 3 GPUs of candidates: b is now the more over-share queue.
    assert compare_victim_queues(a, b, job(3), job(1), TOTAL) > 0
    assert compare_victim_queues(a, b, job(1), job(3), TOTAL) < 0


def test_victim_order_newer_queue_first_on_full_tie():
    old = q("old", fair=4, allocated=2, creation=1)
    new = q("new", fair=4, allocated=2, creation=2)
    assert compare_victim_queues(old, new, job(0), job(0), TOTAL) > 0


# ---- KAI's own queue-order cases (CPU and memory all zero: deserved, fair, limit, allocated) ------


def kai_queue(name: str, priority: int, fair: float, allocated: float) -> QueueAttrs:
    return QueueAttrs(name=name, parent=None, priority=priority, creation=0, deserved=[0, 0, 2], limit=[0, 0, U],
                      weight=[0, 0, 1], allocated=[0, 0, allocated], fair=[0, 0, fair])


@pytest.mark.parametrize(
    ("case", "left", "right", "expected"),
    [
        ("starved queue first", (100, 99, 20), (100, 2, 0), 1),
        ("starved queue first even with a lower priority", (1, 99, 20), (0, 2, 0), 1),
        ("priority when neither is starved", (1, 99, 20), (0, 2, 3), -1),
        ("priority when neither is starved, right between quota and fair share", (1, 99, 20), (0, 80, 3), -1),
    ],
)
def test_kai_queue_order_cases(case, left, right, expected):
    lq = kai_queue("lQueue", *left)
    rq = kai_queue("rQueue", *right)
    assert compare_queues(lq, rq, None, None, [0, 0, 100]) == expected
