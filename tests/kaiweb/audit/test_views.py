"""The audit log page: changes made through the web UI show who, what, before and after."""

from __future__ import annotations


def test_a_ui_edit_appears_with_its_change(client, platform_admin, queue_tree):
    q = queue_tree["team-training"]
    client.force_login(platform_admin)
    data = {"display_name": "", "parent": q.parent_id, "priority": 150, "preempt_min_runtime": "",
            "reclaim_min_runtime": ""}
    for r in ("cpu", "memory", "gpu"):
        for part in ("quota", "limit", "over_quota_weight"):
            data[f"{r}_{part}"] = getattr(q, f"{r}_{part}")
    assert client.post("/queues/team-training/edit/", data).status_code == 302
    html = client.get("/audit/?source=ui").content.decode()
    table = html[html.index('id="audit-table"'):]
    assert "team-training" in table
    assert "platform-admin" in table
    assert 'priority: <span class="delta-down">100</span> → <span class="delta-up">150</span>' in table


def test_audit_page_before_any_change_says_what_will_appear(client, viewer, db):
    client.force_login(viewer)
    assert "No changes recorded yet" in client.get("/audit/").content.decode()


def test_audit_filters_by_action(client, platform_admin, viewer, queue_tree):
    from kaiweb.queues import services

    services.update_queue(queue_tree["team-training"], {"priority": 120}, actor=platform_admin)
    client.force_login(viewer)
    assert "No change matches these filters" in client.get("/audit/?action=delete").content.decode()
    html = client.get("/audit/?action=update").content.decode()
    assert "team-training" in html[html.index('id="audit-table"'):]


def test_audit_query_budget(client, platform_admin, viewer, queue_tree, django_assert_max_num_queries):
    from kaiweb.queues import services

    for priority in range(101, 131):
        services.update_queue(queue_tree["team-training"], {"priority": priority}, actor=platform_admin)
    client.force_login(viewer)
    client.get("/audit/")
    with django_assert_max_num_queries(8):
        client.get("/audit/")


def test_the_log_reads_old_to_new_in_units_and_names(client, platform_admin, viewer, queue_tree):
    from kaiweb.queues import services

    q = queue_tree["team-training"]
    services.update_queue(q, {"gpu_quota": 12, "cpu_limit": -1, "parent": "department-a",
                              "reclaim_min_runtime": "00:10:00"}, actor=platform_admin)
    client.force_login(viewer)
    html = client.get("/audit/?action=update").content.decode()
    table = html[html.index('id="audit-table"'):html.index("</table>")]
    assert 'GPU quota: <span class="delta-down">8 GPUs</span> → <span class="delta-up">12 GPUs</span>' in table
    assert 'CPU limit: <span class="delta-down">128 cores</span> → <span class="delta-up">unlimited</span>' in table
    assert 'parent: <span class="delta-down">department-b</span> → <span class="delta-up">department-a</span>' in table
    assert 'reclaim min runtime: <span class="delta-down">inherit</span> → <span class="delta-up">10 m</span>' in table
    assert "parent_id" not in table
    assert "-1.0" not in table


def test_a_creation_lists_what_was_set_without_empty_fields(client, platform_admin, viewer, queue_tree):
    from kaiweb.queues import services

    services.create_queue({"name": "team-new", "parent": "department-a", "gpu_quota": 2}, actor=platform_admin)
    client.force_login(viewer)
    html = client.get("/audit/?action=create").content.decode()
    row = html[html.index("team-new"):]
    row = row[:row.index("</tr>")]
    assert 'GPU quota: <span class="delta-up">2 GPUs</span>' in row
    assert 'parent: <span class="delta-up">department-a</span>' in row
    assert "labels" not in row  # empty on creation: not listed
    assert "→" not in row
