"""The DRA scenarios (`tests/dra_scenarios/`: KAI's DRA e2e specs converted, and ours) on a real API server.

Each scenario applies its objects with the official client on an empty API server with KWOK nodes (the
ResourceSlices stand for what a DRA driver publishes for them; the controller-manager runs the
resource-claim controller), runs the product's cycles, and checks what ``kubectl`` would show: where the
pods run, which claims are allocated, on which node and for which pods, the queues' GPUs. The invariants
are checked after every cycle (by the runner, and by the project's conftest).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from devkube import dra_scenarios, e2e
from devkube.localkube import LocalKube
from devkube.product import cycle_invariants, product_cycle
from tests.kube.fixtures import kwok_scenario_cluster, scenario_runner

pytestmark = [pytest.mark.kube, pytest.mark.django_db(transaction=True)]

SCENARIOS = e2e.load_scenarios(dra_scenarios.SCENARIOS)
KAI_SPECS = {  # the DRA Its of KAI's e2e suites (the builder's source commit), all converted
    "test/e2e/suites/allocate/resources/dra_test.go": 4,
    "test/e2e/suites/reclaim/reclaim_dra_test.go": 2,
    "test/e2e/suites/preempt/preempt_test.go": 1,
}


@pytest.fixture(scope="module")
def kwok_cluster() -> Iterator[LocalKube]:
    yield from kwok_scenario_cluster(controllers=e2e.controllers_for(SCENARIOS))


@pytest.fixture
def runner(kwok_cluster: LocalKube, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[e2e.ScenarioRunner]:
    yield from scenario_runner(kwok_cluster, settings, monkeypatch, run_cycle=product_cycle, check=cycle_invariants)


def test_every_kai_dra_spec_is_a_scenario_with_an_expectation():
    from_kai = [s for s in SCENARIOS if s["source"].startswith("test/e2e/suites/")]
    by_file: dict[str, int] = {}
    for s in from_kai:
        by_file[s["source"].rsplit(":", 1)[0]] = by_file.get(s["source"].rsplit(":", 1)[0], 0) + 1
    assert by_file == KAI_SPECS
    assert len(SCENARIOS) >= sum(KAI_SPECS.values())
    assert all(re.fullmatch(r"[a-z_/]+#[\w-]+", s["id"]) for s in SCENARIOS)
    assert len({s["id"] for s in SCENARIOS}) == len(SCENARIOS)
    assert all("dra" in s["features"] for s in SCENARIOS)
    assert all(any("expect" in step for step in s["steps"]) for s in SCENARIOS)
    assert all(s["source"].startswith("kaiweb (ours)") for s in SCENARIOS if s not in from_kai)


def test_the_json_is_what_the_builder_writes():
    from tests.dra_scenarios import build

    for path, make in build.FILES.items():
        assert json.loads((dra_scenarios.SCENARIOS / path).read_text()) == make(), path


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["id"] for s in SCENARIOS])
def test_dra_scenario(runner: e2e.ScenarioRunner, scenario: dict[str, Any]):
    result = runner.run(scenario)
    assert result.error is None, result.error
    assert dra_scenarios.failures(scenario, result.observations) == []


def test_the_checker_names_what_a_claim_does_not_show():
    """`dra_scenarios.failures` on a made-up observation: a claim on the wrong node, holding another
    device, reserved for nobody, and a device held twice, are each named."""
    scenario = next(s for s in SCENARIOS if s["id"] == "allocate/resources/dra_test#1")
    claim = {"metadata": {"namespace": "kai-q", "name": "allocate-simple"},
             "status": {"allocation": {
                 "devices": {"results": [{"pool": "node-2", "device": "gpu-1"}]},
                 "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                     {"key": "metadata.name", "operator": "In", "values": ["node-2"]}]}]}}}}
    twin = {"metadata": {"namespace": "kai-q", "name": "twin"}, "status": claim["status"]}
    pod = {"namespace": "kai-q", "name": "simple", "nodeName": "node-1", "deleted": False, "conditions": [],
           "resourceClaims": [{"name": "claim", "resourceClaimName": "allocate-simple"}], "resourceClaimStatuses": []}
    found = dra_scenarios.failures(scenario, [{"pods": [pod], "queues": [], "resourceclaims": [claim, twin]}])
    assert found == [
        "expect #1: the claims of pod kai-q/simple (allocate-simple): allocated on node node-2, expected node-1",
        "expect #1: the claims of pod kai-q/simple (allocate-simple): holds ['node-2/gpu-1'], expected ['node-1/gpu-0']",
        "expect #1: the claims of pod kai-q/simple (allocate-simple): reserved for [], expected ['simple']",
        "expect #1: devices: 2 held by claims (['node-2/gpu-1', 'node-2/gpu-1']), expected 1",
        "expect #1: devices: some held by two claims: ['node-2/gpu-1', 'node-2/gpu-1']"]
