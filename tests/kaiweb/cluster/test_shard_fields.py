"""Every field of KAI's SchedulingShard (kai.scheduler/v1) is read: applied (queueDepthPerAction, the
usage window of usageDBConfig, …) or kept on the shard as not applied with the reason, shown on the
shard's page and in the API; a bad value is an unreadable object naming the field and the rule."""

from __future__ import annotations

from typing import Any

import pytest

from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.backends.kubernetes.shards import parse_shard
from kaiweb.cluster.backends.types import ObservedShard, Unreadable
from kaiweb.cluster.models import Cluster, SchedulingShard, UnreadableObject
from kaiweb.scheduling import cycle
from scheduler_core import model as m
from scheduler_core import run_cycle
from tests.fakes.kube_apiserver import FakeKubeApiServer, kube_apiserver  # noqa: F401 - fixture
from tests.scheduler_core.engine_builders import job, node, queue, snapshot

#: a SchedulingShard of KAI v0.18 that sets every field
EVERY_FIELD: dict[str, Any] = {
    "args": {"restrict-node-scheduling": "true", "leader-elect": "true"},
    "placementStrategy": {"gpu": "binpack", "cpu": "binpack"},
    "partitionLabelValue": "",
    "queueDepthPerAction": {"allocate": 50, "reclaim": 5},
    "minRuntime": {"preemptMinRuntime": "1m", "reclaimMinRuntime": "5m"},
    "kValue": 0.5,
    "usageDBConfig": {"clientType": "prometheus", "connectionString": "http://prometheus:9090",
                      "usageParams": {"windowSize": "1w", "halfLifePeriod": "12h", "windowType": "sliding"}},
    "scenarioSearchBudgets": {"maxActionSearchDuration": {"reclaim": "2s"}, "maxJobSearchDuration": "0s"},
    "plugins": {"gpuspread": {"enabled": False}},
    "actions": {"consolidation": {"enabled": False, "priority": 400}},
    "goMemLimitRatio": 0.9,
    "goMemLimit": "2Gi",
}


def shard_object(spec: Any) -> ObservedShard | Unreadable:
    return parse_shard({"metadata": {"name": "default"}, "spec": spec})


def test_every_field_is_applied_or_reported_with_its_reason():
    shard = shard_object(EVERY_FIELD)
    assert isinstance(shard, ObservedShard)
    assert shard.queue_depth_per_action == (("allocate", 50), ("reclaim", 5))
    assert (shard.usage_window_s, shard.usage_half_life_s) == (7 * 86400.0, 12 * 3600.0)
    assert (shard.k_value, shard.preempt_min_runtime_s, shard.reclaim_min_runtime_s) == (0.5, 60.0, 300.0)
    reported = dict(shard.unsupported)
    assert set(reported) == {
        "spec.args[leader-elect]", "spec.scenarioSearchBudgets",
        "spec.plugins[gpuspread]", "spec.goMemLimitRatio", "spec.goMemLimit"}
    # the actions: KAI's defaults, consolidation turned off by the object
    assert shard.actions == ("allocate", "reclaim", "preempt", "stalegangeviction")
    # the Prometheus usage database is applied: time-based fair share reads it, KAI's defaults otherwise
    assert shard.usage_db is not None
    source = shard.usage_db.as_json()
    assert (source["connection_string"], source["window_type"]) == ("http://prometheus:9090", "sliding")
    assert (source["fetch_interval_s"], source["staleness_s"], source["query_resolution_s"]) == (60.0, 300.0, 60.0)
    assert source["allocation_metrics"]["gpu"] == "kai_queue_allocated_gpus"
    assert source["capacity_metrics"]["memory"] == 'sum(kube_node_status_capacity{resource="memory"})'
    # the budgets in effect: the object's, KAI's defaults for the rest
    assert '"reclaim": "2s"' in reported["spec.scenarioSearchBudgets"]
    assert '"NodeLocalGreedy": "30s"' in reported["spec.scenarioSearchBudgets"]
    assert "never by time" in reported["spec.scenarioSearchBudgets"]


