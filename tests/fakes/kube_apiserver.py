"""The fake Kubernetes API server (`devkube.fake_apiserver`) as a pytest fixture."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devkube.fake_apiserver import FakeKubeApiServer, RequestRecord


@pytest.fixture
def kube_apiserver() -> Iterator[FakeKubeApiServer]:
    """A started fake API server; ``.api_client`` is a configured `kubernetes.client.ApiClient`."""
    server = FakeKubeApiServer().start()
    try:
        yield server
    finally:
        server.stop()


__all__: list[str] = ["FakeKubeApiServer", "RequestRecord", "kube_apiserver"]
