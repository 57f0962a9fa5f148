"""Queue CRD YAML: the example file builds its tree, export re-imports unchanged, bad files change nothing."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml

from kaiweb.audit.models import AuditEntry
from kaiweb.queues.models import Queue
from kaiweb.queues.selectors import format_listing, queue_listing
from kaiweb.queues.yaml_io import QueueImportError, export_queues, import_queues
from scheduler_core.queue_crd import format_duration, parse_duration
from tests.factories import QueueFactory, WorkloadFactory

pytestmark = pytest.mark.django_db

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "examples" / "queues.yaml"


def tree_state() -> dict[str, tuple]:
    return {
        q.name: (
            q.parent.name if q.parent else None, q.priority,
            tuple(getattr(q, f"{r}_{p}") for r in ("cpu", "memory", "gpu") for p in ("quota", "limit", "over_quota_weight")),
            q.preempt_min_runtime, q.reclaim_min_runtime, q.display_name, q.labels,
        )
        for q in Queue.objects.select_related("parent")
    }


def problems_of(excinfo: pytest.ExceptionInfo[QueueImportError]) -> list[tuple[int, str, str, str]]:
    return [(p.document, p.name, p.field, p.message) for p in excinfo.value.problems]


def test_example_file_builds_its_tree():
    result = import_queues(EXAMPLE.read_text())
    assert sorted(result.created) == [
        "department-a", "department-b", "team-inference", "team-research-a", "team-research-b", "team-training",
    ]
    assert result.warnings == []
    training = Queue.objects.get(name="team-training")
    assert training.parent.name == "department-b"
    assert (training.gpu_quota, training.gpu_limit, training.gpu_over_quota_weight) == (8, 16, 2)
    assert Queue.objects.get(name="department-a").memory_quota == -1
    assert Queue.objects.get(name="team-research-b").priority == 50


def test_example_listing_matches_the_files_header():
    import_queues(EXAMPLE.read_text())
    text = format_listing(queue_listing())
    header = [
        line[2:].rstrip() for line in EXAMPLE.read_text().splitlines()
        if line.startswith("#   ") and line.strip("# ")
    ]

    def rows(lines: list[str]) -> dict[str, tuple]:
        # Children are a set (the file's header lists them in no particular order).
        out = {}
        for line in lines[1:]:
            cells = line.split()
            children = frozenset(cells[3].split(",")) if len(cells) == 4 else frozenset()
            parent = cells[2] if len(cells) >= 3 and not cells[2].count(",") and cells[0].startswith("team") else ""
            out[cells[0]] = (cells[1], parent, children if not cells[0].startswith("team") else frozenset())
        return out

    assert text.splitlines()[0].split() == ["NAME", "PRIORITY", "PARENT", "CHILDREN"]
    assert rows(text.splitlines()) == rows(header)


def test_export_reimports_to_the_same_tree():
    import_queues(EXAMPLE.read_text())
    Queue.objects.filter(name="team-training").update(
        preempt_min_runtime=dt.timedelta(minutes=5), reclaim_min_runtime=dt.timedelta(seconds=90),
        display_name="Training", labels={"kai.scheduler/node-pool": "a100"},
    )
    before = tree_state()
    exported = export_queues()
    for queue in Queue.objects.exclude(parent=None):
        queue.delete()
    Queue.objects.all().delete()
    result = import_queues(exported)
    assert len(result.created) == 6
    assert tree_state() == before


def test_reimporting_the_export_reports_everything_unchanged():
    import_queues(EXAMPLE.read_text())
    audit_count = AuditEntry.objects.count()
    result = import_queues(export_queues())
    assert result.created == []
    assert result.updated == []
    assert len(result.unchanged) == 6
    assert AuditEntry.objects.count() == audit_count


def test_export_puts_parents_first_and_uses_crd_fields():
    import_queues(EXAMPLE.read_text())
    docs = list(yaml.safe_load_all(export_queues()))
    names = [d["metadata"]["name"] for d in docs]
    assert names.index("department-b") < names.index("team-training")
    training = next(d for d in docs if d["metadata"]["name"] == "team-training")
    assert training == {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "team-training"},
        "spec": {
            "parentQueue": "department-b",
            "priority": 100,
            "resources": {
                "cpu": {"quota": 64000, "limit": 128000, "overQuotaWeight": 2},
                "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                "gpu": {"quota": 8, "limit": 16, "overQuotaWeight": 2},
            },
        },
    }


def test_import_updates_existing_queues():
    QueueFactory(name="department-a", gpu_quota=2)
    result = import_queues(EXAMPLE.read_text())
    assert "department-a" in result.updated
    assert Queue.objects.get(name="department-a").gpu_quota == 16


BAD = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: good}
spec:
  resources:
    gpu: {quota: 4, limit: 8, overQuotaWeight: 1}
    cpu: {quota: 0, limit: -1, overQuotaWeight: 1}
    memory: {quota: 0, limit: -1, overQuotaWeight: 1}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: low-limit}
spec:
  parentQueue: good
  resources:
    gpu: {quota: 4, limit: 2, overQuotaWeight: -1}
---
apiVersion: scheduling.run.ai/v1
kind: Queue
metadata: {name: orphan}
spec:
  parentQueue: missing
  resources: {gpu: {quota: 1, limit: -1}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: no-resources}
spec: {priority: high}
"""