def test_an_object_that_sets_only_applied_fields_reports_nothing():
    shard = shard_object({"placementStrategy": {"gpu": "spread"}, "kValue": 1, "queueDepthPerAction": {"preempt": 0},
                          "args": {"kaiweb-eviction-mode": "evict", "max-consolidation-preemptees": "4"}})
    assert isinstance(shard, ObservedShard)
    assert shard.unsupported == ()
    assert shard.queue_depth_per_action == (("preempt", 0),)


def test_an_unknown_field_and_the_usage_settings_kaiweb_does_not_apply_are_reported():
    shard = shard_object({"usageParams": {"windowSize": "1w"}, "usageDBConfig": {
        "clientType": "prometheus", "usageParams": {
            "windowType": "cron", "cronString": "0 0 * * 1", "tumblingWindowStartTime": "2026-01-01T00:00:00Z",
            "waitTimeout": "2m", "fetchInterval": "2m", "stalenessPeriod": "1m",
            "extraParams": {"queryResolution": "30s", "gpuCapacityMetric": "sum(my_gpus)", "lookback": "5m"}}}})
    assert isinstance(shard, ObservedShard)
    reported = dict(shard.unsupported)
    assert "not a field of KAI's SchedulingShard" in reported["spec.usageParams"]
    assert set(reported) == {"spec.usageParams", "spec.usageDBConfig.usageParams.waitTimeout",
                             "spec.usageDBConfig.usageParams.tumblingWindowStartTime",
                             "spec.usageDBConfig.usageParams.extraParams[lookback]"}
    assert "never waits" in reported["spec.usageDBConfig.usageParams.waitTimeout"]
    assert "only with windowType tumbling" in reported["spec.usageDBConfig.usageParams.tumblingWindowStartTime"]
    assert shard.usage_db is not None
    source = shard.usage_db.as_json()
    assert (source["window_type"], source["cron"], source["tumbling_start"]) == ("cron", "0 0 * * 1", "")
    # staleness is never shorter than the fetch interval (KAI's rule)
    assert (source["fetch_interval_s"], source["staleness_s"], source["query_resolution_s"]) == (120.0, 120.0, 30.0)
    assert source["capacity_metrics"]["gpu"] == "sum(my_gpus)"


def test_a_usage_database_of_another_client_type_is_reported_and_not_read():
    shard = shard_object({"usageDBConfig": {"clientType": "influxdb", "connectionString": "http://influx:8086",
                                            "usageParams": {"windowSize": "1d", "fetchInterval": "1m"}}})
    assert isinstance(shard, ObservedShard)
    assert shard.usage_db is None
    assert shard.usage_window_s == 86400.0
    reported = dict(shard.unsupported)
    assert "prometheus only" in reported["spec.usageDBConfig.clientType"]
    assert "spec.usageDBConfig.usageParams.fetchInterval" in reported


