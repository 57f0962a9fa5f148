"""The engine against KAI's decision scenarios: the strict pass count never drops below the floor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import decisions as scenarios

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus" / "kai"
FLOOR = ROOT / "tests" / "scenario_floor.txt"


@pytest.fixture(scope="module")
def corpus_summary():
    if not CORPUS.is_dir():
        pytest.skip(f"the KAI scenario corpus is not present at ../shared/corpus/kai ({CORPUS})")
    summary = scenarios.run_all(scenarios.load([str(CORPUS)]))
    summary.pop("_lines")
    return summary


def test_strict_passes_do_not_fall_below_the_floor(corpus_summary):
    floor = int(FLOOR.read_text().split()[0])
    assert corpus_summary["passed"] >= floor, (
        f"{corpus_summary['passed']} strict passes, floor is {floor}; failing: {corpus_summary['failed']}"
    )


def test_summary_counts_are_consistent(corpus_summary):
    s = corpus_summary
    assert s["passed"] <= s["passed_status_only"] <= s["total"] - s["skipped_unsupported"]
    assert sum(c["total"] for c in s["by_mode"].values()) == s["total"]
    assert len(s["failed"]) == s["total"] - s["skipped_unsupported"] - s["passed"]


def _tiny_scenario(expected_status: str, expected_node: str | None) -> dict:
    exp = {"status": expected_status}
    if expected_node:
        exp["node"] = expected_node
    return {
        "id": "tiny/one#000", "mode": "action:allocate", "actions": ["allocate"], "features": ["allocate"],
        "unsupported_features": [],
        "harness": {"predicates_enabled": True, "max_binds_per_session": 5, "max_evictions_per_session": 0,
                    "max_pipelines_per_session": 0, "plugin_set": "default"},
        "queues": [{"name": "q", "kind": "queue", "parent": None, "priority": 100, "creation_minute": 0,
                    "gpu": {"quota": 2, "limit": -1, "over_quota_weight": 1},
                    "cpu": {"quota_millis": -1, "limit_millis": -1, "over_quota_weight": 1},
                    "memory": {"quota_bytes": -1, "limit_bytes": -1, "over_quota_weight": 1}}],
        "nodes": [{"name": n, "gpus": g, "cpu_millis": 8000, "memory_bytes": 10**10} for n, g in
                  (("node-a", 4), ("node-b", 2))],
        "jobs": [{"name": "j", "queue": "q", "priority": 50, "preemptible": True, "age_minutes": 1,
                  "build_order": 0, "subgroups": {"name": "", "min_subgroups": None, "topology_constraint": None,
                                                  "pod_sets": [{"name": "default", "min_available": 1}],
                                                  "subgroups": []},
                  "tasks": [{"name": "j-0", "state": "Pending", "cpu_millis": 1000, "memory_bytes": 10**9,
                             "gpus": 1, "gpu_request_kind": "whole"}]}],
        "expected": {"jobs": {"j": dict(exp, gpus_required=1)}, "tasks": {}, "nodes": {}},
    }


def test_runner_passes_a_correct_expectation_and_reports_the_node_difference(tmp_path):
    # binpack: the node with fewer free GPUs (node-b) wins
    good = _tiny_scenario("Binding", "node-b")
    wrong_node = dict(_tiny_scenario("Binding", "node-a"), id="tiny/one#001")
    wrong_status = dict(_tiny_scenario("Pending", None), id="tiny/one#002")
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([good, wrong_node, wrong_status]))
    summary = scenarios.run_all(scenarios.load([str(path)]))
    lines = summary.pop("_lines")
    assert summary["total"] == 3
    assert summary["passed"] == 1
    assert summary["passed_status_only"] == 2
    assert summary["failed"] == ["tiny/one#001", "tiny/one#002"]
    assert any("on node node-b, expected node-a" in line for line in lines)


def test_runner_cli_prints_the_json_summary(tmp_path, capsys):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([_tiny_scenario("Binding", "node-b")]))
    assert scenarios.main([str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"total", "passed", "passed_status_only", "skipped_unsupported", "by_mode", "by_feature",
                        "failed"}
    assert out["by_mode"]["action:allocate"]["passed"] == 1


def test_runner_skips_unsupported_scenarios_unless_asked(tmp_path):
    sc = dict(_tiny_scenario("Binding", "node-b"), unsupported_features=["numa"])
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([sc]))
    s1 = scenarios.run_all(scenarios.load([str(path)]))
    assert s1["skipped_unsupported"] == 1
    assert s1["passed"] == 0
    s2 = scenarios.run_all(scenarios.load([str(path)]), include_unsupported=True)
    assert s2["skipped_unsupported"] == 0
    assert s2["passed"] == 1
