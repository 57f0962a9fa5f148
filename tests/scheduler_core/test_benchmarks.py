"""Correctness counters of the benchmarks at small sizes (their timings are never asserted)."""

from __future__ import annotations

import json

import pytest

from benchmarks import b1_fill, b2_gang_waves, b3_reclaim
from benchmarks.floor import best_fit


def test_floor_best_fit_places_on_the_fullest_node_that_fits():
    import numpy as np

    where, placed = best_fit(np.array([8.0, 3.0, 1.0]), np.array([2.0, 1.0, 4.0, 8.0]))
    # 2 → the 3-GPU node; 1 → the 1-left node with the lower index; 4 → the 8-GPU node; 8 fits nowhere
    assert where.tolist() == [1, 1, 0, -1]
    assert placed == 3


@pytest.mark.parametrize("variant", ["base", "mixed", "many_queues", "gangs"])
def test_b1_fills_the_cluster_fairly_without_partial_gangs(variant):
    run = b1_fill.measure(10, variant, repeats=1)
    assert run["allocated_gpus"] == 80  # 8·N one-GPU pods on N × 8 GPUs: everything fits
    assert run["partial_gangs"] == 0
    assert run["evictions"] == 0
    assert run["jain_index"] == pytest.approx(1.0)


def test_b2_packs_the_gang_burst_into_nine_waves():
    out = b2_gang_waves.simulate(32, 30.0)
    assert out["pods_finished"] == out["pods"] == 288
    assert out["partial_gangs"] == 0
    assert out["makespan_s"] == 270.0
    assert out["gpu_occupancy"] == 1.0


@pytest.mark.parametrize("case", ["a", "b", "c"])
def test_b3_reclaims_exactly_what_is_needed(case):
    run = b3_reclaim.measure(12, case, repeats=1)
    assert run["counts_exact"], run
    if case == "a":
        assert (run["victims"], run["pipelined"]) == (48, 6)
    if case == "c":
        assert run["victims"] == 0
        assert "cannot free 80 GPUs" in run["pending_reason"]


def test_benchmarks_print_one_json_object(capsys):
    assert b3_reclaim.main(["--sizes", "4", "--cases", "a", "--repeats", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "B3"
    assert out["runs"][0]["counts_exact"]
