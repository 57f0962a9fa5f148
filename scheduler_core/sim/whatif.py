"""What-if: the same jobs replayed under the current queue tree and under a changed one.

`what_if` is the one comparison the what-if page, its API and the ``replay --compare`` command
share. It runs `replay.replay` twice with the same job → queue map, then reports per queue the
metrics of both runs and their difference (changed − current), and the same for the cluster-wide
summary. The caller brings the jobs (from a trace, or the workloads a shard recorded) and says how
they map to leaf queues; every queue that holds a job must be a leaf of both trees.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler_core import model as m
from scheduler_core.sim.replay import (
    ReplayCluster,
    ReplayConfig,
    ReplayResult,
    assign_queues,
    leaf_queues,
    replay,
)
from scheduler_core.sim.traces import Job

__all__ = ["METRICS", "SUMMARY_KEYS", "WhatIf", "what_if"]

#: per queue, what each run reports
METRICS = (
    "jobs", "queueing_delay_mean_s", "queueing_delay_p95_s", "jct_mean_s", "gpu_hours",
    "allocated_gpus_avg", "fair_share_gpus_avg", "preemptions",
)
#: cluster-wide, what each run reports
SUMMARY_KEYS = (
    "jain_fairness", "jain_fairness_vs_quota", "gpu_utilisation", "queueing_delay_mean_s", "jct_mean_s",
    "preempted_jobs", "unfinished", "simulated_seconds", "cycles",
)


def _row(per_queue: Mapping[str, float]) -> dict[str, float | None]:
    """One queue's metrics in one run (NaN, e.g. no job started, becomes None)."""
    return {k: None if math.isnan(v := float(per_queue[k])) else round(v, 2) for k in METRICS}


def _diff(a: Any, b: Any) -> float | None:
    return None if a is None or b is None else round(b - a, 4)


@dataclass(frozen=True)
class WhatIf:
    """Both runs and their comparison."""

    current: ReplayResult
    changed: ReplayResult
    config: ReplayConfig
    #: per queue: {"queue", "current", "changed", "difference"}, metrics as in METRICS (None: absent)
    queues: tuple[dict[str, Any], ...]
    #: {"current", "changed", "difference"}, each keyed by SUMMARY_KEYS
    summary: dict[str, dict[str, Any]]

    @property
    def horizon_reached(self) -> bool:
        """Whether a run stopped at its cycle bound with jobs unfinished."""
        return any(len(r.cycles) >= self.config.max_cycles and r.unfinished_jobs for r in (self.current, self.changed))

    def to_dict(self) -> dict[str, Any]:
        return {"queues": [dict(q) for q in self.queues], "summary": self.summary,
                "horizon_reached": self.horizon_reached}


def what_if(
    jobs: Sequence[Job],
    current: Sequence[m.QueueSpec],
    changed: Sequence[m.QueueSpec],
    cluster: ReplayCluster,
    config: ReplayConfig | None = None,
    queue_of: Mapping[str, str] | None = None,
) -> WhatIf:
    """Replay ``jobs`` under both trees and compare. Without ``queue_of`` the jobs are mapped to the
    current tree's leaf queues by user (`replay.assign_queues`)."""
    config = config or ReplayConfig()
    leaves_now, leaves_after = leaf_queues(current), leaf_queues(changed)
    mapping = dict(queue_of) if queue_of is not None else assign_queues(jobs, leaves_now, config.seed)
    held = sorted(set(mapping.values()))
    bad = [q for q in held if q not in leaves_now or q not in leaves_after]
    if bad:
        raise ValueError(f"queues: {', '.join(bad)} hold jobs, so they must be leaf queues of both trees")
    ra = replay(jobs, current, cluster, config, mapping)
    rb = replay(jobs, changed, cluster, config, mapping)
    pa, pb = ra.per_queue(), rb.per_queue()
    rows = []
    for q in sorted(set(pa) | set(pb)):
        a = _row(pa[q]) if q in pa else None
        b = _row(pb[q]) if q in pb else None
        rows.append({"queue": q, "current": a, "changed": b,
                     "difference": {k: _diff(a[k] if a else None, b[k] if b else None) for k in METRICS}})
    sa, sb = ra.summary(), rb.summary()
    summary = {"current": {k: sa[k] for k in SUMMARY_KEYS}, "changed": {k: sb[k] for k in SUMMARY_KEYS},
               "difference": {k: _diff(sa[k], sb[k]) for k in SUMMARY_KEYS}}
    return WhatIf(current=ra, changed=rb, config=config, queues=tuple(rows), summary=summary)
