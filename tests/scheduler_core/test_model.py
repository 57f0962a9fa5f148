"""Engine: model, priority classes, bad input and determinism."""

from __future__ import annotations

import json

import pytest

from scheduler_core import model as m
from scheduler_core import run_cycle
from scheduler_core.cycle import open_session
from scheduler_core.state import GPU
from scheduler_core.statement import Statement
from tests.scheduler_core.engine_builders import (
    fraction_task,
    job,
    node,
    queue,
    reclaim_example,
    snapshot,
    status_of,
)


def test_snapshot_and_result_round_trip_through_json():
    snap = snapshot([node("n1", 4, labels={"zone": "a"})], [queue("q", gpu_quota=2)],
                    [job("j", "q", pods=2), job("r", "q", running_on=["n1"])])
    again = m.ClusterSnapshot.from_dict(json.loads(json.dumps(snap.to_dict())))
    assert again == snap
    result = run_cycle(snap)
    assert m.CycleResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result

def test_from_dict_names_the_bad_field():
    data = snapshot([node("n1")], [], []).to_dict()
    data["nodes"][0]["gpus"] = "eight"
    with pytest.raises(ValueError, match=r"nodes\[0\]\.gpus: expected an integer"):
        m.ClusterSnapshot.from_dict(data)
    data = snapshot([node("n1")], [], []).to_dict()
    data["nodes"][0]["colour"] = "red"
    with pytest.raises(ValueError, match="unknown field"):
        m.ClusterSnapshot.from_dict(data)

@pytest.mark.parametrize(("name", "explicit", "expected"), [
    ("train", None, (50, True)),
    ("build-preemptible", None, (75, True)),
    ("build", None, (100, False)),
    ("inference", None, (125, False)),
    ("inference", "preemptible", (125, True)),
    ("train", "non-preemptible", (50, False)),
    (None, None, (50, True)),
    ("no-such-class", None, (50, True)),
])
def test_priority_classes_resolve_like_kai(name, explicit, expected):
    assert m.resolve_priority(name, None, explicit) == expected

def test_unknown_preemptibility_is_refused_with_the_field_name():
    with pytest.raises(ValueError, match="preemptibility"):
        m.resolve_priority("train", None, "sometimes")

def test_bad_objects_are_reported_on_the_object_and_the_rest_is_scheduled():
    qs = [queue("q", gpu_quota=8), queue("orphan", "missing-parent"), queue("parent"), queue("leaf", "parent")]
    bad_fraction = m.JobSpec("frac", "q", tasks=(fraction_task("frac-0", 1.5),))
    negative = m.JobSpec("neg", "q", tasks=(m.TaskSpec("neg-0", m.TaskRequest(cpu_millis=-5)),))
    jobs = [bad_fraction, negative, job("on-orphan", "orphan"), job("on-parent", "parent"),
            job("nowhere", "no-such-queue"), job("good", "q")]
    result = run_cycle(snapshot([node("a", 8)], qs, jobs))
    errors = {(e.kind, e.name): e for e in result.errors}
    assert "parent queue 'missing-parent' does not exist" in errors[("queue", "orphan")].message
    assert errors[("job", "frac")].field == "tasks.request.gpu_fraction"
    assert errors[("job", "neg")].field == "tasks.request"
    assert "not usable" in errors[("job", "on-orphan")].message
    assert "has child queues" in errors[("job", "on-parent")].message
    assert "does not exist" in errors[("job", "nowhere")].message
    assert status_of(result)["good-0"][0] == m.BINDING
    assert result.pending["frac"].code == "invalid"

def test_the_same_snapshot_gives_the_same_result():
    nodes = [node(f"n{i}", 8) for i in range(6)]
    qs = [queue("a", gpu_quota=20), queue("b", gpu_quota=20, creation=1)]
    jobs = [job(f"j{i}", "ab"[i % 2], pods=1 + i % 3, gpus=1 + i % 4, age=i) for i in range(30)]
    snap = snapshot(nodes, qs, jobs)
    r1, r2 = run_cycle(snap), run_cycle(snap)
    assert r1.binds == r2.binds
    assert r1.pipelined == r2.pipelined
    assert r1.evictions == r2.evictions
    assert r1.pending == r2.pending

def test_run_cycle_refuses_an_unknown_action():
    with pytest.raises(ValueError, match="unknown action"):
        run_cycle(snapshot([], [], []), m.CycleConfig(actions=("allocate", "teleport")))

def test_statement_rollback_restores_nodes_queues_and_tasks_exactly():
    jobs = [job("r", "q", pods=2, gpus=2, running_on=["a", "a"]), job("p", "q", pods=1, gpus=2)]
    s, _ = open_session(snapshot([node("a", 8)], [queue("q", gpu_quota=8)], jobs), m.CycleConfig())
    idle, rel = s.idle.copy(), s.rel.copy()
    alloc = list(s.queues["q"].allocated)
    stmt = Statement(s)
    r0 = s.jobs[0].tasks[0]
    p0 = s.jobs[1].tasks[0]
    stmt.evict(r0)
    assert s.queues["q"].allocated[GPU] == alloc[GPU] - 2  # releasing pods stop counting
    stmt.move(p0, m.PIPELINED, 0)
    assert s.rel[0, GPU] == 0  # 2 released, 2 taken by the pipelined task
    assert s.queues["q"].allocated[GPU] == alloc[GPU]  # a pod pipelined in-session counts
    stmt.discard()
    assert (s.idle == idle).all()
    assert (s.rel == rel).all()
    assert s.queues["q"].allocated == alloc
    assert (r0.status, p0.status) == (m.RUNNING, m.PENDING)

def test_session_caps_stop_binds_and_evictions_with_a_reason():
    jobs = [job(f"p{i}", "q", age=10 - i) for i in range(4)]
    result = run_cycle(snapshot([node("a", 8)], [queue("q", gpu_quota=8)], jobs), m.CycleConfig(max_binds=2))
    assert len(result.binds) == 2
    assert result.pending["p2"].code == "session-cap"
    assert "cap of 2 binds" in result.pending["p2"].message
    capped = run_cycle(reclaim_example(), m.CycleConfig(max_evictions=1))
    assert capped.evictions == ()
    assert "cap of 1 evictions" in capped.pending["b"].message


def test_the_result_keeps_every_phase_timing_including_closing_and_the_total():
    from tests.scheduler_core.engine_builders import reclaim_example

    result = run_cycle(reclaim_example(), m.CycleConfig())
    assert {"open_session", *m.CycleConfig().actions, "close_session", "total"} <= set(result.timings_ms)