@pytest.mark.parametrize(("spec", "field", "rule"), [
    ({"queueDepthPerAction": {"alocate": 3}}, "spec.queueDepthPerAction[alocate]", "must name one of KAI's actions"),
    ({"queueDepthPerAction": {"allocate": -1}}, "spec.queueDepthPerAction[allocate]", "at least 0"),
    ({"queueDepthPerAction": {"allocate": "5"}}, "spec.queueDepthPerAction[allocate]", "whole number"),
    ({"queueDepthPerAction": [5]}, "spec.queueDepthPerAction", "must map action names"),
    ({"usageDBConfig": {"usageParams": {}}}, "spec.usageDBConfig.clientType", "is required"),
    ({"usageDBConfig": {"clientType": "prometheus", "usageParams": {"windowSize": "a week"}}},
     "spec.usageDBConfig.usageParams.windowSize", "Prometheus duration"),
    ({"usageDBConfig": {"clientType": "prometheus", "usageParams": {"halfLifePeriod": "1d"}}},
     "spec.usageDBConfig.usageParams.halfLifePeriod", "must be a duration"),
    ({"usageDBConfig": {"clientType": "prometheus", "usageParams": {"windowType": "rolling"}}},
     "spec.usageDBConfig.usageParams.windowType", "sliding, tumbling, cron"),
    ({"usageDBConfig": {"clientType": "prometheus", "connectionString": "prometheus:9090"}},
     "spec.usageDBConfig.connectionString", "http:// or https://"),
    ({"usageDBConfig": {"clientType": "prometheus", "usageParams": {"windowType": "tumbling"}}},
     "spec.usageDBConfig.usageParams.tumblingWindowStartTime", "is required with windowType tumbling"),
    ({"usageDBConfig": {"clientType": "prometheus", "usageParams": {"windowType": "cron", "cronString": "0 0 * *"}}},
     "spec.usageDBConfig.usageParams.cronString", "five fields"),
    ({"usageDBConfig": {"clientType": "prometheus", "usageParams": {"windowType": "cron", "cronString": "61 * * * *"}}},
     "spec.usageDBConfig.usageParams.cronString", "five fields"),
    ({"usageDBConfig": {"clientType": "prometheus", "usageParams": {"fetchInterval": "0s"}}},
     "spec.usageDBConfig.usageParams.fetchInterval", "more than 0s"),
    ({"usageDBConfig": {"clientType": "prometheus", "usageParams": {"extraParams": {"usageQueryTimeout": "5m"}}}},
     "spec.usageDBConfig.usageParams.extraParams[usageQueryTimeout]", "at most 60s"),
    ({"usageDBConfig": {"clientType": "prometheus", "usageParams": {"extraParams": {"queryResolution": "1s"}}}},
     "spec.usageDBConfig.usageParams.extraParams[queryResolution]", "at most 100000 steps"),
    ({"usageDBConfig": {"clientType": "prometheus", "usageParams": {"extraParams": {"gpuAllocationMetric": ""}}}},
     "spec.usageDBConfig.usageParams.extraParams[gpuAllocationMetric]", "metric name or PromQL"),
    ({"scenarioSearchBudgets": {"maxActionSearchDuration": {"allocate": "1s"}}},
     "spec.scenarioSearchBudgets.maxActionSearchDuration[allocate]", "default, reclaim, preempt, consolidation"),
    ({"scenarioSearchBudgets": {"minJobSearchDuration": "5s", "maxJobSearchDuration": "1s"}},
     "spec.scenarioSearchBudgets.minJobSearchDuration", "less than maxJobSearchDuration"),
    ({"scenarioSearchBudgets": {"maxJobSearchDuration": "-1s"}},
     "spec.scenarioSearchBudgets.maxJobSearchDuration", "must be a duration"),
    ({"actions": {"reclaim": {"enabled": "no"}}}, "spec.actions[reclaim].enabled", "true or false"),
    ({"plugins": {"proportion": {"arguments": ["k"]}}}, "spec.plugins[proportion].arguments", "map of strings"),
    ({"goMemLimitRatio": 1.5}, "spec.goMemLimitRatio", "at most 1"),
    ({"minRuntime": "5m"}, "spec.minRuntime", "must be an object"),
    ("everything", "spec", "must be an object"),
])
def test_a_bad_value_is_unreadable_naming_the_field_and_the_rule(spec, field, rule):
    bad = shard_object(spec)
    assert isinstance(bad, Unreadable)
    assert bad.field == field
    assert rule in bad.rule


def test_unlimited_budgets_are_read_and_reported_as_not_applied():
    shard = shard_object({"scenarioSearchBudgets": {"maxActionSearchDuration": {"default": "0s"},
                                                    "maxJobSearchDuration": "0s", "minJobSearchDuration": "0s",
                                                    "maxGeneratorSearchDuration": {"default": "0s"}}})
    assert isinstance(shard, ObservedShard)
    assert [f for f, _ in shard.unsupported] == ["spec.scenarioSearchBudgets"]


