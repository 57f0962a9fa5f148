"""What if? — the service (recorded jobs, the two replays, validation), the page and the API."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.urls import reverse
from django.utils import timezone

from kaiweb.queues.models import Queue
from kaiweb.whatif import replay as whatif
from tests.factories import ClusterFactory, NodeFactory, PodFactory, QueueFactory, WorkloadFactory

# Recent enough that the page's and the API's default window (ending now) holds the history.
NOW = timezone.now().replace(microsecond=0)
SUBMIT = NOW - dt.timedelta(hours=3)


@pytest.fixture
def contended(db) -> dict:
    return build_contended()


def build_contended() -> dict:
    """One 8-GPU node, two top-level leaf queues with a 4-GPU quota each, and 12 one-GPU jobs of
    10 minutes per queue, all submitted at once: the queues contend for the node for an hour."""
    cluster = ClusterFactory()
    NodeFactory(cluster=cluster, name="node-a")
    queues = {
        name: QueueFactory(name=name, gpu_quota=4, gpu_limit=-1, cpu_quota=-1, memory_quota=-1)
        for name in ("alpha", "beta")
    }
    for name, queue in queues.items():
        for i in range(12):
            w = WorkloadFactory(cluster=cluster, queue=queue, name=f"{name}-{i:02d}", state="pending",
                                submitted_at=SUBMIT + dt.timedelta(seconds=i))
            PodFactory(workload=w, name=f"{name}-{i:02d}-0", gpu=1, duration_seconds=600)
    return {"cluster": cluster, "queues": queues}


def _row(result: dict, queue: str) -> dict:
    return next(r for r in result["queues"] if r["queue"] == queue)


# ------------------------------------------------------------------------------------------ recorded jobs


def test_recorded_jobs_keep_real_queues_gangs_and_say_where_durations_came_from(db):
    cluster = ClusterFactory()
    NodeFactory(cluster=cluster)
    q = QueueFactory(name="team-x")
    done = WorkloadFactory(cluster=cluster, queue=q, name="done", state="completed", min_member=2,
                           submitted_at=NOW - dt.timedelta(hours=2))
    for i in range(3):
        PodFactory(workload=done, name=f"done-{i}", gpu=2, state="Succeeded",
                   started_at=NOW - dt.timedelta(hours=1, minutes=50),
                   finished_at=NOW - dt.timedelta(hours=1, minutes=20 + i))
    running = WorkloadFactory(cluster=cluster, queue=q, name="running", state="running",
                              submitted_at=NOW - dt.timedelta(hours=1), last_start_at=NOW - dt.timedelta(minutes=30))
    PodFactory(workload=running, name="running-0", gpu=1, state="Running", started_at=NOW - dt.timedelta(minutes=30))
    sim = WorkloadFactory(cluster=cluster, queue=q, name="sim", submitted_at=NOW - dt.timedelta(minutes=5))
    PodFactory(workload=sim, name="sim-0", gpu_fraction=0.5, gpu=0, duration_seconds=900)
    WorkloadFactory(cluster=cluster, queue=q, name="old", state="completed", submitted_at=NOW - dt.timedelta(days=3),
                    finished_at=NOW - dt.timedelta(days=2))
    long = WorkloadFactory(cluster=cluster, queue=q, name="long", state="running",
                           submitted_at=NOW - dt.timedelta(days=2), last_start_at=NOW - dt.timedelta(hours=30))
    PodFactory(workload=long, name="long-0", gpu=8, state="Running", started_at=NOW - dt.timedelta(hours=30))

    rec = whatif.recorded_jobs(dt.timedelta(hours=24), now=NOW)

    jobs = {j.job_id: j for j in rec.jobs}
    # "old" ended before the window; "long" was running when it opened, so it is carried in.
    assert set(jobs) == {"team/done", "team/running", "team/sim", "team/long"}
    assert set(rec.queue_of.values()) == {"team-x"}
    assert rec.carried_in == 1
    assert jobs["team/long"].submit_time == (NOW - dt.timedelta(hours=24)).timestamp()
    assert jobs["team/long"].duration == 24 * 3600  # only the part of its run inside the window
    assert jobs["team/done"].num_pods == 2
    assert jobs["team/done"].gpu_per_pod == 2
    assert jobs["team/done"].duration == 30 * 60  # first start to last finish
    assert jobs["team/running"].duration == 30 * 60  # running so far
    assert jobs["team/sim"].duration == 900
    assert jobs["team/sim"].gpu_per_pod == 0.5
    assert rec.durations == {"observed": 1, "running_so_far": 2, "simulated": 1}
    assert rec.pods_not_replayed == 1


def test_more_jobs_than_the_bound_keeps_the_most_recent_and_says_so(contended):
    result = whatif.run_whatif({"alpha": {"gpu_quota": 8}}, now=NOW, max_jobs=10)
    assert result["jobs"]["recorded"] == 24
    assert result["jobs"]["replayed"] == 10
    assert result["truncated"]["jobs_left_out"] == 14
    assert any("14 older workload(s)" in n for n in result["notes"])


# ------------------------------------------------------------------------------------------ the comparison


def test_raising_a_queues_quota_lowers_its_queueing_delay(contended):
    result = whatif.run_whatif({"alpha": {"gpu_quota": 8}}, now=NOW)

    alpha, beta = _row(result, "alpha"), _row(result, "beta")
    assert alpha["edited"]
    assert not beta["edited"]
    assert alpha["changed"]["queueing_delay_mean_s"] < alpha["current"]["queueing_delay_mean_s"]
    assert alpha["difference"]["queueing_delay_mean_s"] < 0
    assert beta["changed"]["queueing_delay_mean_s"] > beta["current"]["queueing_delay_mean_s"]
    assert alpha["changed"]["allocated_gpus_avg"] > alpha["current"]["allocated_gpus_avg"]
    # Every job ran in both runs: the same GPU-hours, delivered in a different order.
    assert alpha["current"]["gpu_hours"] == alpha["changed"]["gpu_hours"] == pytest.approx(2.0)
    assert result["changes"] == [{"queue": "alpha", "field": "gpu_quota", "current": 4, "changed": 8}]
    assert result["jobs"]["durations"] == {"simulated": 24}
    timeline = result["timeline"]["changed"]
    assert len(timeline["t"]) == len(timeline["queues"]["alpha"]) > 1
    assert max(result["timeline"]["current"]["queues"]["alpha"]) == 4  # its quota while beta waits too
    assert max(timeline["queues"]["alpha"]) > 4


def test_same_history_same_result(contended):
    first = whatif.run_whatif({"beta": {"gpu_over_quota_weight": 3, "gpu_quota": 2}}, now=NOW)
    second = whatif.run_whatif({"beta": {"gpu_over_quota_weight": 3, "gpu_quota": 2}}, now=NOW)
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


def test_a_yaml_tree_is_checked_as_an_import_and_replayed(contended):
    text = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: beta}
spec:
  resources:
    gpu: {quota: 8, limit: -1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
"""
    result = whatif.run_whatif(yaml_text=text, now=NOW)
    beta = _row(result, "beta")
    assert beta["difference"]["queueing_delay_mean_s"] < 0
    assert {"queue": "beta", "field": "gpu_quota", "current": 4, "changed": 8} in result["changes"]


