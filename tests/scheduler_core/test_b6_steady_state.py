"""Correctness counters of B6 (steady state) at a small size; its timings are never asserted."""

from __future__ import annotations

import json

from benchmarks import b6_steady_state as b6


def test_a_saturated_cluster_changes_nothing_cycle_after_cycle():
    run = b6.measure(8, 128, "static", cycles=3, check=True)
    assert (run["binds"], run["evictions"], run["pipelined"]) == (0, 0, 0)
    assert run["same_decisions"] is True


def test_churn_fills_what_finished_with_the_decisions_of_the_full_evaluation():
    run = b6.measure(10, 160, "churn", cycles=4, check=True)
    # 1 % of 80 running jobs rounds to one job per step: one GPU frees and is bound again
    assert run["binds"] == 4
    assert run["evictions"] == 0
    assert run["same_decisions"] is True


def test_the_gang_variant_keeps_whole_gangs_pending():
    run = b6.measure(8, 128, "static", variant="gangs", cycles=2, check=True)
    assert run["binds"] == 0
    assert run["same_decisions"] is True


def test_b6_prints_one_json_object(capsys):
    assert b6.main(["--sizes", "4x32", "--kinds", "static", "--cycles", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "B6"
    assert out["runs"][0]["same_decisions"] is True