def test_one_bad_document_rejects_the_whole_import_with_every_error_listed():
    with pytest.raises(QueueImportError) as exc:
        import_queues(BAD)
    assert problems_of(exc) == [
        (2, "low-limit", "spec.resources.gpu.limit", "limit 2 is below the quota 4; a limit must be -1 or ≥ the quota"),
        (2, "low-limit", "spec.resources.gpu.overQuotaWeight",
         "must not be negative (got -1); 0 means no share of the surplus"),
        (3, "orphan", "apiVersion", "must be scheduling.run.ai/v2, not 'scheduling.run.ai/v1'"),
        (4, "no-resources", "spec.priority", "must be an integer, not 'high'"),
        (4, "no-resources", "spec.resources", "is required (a mapping of cpu, memory and gpu)"),
    ]
    assert Queue.objects.count() == 0
    assert AuditEntry.objects.count() == 0


def test_missing_parent_and_cycles_are_listed():
    text = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: a}
spec: {parentQueue: b, resources: {gpu: {quota: 1, limit: -1}}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: b}
spec: {parentQueue: a, resources: {gpu: {quota: 1, limit: -1}}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: c}
spec: {parentQueue: nowhere, resources: {gpu: {quota: 1, limit: -1}}}
"""
    with pytest.raises(QueueImportError) as exc:
        import_queues(text)
    assert problems_of(exc) == [
        (1, "a", "spec.parentQueue", "makes a cycle in the tree: a → b → a"),
        (3, "c", "spec.parentQueue", "queue 'nowhere' does not exist in the file or in kaiweb"),
    ]
    assert Queue.objects.count() == 0


def test_cycle_through_an_existing_queue_is_found(queue_tree):
    text = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: department-a}
spec: {parentQueue: team-inference, resources: {gpu: {quota: 1, limit: -1}}}
"""
    with pytest.raises(QueueImportError) as exc:
        import_queues(text)
    assert problems_of(exc)[0][3] == "makes a cycle in the tree: department-a → team-inference → department-a"


def test_duplicate_names_and_unknown_fields_are_errors():
    doc = "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: x}\nspec: {resources: {gpu: {quota: 1, limit: -1}}%s}\n"
    with pytest.raises(QueueImportError) as exc:
        import_queues(doc % "" + "---\n" + doc % ", quota: 3")
    assert problems_of(exc) == [
        (2, "x", "spec.quota", "is not a Queue field (known: displayName, parentQueue, preemptMinRuntime, "
         "priority, reclaimMinRuntime, resources)"),
    ]
    with pytest.raises(QueueImportError) as exc:
        import_queues(doc % "" + "---\n" + doc % "")
    assert problems_of(exc) == [(2, "x", "metadata.name", "queue x is also defined in document 1")]


def test_a_parent_with_active_workloads_cannot_get_children_by_import(queue_tree):
    WorkloadFactory(queue=queue_tree["team-training"])
    text = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: sub}
spec: {parentQueue: team-training, resources: {gpu: {quota: 1, limit: -1}}}
"""
    with pytest.raises(QueueImportError) as exc:
        import_queues(text)
    assert "has active workloads" in problems_of(exc)[0][3]


def test_invalid_yaml_is_reported_with_its_line():
    with pytest.raises(QueueImportError) as exc:
        import_queues("apiVersion: x\n  bad: [\n")
    assert "is not valid YAML at line" in str(exc.value)


def test_unset_limit_follows_kai_and_warns():
    text = "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: x}\nspec: {resources: {gpu: {quota: 0}}}\n"
    result = import_queues(text)
    queue = Queue.objects.get(name="x")
    assert (queue.gpu_limit, queue.gpu_over_quota_weight, queue.priority) == (0, 0, 100)
    assert any("gpu.limit is unset" in w for w in result.warnings)


def test_dry_run_changes_nothing():
    result = import_queues(EXAMPLE.read_text(), dry_run=True)
    assert len(result.created) == 6
    assert Queue.objects.count() == 0
    assert AuditEntry.objects.count() == 0


def test_kubectl_list_output_is_accepted():
    items = list(yaml.safe_load_all(EXAMPLE.read_text()))
    result = import_queues(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    assert len(result.created) == 6


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("5m", 300), ("1h30m", 5400), ("1.5s", 1.5), ("250ms", 0.25)])
def test_go_durations_parse(text, seconds):
    assert parse_duration(text) == seconds


def test_durations_round_trip():
    for seconds in (1, 59, 60, 90, 3600, 5400, 86400 + 61):
        assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize("text", ["", "5", "5x", "m5", "1h 30m"])
def test_bad_durations_are_rejected(text):
    with pytest.raises(ValueError, match="must be a duration"):
        parse_duration(text)


def test_a_child_of_an_invalid_document_is_not_reported_as_orphaned():
    text = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: parent}
spec: {resources: {gpu: {quota: 4, limit: 2}}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: child}
spec: {parentQueue: parent, resources: {gpu: {quota: 1, limit: -1}}}
"""
    with pytest.raises(QueueImportError) as exc:
        import_queues(text)
    assert [(p.document, p.field) for p in exc.value.problems] == [(1, "spec.resources.gpu.limit")]