def test_nothing_recorded_gives_an_empty_result(db):
    NodeFactory(cluster=ClusterFactory())
    QueueFactory(name="alpha")
    result = whatif.run_whatif({"alpha": {"gpu_quota": 3}}, now=NOW)
    assert result["empty"] is True
    assert result["queues"] == []
    assert result["jobs"]["recorded"] == 0


# ------------------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("changes", "key", "words"),
    [
        ({"alpha": {"gpu_quota": 20, "gpu_limit": 10}}, "changes.alpha.gpu_limit", "below the quota"),
        ({"nobody": {"gpu_quota": 1}}, "changes.nobody", "does not exist"),
        ({"alpha": {"colour": "red"}}, "changes.alpha.colour", "is not a field that can be set"),
        ({"alpha": {"gpu_over_quota_weight": -2}}, "changes.alpha.gpu_over_quota_weight", ""),
        ({"alpha": {"gpu_quota": 4}}, "changes", "no value differs"),
        ({"alpha": {"parent": "ghost"}}, "changes.alpha.parent", "does not exist"),
    ],
)
def test_bad_changes_name_the_field_and_the_rule_and_write_nothing(contended, changes, key, words):
    before = list(Queue.objects.order_by("name").values())
    with pytest.raises(whatif.WhatIfInputError) as exc:
        whatif.run_whatif(changes, now=NOW)
    assert key in exc.value.message_dict
    assert words in " ".join(exc.value.message_dict[key])
    assert list(Queue.objects.order_by("name").values()) == before


