"""The org scenarios (`tests/org_scenarios/placement.json`) on a real API server with KWOK nodes.

Each scenario sets up node pools, a department and its projects through the org services, applies its
cluster objects with the official client, runs every shard's cycles (the assigner first in each) and
checks what `kubectl` would show: where the pods run, each PodGroup's node pool and queue, the events.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devkube import e2e, org_scenarios
from devkube.localkube import LocalKube
from tests.kube.fixtures import kwok_scenario_cluster, scenario_runner

pytestmark = [pytest.mark.kube, pytest.mark.django_db(transaction=True)]

SCENARIOS = e2e.load_scenarios(org_scenarios.SCENARIOS)


@pytest.fixture(scope="module")
def kwok_cluster() -> Iterator[LocalKube]:
    yield from kwok_scenario_cluster()


@pytest.fixture
def runner(kwok_cluster: LocalKube, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[e2e.ScenarioRunner]:
    yield from scenario_runner(kwok_cluster, settings, monkeypatch, run_cycle=org_scenarios.every_shard_cycle,
                               check=org_scenarios.every_shard_invariants, setup=org_scenarios.apply_org)


def test_there_are_at_least_twenty_org_scenarios_each_with_an_expectation():
    assert len(SCENARIOS) >= 20
    assert all(any("expect" in step for step in s["steps"]) and s.get("org") for s in SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["id"].split("#")[1] for s in SCENARIOS])
def test_org_scenario(runner: e2e.ScenarioRunner, scenario: dict[str, Any]):
    result = runner.run(scenario)
    assert result.error is None, result.error
    assert org_scenarios.failures(scenario, result.observations) == []
