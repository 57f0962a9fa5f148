"""Time-based fair share from a real Prometheus (Debian's `prometheus`), the round trip of KAI's usage
database: kaiweb's `/metrics` writes each queue's allocation (`kai_queue_allocated_*`, label
`queue_name`), Prometheus scrapes it beside kube-state-metrics' node capacity, and a shard whose
SchedulingShard names that Prometheus in `usageDBConfig` has its fair share follow the usage read back
with KAI's queries. Skipped, with a notice, when the binary is absent (apt-get install prometheus).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.shards import parse_shard
from kaiweb.cluster.models import SchedulingShard
from kaiweb.core.prometheus import render
from kaiweb.scheduling import cycle
from kaiweb.scheduling.models import QueueStatus
from kaiweb.usage import usagedb
from tests.celery.builders import GIB, small_cluster, submit
from tests.prometheus_server import Exposition, free_port, needs_prometheus, running_prometheus

pytestmark = [needs_prometheus, pytest.mark.django_db]

# kube-state-metrics' node capacity of the two 8-GPU nodes of `small_cluster`, beside kaiweb's figures
NODE_CAPACITY = "".join(
    f'kube_node_status_capacity{{node="node-{i}",resource="{r}",unit="{u}"}} {v}\n'
    for i in range(2) for r, u, v in (("nvidia_com_gpu", "integer", 8), ("cpu", "core", 128),
                                      ("memory", "byte", 1024 * GIB)))


class Scraped:
    """What Prometheus scrapes: kaiweb's /metrics as rendered by the test, and the node capacity."""

    def __init__(self) -> None:
        self.metrics = b""

    def body(self) -> bytes:
        return b"# TYPE kube_node_status_capacity gauge\n" + NODE_CAPACITY.encode() + self.metrics


@pytest.fixture(scope="module")
def scraped() -> Iterator[tuple[Scraped, Exposition]]:
    page = Scraped()
    exporter = Exposition(page.body)
    try:
        yield page, exporter
    finally:
        exporter.close()


@pytest.fixture
def prometheus(scraped, tmp_path) -> Iterator[str]:
    """A fresh Prometheus scraping the page; ready once it holds four samples of kaiweb's allocation."""
    _, exporter = scraped
    with running_prometheus(tmp_path, exporter.target, 'count_over_time(kai_queue_allocated_gpus{queue_name="team-a"}[1m])',
                            ready_samples=4) as url:
        yield url


def usage_db_shard(sc: Any, url: str, **params: Any) -> SchedulingShard:
    """The shard configured as the mirror configures it from a SchedulingShard object naming `url`."""
    observed = parse_shard({"metadata": {"name": "default"}, "spec": {"kValue": 1, "usageDBConfig": {
        "clientType": "prometheus", "connectionString": url,
        "usageParams": {"windowSize": "10m", "extraParams": {"queryResolution": "1s"}, **params}}}})
    assert not hasattr(observed, "rule"), observed
    mirror._apply_shards(sc.cluster, [observed])
    return SchedulingShard.objects.get(pk=sc.shard.pk)


def fair_gpus(outcome: Any) -> dict[str, float]:
    return {s.queue.name: s.fair_share["gpu"] for s in
            QueueStatus.objects.filter(cycle_id=outcome.cycle_id, queue__name__in=("team-a", "team-b"))}


@pytest.fixture
def team_a_ran_the_cluster(scraped):
    """team-a has held all 16 GPUs (a cycle bound its job), team-b nothing; kaiweb's /metrics says so.
    Both leaf queues have quota 0 and weight 1: their fair shares come from the surplus alone."""
    page, _ = scraped
    sc = small_cluster(nodes=2)
    for name in ("team-a", "team-b"):
        sc.queues[name].gpu_quota = 0
        sc.queues[name].save()
    submit(sc, "team-a", "big", pods=16, gpus_per_pod=1, min_member=1)
    assert cycle.run_and_record_cycle(sc.shard, advance=False).binds == 16
    page.metrics = render()[0]
    assert b'kai_queue_allocated_gpus{queue_name="team-a"} 16.0' in page.metrics
    assert b'kai_queue_allocated_gpus{queue_name="team-b"} 0.0' in page.metrics
    submit(sc, "team-b", "late", pods=16, gpus_per_pod=1, min_member=1)
    return sc


