"""KAI's end-to-end corpus through the product's Kubernetes path on the fake API server (quick).

CI also plays it on the real API server (`make e2e-kai`); both keep the floor in
tests/e2e_scenario_floor.txt. Skipped with a notice where the corpus is not beside the checkout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from devkube import e2e
from devkube.product import product_cycle
from kaiweb.cluster import mirror

ROOT = Path(__file__).resolve().parents[3]
CORPUS = ROOT.parent / "shared" / "corpus" / "kai-e2e"
FLOOR = int((ROOT / "tests" / "e2e_scenario_floor.txt").read_text().split()[0])

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"the kai-e2e corpus is not at {CORPUS}")
def test_the_kai_e2e_corpus_passes_at_least_its_floor_on_the_fake_api_server(settings: Any) -> None:
    scenarios = e2e.load_scenarios(CORPUS)
    # Set through the fixture first, so that what point_product_at changes is put back afterwards.
    settings.KAI_CLUSTER_BACKEND = "kubernetes"
    settings.KAI_KUBERNETES_HOST = ""

    def prepare(kube: e2e.FakeCluster) -> None:
        call_command("flush", interactive=False, verbosity=0)
        e2e.point_product_at(kube)  # settings only: the fake is reached by its address
        mirror.kubernetes_cluster()

    with e2e.FakeCluster() as kube:
        runner = e2e.ScenarioRunner(kube, prepare=prepare, run_cycle=product_cycle)
        results = {str(s["id"]): runner.run(s).as_json() for s in scenarios}

    passed, total, failures = e2e.score(CORPUS, scenarios, results)
    assert passed >= FLOOR, f"{passed}/{total} passed, below the floor of {FLOOR}: {failures[:5]}"
