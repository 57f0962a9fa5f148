"""Engine: stale-gang eviction."""

from __future__ import annotations

from scheduler_core import model as m
from scheduler_core import run_cycle
from tests.scheduler_core.engine_builders import (
    NOW,
    gpu_task,
    node,
    queue,
    snapshot,
)


def test_stale_gang_is_evicted_after_its_grace_period_only():
    def snap(stale_for: float) -> m.ClusterSnapshot:
        tasks = (gpu_task("g-0", 1, m.RUNNING, "a"), gpu_task("g-1", 1, m.FAILED, "a"))
        return snapshot([node("a", 8)], [queue("q", gpu_quota=8)],
                        [m.JobSpec("g", "q", tasks=tasks, stale_since=NOW - stale_for, priority=125,
                                   preemptible=False)])
    cfg = m.CycleConfig(default_staleness_grace_s=60)
    assert run_cycle(snap(10), cfg).evictions == ()
    result = run_cycle(snap(120), cfg)
    assert [(e.task, e.action) for e in result.evictions] == [("g-0", "stalegangeviction")]
    assert "grace period of 60s" in result.evictions[0].reason.message
