"""manage.py import_queues / export_queues / queues."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from kaiweb.audit.models import AuditEntry
from kaiweb.queues.models import Queue

pytestmark = pytest.mark.django_db

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "examples" / "queues.yaml"


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_import_then_list_then_export_round_trip(tmp_path):
    out, _ = run("import_queues", str(EXAMPLE))
    assert out.strip() == "6 queue(s) were created, 0 updated, 0 unchanged"
    assert AuditEntry.objects.filter(source="cli").count() == 6
    listing, _ = run("queues")
    lines = listing.splitlines()
    assert lines[0].split() == ["NAME", "PRIORITY", "PARENT", "CHILDREN"]
    assert lines[1].split() == ["department-a", "medium", "team-inference,team-research-a"]
    assert lines[6].split() == ["team-training", "medium", "department-b"]
    target = tmp_path / "out.yaml"
    run("export_queues", str(target))
    out, _ = run("import_queues", str(target))
    assert out.strip() == "0 queue(s) were created, 0 updated, 6 unchanged"


def test_export_to_stdout(queue_tree):
    out, _ = run("export_queues")
    assert out.count("kind: Queue") == 6
    assert "parentQueue: department-a" in out


def test_bad_file_lists_problems_and_changes_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text().replace("parentQueue: department-b", "parentQueue: department-z"))
    err = io.StringIO()
    with pytest.raises(CommandError, match=r"nothing imported: 2 problem\(s\)"):
        call_command("import_queues", str(bad), stdout=io.StringIO(), stderr=err)
    assert "document 5 (team-training): spec.parentQueue: queue 'department-z' does not exist" in err.getvalue()
    assert Queue.objects.count() == 0


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        run("import_queues", str(tmp_path / "nope.yaml"))


def test_dry_run_and_empty_listing():
    out, _ = run("import_queues", "--dry-run", str(EXAMPLE))
    assert out.strip() == "6 queue(s) would be created, 0 updated, 0 unchanged"
    _, err = run("queues")
    assert err.strip() == "No queues."
