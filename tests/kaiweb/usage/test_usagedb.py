"""The usage database of time-based fair share without a Prometheus: KAI's queries as text, and every
kind of bad answer (from a server on loopback that answers what the test says) leaving the shard on
kaiweb's own accounting with the reason. The real Prometheus is in `test_usagedb_real`."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.shards import parse_shard
from kaiweb.cluster.models import Cluster, SchedulingShard
from kaiweb.core.promapi import PrometheusAPI, PrometheusError
from kaiweb.core.prometheus import render
from kaiweb.usage import usagedb
from kaiweb.usage.accounting import usage_for_engine
from tests.factories import QueueFactory, QueueStatusFactory, SchedulingCycleFactory, SchedulingShardFactory
from tests.prometheus_server import free_port

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 4, 10, 30, 15, tzinfo=UTC)


def shard_with(url: str = "http://prometheus:9090", **params: Any) -> SchedulingShard:
    cluster = Cluster.objects.create(name="k8s", backend="kubernetes")
    observed = parse_shard({"metadata": {"name": "default"}, "spec": {"usageDBConfig": {
        "clientType": "prometheus", "connectionString": url, "usageParams": params}}})
    mirror._apply_shards(cluster, [observed])
    return SchedulingShard.objects.get(cluster=cluster, name="default")


def test_a_sliding_window_asks_kais_sum_over_the_window_at_the_query_resolution():
    shard = shard_with(windowSize="1w")
    asked = usagedb.queries(shard, shard.usage_db, NOW)
    assert asked[("allocation", "gpu")] == "sum_over_time((kai_queue_allocated_gpus)[604800000ms:60000ms])"
    assert asked[("capacity", "cpu")] == ('sum_over_time((sum(kube_node_status_capacity{resource="cpu"}))'
                                          '[604800000ms:60000ms])')
    assert set(asked) == {(k, r) for k in ("allocation", "capacity") for r in ("cpu", "memory", "gpu")}


def test_the_half_life_decays_each_step_as_kai_writes_it():
    shard = shard_with(windowSize="1d", halfLifePeriod="12h", extraParams={"queryResolution": "5m"})
    asked = usagedb.queries(shard, shard.usage_db, NOW)
    now = int(NOW.timestamp())
    assert asked[("allocation", "memory")] == (
        f"sum_over_time((((kai_queue_allocated_memory_bytes) * (0.5^(({now} - time()) / 43200.000000))))"
        "[86400000ms:300000ms])")


def test_a_tumbling_window_reaches_back_to_its_latest_reset_and_a_cron_window_to_its_latest_tick():
    tumbling = shard_with(windowSize="1d", windowType="tumbling", tumblingWindowStartTime="2026-03-01T06:00:00Z")
    # resets every day at 06:00: the latest before 10:30:15 is today's
    assert usagedb.window_seconds(tumbling, tumbling.usage_db, NOW) == 4 * 3600 + 30 * 60 + 15
    assert "[16215000ms:" in usagedb.queries(tumbling, tumbling.usage_db, NOW)[("allocation", "gpu")]
    SchedulingShard.objects.all().delete()
    Cluster.objects.filter(name="k8s").delete()
    cron = shard_with(windowType="cron", cronString="0 0 * * 1")  # Mondays at midnight; NOW is a Wednesday
    assert usagedb.window_seconds(cron, cron.usage_db, NOW) == 2 * 86400 + 10 * 3600 + 30 * 60 + 15


def test_a_window_that_has_just_reset_or_starts_later_reads_no_usage_and_asks_nothing():
    shard = shard_with(windowSize="1h", windowType="tumbling", tumblingWindowStartTime="2026-03-04T10:30:15Z")
    assert usagedb.queries(shard, shard.usage_db, NOW) == {}
    shard.usage_db = {**shard.usage_db, "tumbling_start": "2026-05-01T00:00:00Z"}
    assert usagedb.fetch(shard, NOW) == {}


class Answers:
    """A server on loopback answering each query with what `answer(query)` gives (status, body)."""

    def __init__(self, answer: Callable[[str], tuple[int, bytes]]) -> None:
        outer = self
        self.answer = answer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's hook name)
                query = parse_qs(urlparse(self.path).query).get("query", [""])[0]
                status, body = outer.answer(query)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def answers() -> Iterator[Callable[[Callable[[str], tuple[int, bytes]]], Answers]]:
    started: list[Answers] = []

    def start(answer: Callable[[str], tuple[int, bytes]]) -> Answers:
        started.append(Answers(answer))
        return started[-1]

    yield start
    for server in started:
        server.server.shutdown()
        server.server.server_close()


def vector(*samples: tuple[dict[str, str], Any]) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [NOW.timestamp(), value]} for labels, value in samples]}}).encode()


def good(query: str) -> tuple[int, bytes]:
    if "kube_node_status_capacity" in query:
        return 200, vector(({}, "100"))
    return 200, vector(({"queue_name": "a"}, "75"), ({"queue_name": "b"}, "25"))


def test_a_good_answer_is_each_queues_sum_over_the_capacitys(answers):
    server = answers(good)
    shard = shard_with(server.url)
    reading = usagedb.refresh(shard)
    assert reading["state"] == "ok"
    assert reading["usage"] == {"a": [0.75, 0.75, 0.75], "b": [0.25, 0.25, 0.25]}
    shard.k_value = 1.0
    assert usage_for_engine(shard) == {"a": (0.75, 0.75, 0.75), "b": (0.25, 0.25, 0.25)}


def with_allocation(body: bytes, status: int = 200) -> Callable[[str], tuple[int, bytes]]:
    return lambda query: good(query) if "kube_node_status_capacity" in query else (status, body)


@pytest.mark.parametrize(("answer", "reason"), [
    (with_allocation(b"<html>bad gateway</html>", 502), "HTTP 502, not a JSON answer"),
    (with_allocation(b'{"status": "error", "error": "parse error at char 5"}', 400), "failed: parse error at char 5"),
    (with_allocation(b'{"status": "success", "data": {"resultType": "matrix", "result": []}}'),
     "did not return a vector"),
    (with_allocation(vector(({"queue_name": "a"}, "NaN"))), "is not a finite number"),
    (with_allocation(vector(({"queue_name": "a"}, "-3"))), "less than 0"),
    (with_allocation(vector(({"job": "kaiweb"}, "3"))), "has no queue_name label"),
    (with_allocation(vector(({"queue_name": "a"}, "1"), ({"queue_name": "a"}, "2"))), "two series for queue 'a'"),
    (with_allocation(b'{"status": "success", "data": {"resultType": "vector", "result": [1, 2]}}'),
     "a sample is not a series"),
    (lambda query: (200, vector(({"node": "n1"}, "8"), ({"node": "n2"}, "8")))
     if "kube_node_status_capacity" in query else good(query), "must be one series (a sum), not 2"),
    (lambda query: (200, vector()) if "kube_node_status_capacity" in query else good(query),
     "must be one series (a sum), not 0"),
])
def test_a_bad_answer_leaves_the_shard_on_kaiwebs_accounting_and_says_why(answers, answer, reason):
    server = answers(answer)
    shard = shard_with(server.url)
    reading = usagedb.refresh(shard)
    assert reading["state"] == "failed"
    assert reason in reading["reason"]
    assert "usage" not in reading
    usage, why = shard.usage_db_answer()
    assert usage is None
    assert reason in why
    shard.k_value = 1.0
    assert usage_for_engine(shard) == {}  # kaiweb's own accounting, which has no history here


def test_a_failed_fetch_keeps_the_last_good_answer_while_it_is_fresh(answers):
    healthy = [True]
    server = answers(lambda query: good(query) if healthy[0] else (503, b"down"))
    shard = shard_with(server.url)
    usagedb.refresh(shard)
    healthy[0] = False
    reading = usagedb.refresh(shard)
    assert reading["state"] == "failed"
    usage, why = shard.usage_db_answer()
    assert usage == {"a": (0.75, 0.75, 0.75), "b": (0.25, 0.25, 0.25)}  # as KAI: the last data, until stale
    assert "the last fetch" in why
    assert "HTTP 503" in why


def test_an_answer_too_large_or_with_too_many_series_is_refused_unread(answers):
    many = vector(*(({"queue_name": f"q{i}"}, "1") for i in range(50)))
    server = answers(lambda query: (200, many))
    with pytest.raises(PrometheusError, match="larger than 1000 bytes"):
        PrometheusAPI(server.url, max_bytes=1000).vector("kai_queue_allocated_gpus")
    with pytest.raises(PrometheusError, match="returned 50 series, more than the 10"):
        PrometheusAPI(server.url, max_series=10).vector("kai_queue_allocated_gpus")
    assert len(PrometheusAPI(server.url).vector("kai_queue_allocated_gpus")) == 50


def test_the_connection_comes_from_the_string_the_variable_or_kaiwebs_prometheus(settings, monkeypatch):
    settings.KAI_PROMETHEUS_URL = ""
    assert usagedb.source_url({"connection_string": "http://p:9090"}) == ("http://p:9090", "http://p:9090")
    monkeypatch.setenv("KAI_USAGE_DB_URL", "http://user:secret@from-env:9090")
    assert usagedb.source_url({"connection_string_env_var": "KAI_USAGE_DB_URL"}) == (
        "http://user:secret@from-env:9090", "$KAI_USAGE_DB_URL")
    with pytest.raises(PrometheusError, match="the variable KAI_USAGE_DB_NOT_SET is not set"):
        usagedb.source_url({"connection_string_env_var": "KAI_USAGE_DB_NOT_SET"})
    with pytest.raises(PrometheusError, match="no KAI_PROMETHEUS_URL"):
        usagedb.source_url({})
    settings.KAI_PROMETHEUS_URL = "http://kaiweb-prometheus:9090"
    assert usagedb.source_url({}) == ("http://kaiweb-prometheus:9090", "KAI_PROMETHEUS_URL")


def test_an_object_cannot_point_the_worker_at_another_of_its_settings_nor_see_an_env_url(monkeypatch):
    monkeypatch.setenv("DATABASE_URL_FOR_TEST", "http://user:secret@db:5432")
    with pytest.raises(PrometheusError, match="must name a variable starting with KAI_USAGE_DB_"):
        usagedb.source_url({"connection_string_env_var": "DATABASE_URL_FOR_TEST"})

    port = free_port()
    monkeypatch.setenv("KAI_USAGE_DB_URL", f"http://user:secret@127.0.0.1:{port}")
    cluster = Cluster.objects.create(name="k8s", backend="kubernetes")
    mirror._apply_shards(cluster, [parse_shard({"metadata": {"name": "default"}, "spec": {"usageDBConfig": {
        "clientType": "prometheus", "connectionStringEnvVar": "KAI_USAGE_DB_URL"}}})])
    shard = SchedulingShard.objects.get(cluster=cluster, name="default")
    reading = usagedb.refresh(shard)
    assert reading["state"] == "failed"
    assert "$KAI_USAGE_DB_URL could not be reached" in reading["reason"]
    assert "secret" not in json.dumps(reading) + shard.usage_db_answer()[1]


def test_the_task_fetches_only_the_shards_that_name_a_database_and_are_due(answers):
    server = answers(good)
    shard = shard_with(server.url, fetchInterval="1m")
    assert usagedb.refresh_due(NOW) == {"k8s/default": "ok"}
    shard.refresh_from_db()
    assert usagedb.refresh_due(NOW) == {}  # fetched a moment ago
    assert usagedb.is_due(shard, NOW.replace(minute=31, second=15))
    assert not SchedulingShard.objects.exclude(pk=shard.pk).exclude(usage_db_reading={}).exists()


def test_metrics_give_the_allocation_of_every_shards_queues_from_its_latest_cycle():
    """What KAI's usage queries read: a gauge per queue at every scrape, whichever shard ran last."""
    east, west = SchedulingShardFactory(name="east"), SchedulingShardFactory(name="west")
    a, b = QueueFactory(name="east-team"), QueueFactory(name="west-team")
    old, new = NOW - timedelta(minutes=2), NOW - timedelta(minutes=1)
    QueueStatusFactory(queue=a, cycle=SchedulingCycleFactory(shard=east), recorded_at=old - timedelta(minutes=1),
                       allocated={"cpu": 0, "memory": 0, "gpu": 1})
    QueueStatusFactory(queue=a, cycle=SchedulingCycleFactory(shard=east), recorded_at=old,
                       allocated={"cpu": 2000, "memory": 1000, "gpu": 3})
    QueueStatusFactory(queue=b, cycle=SchedulingCycleFactory(shard=west), recorded_at=new,
                       allocated={"cpu": 0, "memory": 0, "gpu": 5})
    body = render()[0].decode()
    assert 'kai_queue_allocated_gpus{queue_name="east-team"} 3.0' in body
    assert 'kai_queue_allocated_cpu_cores{queue_name="east-team"} 2.0' in body
    assert 'kai_queue_allocated_memory_bytes{queue_name="east-team"} 1e+09' in body
    assert 'kai_queue_allocated_gpus{queue_name="west-team"} 5.0' in body


