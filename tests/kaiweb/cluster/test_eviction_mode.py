"""A shard's eviction mode (``delete`` as KAI, or ``evict`` through the Eviction API) and KAI's
``update-pod-eviction-condition``: read from a SchedulingShard object, kept on the shard, edited through
the API and the admin, and handed by the cycle to the gateway's evict action.

What the modes do on a cluster: ``tests/contract/test_kubernetes_delete_eviction.py`` and, with a
PodDisruptionBudget, ``tests/kube/test_eviction_modes_real.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from kaiweb.audit.models import AuditEntry
from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.shards import parse_shard
from kaiweb.cluster.backends.simulated import SimulatedGateway
from kaiweb.cluster.backends.types import ActionOutcome, ActionResult, EvictAction, ObservedShard, Unreadable
from kaiweb.cluster.models import Cluster, SchedulingShard
from kaiweb.scheduling import cycle
from kaiweb.scheduling.choices import DecisionKind
from tests.celery.builders import running_pods, small_cluster, submit
from tests.factories import DecisionFactory, SchedulingCycleFactory, SchedulingShardFactory


def shard_object(args: dict[str, Any] | None = None) -> ObservedShard | Unreadable:
    return parse_shard({"metadata": {"name": "default"}, "spec": {"args": args} if args is not None else {}})


# -- the SchedulingShard object -----------------------------------------------------------------


def test_a_schedulingshard_object_without_the_args_deletes_as_kai_does():
    shard = shard_object()
    assert isinstance(shard, ObservedShard)
    assert (shard.eviction_mode, shard.update_pod_eviction_condition) == ("delete", False)


@pytest.mark.parametrize(("args", "mode", "condition"), [
    ({"kaiweb-eviction-mode": "evict"}, "evict", False),
    ({"kaiweb-eviction-mode": "delete", "update-pod-eviction-condition": "true"}, "delete", True),
    ({"update-pod-eviction-condition": "T"}, "delete", True),  # as Go's strconv.ParseBool reads KAI's flag
    ({"update-pod-eviction-condition": "0"}, "delete", False),
])
def test_a_schedulingshard_object_sets_the_mode_and_the_condition_in_its_args(args, mode, condition):
    shard = shard_object(args)
    assert isinstance(shard, ObservedShard)
    assert (shard.eviction_mode, shard.update_pod_eviction_condition) == (mode, condition)
    assert shard.args == args  # kept as written: KAI's operator reads the same object


@pytest.mark.parametrize(("args", "field", "rule"), [
    ({"kaiweb-eviction-mode": "drain"}, "spec.args[kaiweb-eviction-mode]", "must be delete"),
    ({"kaiweb-eviction-mode": "Evict"}, "spec.args[kaiweb-eviction-mode]", "or evict"),
    ({"update-pod-eviction-condition": "yes"}, "spec.args[update-pod-eviction-condition]", "must be true or false"),
    ({"update-pod-eviction-condition": ""}, "spec.args[update-pod-eviction-condition]", "must be true or false"),
])
def test_a_schedulingshard_object_with_a_bad_value_is_unreadable_naming_the_arg(args, field, rule):
    bad = shard_object(args)
    assert isinstance(bad, Unreadable)
    assert bad.field == field
    assert rule in bad.rule


@pytest.mark.django_db
def test_the_mirror_takes_the_mode_from_the_object_and_absent_args_mean_kais_behaviour():
    cluster = Cluster.objects.create(name="k8s", backend="kubernetes")
    shard = SchedulingShardFactory(cluster=cluster, name="default", partition_label_value="",
                                   eviction_mode="evict")

    mirror._apply_shards(cluster, [shard_object({"kaiweb-eviction-mode": "evict",
                                                 "update-pod-eviction-condition": "true"})])
    shard.refresh_from_db()
    assert (shard.eviction_mode, shard.update_pod_eviction_condition) == ("evict", True)

    mirror._apply_shards(cluster, [shard_object({})])
    shard.refresh_from_db()
    assert (shard.eviction_mode, shard.update_pod_eviction_condition) == ("delete", False)


# -- the shard: default, API, admin -------------------------------------------------------------


@pytest.mark.django_db
def test_a_new_shard_deletes_as_kai_does():
    cluster = Cluster.objects.create(name="k8s", backend="kubernetes")
    shard = SchedulingShard.objects.create(cluster=cluster, name="new")
    assert (shard.eviction_mode, shard.update_pod_eviction_condition) == ("delete", False)


@pytest.mark.django_db
def test_the_api_shows_and_changes_the_mode_and_the_change_is_audited(admin_api):
    shown = admin_api.get("/api/v1/shards/default/").json()
    assert {"eviction_mode", "update_pod_eviction_condition"} <= set(shown)

    response = admin_api.patch("/api/v1/shards/default/", {"eviction_mode": "delete",
                                                           "update_pod_eviction_condition": True}, format="json")

    assert response.status_code == 200, response.json()
    assert (response.json()["eviction_mode"], response.json()["update_pod_eviction_condition"]) == ("delete", True)
    assert response.json()["warnings"] == []
    entry = AuditEntry.objects.filter(object_type="cluster.schedulingshard", action="update").latest("pk")
    assert entry.after["update_pod_eviction_condition"] is True


@pytest.mark.django_db
@pytest.mark.parametrize(("body", "field", "words"), [
    ({"eviction_mode": "drain"}, "eviction_mode", 'must be delete (the pod is deleted, as KAI does'),
    ({"eviction_mode": "drain", "k_value": 3}, "eviction_mode", 'not "drain"'),
    ({"update_pod_eviction_condition": "sometimes"}, "update_pod_eviction_condition", "valid boolean"),
])
def test_a_bad_mode_is_refused_naming_the_field_and_nothing_is_written(admin_api, body, field, words):
    before = SchedulingShard.objects.values().get(name="default")

    response = admin_api.patch("/api/v1/shards/default/", body, format="json")

    assert response.status_code == 400
    assert list(response.json()) == [field]
    assert words in response.json()[field][0]
    assert SchedulingShard.objects.values().get(name="default") == before


@pytest.mark.django_db
def test_the_condition_with_the_eviction_api_is_kept_with_a_warning(admin_api):
    response = admin_api.patch("/api/v1/shards/default/", {"eviction_mode": "evict",
                                                           "update_pod_eviction_condition": True}, format="json")

    assert response.status_code == 200
    assert response.json()["warnings"] == [
        "update_pod_eviction_condition applies to the delete mode only: with evict, the API server sets "
        "DisruptionTarget itself (reason EvictionByEvictionAPI, Kubernetes 1.26 and later)"]


@pytest.mark.django_db
def test_the_shard_page_shows_and_saves_the_mode(admin_client):
    shard = SchedulingShard.objects.get(name="default")
    page = admin_client.get(f"/admin/cluster/schedulingshard/{shard.pk}/change/").content.decode()
    select = page[page.index('name="eviction_mode"'):]
    select = select[:select.index("</select>")]
    assert 'value="delete"' in select
    assert 'value="evict"' in select
    assert "Delete the pod, as KAI does (PodDisruptionBudgets do not apply)" in select
    assert 'name="update_pod_eviction_condition"' in page

    listing = admin_client.get("/admin/cluster/schedulingshard/").content.decode()
    assert "column-eviction_mode" in listing

    form = {"cluster": shard.cluster_id, "name": shard.name, "partition_label_key": shard.partition_label_key,
            "partition_label_value": "", "gpu_placement": "binpack", "cpu_placement": "binpack", "k_value": 1,
            "usage_window_seconds": 604800, "usage_half_life_seconds": 0, "eviction_mode": "evict",
            "enabled": "on"}
    response = admin_client.post(f"/admin/cluster/schedulingshard/{shard.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    shard.refresh_from_db()
    assert shard.eviction_mode == "evict"

    refused = admin_client.post(f"/admin/cluster/schedulingshard/{shard.pk}/change/",
                                {**form, "eviction_mode": "drain"})
    assert refused.status_code == 200
    assert "Select a valid choice" in refused.content.decode()
    shard.refresh_from_db()
    assert shard.eviction_mode == "evict"


# -- the cycle hands the shard's mode to the gateway ---------------------------------------------


class RecordingGateway:
    """A gateway without the bulk path: records the actions it is given."""

    capabilities = frozenset()

    def __init__(self) -> None:
        self.evicted: list[EvictAction] = []

    def evict(self, action: EvictAction) -> ActionResult:
        self.evicted.append(action)
        return ActionResult(ActionOutcome.EVICTED)


@pytest.mark.django_db
@pytest.mark.parametrize(("mode", "condition"), [("delete", True), ("evict", False)])
def test_apply_decisions_evicts_as_the_shard_says(mode, condition):
    shard = SchedulingShardFactory(eviction_mode=mode, update_pod_eviction_condition=condition)
    decision = DecisionFactory(cycle=SchedulingCycleFactory(shard=shard), kind=DecisionKind.EVICT,
                               namespace="team", pod_name="victim", pod_uid="u1", reason="Reclaimed",
                               message="reclaimed by team/b")
    for given in (shard, None):  # the shard given, or the decision's own cycle's
        gateway = RecordingGateway()
        cycle.apply_decisions(gateway, [decision], given)
        (action,) = gateway.evicted
        assert (action.mode, action.disruption_target) == (mode, condition)
        assert (action.uid, action.message) == ("u1", "reclaimed by team/b")


@pytest.mark.django_db
def test_the_simulated_cluster_evicts_in_both_modes_and_says_which():
    """No PodDisruptionBudgets in the simulation: both modes take effect, and the victim is recreated."""
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j", pods=2, gpus_per_pod=1)
    cycle.run_and_record_cycle(sc.shard, advance=False)
    gateway = SimulatedGateway(sc.cluster)
    first, second = running_pods(sc)

    by_delete = gateway.evict(EvictAction(first.workload.namespace, first.name, first.uid, mode="delete",
                                          disruption_target=True))
    by_api = gateway.evict(EvictAction(second.workload.namespace, second.name, second.uid, mode="evict"))

    assert (by_delete.outcome, by_api.outcome) == (ActionOutcome.EVICTED, ActionOutcome.EVICTED)
    assert by_delete.message.endswith("deleted and recreated")
    assert by_api.message.endswith("evicted and recreated")
    assert running_pods(sc) == []


# -- the migration ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_the_eviction_api_for_the_kubernetes_shards_that_existed():
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("cluster", "0008_topology_aliases")], [("cluster", "0009_shard_eviction_mode")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    k8s = old.get_model("cluster", "Cluster").objects.create(name="k8s", backend="kubernetes")
    sim = old.get_model("cluster", "Cluster").objects.create(name="sim", backend="simulated")
    for cluster in (k8s, sim):
        old.get_model("cluster", "SchedulingShard").objects.create(cluster=cluster, name="default")
    try:
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        new = executor.loader.project_state(after).apps.get_model("cluster", "SchedulingShard")
        modes = {(s.cluster.name, s.name): (s.eviction_mode, s.update_pod_eviction_condition)
                 for s in new.objects.select_related("cluster")}
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    # A simulated cluster's shard has no budgets to honour: KAI's mode, as new shards get.
    assert modes[("k8s", "default")] == ("evict", False)
    assert modes[("sim", "default")] == ("delete", False)
