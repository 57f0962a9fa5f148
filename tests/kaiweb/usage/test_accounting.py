"""Usage accounting: buckets from what queues hold, roll-up and retention, and the time-based
fair share input computed from the buckets (KAI-SEMANTICS §3.8)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kaiweb.cluster.backends.simulated import SimulatedGateway
from kaiweb.cluster.backends.types import BindAction
from kaiweb.usage import accounting
from kaiweb.usage.models import UsageBucket, UsageSettings
from kaiweb.usage.tasks import account_usage_task
from tests.celery.builders import small_cluster, submit

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 10, 0, 30, tzinfo=UTC)


def _bind_all(sc, job) -> None:
    gw = SimulatedGateway(sc.cluster)
    gw.apply(binds=[BindAction("ns", p.name, p.uid, sc.nodes[0].name) for p in job.pods.all()])


def test_accounting_writes_allocated_times_width_per_queue_and_ancestor():
    sc = small_cluster(nodes=1)
    _bind_all(sc, submit(sc, "team-a", "a", pods=3, gpus_per_pod=1))
    _bind_all(sc, submit(sc, "team-b", "b", pods=1, fraction=0.5))

    written = accounting.account_usage(at=NOW)

    assert written == 3 * 3  # 3 queues × cpu, memory, gpu
    start = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)

    def value(queue, resource):
        return UsageBucket.objects.get(queue=sc.queues[queue], resource=resource, start=start, width_seconds=60).value

    assert value("team-a", "gpu") == 3 * 60
    assert value("team-b", "gpu") == 0.5 * 60
    assert value("dept", "gpu") == 3.5 * 60
    assert value("team-a", "cpu") == 3 * 1000 * 60  # millicore-seconds
    assert value("team-a", "memory") == pytest.approx(3 * 1024**3 / 1e6 * 60)  # MB-seconds


def test_leaf_buckets_split_by_namespace_and_submitting_user(settings):
    from kaiweb.workloads.models import Workload

    settings.KAI_USER_LABEL = "kai.example/user"
    sc = small_cluster(nodes=2)
    a1 = submit(sc, "team-a", "a1", pods=2, gpus_per_pod=1)
    a2 = submit(sc, "team-a", "a2", pods=1, gpus_per_pod=1)
    b1 = submit(sc, "team-b", "b1", pods=1, fraction=0.5)
    Workload.objects.filter(pk=a1.pk).update(labels={"kai.example/user": "ana"})
    Workload.objects.filter(pk=a2.pk).update(namespace="other", labels={"kai.example/user": "ana"})
    Workload.objects.filter(pk=b1.pk).update(labels={"team": "b"})  # no user label: its namespace's
    for job in (a1, a2, b1):
        gw = SimulatedGateway(sc.cluster)
        gw.apply(binds=[BindAction(job.namespace, p.name, p.uid, sc.nodes[0].name) for p in job.pods.all()])

    accounting.account_usage(at=NOW)

    start = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)

    def bucket(queue, resource):
        return UsageBucket.objects.get(queue=sc.queues[queue], resource=resource, start=start, width_seconds=60)

    a_gpu = bucket("team-a", "gpu")
    assert a_gpu.by_namespace == {"ns": 120.0, "other": 60.0}
    assert a_gpu.by_user == {"ana": 180.0}
    assert bucket("team-a", "cpu").by_namespace == {"ns": 2 * 1000 * 60, "other": 1000 * 60}
    assert bucket("team-b", "gpu").by_user == {"ns/ns": 30.0}
    assert bucket("dept", "gpu").by_user == {}  # a parent's value is its leaves': split there only
    for queue in ("team-a", "team-b"):
        b = bucket(queue, "gpu")
        assert sum(b.by_namespace.values()) == pytest.approx(b.value)
        assert sum(b.by_user.values()) == pytest.approx(b.value)


def test_roll_up_sums_the_splits_by_namespace_and_user():
    sc = small_cluster()
    q = sc.queues["team-a"]
    old_hour = datetime(2026, 2, 20, 5, 0, tzinfo=UTC)
    UsageBucket.objects.create(queue=q, resource="gpu", start=old_hour, width_seconds=60, value=60.0,
                               by_namespace={"x": 60.0}, by_user={"ana": 60.0})
    UsageBucket.objects.create(queue=q, resource="gpu", start=old_hour + timedelta(minutes=1), width_seconds=60,
                               value=90.0, by_namespace={"x": 30.0, "y": 60.0}, by_user={"ana": 30.0, "ben": 60.0})

    accounting.roll_up_and_expire(now=NOW)

    hour = UsageBucket.objects.get(queue=q, resource="gpu", width_seconds=3600)
    assert hour.value == 150.0
    assert hour.by_namespace == {"x": 90.0, "y": 60.0}
    assert hour.by_user == {"ana": 90.0, "ben": 60.0}


def test_accounting_the_same_minute_twice_is_harmless():
    sc = small_cluster(nodes=1)
    _bind_all(sc, submit(sc, "team-a", "a", pods=2))
    accounting.account_usage(at=NOW)

    accounting.account_usage(at=NOW + timedelta(seconds=10))
    account_usage_task.apply()  # the task: a different (current) minute

    gpu = UsageBucket.objects.filter(queue=sc.queues["team-a"], resource="gpu", start__lte=NOW)
    assert [b.value for b in gpu] == [120.0]


def test_roll_up_sums_old_minutes_into_hours_and_days_and_expires_the_oldest():
    sc = small_cluster()
    conf = UsageSettings.load()
    conf.raw_retention_days, conf.hourly_retention_days, conf.daily_retention_days = 1, 3, 10
    conf.save()
    q = sc.queues["team-a"]
    old_hour = datetime(2026, 3, 1, 5, 0, tzinfo=UTC)  # 29 h before NOW: past raw retention
    for minute in range(3):
        UsageBucket.objects.create(queue=q, resource="gpu", start=old_hour + timedelta(minutes=minute),
                                   width_seconds=60, value=60.0)
    recent = NOW - timedelta(minutes=5)
    UsageBucket.objects.create(queue=q, resource="gpu", start=recent, width_seconds=60, value=30.0)
    old_day_hour = datetime(2026, 2, 24, 7, tzinfo=UTC)  # past the hourly retention
    UsageBucket.objects.create(queue=q, resource="gpu", start=old_day_hour, width_seconds=3600, value=7200.0)
    UsageBucket.objects.create(queue=q, resource="gpu", start=datetime(2026, 2, 1, tzinfo=UTC),
                               width_seconds=86400, value=1.0)  # past the daily retention

    report = accounting.roll_up_and_expire(now=NOW)

    rows = {(b.width_seconds, b.start): b.value for b in UsageBucket.objects.filter(queue=q, resource="gpu")}
    assert rows == {
        (60, recent): 30.0,
        (3600, old_hour): 180.0,
        (86400, datetime(2026, 2, 24, tzinfo=UTC)): 7200.0,
    }
    assert report["hourly"] == 1
    assert report["daily"] == 1
    assert report["expired"] == 1
    # Rolling up again changes nothing: no bucket is counted twice.
    accounting.roll_up_and_expire(now=NOW)
    assert {(b.width_seconds, b.start): b.value for b in UsageBucket.objects.filter(queue=q, resource="gpu")} == rows


def _history(sc, a_gpus: list[float], b_gpus: list[float], end: datetime) -> None:
    """One minute bucket per sample, oldest first, ending at `end`."""
    n = len(a_gpus)
    for i, (a, b) in enumerate(zip(a_gpus, b_gpus)):
        start = end - timedelta(minutes=n - 1 - i)
        for queue, gpus in (("team-a", a), ("team-b", b)):
            UsageBucket.objects.create(queue=sc.queues[queue], resource="gpu", start=start, width_seconds=60,
                                       value=gpus * 60)


def test_decayed_usage_reproduces_the_kai_example():
    """KAI-SEMANTICS §3.8: 16 GPUs, samples at ages 3,2,1,0 min, half-life 2 min:
    A used 16,16,0,0 → 0.333; B used 0,0,16,16 → 0.667."""
    sc = small_cluster(nodes=2, gpus=8)
    sc.shard.usage_half_life_seconds = 120
    sc.shard.usage_window_seconds = 3600
    sc.shard.save()
    end = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
    _history(sc, [16, 16, 0, 0], [0, 0, 16, 16], end)

    usage = accounting.usage_for_engine(sc.shard, now=end)

    assert usage["team-a"][2] == pytest.approx(1 / 3, abs=1e-3)
    assert usage["team-b"][2] == pytest.approx(2 / 3, abs=1e-3)
    assert usage["team-a"][0] == 0.0  # no CPU history


def test_usage_is_off_when_k_is_zero_and_outside_the_window_counts_nothing():
    sc = small_cluster(nodes=2, gpus=8)
    end = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
    _history(sc, [16, 16], [0, 0], end - timedelta(hours=2))
    sc.shard.usage_window_seconds = 3600
    sc.shard.save()
    assert accounting.usage_for_engine(sc.shard, now=end) == {}  # nothing inside the window
    sc.shard.k_value = 0
    sc.shard.usage_window_seconds = 86400
    sc.shard.save()
    assert accounting.usage_for_engine(sc.shard, now=end) == {}


def test_a_tumbling_window_starts_over_at_each_window_boundary():
    sc = small_cluster(nodes=2, gpus=8)
    sc.cluster.settings = dict(sc.cluster.settings, usage={"window_type": "tumbling", "tumbling_start": 0})
    sc.cluster.save()
    sc.shard.usage_window_seconds = 3600
    sc.shard.save()
    end = datetime(2026, 3, 2, 10, 1, tzinfo=UTC)
    _history(sc, [16, 0, 0], [0, 8, 8], end)  # 09:59 (previous window), 10:00, 10:01

    usage = accounting.usage_for_engine(sc.shard, now=end)

    assert usage["team-a"][2] == 0.0
    assert usage["team-b"][2] == pytest.approx(0.5)


def test_a_bad_window_type_is_refused_with_the_field_named():
    sc = small_cluster()
    sc.cluster.settings = dict(sc.cluster.settings, usage={"window_type": "cron"})
    sc.cluster.save()
    with pytest.raises(ValueError, match="usage.window_type"):
        accounting.usage_params(sc.shard)


def test_usage_explanation_shows_the_arithmetic():
    sc = small_cluster(nodes=2, gpus=8)
    sc.shard.usage_half_life_seconds = 120
    sc.shard.save()
    end = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
    _history(sc, [16, 16, 0, 0], [0, 0, 16, 16], end)

    ex = accounting.usage_explanation(sc.queues["team-a"], sc.shard, now=end)

    assert ex["queue"] == "team-a"
    assert len(ex["sample_times"]) == 4
    assert ex["weights"] == pytest.approx([0.3536, 0.5, 0.7071, 1.0], abs=1e-4)
    assert ex["queue_decayed"]["gpu"] == pytest.approx(16 * (0.3536 + 0.5), abs=1e-2)
    assert ex["capacity_decayed"]["gpu"] == pytest.approx(16 * 2.5607, abs=1e-2)
    assert ex["usage"]["gpu"] == pytest.approx(1 / 3, abs=1e-3)
    assert ex["k"] == 1.0
    assert ex["over_quota_weight"]["gpu"] == sc.queues["team-a"].gpu_over_quota_weight


def test_the_cycle_feeds_historical_usage_to_the_engine(monkeypatch):
    from kaiweb.scheduling import cycle

    sc = small_cluster(nodes=2, gpus=8)
    now = SimulatedGateway(sc.cluster).now()
    end = datetime.fromtimestamp(now - now % 60, tz=UTC)
    _history(sc, [16, 16], [0, 0], end)
    seen = {}

    def spy(snapshot, config, shard_id=None):
        seen["usage"] = snapshot.usage
        return real(snapshot, config, shard_id)

    real = cycle.engine_run_cycle
    monkeypatch.setattr(cycle, "engine_run_cycle", spy)
    monkeypatch.setattr(accounting, "datetime", _FrozenDatetime(end))
    cycle.run_and_record_cycle(sc.shard, advance=False)

    assert seen["usage"]["team-a"][2] == pytest.approx(1.0)
    assert seen["usage"]["team-b"][2] == 0.0


class _FrozenDatetime:
    """`datetime` with a fixed `now()` (the accounting clock), everything else passed through."""

    def __init__(self, at: datetime) -> None:
        self._at = at

    def now(self, tz=None):
        return self._at

    def __getattr__(self, name):
        return getattr(datetime, name)
