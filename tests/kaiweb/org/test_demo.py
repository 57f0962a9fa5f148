"""The demo's org part: two node pools by GPU product, a department with two projects in both, scheduled."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from kaiweb.org.choices import NODE_POOL_LABEL
from kaiweb.org.models import Department, NodePool
from kaiweb.org.status import project_quota_status
from kaiweb.queues.models import Queue
from kaiweb.workloads.models import Pod

pytestmark = pytest.mark.django_db


def seed() -> str:
    out = StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


def test_the_demo_has_two_pools_and_a_department_with_two_projects_whose_work_runs_in_their_pool(settings):
    from kaiweb.scheduling.cycle import run_and_record_cycle

    settings.KAI_CLUSTER_BACKEND = "simulated"
    text = seed()
    assert "16 node(s) created" in text
    assert "node pool h100, node pool a100, department research, project vision, project nlp" in text
    pools = {p.name: p for p in NodePool.objects.select_related("shard")}
    assert set(pools) == {"default", "h100", "a100"}
    assert {p.name: p.phase for p in pools.values()} == {"default": "Ready", "h100": "Ready", "a100": "Ready"}
    department = Department.objects.get(name="research")
    assert sorted(department.projects.values_list("name", flat=True)) == ["nlp", "vision"]
    assert Queue.objects.get(name="vision-h100").parent.name == "research-h100"
    assert Queue.objects.get(name="nlp-a100").parent.name == "research-a100"
    for pool in pools.values():
        run_and_record_cycle(pool.shard, trigger="manual")
    placed = Pod.objects.filter(workload__queue__name="vision-h100", node__isnull=False).select_related("node")
    assert placed.exists()
    assert {p.node.labels[NODE_POOL_LABEL] for p in placed} == {"h100"}
    status = project_quota_status(department.projects.get(name="vision"))
    assert status["pools"]["h100"]["allocated"]["gpu"] == 6
    # seeding again changes nothing
    assert "nothing new; 0 project workload(s) submitted" in seed()
