"""KAI's own reclaim-rule cases (its reclaimable plugin tests), re-expressed as data.

Queues carry GPU numbers only (deserved, fair share, allocated; limit unlimited); CPU and memory are all
zero (deserved, limit, fair share and allocation), as in KAI's fixtures. A reclaim scenario is decided by
`validate_reclaim` (strategies per victim chunk, then the saturation check), eligibility by `can_reclaim`
and the victim pre-filter by `filter_victim_queue`."""

from __future__ import annotations

import pytest

from scheduler_core.proportion import CPU, GPU, UNLIMITED, QueueAttrs
from scheduler_core.reclaimable import can_reclaim, filter_victim_queue, validate_reclaim

U = UNLIMITED


def build(data: dict[str, tuple[str | None, float, float, float]]) -> dict[str, QueueAttrs]:
    """name -> (parent, deserved, fair share, allocated) in GPUs."""
    return {
        name: QueueAttrs(name=name, parent=parent, priority=100, creation=0, deserved=[0, 0, d], limit=[0, 0, U],
                         weight=[0, 0, 1], allocated=[0, 0, a], fair=[0, 0, f])
        for name, (parent, d, f, a) in data.items()
    }


def gpus(n: float) -> list[float]:
    return [0.0, 0.0, float(n)]


# ---- eligibility ------------------------------------------------------------------------------


def eligibility_queue(fair: tuple, alloc: tuple, deserved: tuple = (0, 0, 0), alloc_np: tuple = (0, 0, 0)):
    # vectors in KAI's fixture order (cpu, memory, gpu)
    return {"queue1": QueueAttrs("queue1", None, 100, 0, deserved=list(deserved), limit=[U, U, U],
                                 weight=[1, 1, 1], fair=list(fair), allocated=list(alloc),
                                 allocated_np=list(alloc_np))}


@pytest.mark.parametrize(
    ("case", "req", "fair", "alloc", "expected"),
    [
        ("nothing allocated, below fair share", (1000, 1000, 1), (2000, 2000, 2), (0, 0, 0), True),
        ("some allocated, below fair share", (1000, 1000, 1), (3000, 3000, 3), (1000, 1000, 1), True),
        ("some resources reach fair share, others stay below", (500, 1000, 0), (2000, 2000, 2),
         (1000, 1000, 1), True),
        ("exactly at fair share with the job", (1000, 1000, 1), (2000, 2000, 2), (1000, 1000, 1), True),
        ("partly above fair share", (1, 1000, 1000), (1500, 3000, 1), (1000, 1000, 1), False),
        ("fully above fair share", (1, 1000, 1000), (1500, 1500, 1), (1000, 1000, 1), False),
        ("already above in a resource the job barely asks for", (1, 1000, 1000), (3000, 3000, 0),
         (2000, 1000, 1), False),
    ],
)
def test_can_reclaim_preemptible(case, req, fair, alloc, expected):
    assert can_reclaim(eligibility_queue(fair, alloc), "queue1", list(req)).ok is expected


@pytest.mark.parametrize(
    ("case", "req", "deserved", "fair", "alloc", "alloc_np", "expected"),
    [
        ("below quota", (1000, 1000, 1), (2000, 2000, 2), (2000, 2000, 2), (0, 0, 0), (0, 0, 0), True),
        ("exactly at quota", (1000, 1000, 1), (1000, 1000, 1), (2000, 2000, 2), (0, 0, 0), (0, 0, 0), True),
        ("fractional GPUs exactly at quota", (1, 1, 0.2), (2, 2, 0.3), (2, 2, 0.3), (1, 1, 0.1), (1, 1, 0.1), True),
        ("partly above quota", (1, 1000, 1000), (1000, 500, 0), (2000, 2000, 2), (0, 0, 0), (0, 0, 0), False),
        ("some allocated, below quota", (1000, 1000, 1), (3000, 3000, 3), (3000, 3000, 3), (1000, 1000, 1),
         (1000, 1000, 1), True),
        ("zero quota", (1, 1000, 1000), (0, 0, 0), (3000, 3000, 3), (1000, 1000, 1), (0, 0, 0), False),
        ("over quota", (1, 1000, 1000), (1500, 1500, 1), (3000, 3000, 3), (1000, 1000, 1), (1000, 1000, 1), False),
    ],
)
def test_can_reclaim_non_preemptible(case, req, deserved, fair, alloc, alloc_np, expected):
    qs = eligibility_queue(fair, alloc, deserved, alloc_np)
    assert can_reclaim(qs, "queue1", list(req), preemptible=False).ok is expected