def test_the_fair_share_the_cycle_uses_follows_the_usage_prometheus_holds(team_a_ran_the_cluster, prometheus):
    sc = team_a_ran_the_cluster
    # kaiweb's own accounting has no history: the surplus is split evenly
    assert fair_gpus(cycle.run_and_record_cycle(sc.shard, advance=False)) == {"team-a": 8, "team-b": 8}

    shard = usage_db_shard(sc, prometheus)
    assert shard.usage_db_answer()[0] is None  # nothing fetched yet: still kaiweb's accounting
    reading = usagedb.refresh(shard)
    assert reading["state"] == "ok", reading
    # team-a held every GPU of the window, team-b none (KAI's ratio: the queue's sum over the capacity's)
    assert reading["usage"]["team-a"][2] == pytest.approx(1.0)
    assert reading["usage"]["team-b"] == [0.0, 0.0, 0.0]

    # P = max(0, W' + k(W' − U)): team-a 0.5 + (0.5 − 1) = 0, team-b 0.5 + 0.5 = 1
    assert fair_gpus(cycle.run_and_record_cycle(shard, advance=False)) == {"team-a": 0, "team-b": 16}
    shown = shard.usage_db_answer()[1]
    assert shown.startswith(f"the Prometheus at {prometheus}")


@pytest.mark.parametrize("params", [
    {"windowType": "tumbling", "tumblingWindowStartTime": "2026-01-01T00:00:00Z", "windowSize": "1h"},
    {"windowType": "cron", "cronString": "* * * * *"},
    {"halfLifePeriod": "30s"},
])
def test_every_window_type_and_the_half_life_are_asked_as_prometheus_answers_them(
        team_a_ran_the_cluster, prometheus, params):
    shard = usage_db_shard(team_a_ran_the_cluster, prometheus, **params)
    now = datetime.now(tz=UTC)
    reading = usagedb.refresh(shard, now=now)
    if params.get("windowType") == "cron" and (now - now.replace(second=0, microsecond=0)).total_seconds() < 1:
        assert reading["usage"] == {}  # the minute has just begun: an empty window
        return
    assert reading["state"] == "ok", reading
    assert reading["usage"]["team-a"][2] == pytest.approx(1.0)
    assert reading["usage"]["team-b"][2] == 0.0


def test_a_prometheus_that_is_down_leaves_the_cycle_on_kaiwebs_accounting_and_the_shard_says_why(
        team_a_ran_the_cluster, admin_client, admin_api):
    sc = team_a_ran_the_cluster
    down = f"http://127.0.0.1:{free_port()}"
    shard = usage_db_shard(sc, down)

    reading = usagedb.refresh(shard)
    assert reading["state"] == "failed"
    assert "could not be reached" in reading["reason"]
    assert fair_gpus(cycle.run_and_record_cycle(shard, advance=False)) == {"team-a": 8, "team-b": 8}

    source = admin_api.get("/api/v1/shards/default/").json()["usage_source"]
    assert source["source"] == "kaiweb"
    assert source["state"] == "failed"
    assert f"no answer yet from the Prometheus at {down}" in source["reason"]
    assert "could not be reached" in source["reason"]
    page = admin_client.get(f"/admin/cluster/schedulingshard/{shard.pk}/change/").content.decode()
    assert f"kaiweb&#x27;s own usage accounting: no answer yet from the Prometheus at {down}" in page


def test_an_answer_older_than_the_staleness_period_is_not_used(team_a_ran_the_cluster, prometheus):
    shard = usage_db_shard(team_a_ran_the_cluster, prometheus, stalenessPeriod="2m", fetchInterval="1m")
    reading = usagedb.refresh(shard)
    assert reading["state"] == "ok"
    fetched = datetime.fromisoformat(reading["attempted_at"])
    assert not usagedb.is_due(shard, fetched + timedelta(seconds=59))
    assert usagedb.is_due(shard, fetched + timedelta(seconds=60))
    assert shard.usage_db_answer(now=fetched + timedelta(seconds=119))[0] is not None
    usage, why = shard.usage_db_answer(now=fetched + timedelta(seconds=121))
    assert usage is None
    assert "older than stalenessPeriod (120s)" in why

    # the answer, three minutes on: the cycle reads kaiweb's own accounting again
    three_minutes_ago = (datetime.now(tz=UTC) - timedelta(minutes=3)).isoformat()
    SchedulingShard.objects.filter(pk=shard.pk).update(
        usage_db_reading={**reading, "attempted_at": three_minutes_ago, "succeeded_at": three_minutes_ago})
    shard.refresh_from_db()
    assert fair_gpus(cycle.run_and_record_cycle(shard, advance=False)) == {"team-a": 8, "team-b": 8}
