"""Trace readers: every format parses into the neutral records; malformed rows name file, line, column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scheduler_core.sim.traces import (
    TraceFormatError,
    read_dirlab_jobs,
    read_itp_jobs,
    read_job_trace,
    read_openb_nodes,
    read_openb_pods,
    read_philly_vc_jobs,
)
from tests.scheduler_core.sim.conftest import NODE_HEADER, POD_HEADER


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_openb_nodes_are_read_into_arrays_and_gpu_nodes_filter_cpu_only_ones(tmp_path):
    p = _write(tmp_path, "n.csv", NODE_HEADER + "a,96000,1024,8,G2\nb,32000,512,0,\nc,64000,2048,2,T4\n")
    nodes = read_openb_nodes(p)
    assert nodes.names == ("a", "b", "c")
    assert nodes.total_gpus == 10
    gpu = nodes.gpu_nodes()
    assert gpu.names == ("a", "c")
    assert gpu.model == ("G2", "T4")
    assert gpu.cpu_milli.tolist() == [96000, 64000]


def test_openb_pods_full_form_keeps_spec_and_times(tmp_path):
    p = _write(
        tmp_path,
        "p.csv",
        POD_HEADER
        + "p0,12000,16384,1,460,V100M16|V100M32,LS,Running,0,100,5\n"
        + "p1,4000,1024,0,0,,BE,Pending,7,,\n",
    )
    pods = read_openb_pods(p)
    assert pods.gpu_spec == ("V100M16|V100M32", "")
    assert pods.gpu_request_milli.tolist() == [460, 0]
    assert pods.creation_time.tolist() == [0.0, 7.0]
    assert np.isnan(pods.scheduled_time[1])


def test_openb_pods_five_column_multigpu_form(tmp_path):
    p = _write(tmp_path, "m.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx,8000,100,4,1000\n")
    pods = read_openb_pods(p)
    assert pods.num_gpu.tolist() == [4]
    assert pods.gpu_spec == ("",)
    assert np.isnan(pods.creation_time[0])


@pytest.mark.parametrize(
    ("row", "column", "rule"),
    [
        ("p0,12000,16384,1,abc,,LS,Running,0,1,0", "gpu_milli", "expected an integer"),
        ("p0,12000,16384,2,500,,LS,Running,0,1,0", "gpu_milli", "only allowed with num_gpu == 1"),
        ("p0,-5,16384,1,500,,LS,Running,0,1,0", "cpu_milli", "must be >= 0"),
        ("p0,12000,16384,9,1000,,LS,Running,0,1,0", "num_gpu", "at most 8"),
        ("p0,12000,16384,1,1500,,LS,Running,0,1,0", "gpu_milli", "at most 1000"),
    ],
)
def test_malformed_pod_row_names_file_line_and_column(tmp_path, row, column, rule):
    p = _write(tmp_path, "bad.csv", POD_HEADER + "ok,1000,1,1,1000,,LS,Running,0,1,0\n" + row + "\n")
    with pytest.raises(TraceFormatError) as info:
        read_openb_pods(p)
    err = info.value
    assert err.line == 3
    assert err.column == column
    assert "bad.csv" in str(err)
    assert "line 3" in str(err)
    assert rule in str(err)


def test_row_with_wrong_field_count_and_missing_column_are_rejected(tmp_path):
    p = _write(tmp_path, "short.csv", NODE_HEADER + "a,96000,1024,8\n")
    with pytest.raises(TraceFormatError, match=r"line 2: expected 5 fields"):
        read_openb_nodes(p)
    p = _write(tmp_path, "nohdr.csv", "sn,cpu_milli,gpu,model\na,1,1,G2\n")
    with pytest.raises(TraceFormatError, match="missing column"):
        read_openb_nodes(p)
    with pytest.raises(TraceFormatError, match="file not found"):
        read_openb_nodes(tmp_path / "absent.csv")


def test_gpu_node_without_model_is_rejected(tmp_path):
    p = _write(tmp_path, "n.csv", NODE_HEADER + "a,96000,1024,8,\n")
    with pytest.raises(TraceFormatError) as info:
        read_openb_nodes(p)
    assert info.value.column == "model"


def test_itp_raw_and_elasticflow_forms_give_the_same_jobs_sorted_by_submission(tmp_path):
    raw = _write(tmp_path, "raw.csv", "job_id,submission_time,duration,num_gpu\nb,20,700,16\na,10,600,1\n")
    ef = _write(
        tmp_path,
        "ef.csv",
        "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\n"
        "b,20,5,bert,99,64,16,700\na,10,5,bert,99,64,1,600\n",
    )
    for trace in (read_itp_jobs(raw), read_job_trace(ef)):
        assert [j.job_id for j in trace.jobs] == ["a", "b"]
        big = trace.jobs[1]
        assert (big.num_gpu, big.num_pods, big.gpu_per_pod) == (16, 2, 8.0)
        assert trace.has_users is False


def test_philly_vc_file(tmp_path):
    p = _write(
        tmp_path,
        "philly_1.csv",
        "job_id,submit_time,real_iteration,model_name,ddl,batch_size,num_gpu,real_duration,duration,iteration\n"
        "0,0,1,vgg16,9,256,4,976570,976570,1\n",
    )
    trace = read_job_trace(p)
    assert trace.jobs[0].num_gpu == 4
    assert trace.jobs[0].duration == 976570
    assert read_philly_vc_jobs(p).jobs == trace.jobs


def test_dirlab_subset_accumulates_intervals_and_keeps_users(tmp_path):
    p = _write(
        tmp_path,
        "helios.csv",
        "u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status\n"
        "0,1,1,4,1,0,84,0,Pass\n1,2,0,2,1,10,50,0,Failed\n2,1,16,64,2,5,100,0,Killed\n",
    )
    trace = read_dirlab_jobs(p)
    assert [j.job_id for j in trace.jobs] == ["0", "2"]  # the CPU job is left out
    assert trace.jobs[1].submit_time == 15.0
    assert (trace.jobs[1].num_pods, trace.jobs[1].gpu_per_pod, trace.jobs[1].cpu_millis_per_pod) == (2, 8.0, 32000)
    assert trace.jobs[1].user == "1"
    assert trace.has_users
    assert len(read_dirlab_jobs(p, include_cpu_jobs=True)) == 3


def test_unrecognised_job_trace_header(tmp_path):
    p = _write(tmp_path, "x.csv", "a,b\n1,2\n")
    with pytest.raises(TraceFormatError, match="unrecognised job trace header"):
        read_job_trace(p)


def test_bundled_sample_reads_without_the_shared_folder():
    from scheduler_core.sim.replay_cli import DATA

    trace = read_job_trace(DATA / "itp_cluster05_sample.csv")
    assert len(trace) == 300
    assert all(j.duration >= 600 for j in trace.jobs)


def test_shared_openb_files_match_their_documented_counts(traces_dir):
    folder = traces_dir / "alibaba_gpu_v2023_openb"
    nodes = read_openb_nodes(folder / "openb_node_list_gpu_node.csv")
    assert (len(nodes), nodes.total_gpus, int(nodes.cpu_milli.sum()) // 1000) == (1213, 6212, 107018)
    pods = read_openb_pods(folder / "openb_pod_list_default.csv")
    assert len(pods) == 8152
    assert int(pods.gpu_request_milli.sum()) == 6_086_800
    multi = read_openb_pods(folder / "openb_pod_list_multigpu50.csv")
    assert len(multi) == 9061
