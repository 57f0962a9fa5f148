"""Fixtures for tests on a real kube-apiserver (`devkube.localkube.LocalKube`).

``kube_cluster`` (one per test module) and ``kube_cluster_fresh`` (an empty cluster for each test)
have our CRDs from ``deploy/kubernetes/crds.yaml`` installed. ``apiserver`` runs a test on both the
fake server and the real one behind the same small interface (`tests.kube.servers`). Without the
binaries (``make kube`` builds them) the real-server tests are skipped with a notice saying so.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devkube.e2e import ScenarioRunner
from devkube.localkube import NO_KWOK, LocalKube, find_binaries, find_tool
from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.kube.servers import FakeServer, RealServer

CRDS = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "crds.yaml"
NO_BINARIES = "no kube-apiserver/etcd binaries: run `make kube`"


def start_cluster(**kwargs: object) -> LocalKube:
    """A started LocalKube with our CRDs, or a skip when the binaries are missing."""
    bin_dir = find_binaries()
    if bin_dir is None:
        pytest.skip(NO_BINARIES)
    kube = LocalKube(bin_dir, **kwargs).start()  # type: ignore[arg-type]
    try:
        kube.install_crds(CRDS)
    except BaseException:
        kube.stop()
        raise
    return kube


def kwok_scenario_cluster(controllers: str | None = None) -> Iterator[LocalKube]:
    """The cluster the end-to-end scenarios play on (`make e2e-kai`): our CRDs, KWOK for the kubelets, no
    controller-manager unless ``controllers`` names some (`devkube.e2e.controllers_for`); a skip when the
    binaries or KWOK are missing. For a module-scoped fixture to yield from."""
    bin_dir = find_binaries()
    if bin_dir is None:
        pytest.skip(NO_BINARIES)
    if find_tool("kwok", bin_dir) is None:
        pytest.skip(NO_KWOK)
    kube = start_cluster(kwok=True, controllers=controllers)
    try:
        yield kube
    finally:
        kube.stop()


def product_on(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Callable[[LocalKube], None]:
    """A `ScenarioRunner`'s ``prepare``: an empty database, and the product's Kubernetes backend
    pointed at the scenario's cluster (its kubeconfig) with that cluster's row made."""
    from django.core.management import call_command

    from kaiweb.cluster import mirror

    def prepare(cluster: LocalKube) -> None:
        call_command("flush", interactive=False, verbosity=0)
        settings.KAI_CLUSTER_BACKEND = "kubernetes"
        settings.KAI_KUBERNETES_HOST = ""
        monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
        mirror.kubernetes_cluster()

    return prepare


def scenario_runner(kube: LocalKube, settings: Any, monkeypatch: pytest.MonkeyPatch,
                    **runner: Any) -> Iterator[ScenarioRunner]:
    """An e2e `ScenarioRunner` on ``kube`` (emptied first) preparing each scenario with `product_on`;
    ``runner`` are the runner's other arguments (``run_cycle``, ``check``, ``setup``). For a fixture
    to yield from."""
    before = os.environ.get("KUBECONFIG")
    kube.reset()
    yield ScenarioRunner(kube, prepare=product_on(settings, monkeypatch), **runner)
    if before is None:
        os.environ.pop("KUBECONFIG", None)


@pytest.fixture(scope="module")
def kube_cluster() -> Iterator[LocalKube]:
    """A real API server with our CRDs, shared by the tests of one module (they tidy up after themselves)."""
    kube = start_cluster()
    try:
        yield kube
    finally:
        kube.stop()


@pytest.fixture
def kube_cluster_fresh(kube_cluster: LocalKube) -> LocalKube:
    """The module's cluster, started again on an empty etcd for this test (about 3 s)."""
    kube_cluster.reset()
    kube_cluster.install_crds(CRDS)
    return kube_cluster


@pytest.fixture
def server(kube_cluster: LocalKube) -> RealServer:
    """The module's real API server, emptied for this test, behind the drivers' interface."""
    real = RealServer(kube_cluster)
    real.wipe()
    return real


@pytest.fixture
def kube_shard(server: RealServer, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """kaiweb configured for the real server (through its kubeconfig): the default shard of its cluster."""
    from kaiweb.cluster import mirror
    from kaiweb.cluster.models import SchedulingShard

    monkeypatch.setenv("KUBECONFIG", str(server.kube.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    settings.KAI_CLUSTER_BACKEND = "kubernetes"
    settings.KAI_KUBERNETES_HOST = ""
    settings.KAI_KUBERNETES_TIMEOUT = 5.0
    return SchedulingShard.objects.get(cluster=mirror.kubernetes_cluster("k8s"), name="default")


@pytest.fixture(scope="module")
def _real_server(kube_cluster: LocalKube) -> RealServer:
    return RealServer(kube_cluster)


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.kube)])
def apiserver(request: pytest.FixtureRequest) -> Iterator[FakeServer | RealServer]:
    """The fake API server, then a real one (emptied before the test), behind one interface."""
    if request.param == "fake":
        fake = FakeKubeApiServer().start()
        try:
            yield FakeServer(fake)
        finally:
            fake.stop()
        return
    server: RealServer = request.getfixturevalue("_real_server")
    server.wipe()
    yield server
