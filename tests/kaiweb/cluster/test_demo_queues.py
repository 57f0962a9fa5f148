"""The demo's queues come from deploy/examples/queues.yaml through the one Queue CRD reader."""

from __future__ import annotations

import pytest

from kaiweb.cluster.demo import import_demo_queues
from kaiweb.queues.models import Queue
from kaiweb.queues.services import create_queue

pytestmark = pytest.mark.django_db


def test_the_demo_adds_the_missing_queues_under_parents_that_exist_and_leaves_existing_ones_alone():
    create_queue({"name": "department-a", "priority": 100, "gpu_quota": 3})
    created = import_demo_queues()
    names = set(Queue.objects.values_list("name", flat=True))
    assert {"department-a", "department-b", "team-research-a", "team-inference"} <= names
    assert created == len(names) - 1
    assert Queue.objects.get(name="department-a").gpu_quota == 3  # not overwritten
    assert Queue.objects.get(name="team-research-a").parent.name == "department-a"
    assert import_demo_queues() == 0
