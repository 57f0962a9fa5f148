"""Queue pages: the tree, one queue with its fair-share arithmetic, and editing per role with a preview."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from kaiweb.audit.models import AuditEntry
from kaiweb.queues.models import Queue
from kaiweb.scheduling.models import QueueStatus
from tests.sample_data import build_dataset, query_counts_before_and_after_more_data


@pytest.fixture
def ui_data(queue_tree):
    return build_dataset(nodes=8, workloads=40, cycles=6, seed=5)


def _edit_data(queue: Queue, **changes) -> dict:
    """The edit form's POST data for `queue` as it is, with `changes` applied."""
    data = {
        "display_name": queue.display_name, "parent": queue.parent_id or "", "priority": queue.priority,
        "preempt_min_runtime": "", "reclaim_min_runtime": "",
    }
    for r in ("cpu", "memory", "gpu"):
        for part in ("quota", "limit", "over_quota_weight"):
            data[f"{r}_{part}"] = getattr(queue, f"{r}_{part}")
    data.update(changes)
    return data


# ------------------------------------------------------------------------------------------ tree


def test_tree_lists_every_queue_in_hierarchy_order_with_depth(client, viewer, ui_data):
    client.force_login(viewer)
    html = client.get("/queues/").content.decode()
    order = [html.index(f'id="q-{name}"') for name in ("department-a", "team-inference", "team-research-a",
                                                       "department-b", "team-nlp", "team-research-b")]
    assert order == sorted(order)
    assert 'data-path="/department-a/team-inference/"' in html
    assert 'data-depth="1"' in html


def test_tree_badges_a_queue_allocated_above_its_fair_share(client, viewer, queue_tree):
    q = queue_tree["team-training"]
    QueueStatus.objects.create(queue=q, recorded_at=timezone.now(), allocated={"gpu": 12, "cpu": 0, "memory": 0},
                               fair_share={"gpu": 8, "cpu": 0, "memory": 0}, requested={"gpu": 14})
    QueueStatus.objects.create(queue=queue_tree["team-nlp"] if "team-nlp" in queue_tree else queue_tree["team-research-b"],
                               recorded_at=timezone.now(), allocated={"gpu": 2}, fair_share={"gpu": 8})
    client.force_login(viewer)
    html = client.get("/queues/").content.decode()
    row_training = html[html.index('id="q-team-training"'):]
    row_training = row_training[:row_training.index("</tr>")]
    assert "over fair share" in row_training
    row_b = html[html.index('id="q-team-research-b"'):]
    row_b = row_b[:row_b.index("</tr>")]
    assert "over fair share" not in row_b
    assert "12 / 8 fair" in row_training


def test_kubectl_table_view_has_the_crd_columns(client, viewer, queue_tree):
    client.force_login(viewer)
    html = client.get("/queues/?view=table").content.decode()
    for column in ("NAME", "PRIORITY", "PARENT", "CHILDREN"):
        assert f"<th>{column}</th>" in html
    row = html[html.index(">team-inference</a>"):]
    row = row[:row.index("</tr>")]
    assert "<td>200</td>" in row
    assert "<td>department-a</td>" in row