@pytest.mark.django_db
def test_the_mirror_keeps_the_depths_the_usage_window_and_what_is_not_applied_and_the_cycle_uses_the_depths():
    cluster = Cluster.objects.create(name="k8s", backend="kubernetes")
    mirror._apply_shards(cluster, [shard_object(EVERY_FIELD)])
    shard = SchedulingShard.objects.get(cluster=cluster, name="default")
    assert shard.queue_depth_per_action == {"allocate": 50, "reclaim": 5}
    assert (shard.usage_window_seconds, shard.usage_half_life_seconds) == (7 * 86400, 12 * 3600)
    assert shard.usage_db["connection_string"] == "http://prometheus:9090"
    assert {r["field"] for r in shard.unsupported_fields} >= {"spec.scenarioSearchBudgets", "spec.goMemLimit"}
    assert cycle.cycle_config(shard).queue_depth_per_action == (("allocate", 50), ("reclaim", 5))
    assert shard.actions == ["allocate", "reclaim", "preempt", "stalegangeviction"]
    assert cycle.cycle_config(shard).actions == ("allocate", "reclaim", "preempt", "stalegangeviction")

    # the object drops the fields: nothing bounded, nothing left to report, KAI's default actions
    mirror._apply_shards(cluster, [shard_object({})])
    shard.refresh_from_db()
    assert (shard.queue_depth_per_action, shard.unsupported_fields, shard.usage_db) == ({}, [], {})
    assert cycle.cycle_config(shard).queue_depth_per_action == ()
    assert shard.actions is None
    assert cycle.cycle_config(shard).actions == m.ACTIONS