def test_a_queue_holding_jobs_cannot_become_a_parent(contended):
    text = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: child}
spec:
  parentQueue: alpha
  resources: {gpu: {quota: 1, limit: -1, overQuotaWeight: 1}}
"""
    with pytest.raises(whatif.WhatIfInputError) as exc:
        whatif.run_whatif(yaml_text=text, now=NOW)
    assert "yaml" in exc.value.message_dict


def test_a_successful_run_writes_nothing(contended, django_assert_max_num_queries):
    before = list(Queue.objects.order_by("name").values())
    # 10 for the replay, 7 for the live snapshot the start-time estimator runs on (as a refresh reads it)
    with django_assert_max_num_queries(17) as ctx:
        whatif.run_whatif({"alpha": {"gpu_quota": 8, "priority": 150}}, now=NOW)
    assert not [q for q in ctx.captured_queries if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))]
    assert list(Queue.objects.order_by("name").values()) == before


@pytest.mark.parametrize("hours", ["abc", 0, -3, 10_000])
def test_window_must_be_a_sane_number_of_hours(hours):
    with pytest.raises(whatif.WhatIfInputError) as exc:
        whatif.window_from_hours(hours)
    assert "window_hours" in exc.value.message_dict


# ------------------------------------------------------------------------------------------ the page


@pytest.mark.parametrize("persona", ["platform_admin", "queue_admin", "viewer"])
def test_every_role_may_run_a_whatif(request, client, contended, persona, django_assert_max_num_queries):
    client.force_login(request.getfixturevalue(persona))
    page = client.get(reverse("whatif:page") + "?queue=alpha")
    assert page.status_code == 200
    assert b'value="4"' in page.content  # the chosen queue's current quota prefills the form
    # the check, the run stored, kept to the last few and run inline (eager) with its result stored (with the
    # live snapshot's 7 reads for the start-time estimates beside the replay; 3 for the form's departments,
    # projects and node pools)
    with django_assert_max_num_queries(36):
        response = client.post(reverse("whatif:page"), {"queue": "alpha", "gpu_quota": "8", "window_hours": "72"},
                               HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert response.status_code == 200
    assert 'id="whatif-table"' in body
    assert 'data-queue="alpha"' in body
    assert "delta-up" in body  # alpha's delay falls: shown as better
    assert "<html" not in body  # htmx gets the fragment


def test_page_puts_errors_next_to_the_field(client, viewer, contended):
    client.force_login(viewer)
    response = client.post(reverse("whatif:page"), {"queue": "alpha", "gpu_quota": "20", "gpu_limit": "10",
                                                      "window_hours": "72"})
    body = response.content.decode()
    assert 'id="id_gpu_limit-errors"' in body
    assert "below the quota" in body
    assert 'id="whatif-table"' not in body


def test_page_without_a_queue_asks_for_one(client, viewer, contended):
    client.force_login(viewer)
    body = client.post(reverse("whatif:page"), {"gpu_quota": "8"}).content.decode()
    assert 'id="id_queue-errors"' in body
    assert "choose the queue" in body


def test_page_shows_the_empty_state_when_nothing_was_recorded(client, viewer, db):
    NodeFactory(cluster=ClusterFactory())
    QueueFactory(name="alpha", gpu_quota=2)
    client.force_login(viewer)
    body = client.post(reverse("whatif:page"), {"queue": "alpha", "gpu_quota": "3"}).content.decode()
    assert 'id="whatif-empty"' in body
    assert "widen the window" in body


def test_the_edit_form_posts_its_values_to_the_whatif(client, platform_admin, contended):
    client.force_login(platform_admin)
    edit = client.get(reverse("queues:edit", args=["alpha"])).content.decode()
    assert 'id="simulate-queue"' in edit
    assert reverse("whatif:page") + "?queue=alpha" in edit
    # What the edit form submits: all its fields, the queue's name only in the URL.
    data = {"display_name": "", "priority": "100", "gpu_quota": "8", "gpu_limit": "-1", "gpu_over_quota_weight": "1",
            "cpu_quota": "-1", "cpu_limit": "-1", "cpu_over_quota_weight": "1", "memory_quota": "-1",
            "memory_limit": "-1", "memory_over_quota_weight": "1", "window_hours": "72"}
    body = client.post(reverse("whatif:page") + "?queue=alpha", data).content.decode()
    assert "<html" in body
    assert 'id="whatif-table"' in body
    assert "alpha.gpu_quota" in body


def test_the_queue_tree_links_to_the_whatif(client, viewer, contended):
    client.force_login(viewer)
    assert 'id="whatif-link"' in client.get(reverse("queues:tree")).content.decode()


# ------------------------------------------------------------------------------------------ the API


def test_api_returns_the_comparison(viewer_api, contended):
    response = viewer_api.post("/api/v1/what-if/", {"changes": {"alpha": {"gpu_quota": 8}}, "window_hours": 72},
                               format="json")
    assert response.status_code == 202, response.content
    run = response.json()
    assert run["url"].endswith(f"/api/v1/what-if/{run['id']}/")
    polled = viewer_api.get(f"/api/v1/what-if/{run['id']}/")
    assert polled.status_code == 200
    assert polled.json()["state"] == "done"
    data = polled.json()["result"]
    alpha = _row(data, "alpha")
    assert alpha["difference"]["queueing_delay_mean_s"] < 0
    assert set(data["summary"]) == {"current", "changed", "difference"}
    assert "jain_fairness" in data["summary"]["current"]


def test_api_gives_each_queues_waits_now_and_with_the_change_from_the_start_estimator(viewer_api, contended):
    response = viewer_api.post("/api/v1/what-if/", {"changes": {"alpha": {"gpu_quota": 8}}}, format="json")
    assert response.status_code == 202, response.content
    data = viewer_api.get(f"/api/v1/what-if/{response.json()['id']}/").json()["result"]
    waits = {row["queue"]: row for row in data["start_estimates"]["queues"]}
    assert set(waits) == {"alpha", "beta"}
    assert data["start_estimates"]["samples"] >= 1
    assert "arrivals are not guessed" in data["start_estimates"]["note"]
    # The node holds 8 of the 24 waiting jobs: with alpha's quota raised to the whole node, alpha's
    # waiting jobs start sooner and beta's later.
    alpha, beta = waits["alpha"], waits["beta"]
    assert (alpha["edited"], beta["edited"]) == (True, False)
    assert alpha["changed"]["p50_wait_seconds"] < alpha["current"]["p50_wait_seconds"]
    assert beta["changed"]["p50_wait_seconds"] > beta["current"]["p50_wait_seconds"]
    for row in (alpha, beta):
        for side in ("current", "changed"):
            assert row[side]["p50_wait_seconds"] <= row[side]["p80_wait_seconds"]


def test_the_waits_differ_only_by_the_change_on_the_same_snapshot_and_seed(contended):
    from kaiweb.cluster.models import SchedulingShard
    from kaiweb.scheduling import estimates

    shard = SchedulingShard.objects.default()
    unchanged = estimates.queue_waits_with(shard, {})
    assert unchanged["queues"]
    for row in unchanged["queues"]:
        assert row["current"] == row["changed"]
        assert row["current"]["p50_wait_seconds"] is not None


def test_api_errors_name_the_field(viewer_api, contended):
    response = viewer_api.post("/api/v1/what-if/", {"changes": {"alpha": {"gpu_quota": -7}}}, format="json")
    assert response.status_code == 400
    assert "changes.alpha.gpu_quota" in response.json()
    both = viewer_api.post("/api/v1/what-if/", {"changes": {"alpha": {"gpu_quota": 8}}, "yaml": "x"}, format="json")
    assert both.status_code == 400
    assert "exactly one" in json.dumps(both.json())


def test_api_needs_a_signed_in_user(api_client, contended):
    assert api_client.post("/api/v1/what-if/", {"changes": {"alpha": {"gpu_quota": 8}}}, format="json").status_code == 401


def test_a_pod_larger_than_any_node_is_skipped_and_listed(contended):
    big = WorkloadFactory(cluster=contended["cluster"], queue=contended["queues"]["alpha"], name="huge",
                          submitted_at=SUBMIT)
    PodFactory(workload=big, name="huge-0", gpu=16, duration_seconds=60)
    result = whatif.run_whatif({"alpha": {"gpu_quota": 8}}, now=NOW)
    assert result["jobs"]["skipped_count"] == 1
    assert result["jobs"]["skipped"][0]["workload"] == "team/huge"
    assert "more than any node has" in result["jobs"]["skipped"][0]["reason"]
    assert result["jobs"]["replayed"] == 24


def test_choosing_a_queue_reloads_the_form_with_its_values(client, viewer, contended):
    client.force_login(viewer)
    contended["queues"]["beta"].gpu_over_quota_weight = 3
    contended["queues"]["beta"].save()
    body = client.get(reverse("whatif:page"), {"queue": "beta"}, HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in body
    assert 'name="gpu_over_quota_weight" value="3"' in body
    assert 'hx-get="' + reverse("whatif:page") + '"' in body


def test_differences_are_coloured_by_what_is_better_for_the_queue():
    from kaiweb.whatif.views import _cell

    faster = _cell(600.0, 300.0, -300.0, "seconds", -1)
    assert (faster["tone"], faster["delta"]) == ("better", "-5.0 min")
    fewer_gpus = _cell(8.0, 6.0, -2.0, "number", 1)
    assert (fewer_gpus["tone"], fewer_gpus["delta"]) == ("worse", "-2.00")
    one_sided = _cell(None, 3600.0, None, "seconds", -1)
    assert (one_sided["tone"], one_sided["delta"], one_sided["now"]) == ("", "n/a", "–")
    same = _cell(5.0, 5.0, 0.0, "count", -1)
    assert (same["tone"], same["delta"]) == ("", "0")


# ------------------------------------------------------------------------------------------ runs on a worker


def _queued(user, n: int = 1):
    from kaiweb.whatif.models import WhatIfRun

    return [WhatIfRun.objects.create(user=user, inputs={}) for _ in range(n)]


def test_a_user_with_too_many_runs_in_flight_gets_a_429_naming_the_limit(viewer_api, viewer, contended, settings):
    settings.KAI_WHATIF_MAX_RUNNING_PER_USER = 2
    _queued(viewer, 2)
    response = viewer_api.post("/api/v1/what-if/", {"changes": {"alpha": {"gpu_quota": 8}}}, format="json")
    assert response.status_code == 429
    assert "KAI_WHATIF_MAX_RUNNING_PER_USER = 2" in response.json()["detail"]
    # a bad input is still a 400 first, and a run long past its time limit no longer counts
    assert viewer_api.post("/api/v1/what-if/", {"changes": {"alpha": {"gpu_quota": -7}}},
                           format="json").status_code == 400
    from kaiweb.whatif.models import WhatIfRun

    WhatIfRun.objects.filter(user=viewer).update(created_at=timezone.now() - dt.timedelta(hours=2))
    assert viewer_api.post("/api/v1/what-if/", {"changes": {"alpha": {"gpu_quota": 8}}},
                           format="json").status_code == 202


def test_the_page_says_so_when_too_many_runs_are_in_flight(client, viewer, contended, settings):
    settings.KAI_WHATIF_MAX_RUNNING_PER_USER = 1
    _queued(viewer)
    client.force_login(viewer)
    body = client.post(reverse("whatif:page"), {"queue": "alpha", "gpu_quota": "8"}).content.decode()
    assert "KAI_WHATIF_MAX_RUNNING_PER_USER = 1" in body
    assert 'id="whatif-table"' not in body


def test_a_run_is_seen_by_its_user_and_platform_admins_only(viewer_api, admin_api, queue_admin_api, viewer, contended):
    run = viewer_api.post("/api/v1/what-if/", {"changes": {"alpha": {"gpu_quota": 8}}}, format="json").json()
    assert queue_admin_api.get(f"/api/v1/what-if/{run['id']}/").status_code == 404
    assert admin_api.get(f"/api/v1/what-if/{run['id']}/").json()["state"] == "done"
    assert viewer_api.get("/api/v1/what-if/99999999/").status_code == 404
    assert viewer_api.get("/api/v1/what-if/not-a-number/").status_code == 404


def test_the_page_polls_a_queued_run_and_draws_it_once_done(client, viewer, contended):
    from kaiweb.whatif import runs as whatif_runs

    client.force_login(viewer)
    run = whatif_runs.submit(viewer, changes={"alpha": {"gpu_quota": 8}}, window_hours=72)
    waiting = client.get(reverse("whatif:run", args=[run.pk])).content.decode()
    assert 'id="whatif-poll"' in waiting
    assert 'hx-trigger="every 2s"' in waiting
    assert whatif_runs.execute(run.pk) == "done"
    done = client.get(reverse("whatif:run", args=[run.pk])).content.decode()
    assert 'id="whatif-poll"' not in done
    assert '<div id="whatif-summary-body" hx-swap-oob="innerHTML">' in done
    assert 'id="whatif-table"' in done
    assert 'data-queue="alpha"' in done


def test_a_run_past_its_time_limit_ends_timed_out_with_a_message(viewer, contended, monkeypatch, settings):
    from celery.exceptions import SoftTimeLimitExceeded

    from kaiweb.whatif import runs as whatif_runs
    from kaiweb.whatif.models import WhatIfRun

    settings.KAI_WHATIF_TIME_LIMIT_S = 42
    run = whatif_runs.submit(viewer, changes={"alpha": {"gpu_quota": 8}})
    real = whatif.run_whatif

    def slow(*args, check_only=False, **kwargs):
        if check_only:
            return real(*args, check_only=True, **kwargs)
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(whatif, "run_whatif", slow)
    assert whatif_runs.execute(run.pk) == "timed-out"
    stored = WhatIfRun.objects.get(pk=run.pk)
    assert stored.result is None
    assert "longer than 42 s (KAI_WHATIF_TIME_LIMIT_S)" in stored.error["non_field_errors"][0]
    assert stored.finished_at is not None


def test_each_user_keeps_only_the_last_runs(viewer, contended, settings):
    from kaiweb.whatif import runs as whatif_runs
    from kaiweb.whatif.models import WhatIfRun

    settings.KAI_WHATIF_KEEP_PER_USER = 3
    settings.KAI_WHATIF_MAX_RUNNING_PER_USER = 100
    ids = [whatif_runs.submit(viewer, changes={"alpha": {"gpu_quota": 8}}).pk for _ in range(5)]
    assert sorted(WhatIfRun.objects.filter(user=viewer).values_list("pk", flat=True)) == sorted(ids[-3:])


def test_whatifs_and_estimates_have_a_queue_and_a_make_run_worker_of_their_own():
    import importlib.util
    from pathlib import Path

    from kaiweb.celery import app

    route = {task: app.amqp.router.route({}, task)["queue"].name
             for task in ("whatif.run", "scheduling.estimate_starts", "scheduling.run_cycle",
                          "scheduling.dispatch_cycles", "scheduling.dispatch_estimates")}
    assert route == {"whatif.run": "whatif", "scheduling.estimate_starts": "whatif", "scheduling.run_cycle": "celery",
                     "scheduling.dispatch_cycles": "celery", "scheduling.dispatch_estimates": "celery"}
    spec = importlib.util.spec_from_file_location("run_dev", Path(__file__).resolve().parents[3] / "deploy" / "run_dev.py")
    assert spec is not None
    assert spec.loader is not None
    run_dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_dev)
    consumed = {name: cmd[cmd.index("-Q") + 1] for name, cmd in run_dev.services().items() if "-Q" in cmd}
    # The cycles' worker takes no what-if and no estimate, so neither ever waits in front of a cycle.
    assert consumed == {"worker": "celery", "whatif": "whatif"}


def test_simulate_from_the_edit_page_shows_the_window_it_ran(client, platform_admin, contended):
    client.force_login(platform_admin)
    data = {"display_name": "", "priority": "100", "gpu_quota": "8", "gpu_limit": "-1", "gpu_over_quota_weight": "1",
            "cpu_quota": "-1", "cpu_limit": "-1", "cpu_over_quota_weight": "1", "memory_quota": "-1",
            "memory_limit": "-1", "memory_over_quota_weight": "1"}  # the edit form sends no window
    body = client.post(reverse("whatif:page") + "?queue=alpha", data).content.decode()
    selected = body[body.index('name="window_hours"'):body.index("</select>", body.index('name="window_hours"'))]
    assert 'value="24" selected' in selected or 'value="24.0" selected' in selected
    assert "window 24.0 h" in body or "window 24 h" in body


def test_the_page_shows_each_queues_waits_now_and_with_the_change(client, platform_admin, contended):
    client.force_login(platform_admin)
    data = {"display_name": "", "priority": "100", "gpu_quota": "8", "gpu_limit": "-1", "gpu_over_quota_weight": "1",
            "cpu_quota": "-1", "cpu_limit": "-1", "cpu_over_quota_weight": "1", "memory_quota": "-1",
            "memory_limit": "-1", "memory_over_quota_weight": "1", "window_hours": "24"}
    body = client.post(reverse("whatif:page") + "?queue=alpha", data).content.decode()
    table = body[body.index('id="whatif-waits-table"'):body.index("</table>", body.index('id="whatif-waits-table"'))]
    alpha = table[table.index('data-queue="alpha"'):table.index("</tr>", table.index('data-queue="alpha"'))]
    assert "edited" in alpha
    # alpha's waiting jobs start sooner with the whole node as quota: its p50 difference is "better".
    assert 'class="delta-up"' in alpha.split("</td>")[2] + alpha.split("</td>")[3]
    assert 'data-queue="beta"' in table
    assert "arrivals are not guessed" in body


def test_the_result_names_the_limit_that_binds_before_a_raised_gpu_figure(contended):
    result = whatif.run_whatif({"alpha": {"gpu_quota": 8, "cpu_quota": 0, "cpu_limit": 16000}}, now=NOW)
    assert ("alpha.gpu_quota → 8: alpha's CPU limit of 16 cores binds first: the recorded jobs ask 4.0 cores per "
            "GPU, so at most 4.0 GPUs of them fit") in result["notes"]
    free = whatif.run_whatif({"alpha": {"gpu_quota": 8}}, now=NOW)
    assert not any("binds first" in n or "caps it first" in n for n in free["notes"])


def test_the_form_names_the_unit_of_every_resource_row(client, viewer, contended):
    client.force_login(viewer)
    html = client.get(reverse("whatif:page") + "?queue=alpha").content.decode()
    for label in ("cpu (millicores)", "memory (MB)", "gpu (devices)"):
        assert f"<th>{label}</th>" in html
