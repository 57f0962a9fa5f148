"""The overview page and what every page shares: login, navigation, htmx partials, error pages."""

from __future__ import annotations

import pytest

from tests.sample_data import build_dataset, query_counts_before_and_after_more_data

PAGES = ["/", "/queues/", "/queues/?view=table", "/workloads/", "/nodes/", "/preemptions/", "/cycles/", "/usage/",
         "/audit/"]


@pytest.fixture
def ui_data(queue_tree):
    return build_dataset(nodes=8, workloads=40, cycles=8, seed=3)


def test_pages_need_a_login(client, db):
    for path in PAGES:
        response = client.get(path)
        assert response.status_code == 302, path
        assert response["Location"].startswith("/accounts/login/"), path


def test_login_page_renders_and_signs_in(client, viewer):
    page = client.get("/accounts/login/")
    assert b"Sign in to kaiweb" in page.content
    response = client.post("/accounts/login/", {"username": "viewer", "password": "pw"})
    assert response.status_code == 302
    assert response["Location"] == "/"


def test_bad_password_says_so_on_the_login_page(client, viewer):
    response = client.post("/accounts/login/", {"username": "viewer", "password": "nope"})
    assert response.status_code == 200
    assert b"form-error" in response.content


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders_on_an_empty_database_with_next_steps(client, viewer, path):
    client.force_login(viewer)
    response = client.get(path)
    assert response.status_code == 200
    html = response.content.decode()
    # The navigation is on every page and the viewer's role is shown.
    assert 'class="mainnav"' in html
    assert "viewer" in html
    # Empty states tell the user what to do next rather than showing an empty table.
    assert 'class="empty"' in html


def test_overview_shows_capacity_allocation_cycles_and_preemptions(client, viewer, ui_data):
    client.force_login(viewer)
    html = client.get("/").content.decode()
    # 8 nodes x 8 GPUs, of which the not-ready ones do not count (node 37 would be, not here).
    assert "/ 64</small>" in html
    assert 'data-figure="allocation-chart"' in html
    assert 'id="allocation-chart"' in html  # the plotly JSON for charts.js
    assert "Last cycles" in html
    assert "/cycles/" in html
    assert "Recent preemptions" in html
    assert "department-a" in html