@pytest.mark.parametrize(("placement", "actions", "run", "reported"), [
    # KAI's defaults, spelled out: the engine's order
    ("binpack", {"allocate": {"enabled": True}}, ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction"),
     []),
    # a team that never preempts, as it ran KAI
    ("binpack", {"preempt": {"enabled": False}}, ("allocate", "consolidation", "reclaim", "stalegangeviction"), []),
    # priorities reorder: higher first, then by name
    ("binpack", {"reclaim": {"priority": 450}, "stalegangeviction": {"priority": 600}},
     ("stalegangeviction", "allocate", "reclaim", "consolidation", "preempt"), []),
    # consolidation is off by default with spread, and kaiweb cannot turn it on there
    ("spread", {"reclaim": {"enabled": False}}, ("allocate", "preempt", "stalegangeviction"), []),
    ("spread", {"consolidation": {"enabled": True}}, ("allocate", "reclaim", "preempt", "stalegangeviction"),
     ["spec.actions[consolidation]"]),
    # an action kaiweb does not have is reported and left out
    ("binpack", {"backfill": {"enabled": True, "priority": 250}},
     ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction"), ["spec.actions[backfill]"]),
    ("binpack", {a: {"enabled": False} for a in m.ACTIONS}, (), []),
])
def test_the_actions_resolve_as_kais_operator_resolves_them(placement, actions, run, reported):
    shard = shard_object({"placementStrategy": {"gpu": placement}, "actions": actions})
    assert isinstance(shard, ObservedShard)
    assert shard.actions == run
    assert [f for f, _ in shard.unsupported] == reported


@pytest.mark.django_db
def test_a_shard_whose_object_disables_preemption_never_preempts():
    """The engine gets the shard's actions: a preemptor that would evict a running low-priority job
    under the default actions evicts nothing once the object turns preempt off."""
    cluster = Cluster.objects.create(name="k8s", backend="kubernetes")
    mirror._apply_shards(cluster, [shard_object({"actions": {"preempt": {"enabled": False}}})])
    shard = SchedulingShard.objects.get(cluster=cluster, name="default")
    situation = snapshot([node("n1", 8)], [queue("q", gpu_quota=8)],
                         [job("low", "q", running_on=["n1"], gpus=8, priority=50, age=10),
                          job("high", "q", gpus=8, priority=100, preemptible=True)])

    default = run_cycle(situation, m.CycleConfig())
    configured = run_cycle(situation, cycle.cycle_config(shard))

    assert [(e.task, e.action) for e in default.evictions] == [("low-0", "preempt")]
    assert configured.evictions == ()
    assert "preempt" not in configured.timings_ms


@pytest.mark.django_db
def test_a_shard_without_queue_depths_runs_the_cycle_config_of_before():
    shard = SchedulingShard.objects.get(name="default")
    assert shard.queue_depth_per_action == {}
    assert cycle.cycle_config(shard).queue_depth_per_action == ()


@pytest.mark.django_db
def test_the_shard_page_and_the_api_show_the_depths_and_what_is_not_applied(admin_client, admin_api):
    shard = SchedulingShard.objects.get(name="default")
    shard.queue_depth_per_action = {"allocate": 50}
    shard.unsupported_fields = [{"field": "spec.goMemLimit", "reason": "the Go runtime's memory limit"}]
    shard.save()
    page = admin_client.get(f"/admin/cluster/schedulingshard/{shard.pk}/change/").content.decode()
    assert "allocate: 50 job(s) per queue" in page
    assert "<code>spec.goMemLimit</code>: the Go runtime&#x27;s memory limit" in page

    shown = admin_api.get("/api/v1/shards/default/").json()
    assert shown["queue_depth_per_action"] == {"allocate": 50}
    assert shown["unsupported_fields"] == [{"field": "spec.goMemLimit", "reason": "the Go runtime's memory limit"}]
    # set by the cluster's object only: a PATCH leaves them
    admin_api.patch("/api/v1/shards/default/", {"queue_depth_per_action": {}, "k_value": 2}, format="json")
    shard.refresh_from_db()
    assert (shard.queue_depth_per_action, shard.k_value) == ({"allocate": 50}, 2)


@pytest.mark.django_db
def test_a_bad_schedulingshard_on_the_api_server_is_a_problem_record_and_no_crash(
        kube_apiserver: FakeKubeApiServer) -> None:  # noqa: F811
    gateway = KubernetesGateway(kube_apiserver.api_client, request_timeout=2.0, max_attempts=2, sleep=lambda _: None)
    cluster = mirror.kubernetes_cluster("k8s")
    kube_apiserver.register("schedulingshards", "SchedulingShard", "kai.scheduler/v1", namespaced=False)
    kube_apiserver.put("schedulingshards", {"metadata": {"name": "default"},
                                            "spec": {"queueDepthPerAction": {"allocate": -3}}})
    kube_apiserver.put("schedulingshards", {"metadata": {"name": "west"},
                                            "spec": {"partitionLabelValue": "west", "queueDepthPerAction": {"reclaim": 2},
                                                     "goMemLimit": "1Gi"}})
    mirror.sync_full(gateway, cluster)
    problem = UnreadableObject.objects.get(cluster=cluster, kind="SchedulingShard", name="default")
    assert problem.field == "spec.queueDepthPerAction[allocate]"
    assert "at least 0" in problem.rule
    west = SchedulingShard.objects.get(cluster=cluster, name="west")
    assert west.queue_depth_per_action == {"reclaim": 2}
    assert [r["field"] for r in west.unsupported_fields] == ["spec.goMemLimit"]


def test_a_queue_depth_for_an_action_the_object_turns_off_is_reported():
    shard = shard_object({"actions": {"reclaim": {"enabled": False}}, "queueDepthPerAction": {"reclaim": 3, "allocate": 9}})
    assert isinstance(shard, ObservedShard)
    assert shard.actions == ("allocate", "consolidation", "preempt", "stalegangeviction")
    assert [f for f, _ in shard.unsupported] == ["spec.queueDepthPerAction[reclaim]"]
