"""Operations around the cycle: the shard lock, /metrics, /readyz and the beat schedule."""

from __future__ import annotations

import pytest
from django.db import connection

from kaiweb.core import locks
from kaiweb.scheduling import cycle
from kaiweb.scheduling.choices import CycleStatus
from kaiweb.scheduling.models import SchedulingCycle
from tests.celery.builders import small_cluster, submit

pytestmark = pytest.mark.django_db


class _HeldElsewhere:
    """Hold a lock from another session, as a second worker would."""

    def __init__(self, name: str, shard: str, tmp_path) -> None:
        self.name, self.shard = name, shard

    def __enter__(self):
        if connection.vendor == "postgresql":
            import psycopg

            s = connection.settings_dict
            self.conn = psycopg.connect(host=s["HOST"] or "127.0.0.1", port=s["PORT"] or 5432, user=s["USER"],
                                        password=s["PASSWORD"] or None, dbname=s["NAME"], autocommit=True)
            self.conn.execute("SELECT pg_advisory_lock(%s, %s)", [locks.LOCK_KEYS[self.name], locks.subkey(self.shard)])
        else:
            self.cm = locks.advisory_lock(self.name, self.shard)
            assert self.cm.__enter__()
        return self

    def __exit__(self, *exc):
        if connection.vendor == "postgresql":
            # Release explicitly: close() returns before the server has ended the session, so a lock
            # released only by the disconnect may still be held for a moment after it.
            self.conn.execute("SELECT pg_advisory_unlock_all()")
            self.conn.close()
        else:
            self.cm.__exit__(*exc)


def test_a_second_cycle_of_the_same_shard_returns_at_once(tmp_path):
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j")

    with _HeldElsewhere("scheduling-cycle", str(sc.shard.pk), tmp_path):
        skipped = cycle.run_and_record_cycle(sc.shard, advance=False)

    assert skipped.skipped
    assert skipped.cycle_id is None
    assert SchedulingCycle.objects.count() == 0
    ran = cycle.run_and_record_cycle(sc.shard, advance=False)
    assert ran.status == CycleStatus.SUCCEEDED


def test_locks_are_per_shard_and_released_after_the_block(tmp_path):
    with _HeldElsewhere("scheduling-cycle", "1", tmp_path):
        with locks.advisory_lock("scheduling-cycle", "2") as other_shard:
            assert other_shard
        if connection.vendor != "postgresql":
            # (a Postgres session may re-take its own advisory lock; another session may not)
            with locks.advisory_lock("scheduling-cycle", "1") as same_shard:
                assert not same_shard
    with locks.advisory_lock("scheduling-cycle", "1") as again:
        assert again


def test_an_unregistered_lock_name_is_refused():
    with pytest.raises(KeyError, match="not registered"), locks.advisory_lock("whatever"):
        pass


def test_metrics_expose_cycles_decisions_and_queue_figures(admin_client):
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j", pods=2, gpus_per_pod=2)
    cycle.run_and_record_cycle(sc.shard, advance=False)

    body = admin_client.get("/metrics").content.decode()

    assert 'kai_scheduling_cycles_total{shard="default",status="succeeded"} 1.0' in body
    assert 'kai_scheduling_decisions_total{kind="bind",status="applied"} 2.0' in body
    assert 'kai_queue_allocated_gpus{queue_name="team-a"} 4.0' in body
    assert 'kai_queue_fair_share_gpu{queue_name="team-a"}' in body
    assert 'kai_queue_pending_workloads{queue_name="team-b"} 0.0' in body
    assert 'kai_cycle_phase_duration_seconds{phase="engine",shard="default"}' in body
    # a cycle on the simulated cluster writes nothing back, so has no deferred writes to say
    assert "kai_cycle_write_back_deferred{" not in body


def test_metrics_say_the_writes_the_latest_cycle_left_for_the_next_ones(admin_client):
    from django.utils import timezone

    from kaiweb.scheduling.models import SchedulingCycle

    sc = small_cluster(nodes=1)
    SchedulingCycle.objects.create(shard=sc.shard, started_at=timezone.now(), status="succeeded",
                                   write_back={"pending_deferred": 120, "pod_group_deferred": 7})

    body = admin_client.get("/metrics").content.decode()

    assert 'kai_cycle_write_back_deferred{kind="pending_reason",shard="default"} 120.0' in body
    assert 'kai_cycle_write_back_deferred{kind="pod_group",shard="default"} 7.0' in body