def test_overview_htmx_refresh_returns_only_the_panels(client, viewer, ui_data):
    client.force_login(viewer)
    response = client.get("/", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert "<html" not in html
    assert 'class="stats"' in html


def test_overview_query_count_does_not_grow_with_the_data(client, viewer, ui_data, django_assert_max_num_queries):
    client.force_login(viewer)
    small, large = query_counts_before_and_after_more_data(client, "/", nodes=24, workloads=160, cycles=20, seed=4)
    assert large == small
    with django_assert_max_num_queries(17):
        client.get("/")


def test_unknown_address_is_a_page_not_a_traceback(client, viewer, settings):
    settings.DEBUG = False
    client.force_login(viewer)
    response = client.get("/queues/no-such-queue/")
    assert response.status_code == 404
    assert b"Not found" in response.content
    assert b"mainnav" in response.content


def test_static_assets_are_served_locally(client, viewer):
    """plotly comes from the installed package, htmx from django-htmx: no CDN."""
    client.force_login(viewer)
    html = client.get("/").content.decode()
    assert "/static/vendor/plotly/plotly.min.js" in html
    assert "/static/django-htmx/" in html or "htmx" in html
    assert "cdn" not in html.lower()
    assert "<script>" not in html  # no inline scripts


def test_overview_groups_a_gangs_evictions_into_one_line(client, viewer, ui_data):
    from kaiweb.scheduling.models import PreemptionEvent

    event = PreemptionEvent.objects.order_by("-at", "-id").first()
    for _ in range(3):  # three more pods of the same victim, same cycle, same preemptor
        PreemptionEvent.objects.create(cycle=event.cycle, at=event.at, action=event.action, victim_ref=event.victim_ref,
                                       preemptor_ref=event.preemptor_ref, reason=event.reason)
    client.force_login(viewer)
    html = client.get("/").content.decode()
    panel = html[html.index("Recent preemptions"):html.index("Last cycles")]
    assert panel.count(f">{event.victim_ref}</a>") == 1
    assert "× 4 pods" in panel


def test_pod_suffix_strips_the_workload_name():
    from kaiweb.ui.templatetags.ui import pod_suffix

    assert pod_suffix("train-7-2", "ns/train-7") == "-2"
    assert pod_suffix("other-0", "ns/train-7") == "other-0"
    assert pod_suffix("", "ns/x") == ""


def test_panels_poll_only_while_the_tab_is_visible(client, viewer, ui_data):
    client.force_login(viewer)
    for path in ("/", "/queues/", "/workloads/", "/nodes/", "/preemptions/", "/cycles/"):
        html = client.get(path).content.decode()
        assert "hx-trigger=\"every 15s [document.visibilityState=='visible']\"" in html, path


def test_a_failing_page_is_an_error_page_not_a_traceback(client, viewer, db, settings, monkeypatch):
    from kaiweb.ui import queries

    def broken(*args: object) -> None:
        raise RuntimeError("database went away")

    monkeypatch.setattr(queries, "cluster_totals", broken)
    settings.DEBUG = False
    client.raise_request_exception = False
    client.force_login(viewer)
    response = client.get("/")
    assert response.status_code == 500
    assert b"Something went wrong" in response.content
    assert b"database went away" not in response.content
    assert b"Traceback" not in response.content


def test_ages_read_like_kubectl():
    from datetime import timedelta

    from django.utils import timezone

    from kaiweb.ui.templatetags.ui import k8s_age

    now = timezone.now()
    assert k8s_age(now - timedelta(seconds=42)) in ("42s", "43s")
    assert k8s_age(now - timedelta(minutes=5, seconds=3)) == "5m"
    assert k8s_age(now - timedelta(hours=3, minutes=59)) == "3h"
    assert k8s_age(now - timedelta(days=12)) == "12d"


def test_overview_names_the_cluster_objects_the_scheduler_skips(client, viewer):
    from django.utils import timezone

    from kaiweb.cluster.models import Cluster, UnreadableObject

    now = timezone.now()
    UnreadableObject.objects.create(
        cluster=Cluster.objects.get(name="default"), kind="Pod", namespace="ml", name="bad",
        field="metadata.annotations[gpu-fraction]", rule="must be a number in (0, 1]", message="bad fraction",
        first_seen=now, last_seen=now,
    )
    client.force_login(viewer)
    page = client.get("/").content.decode()
    assert "Cluster objects the scheduler skips" in page
    assert "ml/bad" in page
    assert "metadata.annotations[gpu-fraction]" in page


def test_ago_says_just_now_under_a_minute_instead_of_zero_minutes():
    from datetime import UTC, datetime, timedelta

    from kaiweb.ui.templatetags.ui import ago

    now = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    assert ago(now - timedelta(seconds=20), now) == "just now"
    assert ago(now - timedelta(minutes=5, seconds=10), now) == "5\xa0minutes ago"
    assert ago(now - timedelta(hours=2, minutes=3), now) == "2\xa0hours, 3\xa0minutes ago"
    assert ago(None, now) == "never"


def test_overview_figures_are_the_latest_cycles_and_read_no_workload(client, viewer, queue_tree):
    """The tree's workload counts and the allocated totals come from the latest recorded status of
    each queue (the cycle counted them); the page reads no workload or pod, however many there are."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.factories import QueueStatusFactory, SchedulingCycleFactory, WorkloadFactory

    cycle = SchedulingCycleFactory()
    roots = [q for q in queue_tree.values() if q.parent_id is None]
    for i, root in enumerate(roots):
        QueueStatusFactory(queue=root, cycle=cycle, allocated={"cpu": 1000, "memory": 2000, "gpu": 3 + i},
                           pending_workloads=7, running_workloads=2)
    WorkloadFactory.create_batch(3, queue=queue_tree["team-training"])  # after the cycle: not counted yet
    client.force_login(viewer)

    with CaptureQueriesContext(connection) as ctx:
        response = client.get("/")

    totals = response.context["totals"]
    assert totals.gpu_allocated == sum(3 + i for i in range(len(roots)))
    assert totals.cpu_allocated == 1000 * len(roots)
    assert totals.memory_allocated == 2000 * 10**6 * len(roots)  # the status's MB, in bytes
    assert response.context["pending_total"] == 7 * len(roots)
    assert response.context["running_total"] == 2 * len(roots)
    touched = [q["sql"] for q in ctx.captured_queries if '"workloads_workload"' in q["sql"] or '"workloads_pod"' in q["sql"]]
    assert touched == []
