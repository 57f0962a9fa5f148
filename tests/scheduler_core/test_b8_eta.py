"""B8's replay with estimates at a small size: what it records and how it scores (timings never asserted)."""

from __future__ import annotations

from benchmarks import b8_eta
from scheduler_core.eta import Budget
from scheduler_core.sim.replay import ReplayCluster
from scheduler_core.sim.traces import Job


def test_every_job_that_waited_is_estimated_at_submission_and_scored_against_its_real_start():
    # one 8-GPU node; five whole-node jobs arrive together: each waits for the ones before it
    jobs = [Job(f"j{i}", submit_time=0.0, duration=600.0 * (i + 1), num_gpu=8, gpu_per_pod=8.0) for i in range(5)]
    states, figures = b8_eta.replay_with_estimates(jobs, ReplayCluster(nodes=1), 60.0,
                                                   Budget(samples=4, min_samples=4, max_cycles=20))
    assert all("first_start" in s.estimates for s in states)
    waited = [s for s in states if s.estimates["first_start"][0] > s.job.submit_time]
    assert len(waited) == 4
    for s in waited:
        at, p50, p80, baseline = s.estimates["at_submission"]
        assert at == s.job.submit_time
        assert p50 is not None
        assert at <= p50
        assert p80 is None or p80 >= p50  # None: beyond the horizon (no run time known yet at submission)
        assert baseline > at
    # the later in line, the later the estimate
    p50s = [s.estimates["at_submission"][1] for s in waited]
    assert p50s == sorted(p50s)
    # ten minutes later the first run has finished and taught its length: the later estimates are finite
    for s in waited[1:]:
        at, p50, p80, _ = s.estimates["after_10_min"]
        assert at == 600.0
        assert p50 is not None
        assert p80 is not None
        assert at <= p50 <= p80
    assert figures["estimator_runs"] >= 1
    scored = b8_eta.score(states, 7 * 24 * 3600.0, long_only=False)
    overall = scored["at_submission"]["overall"]
    assert overall["jobs"] == 4
    assert 0.0 <= overall["p80_coverage"] <= 1.0
    assert overall["median_abs_error_ratio"] >= 0


def test_the_budget_figure_estimates_every_pending_job_and_runs_forward_only_the_first_in_line():
    fig = b8_eta.budget_figure(nodes=2, pending=24, budget=Budget(samples=4, min_samples=4, max_pending=5))
    assert fig["estimated_jobs"] == 24
    assert fig["beyond_bound"] == 24 - 5
    assert fig["with_p50"] <= 5
    assert fig["budget"]["max_pending"] == 5