# ---- one department ---------------------------------------------------------------------------


def one_department() -> dict[str, QueueAttrs]:
    return build({"p1": ("default", 3, 3, 2), "p2": ("default", 2, 2, 3), "default": (None, 5, 5, 5)})


def _set(qs, name, **gpu):
    for field, value in gpu.items():
        getattr(qs[name], field)[GPU] = value


ONE_DEPARTMENT = [
    ("reclaimer below fair share, victim above", {}, True, True),
    ("victim exactly at fair share", {"p2": {"allocated": 2}, "default": {"allocated": 4}}, True, False),
    ("both below fair share", {"p2": {"allocated": 1}, "default": {"allocated": 3}}, True, False),
    ("reclaimer below quota, victim above quota within fair share", {"p2": {"fair": 3}}, True, True),
    ("reclaimer at fair share, department below its share",
     {"p1": {"allocated": 3}, "default": {"allocated": 6, "deserved": 7, "fair": 10}}, True, False),
    ("reclaimer at fair share, department above its share",
     {"p1": {"allocated": 3}, "default": {"allocated": 6}}, True, False),
    ("non-preemptible reclaimer above its quota", {"p1": {"deserved": 2}}, False, True),
    ("non-preemptible, department has room in quota", {"p1": {"deserved": 2}, "default": {"deserved": 3}},
     False, True),
    ("non-preemptible, department quota used by non-preemptible work",
     {"p1": {"deserved": 2}, "default": {"deserved": 3, "allocated_np": 3}}, False, False),
    ("department above fair share, no sibling department to compare with",
     {"p1": {"deserved": 2}, "default": {"deserved": 1, "fair": 1, "allocated": 3}}, True, True),
]


@pytest.mark.parametrize(("case", "changes", "preemptible", "expected"), ONE_DEPARTMENT,
                         ids=[c[0] for c in ONE_DEPARTMENT])
def test_one_department(case, changes, preemptible, expected):
    qs = one_department()
    for name, fields in changes.items():
        _set(qs, name, **fields)
    verdict, _ = validate_reclaim(qs, "p1", gpus(1), [("p2", gpus(1))], preemptible=preemptible)
    assert verdict.ok is expected


# ---- two departments ----------------------------------------------------------------------------


def two_departments() -> dict[str, QueueAttrs]:
    return build({"p1": ("d1", 3, 3, 2), "p2": ("d2", 2, 2, 3), "d1": (None, 3, 3, 2), "d2": (None, 2, 2, 3)})


@pytest.mark.parametrize(
    ("case", "changes", "expected"),
    [
        ("reclaimer below fair share, victim above", {}, True),
        ("victim department would go below its fair share", {"p2": {"allocated": 2}, "d2": {"allocated": 2}}, False),
        ("reclaimer department below quota, victim department above quota within fair share",
         {"p1": {"allocated": 1}, "d1": {"allocated": 1}, "p2": {"fair": 4}, "d2": {"fair": 4}}, True),
    ],
)
def test_two_departments(case, changes, expected):
    qs = two_departments()
    for name, fields in changes.items():
        _set(qs, name, **fields)
    verdict, outcome = validate_reclaim(qs, "p1", gpus(1), [("p2", gpus(1))])
    assert verdict.ok is expected
    assert outcome.chunks[0].victim_level == "d2"


# ---- deeper trees -----------------------------------------------------------------------------


def test_three_levels_sanity():
    qs = build({
        "left-top": (None, 1, 1, 0), "left-mid": ("left-top", 1, 1, 0), "left-leaf": ("left-mid", 1, 1, 0),
        "right-top": (None, 1, 1, 2), "right-mid": ("right-top", 1, 1, 2), "right-leaf": ("right-mid", 1, 1, 2),
    })
    verdict, _ = validate_reclaim(qs, "left-leaf", gpus(1), [("right-leaf", gpus(2))])
    assert verdict.ok


