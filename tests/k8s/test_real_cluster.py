"""The Kubernetes gateway against a real cluster: opt-in (``pytest -m k8s`` with KUBECONFIG set).

Reads only, unless ``KAIWEB_K8S_ALLOW_WRITES=1``: then a uniquely named Queue is created,
changed and deleted (the Queue CRD must be installed, see deploy/kubernetes/crds.yaml).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.backends.kubernetes.transport import load_configuration
from kaiweb.cluster.backends.types import Unreadable
from kaiweb.cluster.gateway import ClusterRejected
from kaiweb.cluster.watch import ResourceWatch, WatchEvent, resource_kinds
from scheduler_core.model import QueueResource, QueueSpec

pytestmark = [
    pytest.mark.k8s,
    pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="needs KUBECONFIG pointing at a cluster"),
]


@pytest.fixture(scope="module")
def gateway() -> Iterator[KubernetesGateway]:
    api_client = client.ApiClient(load_configuration())
    yield KubernetesGateway(api_client, scheduler_name=os.environ.get("KAI_SCHEDULER_NAME", "kai-scheduler"))
    api_client.close()


def test_the_cluster_answers(gateway: KubernetesGateway) -> None:
    assert gateway.ping().startswith("Kubernetes v")


def test_nodes_pods_and_priority_classes_are_listed(gateway: KubernetesGateway) -> None:
    nodes = gateway.list_nodes()
    assert nodes.resource_version
    assert all(n.name and n.cpu_millis > 0 for n in nodes)
    assert all(isinstance(p, Unreadable) and p.field and p.rule for p in nodes.problems)
    pods = gateway.list_pods()
    assert all(p.queue or p.pod_group for p in pods)
    assert all(p.message for p in pods.problems)
    assert all(isinstance(c.value, int) for c in gateway.list_priority_classes())


def test_kai_crds_are_listed_when_installed(gateway: KubernetesGateway) -> None:
    try:
        queues = gateway.list_queues()
        groups = gateway.list_pod_groups()
    except ClusterRejected as err:
        if err.status == 404:
            pytest.skip("the scheduling.run.ai CRDs are not installed")
        raise
    assert all(q.spec.name for q in queues)
    assert all(g.queue for g in groups)


def test_a_node_watch_lists_then_streams(gateway: KubernetesGateway) -> None:
    events: list[WatchEvent] = []
    (kind,) = resource_kinds(gateway, ["Node"])
    watch = ResourceWatch(gateway, kind, events.append, timeout_seconds=2)

    assert watch.step() is True
    assert events[-1].type == "SYNCED"
    listed = watch.resource_version
    assert watch.step(2) is True
    assert int(watch.resource_version) >= int(listed)


@pytest.mark.skipif(os.environ.get("KAIWEB_K8S_ALLOW_WRITES") != "1", reason="writes need KAIWEB_K8S_ALLOW_WRITES=1")
def test_a_queue_is_created_replaced_and_deleted(gateway: KubernetesGateway) -> None:
    name = f"kaiweb-test-{uuid.uuid4().hex[:8]}"
    spec = QueueSpec(name, priority=100, gpu=QueueResource(1, -1, 1))
    try:
        assert gateway.upsert_queue(spec).spec == spec
        changed = QueueSpec(name, priority=150, gpu=QueueResource(2, 4, 1))
        assert gateway.upsert_queue(changed).spec == changed
    finally:
        gateway.delete_queue(name)
    assert gateway.read_queue(name) is None