def test_tree_htmx_refresh_returns_the_table_only(client, viewer, queue_tree):
    client.force_login(viewer)
    html = client.get("/queues/", headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in html
    assert 'id="queue-tree"' in html


def test_edit_buttons_follow_the_role(client, viewer, queue_admin, platform_admin, queue_tree):
    client.force_login(viewer)
    assert "/edit/" not in client.get("/queues/").content.decode()
    client.force_login(queue_admin)
    html = client.get("/queues/").content.decode()
    assert "/queues/team-inference/edit/" in html
    assert "/queues/department-a/edit/" in html
    assert "/queues/team-training/edit/" not in html
    client.force_login(platform_admin)
    html = client.get("/queues/").content.decode()
    assert "/queues/team-training/edit/" in html
    assert "/queues/department-b/edit/" in html


def test_tree_query_count_does_not_grow_with_the_data(client, viewer, ui_data, django_assert_max_num_queries):
    client.force_login(viewer)
    small, large = query_counts_before_and_after_more_data(client, "/queues/", nodes=16, workloads=120, cycles=10, seed=6, extra_departments=3)
    assert large == small
    with django_assert_max_num_queries(10):
        client.get("/queues/")


# ------------------------------------------------------------------------------------------ detail


def test_detail_shows_settings_figures_and_the_division_with_numbers(client, viewer, ui_data):
    client.force_login(viewer)
    response = client.get("/queues/team-training/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="queue-settings"' in html
    assert 'id="division-steps"' in html
    # team-training has a GPU quota of 32 and requests more: the deserved step grants the quota.
    steps = html[html.index('id="division-steps"'):]
    steps = steps[:steps.index("</table>")]
    assert "deserved" in steps
    assert ">32<" in steps
    assert 'id="division-siblings"' in html
    # The time-based arithmetic: window, half-life and k of the shard, and one row per queue of the bucket.
    assert "half-life = 4 h" in html
    assert "k = 1.0" in html
    weights = html[html.index('id="usage-weights"'):]
    assert "team-training" in weights[:weights.index("</table>")]
    assert 'data-figure="share-chart"' in html


def test_detail_lists_preemptions_as_preemptor_and_as_victim(client, viewer, ui_data):
    from kaiweb.scheduling.models import PreemptionEvent

    event = PreemptionEvent.objects.exclude(preemptor_queue=None).first()
    client.force_login(viewer)
    html = client.get(f"/queues/{event.victim_queue.name}/").content.decode()
    victim_part = html[html.index("As victim"):]
    assert event.victim_ref in victim_part
    html = client.get(f"/queues/{event.preemptor_queue.name}/").content.decode()
    preemptor_part = html[html.index("As preemptor"):html.index("As victim")]
    assert event.victim_ref in preemptor_part


def test_detail_query_budget(client, viewer, ui_data, django_assert_max_num_queries):
    client.force_login(viewer)
    client.get("/queues/team-training/")
    with django_assert_max_num_queries(40):
        client.get("/queues/team-training/")


def test_detail_of_an_unknown_queue_is_404(client, viewer, db):
    client.force_login(viewer)
    assert client.get("/queues/nope/").status_code == 404


def test_detail_renders_without_any_cycle_or_usage(client, viewer, queue_tree):
    client.force_login(viewer)
    html = client.get("/queues/team-inference/").content.decode()
    assert "no cycle has recorded this queue yet" in html


# ------------------------------------------------------------------------------------------ edit


def test_viewer_cannot_open_or_post_the_edit_form(client, viewer, queue_tree):
    client.force_login(viewer)
    assert client.get("/queues/team-inference/edit/").status_code == 403
    q = queue_tree["team-inference"]
    response = client.post("/queues/team-inference/edit/", _edit_data(q, gpu_quota=2))
    assert response.status_code == 403
    assert Queue.objects.get(pk=q.pk).gpu_quota == 8


def test_queue_admin_edits_only_their_subtree(client, queue_admin, queue_tree):
    client.force_login(queue_admin)
    assert client.get("/queues/team-inference/edit/").status_code == 200
    other = queue_tree["team-training"]
    assert client.get("/queues/team-training/edit/").status_code == 403
    assert client.post("/queues/team-training/edit/", _edit_data(other, gpu_quota=1)).status_code == 403
    assert Queue.objects.get(pk=other.pk).gpu_quota == 8


def test_queue_admin_cannot_move_a_queue_out_of_their_subtree(client, queue_admin, queue_tree):
    client.force_login(queue_admin)
    q = queue_tree["team-inference"]
    response = client.post("/queues/team-inference/edit/", _edit_data(q, parent=queue_tree["department-b"].pk))
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert Queue.objects.get(pk=q.pk).parent_id == queue_tree["department-a"].pk


def test_platform_admin_saves_a_change_with_an_audit_entry(client, platform_admin, queue_tree):
    client.force_login(platform_admin)
    q = queue_tree["team-training"]
    response = client.post("/queues/team-training/edit/", _edit_data(q, gpu_quota=12, gpu_over_quota_weight=3))
    assert response.status_code == 302
    assert response["Location"] == "/queues/team-training/"
    q.refresh_from_db()
    assert (q.gpu_quota, q.gpu_over_quota_weight) == (12, 3)
    entry = AuditEntry.objects.filter(object_type="queues.queue", object_id=str(q.pk)).latest("at")
    assert entry.source == "ui"
    assert entry.actor_name == "platform-admin"
    follow = client.get(response["Location"]).content.decode()
    assert "saved" in follow


def test_bad_input_shows_the_error_next_to_the_field_and_saves_nothing(client, platform_admin, queue_tree):
    client.force_login(platform_admin)
    q = queue_tree["team-training"]
    response = client.post("/queues/team-training/edit/", _edit_data(q, gpu_quota=10, gpu_limit=4))
    assert response.status_code == 200
    html = response.content.decode()
    error = html[html.index('id="id_gpu_limit-errors"'):]
    error = error[:error.index("</ul>")]
    assert "limit 4 is below the quota 10" in error
    assert Queue.objects.get(pk=q.pk).gpu_limit == 16


def test_negative_weight_is_refused_with_the_rule(client, platform_admin, queue_tree):
    client.force_login(platform_admin)
    q = queue_tree["team-training"]
    html = client.post("/queues/team-training/edit/", _edit_data(q, cpu_over_quota_weight=-2)).content.decode()
    error = html[html.index('id="id_cpu_over_quota_weight-errors"'):]
    assert "must not be negative" in error[:error.index("</ul>")]


def test_a_cycle_in_the_tree_is_refused_on_the_parent_field(client, platform_admin, queue_tree):
    client.force_login(platform_admin)
    dep = queue_tree["department-a"]
    html = client.post("/queues/department-a/edit/", _edit_data(dep, parent=queue_tree["team-inference"].pk)).content.decode()
    error = html[html.index('id="id_parent-errors"'):]
    assert "cycle" in error[:error.index("</ul>")]
    assert Queue.objects.get(pk=dep.pk).parent_id is None


def test_preview_shows_every_queue_before_and_after_without_saving(client, platform_admin, ui_data):
    # team-research-a asks for far more than its quota, so a bigger quota raises its fair share.
    q = Queue.objects.get(name="team-research-a")
    QueueStatus.objects.create(queue=q, recorded_at=timezone.now(), requested={"gpu": 200, "cpu": 0, "memory": 0})
    client.force_login(platform_admin)
    response = client.post("/queues/team-research-a/edit/preview/", _edit_data(q, gpu_quota=40),
                           headers={"HX-Request": "true"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html
    table = html[html.index('id="preview-table"'):]
    table = table[:table.index("</table>")]
    for name in ("department-a", "department-b", "team-inference", "team-research-a", "team-training"):
        assert f'data-queue="{name}"' in table
    start = table.index('data-queue="team-research-a"')
    assert "changed" in table[table.rindex("<tr", 0, start):start]
    row = table[start:]
    row = row[:row.index("</tr>")]
    before, after = (float(x) for x in re.findall(r'<td class="num">(?:<strong>)?([\d.]+)', row)[:2])
    assert after > before >= 24
    assert "delta-up" in row
    assert Queue.objects.get(pk=q.pk).gpu_quota == 24


def test_preview_with_bad_input_shows_the_field_error_instead(client, platform_admin, queue_tree):
    client.force_login(platform_admin)
    q = queue_tree["team-training"]
    html = client.post("/queues/team-training/edit/preview/", _edit_data(q, gpu_quota=10, gpu_limit=4),
                       headers={"HX-Request": "true"}).content.decode()
    assert 'id="id_gpu_limit-errors"' in html
    assert 'id="preview-table"' not in html


def test_preview_is_refused_to_a_viewer(client, viewer, queue_tree):
    client.force_login(viewer)
    q = queue_tree["team-training"]
    assert client.post("/queues/team-training/edit/preview/", _edit_data(q)).status_code == 403


def test_edit_form_and_preview_query_budgets(client, platform_admin, ui_data, django_assert_max_num_queries):
    q = Queue.objects.get(name="team-training")
    client.force_login(platform_admin)
    client.get("/queues/team-training/edit/")
    with django_assert_max_num_queries(10):
        client.get("/queues/team-training/edit/")
    # Two divisions (now and with the change) and the model's check constraints: a fixed number.
    with django_assert_max_num_queries(50):
        client.post("/queues/team-training/edit/preview/", _edit_data(q, gpu_quota=20), headers={"HX-Request": "true"})


# ------------------------------------------------------------------------------------------ create


def _new_queue(name: str, parent: Queue | None, **changes) -> dict:
    data = {"name": name, "display_name": "", "parent": parent.pk if parent else "", "priority": 100,
            "preempt_min_runtime": "", "reclaim_min_runtime": "",
            "cpu_quota": 0, "cpu_limit": -1, "cpu_over_quota_weight": 1, "memory_quota": 0, "memory_limit": -1,
            "memory_over_quota_weight": 1, "gpu_quota": 2, "gpu_limit": -1, "gpu_over_quota_weight": 1}
    data.update(changes)
    return data


def test_viewer_cannot_add_queues(client, viewer, queue_tree):
    client.force_login(viewer)
    assert client.get("/queues/-/add/").status_code == 403
    assert client.post("/queues/-/add/", _new_queue("sneaky", None)).status_code == 403
    assert not Queue.objects.filter(name="sneaky").exists()


def test_queue_admin_adds_a_queue_under_their_subtree_only(client, queue_admin, queue_tree):
    client.force_login(queue_admin)
    response = client.post("/queues/-/add/", _new_queue("team-new", queue_tree["team-research-a"]))
    assert response.status_code == 302
    assert Queue.objects.get(name="team-new").parent.name == "team-research-a"
    html = client.post("/queues/-/add/", _new_queue("elsewhere", queue_tree["department-b"])).content.decode()
    assert 'id="id_parent-errors"' in html
    html = client.post("/queues/-/add/", _new_queue("top", None)).content.decode()
    assert 'id="id_parent-errors"' in html
    assert not Queue.objects.filter(name__in=["elsewhere", "top"]).exists()


def test_platform_admin_adds_a_top_level_queue_with_an_audit_entry(client, platform_admin, queue_tree):
    client.force_login(platform_admin)
    response = client.post("/queues/-/add/", _new_queue("department-c", None, gpu_quota=8))
    assert response.status_code == 302
    q = Queue.objects.get(name="department-c")
    assert q.parent is None
    assert AuditEntry.objects.filter(object_type="queues.queue", object_id=str(q.pk), action="create",
                                     source="ui").exists()


def test_add_queue_errors_are_next_to_the_field(client, platform_admin, queue_tree):
    client.force_login(platform_admin)
    html = client.post("/queues/-/add/", _new_queue("Bad_Name", None)).content.decode()
    assert 'id="id_name-errors"' in html
    assert "Kubernetes name" in html
    html = client.post("/queues/-/add/", _new_queue("team-training", None)).content.decode()
    assert 'id="id_name-errors"' in html
    html = client.post("/queues/-/add/", _new_queue("capped", None, gpu_quota=4, gpu_limit=2)).content.decode()
    assert "below the quota" in html[html.index('id="id_gpu_limit-errors"'):]
    assert not Queue.objects.filter(name__in=["Bad_Name", "capped"]).exists()


def test_a_queue_with_workloads_cannot_get_a_child(client, platform_admin, ui_data):
    client.force_login(platform_admin)
    parent = Queue.objects.get(name="team-training")
    html = client.post("/queues/-/add/", _new_queue("sub-team", parent)).content.decode()
    error = html[html.index('id="id_parent-errors"'):]
    assert "only leaf queues hold workloads" in error[:error.index("</ul>")]
    assert not Queue.objects.filter(name="sub-team").exists()


def test_a_parent_page_says_what_its_children_receive_and_where_the_rest_went():
    from types import SimpleNamespace as NS

    from kaiweb.queues.views import _children_division

    def q(name, parent, fair, request, limit):
        return NS(name=name, parent=parent, fair=[0, 0, fair], request=[0, 0, request], limit=[-1, -1, limit])

    dept = q("department-a", None, 47.5, 80, -1)
    division = NS(queues={"department-a": dept, "team-x": q("team-x", "department-a", 16, 40, 16),
                          "team-y": q("team-y", "department-a", 16, 40, 16),
                          "team-z": q("team-z", "department-a", 4, 4, -1),
                          "other": q("other", None, 10, 10, -1)})
    out = _children_division(division, dept, 2, 1.0)
    assert [r["name"] for r in out["children"]] == ["team-x", "team-y", "team-z"]
    assert [r["why"] for r in out["children"]] == ["at its limit", "at its limit", "gets all it requests"]
    assert out["given"] == 36
    assert out["leftover"] == pytest.approx(11.5)
    assert _children_division(division, division.queues["team-x"], 2, 1.0) is None


def test_detail_of_a_parent_shows_the_children_division(client, viewer, ui_data):
    client.force_login(viewer)
    html = client.get("/queues/department-b/").content.decode()
    section = html[html.index('id="children-division"'):]
    table = section[section.index('id="children-division-table"'):section.index("</table>")]
    for child in Queue.objects.get(name="department-b").children.values_list("name", flat=True):
        assert f">{child}</a>" in table
    leaf = client.get("/queues/team-training/").content.decode()
    assert 'id="children-division"' not in leaf


def test_preview_warns_as_the_save_will_when_children_quotas_exceed_the_parent(client, platform_admin, queue_tree):
    from kaiweb.queues.services import quota_warnings

    q = queue_tree["team-training"]
    siblings = sum(c.gpu_quota for c in Queue.objects.filter(parent=q.parent).exclude(pk=q.pk))
    raised = q.parent.gpu_quota - siblings + 4  # the children now sum to the parent's quota + 4
    client.force_login(platform_admin)
    html = client.post("/queues/team-training/edit/preview/", _edit_data(q, gpu_quota=raised),
                       headers={"HX-Request": "true"}).content.decode()
    expected = (f"the children of department-b have gpu quotas summing to {q.parent.gpu_quota + 4:g}, above "
                f"department-b&#x27;s gpu quota {q.parent.gpu_quota:g}")
    assert expected in html
    assert Queue.objects.get(pk=q.pk).gpu_quota == q.gpu_quota  # nothing saved
    assert quota_warnings(Queue.objects.get(pk=q.pk)) == []  # and the stored tree is still within
    within = client.post("/queues/team-training/edit/preview/", _edit_data(q, gpu_quota=q.gpu_quota),
                         headers={"HX-Request": "true"}).content.decode()
    assert "summing to" not in within
