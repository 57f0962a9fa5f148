"""KAI's queueDepthPerAction (``CycleConfig.queue_depth_per_action``): an action tries at most the
first N jobs of each leaf queue in its job order; unset, every cycle decides as before."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.b6_steady_state import decisions
from harness import decisions as harness
from scheduler_core import model as m
from scheduler_core import reasons, run_cycle
from scheduler_core.cycle import close_session, open_session, run_action
from scheduler_core.ordering import within_queue_depth
from scheduler_core.session import Session
from tests.scheduler_core.engine_builders import ALLOCATE_ONLY, job, node, queue, reclaim_example, snapshot
from tests.scheduler_core.test_invariants import clusters

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "kai"
#: deeper than any queue of the corpus or of the random clusters: a bound that cuts nothing
DEEP = tuple((a, 10_000) for a in m.ACTIONS)


def _allocate(snap: m.ClusterSnapshot, depth: int | None) -> m.CycleResult:
    pairs = () if depth is None else (("allocate", depth),)
    return run_cycle(snap, dataclasses.replace(ALLOCATE_ONLY, queue_depth_per_action=pairs))


def _head_blocked_queue() -> m.ClusterSnapshot:
    """Queue q's first job (highest priority) asks for 16 GPUs on an 8-GPU node; two small ones follow."""
    jobs = [job("big", "q", gpus=16, priority=100, preemptible=True, age=30), job("s1", "q", age=20), job("s2", "q", age=10)]
    return snapshot([node("n1", 8)], [queue("q", gpu_quota=8)], jobs)


def test_unset_depth_lets_allocate_try_every_job_of_the_queue():
    result = _allocate(_head_blocked_queue(), None)
    assert sorted(b.job for b in result.binds) == ["s1", "s2"]
    assert result.pending["big"].code == reasons.NO_NODE_FITS


def test_a_depth_of_one_tries_only_the_queues_first_job():
    result = _allocate(_head_blocked_queue(), 1)
    assert result.binds == ()
    assert result.pending["big"].code == reasons.NO_NODE_FITS
    for name in ("s1", "s2"):
        why = result.pending[name]
        assert why.code == reasons.NOT_ATTEMPTED
        assert why.details == {"action": "allocate", "queue_depth": 1}
        assert "queueDepthPerAction" in why.message


def test_a_depth_of_two_tries_the_first_two_jobs():
    result = _allocate(_head_blocked_queue(), 2)
    assert [b.job for b in result.binds] == ["s1"]
    assert result.pending["s2"].details == {"action": "allocate", "queue_depth": 2}


def test_the_depth_is_counted_per_leaf_queue():
    jobs = [job("a1", "qa", age=30), job("a2", "qa", age=20), job("b1", "qb", age=25), job("b2", "qb", age=15)]
    snap = snapshot([node("n1", 8)], [queue("qa", gpu_quota=4), queue("qb", gpu_quota=4, creation=1)], jobs)
    assert sorted(b.job for b in _allocate(snap, 1).binds) == ["a1", "b1"]
    assert sorted(b.job for b in _allocate(snap, None).binds) == ["a1", "a2", "b1", "b2"]


def test_a_depth_for_another_action_leaves_allocate_unbounded():
    snap = _head_blocked_queue()
    cfg = dataclasses.replace(ALLOCATE_ONLY, queue_depth_per_action=(("reclaim", 0), ("preempt", 1)))
    assert decisions(run_cycle(snap, cfg)) == decisions(run_cycle(snap, ALLOCATE_ONLY))


def test_a_reclaim_depth_of_zero_stops_the_reclaim_that_unset_makes():
    snap = reclaim_example()
    unset = run_cycle(snap, m.CycleConfig(actions=("reclaim",)))
    assert unset.evictions
    assert {e.action for e in unset.evictions} == {"reclaim"}
    bounded = run_cycle(snap, m.CycleConfig(actions=("reclaim",), queue_depth_per_action=(("reclaim", 0),)))
    assert bounded.evictions == ()
    deep = run_cycle(snap, m.CycleConfig(actions=("reclaim",), queue_depth_per_action=(("reclaim", 1),)))
    # qB's one job is still tried; qA's pending jobs beyond its first are not (reclaim notes none)
    assert (deep.evictions, deep.pipelined) == (unset.evictions, unset.pipelined)
    assert unset.pending["ap1"].code.startswith(reasons.RECLAIM_PREFIX)
    assert deep.pending["ap1"].code == reasons.NOT_ATTEMPTED


def test_within_queue_depth_keeps_each_queues_first_jobs_in_input_order():
    snap = snapshot([node("n1", 8)], [queue("qa"), queue("qb", creation=1)],
                    [job("a-late", "qa", age=1), job("b", "qb", age=5), job("a-early", "qa", age=9),
                     job("a-high", "qa", priority=100, age=0)])
    s = Session(snap, m.CycleConfig())
    kept, cut = within_queue_depth(s.jobs, 2)
    assert [j.uid for j in kept] == ["b", "a-early", "a-high"]
    assert [j.uid for j in cut] == ["a-late"]
    assert within_queue_depth(s.jobs, None) == (s.jobs, [])


def test_the_config_round_trips_and_names_its_depths():
    cfg = m.CycleConfig(queue_depth_per_action=(("allocate", 3), ("reclaim", 0)))
    assert m.CycleConfig.from_dict(cfg.to_dict()) == cfg
    assert (cfg.queue_depth("allocate"), cfg.queue_depth("reclaim"), cfg.queue_depth("preempt")) == (3, 0, None)


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(clusters())
def test_a_depth_that_cuts_nothing_decides_as_unset_on_random_clusters(snap):
    assert decisions(run_cycle(snap, m.CycleConfig(queue_depth_per_action=DEEP))) == decisions(run_cycle(snap))


@SETTINGS
@given(clusters(), st.integers(0, 2), st.sampled_from(m.ACTIONS))
def test_the_shortcuts_change_no_decision_under_a_depth(snap, depth, action):
    bounded = m.CycleConfig(queue_depth_per_action=((action, depth),))
    plain = dataclasses.replace(bounded, shortcuts=False)
    assert decisions(run_cycle(snap, bounded)) == decisions(run_cycle(snap, plain))


def _sessions(sc: dict, config: m.CycleConfig) -> list[tuple]:
    """Each scenario's first session (its actions once each) under ``config``: its decisions."""
    state = {"jobs": sc["jobs"], "nodes": sc["nodes"], "queues": sc["queues"], "topologies": sc.get("topologies", []),
             "harness": sc.get("harness", {})}
    actions = sc.get("actions") or (list(m.ACTIONS) if sc["mode"] == "full_cycle" else [sc["mode"].split(":", 1)[1]])
    s, placer = open_session(harness.snapshot_of(state), config)
    for a in actions:
        run_action(s, placer, a)
    return [decisions(close_session(s))]


def test_on_the_decision_corpus_a_depth_that_cuts_nothing_decides_as_unset():
    if not CORPUS.is_dir():
        pytest.skip(f"the KAI scenario corpus is not present at ../shared/corpus/kai ({CORPUS})")
    scenarios = [sc for sc in harness.load([str(CORPUS)]) if not sc.get("unsupported_features")]
    assert len(scenarios) > 200
    for sc in scenarios:
        base = harness.config_of(sc)
        deep = dataclasses.replace(base, queue_depth_per_action=DEEP)
        assert _sessions(sc, deep) == _sessions(sc, base), sc["id"]
