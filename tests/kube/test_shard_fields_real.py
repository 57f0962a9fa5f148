"""KAI's SchedulingShard with the fields of its newer releases, on a real kube-apiserver with kaiweb's
CRDs (`deploy/kubernetes/crds.yaml`): the API server keeps every field (those of KAI's current CRD by
their schema, the rest because the schema preserves what it does not list), the mirror reads the
object, and the shard applies what kaiweb honours and reports the rest with the reason, on the shard
and, after a cycle, in the object's status conditions (beside those of other writers). A value the
schema allows but KAI's rules do not is a problem record naming the field and the rule."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.models import SchedulingShard, UnreadableObject
from kaiweb.scheduling import cycle
from tests.kube.servers import RealServer
from tests.kube.test_real_apiserver import _run_cycle

pytestmark = [pytest.mark.kube, pytest.mark.django_db]

SPEC: dict[str, Any] = {
    "placementStrategy": {"gpu": "spread", "cpu": "binpack"},
    "args": {"kaiweb-eviction-mode": "evict", "leader-elect": "true"},
    "queueDepthPerAction": {"allocate": 20, "reclaim": 3},
    "minRuntime": {"preemptMinRuntime": "2m", "reclaimMinRuntime": "10m"},
    "kValue": 0.7,
    "usageDBConfig": {"clientType": "prometheus", "connectionString": "http://prometheus.monitoring:9090",
                      "usageParams": {"windowSize": "3d", "halfLifePeriod": "6h", "windowType": "tumbling",
                                      "tumblingWindowStartTime": "2026-01-05T00:00:00Z", "fetchInterval": "2m",
                                      "waitTimeout": "30s", "extraParams": {"queryResolution": "5m"}}},
    "scenarioSearchBudgets": {"maxJobSearchDuration": "1m"},
    "plugins": {"gpuspread": {"enabled": True, "priority": 300}},
    "actions": {"consolidation": {"enabled": False}, "preempt": {"enabled": False}, "stalegangeviction": {"priority": 350}},
    "goMemLimitRatio": 0.8,
    # fields of a KAI release newer than any kaiweb knows
    "victimOrdering": {"strategy": "newest-first"},
    "maxPipelineDepth": 4,
}


@pytest.fixture
def gateway(server: RealServer, kube_shard: SchedulingShard) -> Iterator[KubernetesGateway]:
    yield KubernetesGateway(server.api_client, request_timeout=5.0)
    for name in ("default", "west"):
        server.remove("schedulingshards", name)  # not among what `wipe` empties


def test_the_api_server_keeps_every_field_and_the_shard_applies_or_reports_each(
        server: RealServer, kube_shard: SchedulingShard, gateway: KubernetesGateway) -> None:
    server.put("schedulingshards", {"metadata": {"name": "default"}, "spec": SPEC})
    stored = server.get("schedulingshards", "default")
    assert stored is not None
    assert stored["spec"]["queueDepthPerAction"] == {"allocate": 20, "reclaim": 3}
    assert stored["spec"]["victimOrdering"] == {"strategy": "newest-first"}  # not pruned unseen

    mirror.sync_full(gateway, kube_shard.cluster)

    shard = SchedulingShard.objects.get(pk=kube_shard.pk)
    # applied
    assert (shard.gpu_placement, shard.cpu_placement, shard.eviction_mode) == ("spread", "binpack", "evict")
    assert shard.queue_depth_per_action == {"allocate": 20, "reclaim": 3}
    assert cycle.cycle_config(shard).queue_depth_per_action == (("allocate", 20), ("reclaim", 3))
    assert cycle.cycle_config(shard).actions == ("allocate", "stalegangeviction", "reclaim")
    assert (shard.preempt_min_runtime, shard.reclaim_min_runtime) == (timedelta(minutes=2), timedelta(minutes=10))
    assert shard.k_value == 0.7
    assert (shard.usage_window_seconds, shard.usage_half_life_seconds) == (3 * 86400, 6 * 3600)
    assert shard.usage_db["connection_string"] == "http://prometheus.monitoring:9090"
    assert (shard.usage_db["window_type"], shard.usage_db["tumbling_start"]) == ("tumbling", "2026-01-05T00:00:00Z")
    assert (shard.usage_db["fetch_interval_s"], shard.usage_db["query_resolution_s"]) == (120.0, 300.0)
    # reported, each with its reason
    reported = {r["field"]: r["reason"] for r in shard.unsupported_fields}
    assert set(reported) == {
        "spec.args[leader-elect]", "spec.scenarioSearchBudgets", "spec.plugins[gpuspread]", "spec.goMemLimitRatio",
        "spec.usageDBConfig.usageParams.waitTimeout",
        "spec.victimOrdering", "spec.maxPipelineDepth"}
    assert "not a field of KAI's SchedulingShard" in reported["spec.victimOrdering"]
    assert "never waits" in reported["spec.usageDBConfig.usageParams.waitTimeout"]
    assert "a flag of KAI's scheduler" in reported["spec.args[leader-elect]"]
    # the cycle has had no answer from that Prometheus yet: it reads kaiweb's own accounting, and says so
    assert shard.usage_db_answer()[1].startswith("kaiweb's own usage accounting: no answer yet from the Prometheus "
                                                 "at http://prometheus.monitoring:9090")


def test_the_cycle_writes_what_is_not_applied_and_the_usage_source_into_the_objects_status(
        server: RealServer, kube_shard: SchedulingShard, gateway: KubernetesGateway) -> None:
    server.put("schedulingshards", {"metadata": {"name": "default"}, "spec": SPEC})
    operators = {"type": "Available", "status": "True", "reason": "Deployed", "message": "KAI's operator wrote this",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
    server.put_status("schedulingshards", {"metadata": {"name": "default"}, "status": {"conditions": [operators]}})

    _run_cycle(kube_shard)

    conditions = {c["type"]: c for c in server.get("schedulingshards", "default")["status"]["conditions"]}
    assert conditions["Available"] == operators  # another writer's condition is kept
    fields = conditions["FieldsApplied"]
    assert (fields["status"], fields["reason"]) == ("False", "NotApplied")
    assert "spec.victimOrdering: not a field of KAI's SchedulingShard" in fields["message"]
    assert "spec.usageDBConfig.usageParams.waitTimeout: a cycle never waits" in fields["message"]
    usage = conditions["UsageDatabaseRead"]
    assert (usage["status"], usage["reason"]) == ("False", "OwnAccounting")
    assert "no answer yet from the Prometheus at http://prometheus.monitoring:9090" in usage["message"]
    first = usage["lastTransitionTime"]

    # answered: the condition turns True; written once, not again while nothing changes
    shard = SchedulingShard.objects.get(pk=kube_shard.pk)
    now = datetime.now(tz=UTC).isoformat()
    SchedulingShard.objects.filter(pk=shard.pk).update(usage_db_reading={
        "config": shard.usage_db, "state": "ok", "reason": "", "attempted_at": now, "succeeded_at": now,
        "url": "http://prometheus.monitoring:9090", "usage": {}})
    _run_cycle(kube_shard)
    usage = {c["type"]: c for c in server.get("schedulingshards", "default")["status"]["conditions"]}[
        "UsageDatabaseRead"]
    assert (usage["status"], usage["reason"]) == ("True", "Answered")
    assert usage["message"].startswith("the Prometheus at http://prometheus.monitoring:9090, answered at")
    assert usage["lastTransitionTime"] >= first
    version = server.get("schedulingshards", "default")["metadata"]["resourceVersion"]
    _run_cycle(kube_shard)
    assert server.get("schedulingshards", "default")["metadata"]["resourceVersion"] == version


def test_a_value_the_schema_allows_but_kais_rules_do_not_is_a_problem_naming_the_field(
        server: RealServer, kube_shard: SchedulingShard, gateway: KubernetesGateway) -> None:
    server.put("schedulingshards", {"metadata": {"name": "default"}, "spec": {
        "usageDBConfig": {"clientType": "prometheus", "usageParams": {"windowType": "cron", "cronString": "0 0 * *"}}}})
    server.put("schedulingshards", {"metadata": {"name": "west"}, "spec": {
        "partitionLabelValue": "west", "queueDepthPerAction": {"allocate": -3}}})

    mirror.sync_full(gateway, kube_shard.cluster)

    problems = {p.name: p for p in UnreadableObject.objects.filter(cluster=kube_shard.cluster, kind="SchedulingShard")}
    assert problems["default"].field == "spec.usageDBConfig.usageParams.cronString"
    assert "five fields" in problems["default"].rule
    assert problems["west"].field == "spec.queueDepthPerAction[allocate]"
    assert "at least 0" in problems["west"].rule
    assert SchedulingShard.objects.get(pk=kube_shard.pk).usage_db == {}
