"""Namespace bindings in a real browser: a platform admin binds a namespace to a leaf queue from the
main navigation and sees it listed; a name that is not a namespace's is refused with the rule; a
viewer sees no form."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e


def test_a_platform_admin_binds_a_namespace_and_a_bad_name_is_refused(page, live_server, queue_tree,
                                                                      platform_admin, login, shot):
    from kaiweb.admission.models import NamespaceQueueBinding

    login(page, platform_admin)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Bindings").click()
    expect(page.locator("h1")).to_have_text("Namespace bindings")
    shot(page, "empty")

    leaf = sorted(q.name for q in queue_tree.values() if not q.children.exists())[0]
    page.fill("#id_namespace", "team-research")
    page.select_option("#id_queue", value=leaf)
    page.click("#bind")
    expect(page.locator("#binding-table tr[data-namespace='team-research']")).to_contain_text(leaf)
    shot(page, "bound")
    assert list(NamespaceQueueBinding.objects.values_list("namespace", "queue__name")) == [("team-research", leaf)]

    page.fill("#id_namespace", "Team Research")
    page.select_option("#id_queue", value=leaf)
    page.click("#bind")
    expect(page.locator("#binding-form .errorlist")).to_be_visible()
    shot(page, "bad-name-refused")
    assert NamespaceQueueBinding.objects.count() == 1


def test_a_viewer_sees_the_bindings_without_the_form(page, live_server, queue_tree, viewer, login, shot):
    login(page, viewer)
    page.goto(live_server.url + "/admission/bindings/")
    expect(page.locator("h1")).to_have_text("Namespace bindings")
    expect(page.locator("#binding-form")).to_have_count(0)
    shot(page, "viewer")