def test_readyz_reports_database_broker_and_cluster(client):
    small_cluster(nodes=3)

    response = client.get("/readyz")

    data = response.json()
    assert response.status_code == 200
    assert set(data["checks"]) == {"database", "broker", "cluster", "workers"}
    assert data["checks"]["cluster"]["ok"]


def test_readyz_says_when_the_cluster_cannot_be_reached(client):
    # No simulated cluster at all: the gateway cannot be built.
    from kaiweb.cluster.models import Cluster

    Cluster.objects.all().delete()

    response = client.get("/readyz")

    assert response.status_code == 503
    assert not response.json()["checks"]["cluster"]["ok"]
    assert "no simulated cluster" in response.json()["checks"]["cluster"]["detail"]


@pytest.mark.django_db(transaction=True)  # the scheduler closes the connection it starts on
def test_the_beat_schedule_is_seeded_into_django_celery_beat(settings):
    from django_celery_beat.models import PeriodicTask
    from django_celery_beat.schedulers import DatabaseScheduler

    from kaiweb.celery import app

    DatabaseScheduler(app=app, lazy=False)

    tasks = {t.name: t for t in PeriodicTask.objects.all()}
    assert tasks["scheduling-cycles"].task == "scheduling.dispatch_cycles"
    assert tasks["scheduling-cycles"].interval.every == int(settings.KAI_CYCLE_SECONDS)
    assert tasks["usage-accounting"].task == "usage.account"
    assert tasks["usage-retention"].task == "usage.retention"
    assert tasks["usage-database"].task == "usage.fetch_usage_db"


def test_dispatch_sends_one_cycle_per_enabled_shard(monkeypatch):
    from kaiweb.cluster.models import SchedulingShard
    from kaiweb.scheduling import tasks

    sc = small_cluster()
    other = SchedulingShard.objects.create(cluster=sc.cluster, name="pool-b", partition_label_value="b")
    SchedulingShard.objects.create(cluster=sc.cluster, name="off", partition_label_value="c", enabled=False)
    sent = []
    monkeypatch.setattr(tasks.run_cycle_task, "delay", lambda *args: sent.append(args))

    tasks.dispatch_cycles_task()

    assert sorted(sent) == sorted([(sc.shard.pk, "beat"), (other.pk, "beat")])


def test_the_task_runs_the_cycle_and_returns_its_id():
    from kaiweb.scheduling.tasks import run_cycle_task

    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j")

    cycle_id = run_cycle_task.apply(args=(sc.shard.pk, "test")).get()

    row = SchedulingCycle.objects.get(pk=cycle_id)
    assert (row.trigger, row.status, row.binds) == ("test", CycleStatus.SUCCEEDED, 1)


def test_the_embedded_broker_never_shows_a_half_written_message(tmp_path):
    from kombu import Connection

    folder, processed = tmp_path / "queue", tmp_path / "processed"
    folder.mkdir()
    processed.mkdir()
    options = {"data_folder_in": str(folder), "data_folder_out": str(folder), "processed_folder": str(processed),
               "control_folder": str(tmp_path / "control")}
    with Connection("filesystem://", transport="kaiweb.core.filesystem_broker:Transport",
                    transport_options=options) as conn:
        queue = conn.SimpleQueue("celery")
        # What a writer caught mid-write looks like: the reader must leave it alone.
        (folder / ".1_x.celery.msg.partial").write_bytes(b"")
        queue.put({"task": "scheduling.run_cycle"})
        names = [p.name for p in folder.iterdir()]
        assert len([n for n in names if n.endswith(".celery.msg")]) == 1

        message = queue.get(timeout=1)

        assert message.payload == {"task": "scheduling.run_cycle"}
        assert [p.name for p in folder.iterdir()] == [".1_x.celery.msg.partial"]
        queue.close()
