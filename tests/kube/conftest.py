"""Tests on a real kube-apiserver; skipped, with a notice, when `make kube` has not been run."""

from tests.kube.fixtures import (  # noqa: F401 - fixtures
    _real_server,
    apiserver,
    kube_cluster,
    kube_cluster_fresh,
    kube_shard,
    server,
)
