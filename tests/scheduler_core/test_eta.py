"""Start-time estimates (``scheduler_core.eta``): the engine run forward with sampled run times."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core import model as m
from scheduler_core.eta import (
    Budget,
    Declared,
    Run,
    RuntimeHistory,
    _Ends,
    estimate_starts,
    job_class,
    reason_text,
    size_class,
)
from tests.scheduler_core.engine_builders import NOW, gpu_task, node, queue
from tests.scheduler_core.test_invariants import clusters
from tests.scheduler_core.test_shortcut_properties import crowded

HOUR = 3600.0


def _history(seconds: list[float], queue_name: str = "q", size: str = "8") -> RuntimeHistory:
    return RuntimeHistory.from_runs(Run(queue_name, "", "single", size, s) for s in seconds)


def _two_nodes(long_ran: float, short_ran: float) -> m.ClusterSnapshot:
    """Two 8-GPU nodes, each held by a running job; two pending 8-GPU jobs, one pinned to each node
    by its node selector (so each waits for its own node's runner; the runners are not preemptible, so
    no consolidation moves them)."""
    nodes = (node("n-long", 8, labels={"pool": "long"}), node("n-short", 8, labels={"pool": "short"}))
    jobs = (
        m.JobSpec("runner-long", "q", (gpu_task("rl-0", 8, m.RUNNING, "n-long"),), creation=NOW - long_ran,
                  last_start=NOW - long_ran, preemptible=False),
        m.JobSpec("runner-short", "q", (gpu_task("rs-0", 8, m.RUNNING, "n-short"),), creation=NOW - short_ran,
                  last_start=NOW - short_ran, preemptible=False),
        m.JobSpec("behind-long", "q", (m.TaskSpec("bl-0", gpu_task("x", 8).request,
                                                  node_selector={"pool": "long"}),), creation=NOW - 10),
        m.JobSpec("behind-short", "q", (m.TaskSpec("bs-0", gpu_task("x", 8).request,
                                                   node_selector={"pool": "short"}),), creation=NOW - 5),
    )
    return m.ClusterSnapshot(nodes=nodes, queues=(queue("q", gpu_quota=16),), jobs=jobs, now=NOW)


def test_the_same_snapshot_and_seed_give_the_same_estimates_and_another_seed_may_differ():
    snap = _two_nodes(long_ran=1 * HOUR, short_ran=1 * HOUR)
    history = _history([h * HOUR for h in (1.5, 2, 3, 4, 6, 8, 12, 16, 20, 24)])
    a = estimate_starts(snap, history=history, seed=7)
    b = estimate_starts(snap, history=history, seed=7)
    assert a == b
    assert set(a) == {"behind-long", "behind-short"}
    c = estimate_starts(snap, history=history, seed=8)
    assert set(c) == set(a)


def test_a_job_behind_a_long_runner_gets_a_later_p50_than_one_behind_a_short_one():
    # the same history; the long runner has run 10 h (only the longest records outlast it), the
    # short one 1 h: what is left of the long one is drawn from longer runs
    history = _history([h * HOUR for h in (1.5, 2, 3, 4, 6, 8, 12, 16, 20, 24, 30, 36)])
    est = estimate_starts(_two_nodes(long_ran=10 * HOUR, short_ran=1 * HOUR), history=history, seed=1)
    long_, short = est["behind-long"], est["behind-short"]
    assert long_.p50 is not None
    assert short.p50 is not None
    assert long_.p50 > short.p50 > NOW
    for e in est.values():
        assert e.p80 is not None
        assert e.p50 is not None
        assert e.p80 >= e.p50


def test_p80_is_never_before_p50_and_both_are_after_now():
    history = _history([h * HOUR for h in (0.5, 1, 2, 3, 5, 8, 13, 21)], size="8")
    for seed in range(5):
        for e in estimate_starts(_two_nodes(2 * HOUR, 0.2 * HOUR), history=history, seed=seed).values():
            assert e.p50 is not None
            assert e.p80 is not None
            assert NOW <= e.p50 <= e.p80


def test_a_declared_run_time_decides_the_end_of_the_runner():
    snap = _two_nodes(long_ran=1 * HOUR, short_ran=1 * HOUR)
    history = _history([h * HOUR for h in (2, 3, 4, 6, 8, 12, 16, 20, 24)])
    declared = {"runner-long": Declared(runtime_s=1.5 * HOUR), "runner-short": Declared(deadline=NOW + 3 * HOUR)}
    est = estimate_starts(snap, history=history, declared=declared, seed=3)
    # every sample agrees: the runners end when they said
    assert est["behind-long"].p50 == est["behind-long"].p80 == pytest.approx(NOW + 0.5 * HOUR)
    assert est["behind-short"].p50 == est["behind-short"].p80 == pytest.approx(NOW + 3 * HOUR)
    assert est["behind-long"].reason.details["frees_at"] == pytest.approx(NOW + 0.5 * HOUR)


def test_a_job_that_fits_now_starts_now_and_a_job_that_never_fits_is_beyond_the_horizon():
    nodes = (node("n0", 8),)
    jobs = (
        m.JobSpec("run", "q", (gpu_task("run-0", 4, m.RUNNING, "n0"),), creation=NOW - 100, last_start=NOW - 100),
        m.JobSpec("huge", "q", (gpu_task("huge-0", 16),), creation=NOW - 50),
    )
    snap = m.ClusterSnapshot(nodes=nodes, queues=(queue("q", gpu_quota=8),), jobs=jobs, now=NOW)
    est = estimate_starts(snap, history=_history([600.0] * 10, size="4"), budget=Budget(horizon_s=HOUR))
    assert est["huge"].p50 is None
    assert est["huge"].started == 0
    assert est["huge"].reason.code == "beyond-horizon"


def test_jobs_behind_others_of_their_queue_wait_for_them_and_the_reason_says_so():
    # one 8-GPU node held for a while; three pending 8-GPU jobs of one queue: each waits for the
    # one before it, so their p50s come in the engine's order
    nodes = (node("n0", 8),)
    jobs = [m.JobSpec("run", "q", (gpu_task("run-0", 8, m.RUNNING, "n0"),), creation=NOW - 60, last_start=NOW - 60)]
    jobs += [m.JobSpec(f"w{i}", "q", (gpu_task(f"w{i}-0", 8),), creation=NOW - 30 + i) for i in range(3)]
    snap = m.ClusterSnapshot(nodes=nodes, queues=(queue("q", gpu_quota=8),), jobs=tuple(jobs), now=NOW)
    history = _history([h * HOUR for h in (0.5, 0.75, 1, 1.25, 1.5, 2, 2.5, 3)])
    est = estimate_starts(snap, history=history, seed=2)
    p50s = [est[f"w{i}"].p50 for i in range(3)]
    assert all(p is not None for p in p50s)
    assert p50s[0] < p50s[1] < p50s[2]  # type: ignore[operator]
    assert est["w2"].reason.details["ahead_in_queue"] == 2
    text = reason_text(est["w2"].reason.code, est["w2"].reason.details, lambda t: "14:20")
    assert text.startswith("Behind 2 jobs of q; needs 8 GPUs on one node")
    assert "frees at ~14:20" in text


def test_a_runner_that_outlived_every_record_still_ends_later_not_now():
    history = _history([600.0] * 10)
    remaining = [history.remaining(("q", "", "single", "8"), 5 * HOUR, u) for u in (0.1, 0.5, 0.9)]
    assert 0 < remaining[0] < remaining[1] < remaining[2]
    # the median of a Pareto tail of index 2 past the time run: (sqrt(2) - 1) of it
    assert remaining[1] == pytest.approx(5 * HOUR * (2 ** 0.5 - 1))


def test_the_history_backs_off_to_a_broader_class_when_a_class_has_few_records():
    runs = [Run("a", "u1", "single", "1", 100.0)] * 3 + [Run("b", "u2", "single", "1", 10_000.0)] * 20
    history = RuntimeHistory.from_runs(runs)
    # queue a has 3 records: too few, so the draw is from every 1-GPU single job (mostly 10,000 s)
    assert history.remaining(("a", "u1", "single", "1"), 0.0, 0.5) == pytest.approx(10_000.0)
    rich = RuntimeHistory.from_runs([Run("a", "u1", "single", "1", 100.0)] * 10 + runs[3:])
    assert rich.remaining(("a", "u1", "single", "1"), 0.0, 0.5) == pytest.approx(100.0)


def test_size_classes_round_up_to_powers_of_two_of_gpus_and_of_shares_of_one():
    assert [size_class(g) for g in (0, 0.5, 1, 2, 3, 8, 9)] == ["cpu", "shared-1/2", "1", "2", "4", "8", "16"]
    assert [size_class(g) for g in (0.81, 0.51, 0.26, 0.25, 0.2, 0.001)] == [
        "shared-1", "shared-1", "shared-1/2", "shared-1/4", "shared-1/4", "shared-1/64"]


def test_a_share_of_a_gpu_with_few_records_backs_off_to_every_shared_job_before_every_job():
    runs = ([Run("q", "", "single", "shared-1/4", 60.0)] * 3 + [Run("q", "", "single", "shared-1", 120.0)] * 10
            + [Run("q", "", "single", "1", 10_000.0)] * 40)
    history = RuntimeHistory.from_runs(runs)
    # 3 records of quarter-GPU jobs: too few; the 13 shared-GPU jobs (mostly 120 s) come before all 53 jobs
    assert history.remaining(("q", "", "single", "shared-1/4"), 0.0, 0.5) == pytest.approx(120.0)
    assert history.remaining(("q", "", "single", "shared-1"), 0.0, 0.5) == pytest.approx(120.0)


def test_a_run_that_began_and_ended_between_two_simulated_cycles_frees_its_room_at_its_end():
    # one node; the runner ends at +100 s, then three jobs of 100 s each in line: the cycles are spaced
    # far wider than the runs (two cycles per day), yet each job starts when the one before it ends
    names = ["a", "b", "c"]
    snap = _line(names)
    declared = {uid: Declared(runtime_s=100.0) for uid in names} | {"run": Declared(deadline=NOW + 100.0)}
    est = estimate_starts(snap, history=_history([HOUR] * 10), declared=declared, seed=1,
                          budget=Budget(horizon_s=24 * HOUR, max_cycles=4, samples=4))
    assert [est[n].p50 for n in names] == [NOW + 100.0, NOW + 200.0, NOW + 300.0]
    assert [est[n].p80 for n in names] == [NOW + 100.0, NOW + 200.0, NOW + 300.0]


def test_a_budget_below_one_sample_or_with_a_bad_horizon_is_refused():
    with pytest.raises(ValueError, match="samples"):
        Budget(samples=0)
    with pytest.raises(ValueError, match="horizon_s"):
        Budget(horizon_s=0)
    with pytest.raises(ValueError, match="max_pending"):
        Budget(max_pending=0)


def _line(names_by_creation: list[str]) -> m.ClusterSnapshot:
    """One 8-GPU node held by a runner; pending 8-GPU jobs of one queue, created in the given order."""
    jobs = [m.JobSpec("run", "q", (gpu_task("run-0", 8, m.RUNNING, "n0"),), creation=NOW - 60, last_start=NOW - 60)]
    jobs += [m.JobSpec(name, "q", (gpu_task(f"{name}-0", 8),), creation=NOW - 30 + i)
             for i, name in enumerate(names_by_creation)]
    return m.ClusterSnapshot(nodes=(node("n0", 8),), queues=(queue("q", gpu_quota=8),), jobs=tuple(jobs), now=NOW)


def test_the_run_forward_takes_the_first_jobs_in_the_engines_order_and_says_the_rest_are_further_back():
    # created in the order z, y, x, w (the engine's order), the reverse of their names
    names = ["z", "y", "x", "w"]
    snap = _line(names)
    declared = {uid: Declared(runtime_s=HOUR) for uid in ["run", *names]}
    full = estimate_starts(snap, history=_history([HOUR] * 10), declared=declared, seed=4)
    bounded = estimate_starts(snap, history=_history([HOUR] * 10), declared=declared, seed=4,
                              budget=Budget(max_pending=2))
    assert [full[n].p50 for n in names] == [NOW + (i + 1) * HOUR - 60 for i in range(4)]
    # the two first in line are estimated as without the bound (the ones behind them take nothing of theirs)
    for n in ("z", "y"):
        assert bounded[n] == full[n]
    for n in ("x", "w"):
        e = bounded[n]
        assert (e.p50, e.p80, e.started) == (None, None, 0)
        assert e.reason.code == "beyond-bound"
        # the room frees for the jobs ahead until the last of them starts
        assert e.reason.details["after"] == full["y"].p50
        assert "further back in line than the estimate runs forward" in e.reason.message
    assert bounded["w"].reason.details["ahead_in_queue"] == 3
    text = reason_text("beyond-bound", {**bounded["w"].reason.details, "after": None}, lambda t: "14:20")
    assert text.endswith("further back in line than the estimate runs forward")


PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(st.one_of(crowded(), crowded(fractions=False), clusters()), st.integers(0, 2**16), st.sampled_from([1, 3, 2000]))
def test_the_memo_shared_by_the_samples_changes_no_estimate(snap, seed, max_pending):
    # every simulated cycle of every sample runs with one memo (job states and node tables handed from
    # cycle to cycle, across samples too); the plain config builds every cycle from nothing
    history = RuntimeHistory.from_runs(Run(f"q{k % 3}", "", "single", size_class(g), 600.0 * (1 + k % 7))
                                       for k, g in enumerate([1, 2, 4, 8, 0.5] * 6))
    budget = Budget(samples=4, min_samples=4, max_cycles=8, max_pending=max_pending)
    fast = estimate_starts(snap, history=history, seed=seed, budget=budget)
    plain = estimate_starts(snap, m.CycleConfig(shortcuts=False), history, seed=seed, budget=budget)
    assert fast == plain


@PROPERTY
@given(st.lists(st.floats(1.0, 1e5), min_size=0, max_size=30), st.lists(st.floats(1.0, 1e5), max_size=10),
       st.lists(st.tuples(st.floats(0.0, 2e5), st.floats(1e-6, 1 - 1e-6)), min_size=1, max_size=20))
def test_the_ends_drawn_with_the_curves_looked_up_once_are_the_histories_own(finished, running, draws):
    history = RuntimeHistory.from_runs([Run("q", "", "single", "1", s) for s in finished],
                                       running=[Run("q", "", "single", "1", s) for s in running])
    job = m.JobSpec("j", "q", (gpu_task("j-0", 1, m.RUNNING, "n0"),))
    ends = _Ends(history, {}, {"j": job_class(job)}, {"j": 0})
    for _ in range(2):  # the second pass finds every curve looked up already
        for ran, u in draws:
            start = NOW - ran
            assert ends.end("j", start, NOW, [u]) == NOW + history.remaining(job_class(job), NOW - start, u)
