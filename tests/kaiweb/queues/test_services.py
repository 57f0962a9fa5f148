"""The queue tree's rules, each with the error a user sees, and nothing half-written."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from kaiweb.audit.models import AuditEntry
from kaiweb.core.services import error_dict
from kaiweb.queues import services
from kaiweb.queues.models import PriorityClass, Queue
from tests.factories import PriorityClassFactory, WorkloadFactory

pytestmark = pytest.mark.django_db


def errors_of(excinfo: pytest.ExceptionInfo[ValidationError]) -> dict[str, list[str]]:
    return error_dict(excinfo.value)


def test_create_queue_records_audit_entry_with_after_values(platform_admin):
    change = services.create_queue({"name": "research", "gpu_quota": 4, "gpu_limit": 8}, actor=platform_admin)
    assert change.obj.pk is not None
    assert change.warnings == []
    entry = AuditEntry.objects.get(object_type="queues.queue", object_id=str(change.obj.pk))
    assert entry.action == "create"
    assert entry.actor == platform_admin
    assert entry.actor_name == "platform-admin"
    assert entry.before is None
    assert entry.after["gpu_quota"] == 4


def test_parent_given_by_name_must_exist():
    with pytest.raises(ValidationError) as exc:
        services.create_queue({"name": "orphan", "parent": "no-such-queue"})
    assert errors_of(exc) == {"parent": ["queue 'no-such-queue' does not exist; create the parent first"]}
    assert not Queue.objects.filter(name="orphan").exists()


def test_moving_a_queue_under_its_own_descendant_is_a_cycle(queue_tree):
    with pytest.raises(ValidationError) as exc:
        services.update_queue(queue_tree["department-a"], {"parent": "team-inference"})
    message = errors_of(exc)["parent"][0]
    assert "makes a cycle in the tree" in message
    assert "department-a → team-inference → department-a" in message
    queue_tree["department-a"].refresh_from_db()
    assert queue_tree["department-a"].parent is None


def test_a_queue_cannot_be_its_own_parent(queue_tree):
    with pytest.raises(ValidationError) as exc:
        services.update_queue(queue_tree["department-b"], {"parent": queue_tree["department-b"]})
    assert "parent" in errors_of(exc)


@pytest.mark.parametrize("resource", ["cpu", "memory", "gpu"])
def test_limit_below_quota_is_rejected_naming_the_field(resource):
    with pytest.raises(ValidationError) as exc:
        services.create_queue({"name": "q", f"{resource}_quota": 10, f"{resource}_limit": 5})
    assert errors_of(exc) == {
        f"{resource}_limit": ["limit 5 is below the quota 10; a limit must be -1 or ≥ the quota"]
    }
    assert Queue.objects.count() == 0


def test_unlimited_limit_and_equal_limit_are_accepted():
    services.create_queue({"name": "a", "gpu_quota": 10, "gpu_limit": -1})
    services.create_queue({"name": "b", "gpu_quota": 10, "gpu_limit": 10})
    services.create_queue({"name": "c", "gpu_quota": -1, "gpu_limit": -1})
    assert Queue.objects.count() == 3


def test_finite_limit_under_unlimited_quota_is_rejected():
    with pytest.raises(ValidationError) as exc:
        services.create_queue({"name": "q", "gpu_quota": -1, "gpu_limit": 4})
    assert "below the quota (unlimited)" in errors_of(exc)["gpu_limit"][0]


def test_amount_below_minus_one_is_rejected():
    with pytest.raises(ValidationError) as exc:
        services.create_queue({"name": "q", "cpu_quota": -5})
    assert "must be -1 (unlimited) or a non-negative amount" in " ".join(errors_of(exc)["cpu_quota"])


def test_negative_weight_is_rejected():
    with pytest.raises(ValidationError) as exc:
        services.create_queue({"name": "q", "gpu_over_quota_weight": -1})
    assert "must not be negative" in " ".join(errors_of(exc)["gpu_over_quota_weight"])


def test_invalid_kubernetes_name_is_rejected():
    with pytest.raises(ValidationError) as exc:
        services.create_queue({"name": "Team_A"})
    assert "must be a Kubernetes name" in errors_of(exc)["name"][0]


def test_duplicate_queue_name_is_rejected(queue_tree):
    with pytest.raises(ValidationError) as exc:
        services.create_queue({"name": "department-a"})
    assert errors_of(exc) == {"name": ["a queue named 'department-a' already exists; queue names are unique"]}


def test_unknown_field_is_rejected_by_name():
    with pytest.raises(ValidationError) as exc:
        services.create_queue({"name": "q", "gpu_quotaa": 1})
    assert "gpu_quotaa" in errors_of(exc)


def test_a_queue_with_active_workloads_cannot_get_children(queue_tree):
    WorkloadFactory(queue=queue_tree["team-training"])
    with pytest.raises(ValidationError) as exc:
        services.create_queue({"name": "sub-team", "parent": "team-training"})
    assert errors_of(exc) == {
        "parent": [
            "queue team-training has 1 active workload(s); only leaf queues hold workloads, "
            "so it cannot get child queues"
        ]
    }
    assert not Queue.objects.filter(name="sub-team").exists()


def test_deleting_a_queue_with_children_is_refused(queue_tree):
    with pytest.raises(ValidationError) as exc:
        services.delete_queue(queue_tree["department-a"])
    assert errors_of(exc) == {
        "queue": ["queue department-a has child queues (team-inference, team-research-a); delete or move them first"]
    }
    assert Queue.objects.filter(name="department-a").exists()


def test_deleting_a_queue_with_workloads_is_refused(queue_tree):
    WorkloadFactory(queue=queue_tree["team-training"], state="completed")
    with pytest.raises(ValidationError) as exc:
        services.delete_queue(queue_tree["team-training"])
    assert "has 1 workload(s)" in errors_of(exc)["queue"][0]


def test_deleting_a_leaf_queue_is_audited_with_before_values(queue_tree, platform_admin):
    pk = queue_tree["team-research-b"].pk
    services.delete_queue(queue_tree["team-research-b"], actor=platform_admin)
    assert not Queue.objects.filter(pk=pk).exists()
    entry = AuditEntry.objects.get(object_type="queues.queue", object_id=str(pk), action="delete")
    assert entry.before["name"] == "team-research-b"
    assert entry.after is None


def test_children_quota_above_parent_is_a_warning_not_an_error(queue_tree):
    # department-b has 16 GPUs of quota; its children have 8 + 8; a third child of 4 oversubscribes it.
    change = services.create_queue({"name": "team-extra", "parent": "department-b", "gpu_quota": 4})
    assert change.obj.pk is not None
    assert change.warnings == [
        "the children of department-b have gpu quotas summing to 20, above department-b's gpu quota 16: "
        "not every child can get its quota"
    ]


def test_lowering_a_parent_quota_below_its_children_warns(queue_tree):
    change = services.update_queue(queue_tree["department-a"], {"gpu_quota": 10})
    assert any("summing to 16, above department-a's gpu quota 10" in w for w in change.warnings)


def test_update_records_before_and_after(queue_tree, platform_admin):
    queue = queue_tree["team-training"]
    services.update_queue(queue, {"gpu_quota": 4, "display_name": "Training"}, actor=platform_admin)
    entry = AuditEntry.objects.get(object_type="queues.queue", object_id=str(queue.pk), action="update")
    assert entry.changes() == {"display_name": ("", "Training"), "gpu_quota": (8.0, 4)}


def test_a_rejected_update_changes_nothing_and_audits_nothing(queue_tree):
    queue = queue_tree["team-training"]
    with pytest.raises(ValidationError):
        services.update_queue(queue, {"display_name": "new", "gpu_limit": 1})
    queue.refresh_from_db()
    assert queue.display_name == ""
    assert queue.gpu_limit == 16
    assert not AuditEntry.objects.exists()


def test_default_priority_classes_come_from_the_migration():
    assert dict(PriorityClass.objects.values_list("name", "value")) == {
        "train": 50, "build-preemptible": 75, "build": 100, "inference": 125,
    }
    assert dict(PriorityClass.objects.values_list("name", "preemptible")) == {
        "train": True, "build-preemptible": True, "build": False, "inference": False,
    }


def test_priority_class_name_clash_is_rejected():
    with pytest.raises(ValidationError) as exc:
        services.create_priority_class({"name": "train", "value": 10})
    assert errors_of(exc) == {"name": ["a priority class named 'train' already exists (value 50); names are unique"]}


def test_priority_class_preemptible_defaults_to_kai_rule():
    assert services.create_priority_class({"name": "low", "value": 20}).obj.preemptible is True
    assert services.create_priority_class({"name": "high", "value": 150}).obj.preemptible is False


def test_priority_class_against_kai_default_warns():
    change = services.create_priority_class({"name": "odd", "value": 150, "preemptible": True})
    assert change.warnings
    assert "opposite" in change.warnings[0]


def test_priority_class_in_use_cannot_be_deleted():
    pc = PriorityClassFactory(name="used")
    WorkloadFactory(priority_class=pc)
    with pytest.raises(ValidationError) as exc:
        services.delete_priority_class(pc)
    assert errors_of(exc) == {"priority_class": ["used is used by 1 workload(s); change their class first"]}


def test_only_one_global_default_priority_class():
    services.update_priority_class(PriorityClass.objects.get(name="train"), {"global_default": True})
    with pytest.raises(ValidationError) as exc:
        services.update_priority_class(PriorityClass.objects.get(name="build"), {"global_default": True})
    assert errors_of(exc) == {"global_default": ["train is already the global default; only one class can be"]}


def test_queue_factory_tree_is_valid(queue_tree):
    for queue in Queue.objects.all():
        queue.full_clean(validate_constraints=False)
