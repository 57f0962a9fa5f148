"""Shared fixtures: personas (platform admin, queue admin, viewer), API clients and a queue tree.

Personas (all with password "pw"):
- ``platform_admin``: member of the ``platform-admins`` group — may change everything.
- ``queue_admin``: admin of ``department-a`` (and so of its subtree) in ``queue_tree`` — nothing else.
- ``viewer``: signed in, no role — reads everything, changes nothing.
Clients: ``api_client`` (anonymous DRF client), ``admin_api``, ``queue_admin_api``, ``viewer_api``
(DRF clients logged in as the persona, session auth, CSRF not enforced as in DRF's test client),
and ``admin_client`` from pytest-django for the HTML side.
``queue_tree``: the example tree of deploy/examples/queues.yaml as a dict name -> Queue.
"""

from __future__ import annotations

import os

import pytest
from django.contrib.auth.models import Group
from hypothesis import settings as hypothesis_settings
from rest_framework.test import APIClient

from kaiweb.accounts.roles import PLATFORM_ADMINS_GROUP
from tests.factories import QueueFactory, QueueMembershipFactory, UserFactory

# Property tests: random exploration on a developer's machine; in CI the same examples every run
# (HYPOTHESIS_PROFILE=ci), so a red build is reproducible and never depends on the draw.
hypothesis_settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
hypothesis_settings.register_profile("dev", deadline=None)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """Tests create many users; the production hasher is slow on purpose."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _installed_defaults(request):
    """A test in a transaction (``db``) starts with what a fresh install has: the rows the data migrations
    make (the `default` cluster and shard, KAI's priority classes, the platform-admins group). In one
    process pytest-django runs those tests before any transactional one, whose flush empties every
    table; `make test` runs two processes a file at a time (pytest-xdist), so a process may come to them
    after a flush: the rows are put back, inside the test's transaction, by the migrations' own code."""
    names = request.fixturenames
    if "transactional_db" in names or "live_server" in names:
        return
    marker = request.node.get_closest_marker("django_db")
    if marker is None and "db" not in names:
        return
    if marker is not None and (marker.kwargs.get("transaction") or (marker.args and marker.args[0])):
        return
    request.getfixturevalue("db")
    from django.apps import apps

    from kaiweb.cluster.models import Cluster

    if Cluster.objects.filter(name="default").exists():
        return
    import importlib

    for module, function in (("kaiweb.cluster.migrations.0002_default_cluster", "create_default"),
                             ("kaiweb.queues.migrations.0002_default_priority_classes", "create_defaults"),
                             ("kaiweb.accounts.migrations.0001_platform_admins_group", "create_group")):
        getattr(importlib.import_module(module), function)(apps, None)


@pytest.fixture(autouse=True)
def _fresh_cycle_memory():
    """Each test's database starts empty (and may reuse ids): the worker's per-shard memory of
    earlier cycles (engine memo, last recorded cycle) starts empty too."""
    from kaiweb.scheduling import cycle

    cycle._MEMOS.clear()
    cycle._RECORDED.clear()


@pytest.fixture(autouse=True)
def _invariants_after_every_kubernetes_cycle(request):
    """After every cycle on a Kubernetes cluster, in every test: the cycle succeeded, no pod was bound
    twice, and the API server's own objects break no invariant (`kaiweb.scheduling.invariants`).
    A test that makes a cycle fail on purpose says so with ``@pytest.mark.cycle_may_fail``."""
    from kaiweb.scheduling.invariants import after_cycle
    from kaiweb.scheduling.signals import cycle_step

    may_fail = request.node.get_closest_marker("cycle_may_fail") is not None
    found: list[str] = []

    def check(sender, point, cycle, **kwargs):
        if point != "finished" or cycle.shard is None or cycle.shard.cluster.backend != "kubernetes":
            return
        if may_fail and cycle.status != "succeeded":
            return
        found.extend(f"cycle {cycle.pk}: {v}" for v in after_cycle(cycle))

    cycle_step.connect(check, weak=False, dispatch_uid="tests-invariants")
    try:
        yield found
    finally:
        cycle_step.disconnect(dispatch_uid="tests-invariants")
    assert not found, "invariants broken after a cycle:\n" + "\n".join(found)


@pytest.fixture
def platform_admin(db):
    """A platform admin (member of platform-admins, not a superuser)."""
    user = UserFactory(username="platform-admin", is_staff=True)
    group, _ = Group.objects.get_or_create(name=PLATFORM_ADMINS_GROUP)
    user.groups.add(group)
    return user


@pytest.fixture
def queue_tree(db) -> dict:
    """department-a (team-inference, team-research-a) and department-b (team-training, team-research-b)."""
    dep_a = QueueFactory(name="department-a", gpu_quota=16, cpu_quota=128000)
    dep_b = QueueFactory(name="department-b", gpu_quota=16, cpu_quota=128000)
    tree = {"department-a": dep_a, "department-b": dep_b}
    for name, parent, priority in (
        ("team-inference", dep_a, 200),
        ("team-research-a", dep_a, 100),
        ("team-training", dep_b, 100),
        ("team-research-b", dep_b, 50),
    ):
        tree[name] = QueueFactory(
            name=name, parent=parent, priority=priority, gpu_quota=8, gpu_limit=16, cpu_quota=64000, cpu_limit=128000
        )
    return tree


@pytest.fixture
def queue_admin(db, queue_tree):
    """Admin of department-a's subtree (staff, so the Django admin lets them in)."""
    user = UserFactory(username="queue-admin", is_staff=True)
    QueueMembershipFactory(user=user, queue=queue_tree["department-a"], role="admin")
    return user


@pytest.fixture
def viewer(db):
    """A signed-in user with no role."""
    return UserFactory(username="viewer")


@pytest.fixture
def api_client() -> APIClient:
    """An anonymous API client."""
    return APIClient()


def _client_for(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def admin_api(platform_admin) -> APIClient:
    return _client_for(platform_admin)


@pytest.fixture
def queue_admin_api(queue_admin) -> APIClient:
    return _client_for(queue_admin)


@pytest.fixture
def viewer_api(viewer) -> APIClient:
    return _client_for(viewer)


@pytest.fixture(autouse=True, scope="session")
def _tasks_run_inline():
    """Tasks that views send (a what-if) run inline in the test process; the real-worker tests in
    tests/celery and tests/fault send theirs by name to a real worker (send_task ignores this)."""
    from kaiweb.celery import app

    before = {k: app.conf.get(k) for k in ("task_always_eager", "task_eager_propagates")}
    app.conf.update(task_always_eager=True, task_eager_propagates=True)
    yield
    app.conf.update(before)
