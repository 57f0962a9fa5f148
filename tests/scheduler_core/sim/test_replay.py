"""Job-level replay through the engine: timing, gangs, reclaim, determinism, fairness, what-if, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler_core import model as m
from scheduler_core.sim.cli import main
from scheduler_core.sim.replay import (
    ReplayCluster,
    ReplayConfig,
    assign_queues,
    jain_index,
    leaf_queues,
    replay,
)
from scheduler_core.sim.replay_cli import DATA, queues_from_documents
from scheduler_core.sim.traces import Job
from scheduler_core.sim.whatif import what_if
from tests.scheduler_core.sim.conftest import write_openb

ROOT = Path(__file__).resolve().parents[3]
DEMO_QUEUES = ROOT / "deploy" / "examples" / "queues.yaml"
WHATIF_QUEUES = DATA / "queues_whatif_training.yaml"


def _tree(a_quota: float = 8, b_quota: float = 8, limit: float = m.UNLIMITED) -> tuple[m.QueueSpec, ...]:
    return (
        m.QueueSpec("root-a", gpu=m.QueueResource(quota=a_quota, limit=limit)),
        m.QueueSpec("root-b", gpu=m.QueueResource(quota=b_quota, limit=limit)),
        m.QueueSpec("a", parent="root-a", gpu=m.QueueResource(quota=a_quota, limit=limit)),
        m.QueueSpec("b", parent="root-b", gpu=m.QueueResource(quota=b_quota, limit=limit)),
    )


def _job(jid: str, t: float, dur: float, gpus: int, user: str | None = None) -> Job:
    pods = max(1, -(-gpus // 8))
    return Job(jid, t, dur, gpus, num_pods=pods, gpu_per_pod=gpus / pods, user=user)


def test_a_job_on_an_idle_cluster_starts_at_once_and_completes_after_its_duration():
    res = replay([_job("j", 0, 1000, 4)], _tree(), ReplayCluster(nodes=1), queue_of={"j": "a"})
    row = res.jobs[0]
    assert row["queueing_delay_s"] == 0
    assert row["jct_s"] == 1000
    assert res.unfinished_jobs == 0


def test_a_job_waits_for_the_gpus_of_the_job_before_it_until_the_next_cycle():
    jobs = [_job("first", 0, 1000, 8), _job("second", 10, 500, 8)]
    res = replay(jobs, _tree(), ReplayCluster(nodes=1), ReplayConfig(period_s=60), queue_of={"first": "a", "second": "a"})
    second = next(r for r in res.jobs if r["job"] == "second")
    # the first job ends at 1000; the next cycle on the 60 s grid is at 1020
    assert second["queueing_delay_s"] == 1020 - 10
    assert second["jct_s"] == 1020 + 500 - 10


def test_multi_node_gangs_start_whole_and_never_run_partially():
    jobs = [_job(f"g{i}", i * 30.0, 600 + 100 * (i % 3), 16 if i % 2 else 8) for i in range(12)]
    queue_of = {j.job_id: ("a" if i % 2 else "b") for i, j in enumerate(jobs)}
    res = replay(jobs, _tree(), ReplayCluster(nodes=3), ReplayConfig(period_s=60), queue_of=queue_of)
    assert res.partial_gangs == 0
    assert res.unfinished_jobs == 0
    assert all(c["allocated_gpus"] <= 24 for c in res.cycles)


def test_reclaim_gives_an_under_quota_queue_its_share_by_evicting_the_over_quota_queue():
    # queue a borrows the whole 16-GPU cluster; queue b (quota 8) then asks for its share
    jobs = [_job(f"a{i}", 0, 10_000, 8) for i in range(2)] + [_job("b0", 120, 1000, 8)]
    queue_of = {"a0": "a", "a1": "a", "b0": "b"}
    res = replay(jobs, _tree(), ReplayCluster(nodes=2), ReplayConfig(period_s=60), queue_of=queue_of)
    b0 = next(r for r in res.jobs if r["job"] == "b0")
    assert res.preempted_jobs >= 1
    assert b0["queueing_delay_s"] is not None
    assert b0["queueing_delay_s"] < 600
    assert res.partial_gangs == 0
    assert res.unfinished_jobs == 0


def test_replay_is_deterministic_for_a_seed():
    jobs = [_job(f"j{i}", i * 45.0, 300 + (i * 37) % 900, [1, 2, 4, 8, 16][i % 5], user=f"u{i % 4}") for i in range(30)]
    queues = _tree(4, 12)
    a = replay(jobs, queues, ReplayCluster(nodes=3), ReplayConfig(seed=3)).summary()
    b = replay(jobs, queues, ReplayCluster(nodes=3), ReplayConfig(seed=3)).summary()
    assert a == b
    assert a["partial_gangs"] == 0
    assert a["completed"] == 30


def test_jobs_map_to_leaf_queues_by_a_stable_hash_of_the_user():
    jobs = [_job(f"j{i}", i, 10, 1, user=f"u{i % 7}") for i in range(70)]
    leaves = ["q1", "q2", "q3", "q4"]
    first = assign_queues(jobs, leaves, seed=0)
    assert first == assign_queues(jobs, leaves, seed=0)
    by_user: dict[str, set[str]] = {}
    for j in jobs:
        by_user.setdefault(j.user or "", set()).add(first[j.job_id])
    assert all(len(qs) == 1 for qs in by_user.values())
    assert set(first.values()) <= set(leaves)
    with pytest.raises(ValueError, match="no leaf queue"):
        assign_queues(jobs, [], seed=0)


def test_fairness_against_quota_sees_a_queue_that_gets_more_than_its_guarantee():
    # queue a (quota 2) borrows the whole idle cluster while b (quota 6) asks for nothing
    jobs = [_job("a0", 0, 3600, 8)]
    res = replay(jobs, _tree(2, 6), ReplayCluster(nodes=1), queue_of={"a0": "a"})
    per_q = res.per_queue()
    assert per_q["a"]["allocated_gpus_avg"] == pytest.approx(8.0)
    assert per_q["a"]["quota_gpus_avg"] == pytest.approx(2.0)
    assert res.fairness("quota_gpus_avg") == pytest.approx(jain_index([4.0, 0.0]))
    assert res.fairness() == pytest.approx(1.0)


def test_jain_index_is_one_when_equal_and_one_over_n_when_one_queue_takes_all():
    assert jain_index([2.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert jain_index([1.0, 0.0, 0.0]) == pytest.approx(1 / 3)
    assert jain_index([1.0, 3.0]) == pytest.approx(16 / 20)


def test_a_job_larger_than_a_node_per_pod_or_in_an_unknown_queue_is_rejected():
    with pytest.raises(ValueError, match="gpu_per_pod"):
        replay([Job("x", 0, 10, 16, num_pods=1, gpu_per_pod=16)], _tree(), ReplayCluster(nodes=2), queue_of={"x": "a"})
    with pytest.raises(ValueError, match=r"jobs\[x\]\.queue"):
        replay([_job("x", 0, 10, 1)], _tree(), ReplayCluster(nodes=1), queue_of={"x": "nope"})
    with pytest.raises(ValueError, match="nodes"):
        ReplayCluster(nodes=0)


def test_demo_queue_file_parses_into_the_tree_and_bad_documents_name_the_field():
    import yaml

    queues = queues_from_documents(list(yaml.safe_load_all(DEMO_QUEUES.read_text())), "queues.yaml")
    assert leaf_queues(queues) == ["team-inference", "team-research-a", "team-research-b", "team-training"]
    inference = next(q for q in queues if q.name == "team-inference")
    assert (inference.parent, inference.priority, inference.gpu.quota, inference.gpu.limit) == ("department-a", 200, 8, 16)
    head = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "x"}}
    with pytest.raises(ValueError, match=r"q\[x\]\.spec\.parentQueue: unknown queue 'ghost'"):
        queues_from_documents([{**head, "spec": {"parentQueue": "ghost", "resources": {}}}], "q")
    with pytest.raises(ValueError, match=r"q\[x\]\.spec\.resources\.gpu\.quota: must be a finite number"):
        queues_from_documents([{**head, "spec": {"resources": {"gpu": {"quota": "a"}}}}], "q")
    with pytest.raises(ValueError, match=r"q\[x\]\.spec\.resources\.gpu\.limit: limit 2 is below the quota 4"):
        queues_from_documents([{**head, "spec": {"resources": {"gpu": {"quota": 4, "limit": 2}}}}], "q")
    with pytest.raises(ValueError, match=r"q\[x\]\.spec\.gpus: is not a Queue field"):
        queues_from_documents([{**head, "spec": {"resources": {}, "gpus": 4}}], "q")
    with pytest.raises(ValueError, match=r"q\[0\]\.metadata\.name"):
        queues_from_documents([{**head, "metadata": {}, "spec": {"resources": {}}}], "q")


def test_what_if_runs_the_same_jobs_under_two_trees_side_by_side():
    jobs = [_job(f"j{i}", i * 60.0, 1800, 8, user=f"u{i % 2}") for i in range(8)]
    out = what_if(jobs, _tree(8, 8), _tree(2, 14), ReplayCluster(nodes=2), ReplayConfig(seed=1))
    assert out.current.summary()["jobs"] == out.changed.summary()["jobs"] == 8
    assert [q["queue"] for q in out.queues] == ["a", "b"]
    for q in out.queues:
        for key, delta in q["difference"].items():
            a, b = q["current"][key], q["changed"][key]
            assert delta == (None if a is None or b is None else round(b - a, 4))
    assert set(out.summary) == {"current", "changed", "difference"}
    with pytest.raises(ValueError, match="must be leaf queues of both trees"):
        what_if(jobs, _tree(), (m.QueueSpec("only"),), ReplayCluster(nodes=1))


def test_replay_cli_prints_the_what_if_as_json(capsys):
    code = main(["replay", "--trace", "itp-sample", "--jobs", "25", "--queues", str(DEMO_QUEUES),
                 "--compare", str(WHATIF_QUEUES), "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["meta"]["jobs"] == 25
    assert (out["meta"]["current"], out["meta"]["changed"]) == ("queues.yaml", "queues_whatif_training.yaml")
    assert {q["queue"] for q in out["queues"]} == {"team-inference", "team-research-a", "team-research-b",
                                                   "team-training"}
    for label in ("current_run", "changed_run"):
        run = out[label]
        assert run["partial_gangs"] == 0
        assert set(run["per_queue"]) == {"team-inference", "team-research-a", "team-research-b", "team-training"}
        assert run["jain_fairness"] is not None
        assert 0.25 <= run["jain_fairness_vs_quota"] <= 1.0


def test_replay_cli_timeline_has_one_point_per_cycle(capsys):
    code = main(["replay", "--trace", "itp-sample", "--jobs", "10", "--queues", str(DEMO_QUEUES), "--timeline", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    timeline = out["timeline"]
    assert len(timeline["t"]) == out["result"]["cycles"] == len(timeline["allocated_gpus"])
    assert timeline["t"] == sorted(timeline["t"])
    assert set(timeline["queues"]) == {"team-inference", "team-research-a", "team-research-b", "team-training"}
    assert max(timeline["allocated_gpus"]) <= out["meta"]["gpus"]


def test_fgd_cli_prints_per_seed_and_overall_results(tmp_path, capsys):
    nodes = ["n0,96000,65536,8,G2", "n1,32000,65536,2,T4"]
    pods = [f"p{i:03d},{2000 + 1000 * (i % 3)},100,1,{[1000, 500, 250][i % 3]},,LS,Running,0,1,0" for i in range(12)]
    root = write_openb(tmp_path, nodes, pods)
    code = main(["fgd", "--traces", str(root), "--workload", "tiny", "--policy", "fgd", "--seeds", "42,43", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["seed"] for s in out["per_seed"]] == [42, 43]
    assert set(out["unallocated_gpu_pct"]) == {"90", "100", "110", "130"}
    assert out["seconds_per_experiment"] >= 0


def test_cli_errors_name_the_flag(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["fgd", "--traces", str(tmp_path), "--seeds", "4x"])
    assert "--seeds: expected comma-separated integers" in capsys.readouterr().err
    assert main(["replay", "--trace", "nope", "--queues", str(DEMO_QUEUES)]) == 2
    assert "--trace: unknown trace 'nope'" in capsys.readouterr().err
    assert main(["fgd", "--traces", str(tmp_path), "--workload", "default"]) == 2
    assert "file not found" in capsys.readouterr().err
