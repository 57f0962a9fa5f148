"""Topology level aliases (KAI's ``spec.levels[].alias``) from the cluster to the engine: the mirror
keeps them, the snapshot carries them (the engine resolves a constraint's level by node label or
alias), the API and the nodes page show them; a Topology whose aliases do not each name one level
is an unreadable object naming ``spec.levels[i].alias``."""

from __future__ import annotations

import pytest

from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.models import Cluster, Topology, UnreadableObject
from kaiweb.scheduling import adapters
from scheduler_core import model as m
from tests.fakes.kube_apiserver import FakeKubeApiServer, kube_apiserver  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db

ZONE, RACK, HOST = "example.com/zone", "example.com/rack", "kubernetes.io/hostname"


def _topology(name: str, *levels: dict) -> dict:
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": list(levels)}}


@pytest.fixture
def server(kube_apiserver: FakeKubeApiServer) -> FakeKubeApiServer:  # noqa: F811
    kube_apiserver.register("topologies", "Topology", "kai.scheduler/v1alpha1", namespaced=False)
    return kube_apiserver


@pytest.fixture
def gateway(server: FakeKubeApiServer) -> KubernetesGateway:
    return KubernetesGateway(server.api_client, request_timeout=2.0, max_attempts=2, sleep=lambda _: None)


@pytest.fixture
def cluster() -> Cluster:
    return mirror.kubernetes_cluster("k8s")


def _observe(gateway: KubernetesGateway, cluster: Cluster) -> None:
    mirror.record_heartbeat(cluster)  # the cycle's observe step: Queues, Topologies, shards
    assert mirror.observe(gateway, cluster)["mode"] == "queues"


def test_the_mirror_keeps_each_levels_alias_and_the_snapshot_carries_them(server, gateway, cluster):
    server.put("topologies", _topology("dc", {"nodeLabel": ZONE}, {"nodeLabel": RACK, "alias": "rack"},
                                       {"nodeLabel": HOST, "alias": "node"}))
    _observe(gateway, cluster)
    row = Topology.objects.get(cluster=cluster, name="dc")
    assert (row.levels, row.aliases) == ([ZONE, RACK, HOST], ["", "rack", "node"])
    shard = cluster.shards.get(name="default")
    snapshot, _ = adapters.build_snapshot(shard, now=0.0, reuse=False)
    (spec,) = snapshot.topologies
    assert spec == m.TopologySpec("dc", (ZONE, RACK, HOST), ("", "rack", "node"))
    assert spec.level_label("rack") == RACK

    # KAI lets aliases be edited (only the node labels are immutable): the mirror follows
    server.put("topologies", _topology("dc", {"nodeLabel": ZONE, "alias": "zone"}, {"nodeLabel": RACK},
                                       {"nodeLabel": HOST, "alias": "node"}))
    _observe(gateway, cluster)
    assert Topology.objects.get(cluster=cluster, name="dc").aliases == ["zone", "", "node"]


def test_a_topology_with_a_duplicate_alias_is_unreadable_and_names_the_field(server, gateway, cluster):
    server.put("topologies", _topology("dc", {"nodeLabel": ZONE, "alias": "rack"},
                                       {"nodeLabel": RACK, "alias": "rack"}))
    _observe(gateway, cluster)
    assert not Topology.objects.filter(cluster=cluster).exists()
    problem = UnreadableObject.objects.get(cluster=cluster, kind="Topology", name="dc")
    assert problem.field == "spec.levels[1].alias"
    assert "must be unique within the topology" in problem.rule
    assert "spec.levels[0].alias is 'rack' too" in problem.message

    server.put("topologies", _topology("dc", {"nodeLabel": ZONE, "alias": "zone"},
                                       {"nodeLabel": RACK, "alias": "rack"}))
    _observe(gateway, cluster)  # fixed: readable again, the problem clears
    assert Topology.objects.get(cluster=cluster, name="dc").aliases == ["zone", "rack"]
    assert not UnreadableObject.objects.filter(cluster=cluster, kind="Topology").exists()


def _stored(cluster: Cluster | None = None) -> Topology:
    cluster = cluster or Cluster.objects.get(name="default")
    return Topology.objects.create(cluster=cluster, name="dc", levels=[ZONE, RACK, HOST],
                                   aliases=["", "rack", ""])


def test_the_api_lists_each_topologys_levels_with_their_aliases(viewer_api, admin_api):
    _stored()
    body = viewer_api.get("/api/v1/topologies/").json()
    assert [(r["cluster"], r["name"]) for r in body["results"]] == [("default", "dc")]
    assert body["results"][0]["levels"] == [{"node_label": ZONE, "alias": ""}, {"node_label": RACK, "alias": "rack"},
                                            {"node_label": HOST, "alias": ""}]
    assert admin_api.post("/api/v1/topologies/", {"name": "x"}, format="json").status_code == 405


def test_the_nodes_page_shows_the_topologies_with_their_aliases(client, viewer):
    _stored()
    client.force_login(viewer)
    html = client.get("/nodes/").content.decode()
    card = html[html.index('id="topologies"'):]
    assert "default/dc" in card
    assert f"<code>{RACK}</code> (alias <code>rack</code>)" in card
