"""The org scenarios (`tests/org_scenarios/placement.json`) on a real API server with KWOK nodes.

Each scenario sets up node pools, a department and its projects through the org services, applies its
cluster objects with the official client, runs every shard's cycles (the assigner first in each) and
checks what `kubectl` would show: where the pods run, each PodGroup's node pool and queue, the events.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command

from devkube import e2e, org_scenarios
from devkube.localkube import LocalKube
from kaiweb.cluster import mirror
from tests.kube.fixtures import kwok_scenario_cluster

pytestmark = [pytest.mark.kube, pytest.mark.django_db(transaction=True)]

SCENARIOS = e2e.load_scenarios(org_scenarios.SCENARIOS)


@pytest.fixture(scope="module")
def kwok_cluster() -> Iterator[LocalKube]:
    yield from kwok_scenario_cluster()


@pytest.fixture
def runner(kwok_cluster: LocalKube, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[e2e.ScenarioRunner]:
    def prepare(kube: LocalKube) -> None:
        call_command("flush", interactive=False, verbosity=0)
        settings.KAI_CLUSTER_BACKEND = "kubernetes"
        settings.KAI_KUBERNETES_HOST = ""
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
        mirror.kubernetes_cluster()

    before = os.environ.get("KUBECONFIG")
    kwok_cluster.reset()
    yield e2e.ScenarioRunner(kwok_cluster, prepare=prepare, run_cycle=org_scenarios.every_shard_cycle,
                             check=org_scenarios.every_shard_invariants, setup=org_scenarios.apply_org)
    if before is None:
        os.environ.pop("KUBECONFIG", None)


def test_there_are_at_least_twenty_org_scenarios_each_with_an_expectation():
    assert len(SCENARIOS) >= 20
    assert all(any("expect" in step for step in s["steps"]) and s.get("org") for s in SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["id"].split("#")[1] for s in SCENARIOS])
def test_org_scenario(runner: e2e.ScenarioRunner, scenario: dict[str, Any]):
    result = runner.run(scenario)
    assert result.error is None, result.error
    assert org_scenarios.failures(scenario, result.observations) == []
