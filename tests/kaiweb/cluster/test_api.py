"""Clusters, shards and nodes through the API: rules, roles, audit, query budgets."""

from __future__ import annotations

import pytest

from kaiweb.audit.models import AuditEntry
from kaiweb.cluster.models import Cluster, SchedulingShard
from tests.factories import ClusterFactory, GpuDeviceFactory, NodeFactory

pytestmark = pytest.mark.django_db


def test_default_cluster_and_shard_exist_after_migrations(viewer_api):
    clusters = viewer_api.get("/api/v1/clusters/").json()["results"]
    assert [c["name"] for c in clusters] == ["default"]
    shards = viewer_api.get("/api/v1/shards/").json()["results"]
    assert [(s["cluster"], s["name"], s["partition_label_value"]) for s in shards] == [("default", "default", "")]


def test_platform_admin_creates_a_shard_and_the_change_is_audited(admin_api):
    response = admin_api.post(
        "/api/v1/shards/",
        {"cluster": "default", "name": "a100", "partition_label_value": "a100", "gpu_placement": "spread"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["warnings"] == ["a spread placement turns consolidation off for this shard (as in KAI)"]
    entry = AuditEntry.objects.get(object_type="cluster.schedulingshard", action="create")
    assert entry.actor_name == "platform-admin"
    assert entry.after["partition_label_value"] == "a100"


def test_overlapping_shards_are_refused(admin_api):
    response = admin_api.post("/api/v1/shards/", {"cluster": "default", "name": "again"}, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "partition_label_value": [
            "shard default already covers kai.scheduler/node-pool=(unlabelled); shards must not overlap"
        ]
    }
    assert SchedulingShard.objects.count() == 1


def test_cluster_settings_refuse_secrets(admin_api):
    response = admin_api.post(
        "/api/v1/clusters/", {"name": "prod", "backend": "kubernetes", "settings": {"api_token": "x"}}, format="json"
    )
    assert response.status_code == 400
    assert "api_token look like secrets" in response.json()["settings"][0]
    assert not Cluster.objects.filter(name="prod").exists()


def test_cluster_name_clash(admin_api):
    response = admin_api.post("/api/v1/clusters/", {"name": "default"}, format="json")
    assert response.status_code == 409
    assert response.json() == {"name": ["a cluster named 'default' already exists; names are unique"]}


def test_queue_admin_and_viewer_cannot_change_clusters_or_shards(queue_admin_api, viewer_api):
    for client in (queue_admin_api, viewer_api):
        assert client.post("/api/v1/clusters/", {"name": "x"}, format="json").status_code == 403
        shard = SchedulingShard.objects.get()
        assert client.patch(f"/api/v1/shards/{shard.pk}/", {"k_value": 2}, format="json").status_code == 403
    assert SchedulingShard.objects.get().k_value == 1.0


def test_nodes_are_read_only_with_gpus_and_a_query_budget(admin_api, django_assert_max_num_queries):
    cluster = ClusterFactory()
    for i in range(12):
        node = NodeFactory(cluster=cluster, labels={"kai.scheduler/node-pool": "a" if i % 2 else "b"})
        for index in range(2):
            GpuDeviceFactory(node=node, index=index)
    with django_assert_max_num_queries(8):
        response = admin_api.get("/api/v1/nodes/?label=kai.scheduler/node-pool=a")
    body = response.json()
    assert body["count"] == 6
    assert len(body["results"][0]["gpus"]) == 2
    assert admin_api.post("/api/v1/nodes/", {"name": "n"}, format="json").status_code == 405


def test_unreadable_cluster_objects_are_listed_with_field_and_rule(viewer_api, admin_api):
    from django.utils import timezone

    from kaiweb.cluster.models import UnreadableObject

    cluster = Cluster.objects.get(name="default")
    now = timezone.now()
    UnreadableObject.objects.create(
        cluster=cluster, kind="Pod", namespace="ml", name="bad", field="metadata.annotations[gpu-fraction]",
        rule="must be a number in (0, 1]", message="Pod ml/bad: gpu-fraction '1.5' must be a number in (0, 1]",
        first_seen=now, last_seen=now,
    )
    UnreadableObject.objects.create(
        cluster=cluster, kind="Pod", namespace="ml", name="waiting", field="metadata.labels[kai.scheduler/queue]",
        rule="must name an existing leaf queue", message="queue 'nope' does not exist", deferred=True,
        first_seen=now, last_seen=now,
    )
    body = viewer_api.get("/api/v1/unreadable-objects/?deferred=false").json()
    assert [(r["namespace"], r["name"], r["field"], r["rule"]) for r in body["results"]] == [
        ("ml", "bad", "metadata.annotations[gpu-fraction]", "must be a number in (0, 1]"),
    ]
    # Observed state: nobody writes it through the API.
    assert admin_api.post("/api/v1/unreadable-objects/", {}, format="json").status_code == 405


def test_clusters_shards_nodes_and_priority_classes_are_addressed_by_name_as_in_the_ui(viewer_api, admin_api):
    other = ClusterFactory(name="east")
    default = Cluster.objects.get(name="default")
    NodeFactory(cluster=default, name="gpu-1")
    twin = NodeFactory(cluster=other, name="gpu-1")
    only = NodeFactory(cluster=other, name="gpu-9")

    assert viewer_api.get("/api/v1/clusters/east/").json()["id"] == other.pk
    assert viewer_api.get(f"/api/v1/clusters/{other.pk}/").json()["name"] == "east"
    assert viewer_api.get("/api/v1/nodes/gpu-9/").json()["id"] == only.pk
    # A node name two clusters share: the answer says how to choose.
    ambiguous = viewer_api.get("/api/v1/nodes/gpu-1/")
    assert ambiguous.status_code == 400
    assert "?cluster=" in ambiguous.json()["cluster"][0]
    assert viewer_api.get("/api/v1/nodes/gpu-1/?cluster=east").json()["id"] == twin.pk
    elsewhere = viewer_api.get("/api/v1/nodes/gpu-9/?cluster=default")
    assert elsewhere.status_code == 404
    assert "in cluster 'default'" in elsewhere.json()["detail"]
    missing = viewer_api.get("/api/v1/nodes/nope/")
    assert missing.status_code == 404
    assert "nope" in missing.json()["detail"]
    assert viewer_api.get("/api/v1/shards/default/").json()["cluster"] == "default"
    # Writes too: a platform admin changes a priority class by its name.
    made = admin_api.post("/api/v1/priority-classes/", {"name": "urgent", "value": 900}, format="json")
    assert made.status_code == 201, made.json()
    changed = admin_api.patch("/api/v1/priority-classes/urgent/", {"value": 950}, format="json")
    assert changed.status_code == 200, changed.json()
    assert changed.json()["value"] == 950
    assert admin_api.delete("/api/v1/priority-classes/urgent/").status_code == 204
