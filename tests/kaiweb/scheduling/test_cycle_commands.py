"""The management commands that run the cycle: run_cycle (table / JSON), dump_snapshot and replay."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from kaiweb.scheduling.models import Decision, SchedulingCycle
from tests.celery.builders import running_pods, small_cluster, submit

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_run_cycle_json_prints_one_object_per_cycle():
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j", pods=2, gpus_per_pod=2)

    lines = run("run_cycle", "--cycles", "2", "--json").strip().splitlines()

    objs = [json.loads(line) for line in lines]
    assert len(objs) == 2
    assert {"binds", "evictions", "pipelined", "pending", "duration_ms"} <= set(objs[0])
    assert [o["binds"] for o in objs] == [2, 0]
    assert objs[0]["status"] == "succeeded"
    assert SchedulingCycle.objects.count() == 2


def test_run_cycle_prints_decisions_and_fair_shares():
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j", pods=1)

    text = run("run_cycle")

    assert "1 bind(s)" in text
    assert "bind     ns/j/j-0 -> node-0" in text
    assert "team-a" in text
    assert "gpu fair" in text


def test_a_dumped_snapshot_replays_to_the_same_decisions_without_recording_anything(tmp_path):
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j", pods=2, gpus_per_pod=2)
    path = tmp_path / "snap.json"
    assert "2 jobs" not in run("dump_snapshot", str(path))

    replay = json.loads(run("run_cycle", "--snapshot", str(path), "--dry-run", "--json"))
    again = json.loads(run("run_cycle", "--snapshot", str(path), "--dry-run", "--json"))

    for r in (replay, again):
        r["result"].pop("timings_ms")  # wall-clock measurements, the only thing allowed to differ
    assert replay == again  # deterministic
    assert replay["binds"] == 2
    assert replay["dry_run"] is True
    assert SchedulingCycle.objects.count() == 0
    assert Decision.objects.count() == 0
    assert running_pods(sc) == []
    live = json.loads(run("run_cycle", "--json"))
    assert live["binds"] == replay["binds"]


def test_replay_refuses_bad_files_and_missing_flags(tmp_path):
    small_cluster()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"snapshot": {"nodes": "many"}}))
    with pytest.raises(CommandError, match="nodes"):
        run("run_cycle", "--snapshot", str(bad), "--dry-run")
    with pytest.raises(CommandError, match="does not exist"):
        run("run_cycle", "--snapshot", str(tmp_path / "missing.json"), "--dry-run")
    with pytest.raises(CommandError, match="--dry-run"):
        run("run_cycle", "--snapshot", str(bad))
    with pytest.raises(CommandError, match="--snapshot"):
        run("run_cycle", "--dry-run")
    with pytest.raises(CommandError, match="--cycles"):
        run("run_cycle", "--cycles", "0")
    with pytest.raises(CommandError, match="shard"):
        run("run_cycle", "--shard", "no-such-shard")


def test_seed_demo_then_run_cycle_schedules_the_demo():
    text = run("seed_demo")
    assert "16 node(s) created" in text

    first = json.loads(run("run_cycle", "--json"))

    assert first["binds"] > 0
    assert "0 queue(s) created, 0 node(s) created, 0 workload(s) submitted" in run("seed_demo")