def test_reclaimer_top_queue_would_go_over_its_share():
    qs = build({
        "left-top": (None, 1, 1, 1), "left-top-oq-leaf": ("left-top", 0, 0, 1),
        "left-mid": ("left-top", 1, 1, 0), "left-leaf": ("left-mid", 1, 1, 0),
        "right-top": (None, 1, 1, 2), "right-mid": ("right-top", 1, 1, 2), "right-leaf": ("right-mid", 1, 1, 2),
    })
    verdict, _ = validate_reclaim(qs, "left-leaf", gpus(1), [("right-leaf", gpus(2))])
    assert not verdict.ok
    assert verdict.code == "reclaimer-more-saturated"
    assert (verdict.numbers["queue"], verdict.numbers["sibling"]) == ("left-top", "right-top")


def same_branch() -> dict[str, QueueAttrs]:
    return build({
        "top": (None, 2, 2, 2), "mid1": ("top", 1, 1, 0.5), "mid2": ("top", 1, 1, 1.5),
        "left-leaf1": ("mid1", 1, 1, 0), "left-leaf2": ("mid1", 0, 0, 0.5), "right-leaf": ("mid2", 1, 1, 1.5),
    })


def test_same_branch_reclaimer_would_go_over_its_share():
    verdict, _ = validate_reclaim(same_branch(), "left-leaf1", gpus(1), [("right-leaf", gpus(1.5))])
    assert not verdict.ok
    assert verdict.numbers["queue"] == "mid1"


def test_same_branch_reclaim_from_both_a_cousin_and_a_sibling():
    verdict, outcome = validate_reclaim(same_branch(), "left-leaf1", gpus(1),
                                        [("right-leaf", gpus(1.5)), ("left-leaf2", gpus(0.5))])
    assert verdict.ok
    assert [c.victim_level for c in outcome.chunks] == ["mid2", "left-leaf2"]
    assert outcome.remaining["top"][GPU] == pytest.approx(0)


def departments_with_projects() -> dict[str, QueueAttrs]:
    return build({
        "d1": (None, 4, 4, 4), "d1-project-1": ("d1", 3, 1, 0), "d1-project-2": ("d1", 1, 3, 4),
        "d2": (None, 3, 3, 7), "d2-project-1": ("d2", 3, 3, 7),
    })


def test_reclaimer_over_one_but_less_saturated_than_the_victim():
    verdict, _ = validate_reclaim(departments_with_projects(), "d1-project-1", gpus(1), [("d2-project-1", gpus(1))])
    assert verdict.ok


def test_resources_nobody_asks_for_or_gives_up_are_not_compared():
    qs = build({"d1": (None, 4, 4, 4), "d1-project-1": ("d1", 1, 1, 1),
                "d2": (None, 3, 3, 7), "d2-project-1": ("d2", 3, 3, 7)})
    qs["d1"].allocated[CPU], qs["d1"].fair[CPU] = 3000, 1000  # CPU saturation 3.0
    qs["d2"].allocated[CPU], qs["d2"].fair[CPU] = 1000, 1000
    verdict, _ = validate_reclaim(qs, "d1-project-1", gpus(1), [("d2-project-1", gpus(1))])
    assert verdict.ok
    # The same scenario with a job that also needs CPU compares CPU too, and is refused.
    verdict, _ = validate_reclaim(qs, "d1-project-1", [500, 0, 1], [("d2-project-1", gpus(1))])
    assert not verdict.ok
    assert verdict.numbers["resource"] == "cpu"


# ---- victim pre-filter --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "reclaimer", "victim", "expected"),
    [
        ("victim strictly under quota", (4, 4, 0), (4, 4, 2), False),
        ("victim over quota", (4, 4, 0), (0, 4, 4), True),
        ("victim exactly at quota", (4, 4, 0), (2, 4, 2), True),
        ("reclaimer cannot stay in quota, victim under allocatable share", (1, 4, 0), (2, 4, 3), False),
        ("reclaimer cannot stay in quota, victim over allocatable share", (1, 4, 0), (2, 4, 5), True),
    ],
)
def test_filter_victim(case, reclaimer, victim, expected):
    qs = build({"reclaimer": (None, *reclaimer), "victim": (None, *victim)})
    assert filter_victim_queue(qs, "reclaimer", "victim", gpus(2)).ok is expected