def test_a_slow_answer_is_abandoned_within_its_timeout(answers):
    body = vector(*(({"queue_name": f"q{i}"}, "1") for i in range(20000)))  # about 20 chunks
    server = answers(lambda query: (200, body))
    api = PrometheusAPI(server.url, max_bytes=64 * 1024 * 1024, max_series=100_000)
    api.session.get = _slow_get(api.session.get)  # each chunk arrives a little late: no read times out
    with pytest.raises(PrometheusError, match="took longer than 0.5s"):
        api.vector("kai_queue_allocated_gpus", timeout=0.5)


def _slow_get(get: Callable[..., Any]) -> Callable[..., Any]:
    import time

    def slow(*args: Any, **kwargs: Any) -> Any:
        response = get(*args, **kwargs)
        chunks = response.iter_content

        def late(chunk_size: int = 1) -> Iterator[bytes]:
            for chunk in chunks(chunk_size=chunk_size):
                time.sleep(0.05)
                yield chunk

        response.iter_content = late
        return response

    return slow


def test_the_queue_page_explains_the_fair_share_with_the_usage_the_cycle_reads(answers):
    from kaiweb.scheduling.fairshare import usage_arithmetic

    server = answers(good)
    shard = shard_with(server.url)
    assert usage_arithmetic(shard).source == ""  # nothing fetched yet: kaiweb's own accounting
    usagedb.refresh(shard)
    explained = usage_arithmetic(shard)
    assert explained.source.startswith(f"the Prometheus at {server.url}")
    assert {q: row.normalised for q, row in explained.rows.items()} == {"a": [0.75] * 3, "b": [0.25] * 3}


def test_a_connection_string_is_shown_without_its_user_and_password(admin_api):
    shard = SchedulingShard.objects.get(name="default")
    shard.usage_db = {"client_type": "prometheus", "connection_string": "https://bot:token@prom.example:9090/x"}
    shard.save()
    assert usagedb.source_url(shard.usage_db) == ("https://bot:token@prom.example:9090/x",
                                                  "https://***@prom.example:9090/x")
    assert "https://***@prom.example:9090/x" in shard.usage_db_answer()[1]
    shown = admin_api.get("/api/v1/shards/default/").json()
    assert shown["usage_db"]["connection_string"] == "https://***@prom.example:9090/x"
    assert "token" not in json.dumps(shown)
