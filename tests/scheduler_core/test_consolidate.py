"""Engine: the consolidation action."""

from __future__ import annotations

from scheduler_core import model as m
from scheduler_core import run_cycle
from tests.scheduler_core.engine_builders import (
    job,
    node,
    queue,
    snapshot,
    status_of,
)


def test_consolidation_moves_a_pod_to_open_a_whole_node():
    qs = [queue("q", gpu_quota=16)]
    jobs = [job("small", "q", running_on=["a"], gpus=2, age=10), job("filler", "q", running_on=["b"], gpus=4, age=10),
            job("big", "q", gpus=8)]
    result = run_cycle(snapshot([node("a", 8), node("b", 8)], qs, jobs))
    st = status_of(result)
    assert st["small-0"] == (m.PIPELINED, "b")
    assert st["big-0"] == (m.PIPELINED, "a")
    moved = [p for p in result.pipelined if p.task == "small-0"]
    assert moved[0].moved_from == "a"
    assert [e.action for e in result.evictions] == ["consolidation"]
