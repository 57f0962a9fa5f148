"""B4 replay: the openb pods as jobs, and both placements replayed through run_cycle side by side."""

from __future__ import annotations

import json

import pytest

from benchmarks import b4_replay
from scheduler_core.sim.traces import openb_jobs, read_openb_pods

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


def _trace(tmp_path, rows: list[str]):
    folder = tmp_path / "alibaba_gpu_v2023_openb"
    folder.mkdir()
    path = folder / "openb_pod_list_tiny.csv"
    path.write_text(HEADER + "".join(r + "\n" for r in rows))
    return path


def test_openb_pods_become_one_pod_jobs_with_shared_and_whole_gpus(tmp_path):
    path = _trace(tmp_path, [
        "p-old,4000,8192,1,500,,LS,Running,0,900,0",            # before `since`: left out
        "p-half,4000,8192,1,500,,LS,Running,100,1300,200",      # half a GPU for 1100 s
        "p-two,8000,16384,2,1000,,LS,Running,150,400,160",      # two whole GPUs for 240 s
        "p-cpu,2000,4096,0,0,,BE,Running,120,500,120",          # CPU only: left out
        "p-open,2000,4096,1,1000,,LS,Running,130,,",             # no end: left out
    ])
    trace = openb_jobs(read_openb_pods(path), since=50)
    assert [(j.job_id, j.submit_time, j.duration, j.gpu_per_pod, j.num_pods) for j in trace.jobs] == [
        ("p-half", 100.0, 1100.0, 0.5, 1), ("p-two", 150.0, 240.0, 2.0, 1)]
    assert trace.jobs[0].cpu_millis_per_pod == 4000


def test_the_benchmark_replays_both_placements_on_the_same_jobs(tmp_path, capsys):
    rows = [f"p-{k},4000,8192,1,{(300, 600, 700, 1000)[k % 4]},,LS,Running,{10 * k},{10 * k + 900},{10 * k}"
            for k in range(24)]
    _trace(tmp_path, rows)
    assert b4_replay.main(["--traces", str(tmp_path), "--pods", "openb_pod_list_tiny.csv", "--since", "0",
                           "--jobs", "24", "--nodes", "1", "--period", "30"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["meta"]["jobs"] == 24
    assert out["meta"]["shared_gpu_jobs"] == 18
    for strategy in ("binpack", "fragmentation-aware"):
        row = out[strategy]
        assert row["completed"] == 24
        assert row["partial_gangs"] == 0
        assert row["queueing_delay_mean_s"] is not None
        assert 0 <= row["unallocated_gpu_pct_while_waiting"] <= 100
    assert set(out["difference"]) >= {"unallocated_gpu_pct_while_waiting", "queueing_delay_mean_s", "jct_mean_s"}


def test_an_absent_trace_is_reported_not_a_crash(tmp_path, capsys):
    assert b4_replay.main(["--traces", str(tmp_path)]) == 0
    assert "no trace at" in json.loads(capsys.readouterr().out)["skipped"]


def test_bad_flags_are_refused(tmp_path):
    _trace(tmp_path, ["p-a,4000,8192,1,500,,LS,Running,100,1300,200"])
    with pytest.raises(SystemExit):
        b4_replay.main(["--traces", str(tmp_path), "--pods", "openb_pod_list_tiny.csv", "--jobs", "0"])
