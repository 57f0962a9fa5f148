"""Engine: the preempt action."""

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


def test_preempt_evicts_only_lower_priority_jobs_of_the_same_queue():
    qs = [queue("q", gpu_quota=8), queue("other", gpu_quota=0, creation=1)]
    jobs = [job("low", "q", running_on=["n1"], gpus=4, priority=50, age=10),
            job("equal", "q", running_on=["n1"], gpus=2, priority=100, preemptible=True, age=10),
            job("foreign", "other", running_on=["n1"], gpus=2, priority=10, age=10),
            job("high", "q", gpus=4, priority=100, preemptible=True)]
    result = run_cycle(snapshot([node("n1", 8)], qs, jobs), m.CycleConfig(actions=("allocate", "preempt")))
    assert [e.task for e in result.evictions] == ["low-0"]
    assert result.evictions[0].action == "preempt"
    assert status_of(result)["high-0"] == (m.PIPELINED, "n1")

def test_preemption_delay_stops_a_new_job_from_evicting():
    qs = [queue("q", gpu_quota=8)]
    jobs = [job("low", "q", running_on=["n1"], gpus=8, priority=50, age=10),
            job("high", "q", gpus=8, priority=100, preemptible=True, preemption_delay_s=300)]
    result = run_cycle(snapshot([node("n1", 8)], qs, jobs))
    assert result.evictions == ()
    assert "preemption delay" in result.pending["high"].message
