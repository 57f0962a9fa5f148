"""Queue CRD (`scheduling.run.ai/v2`) YAML import and export.

Import is all-or-nothing: every document is checked (shape, field rules, parents, cycles across
the file and the database) and every problem is listed with its document number and the CRD
field it concerns; only a file without errors is applied, in one transaction, parents first.
Queues already in the database are updated (like `kubectl apply`); queues not in the file are
left alone. Documents are read and written by the one Queue CRD codec
(``scheduler_core.queue_crd``, strict here): unset fields follow KAI (quota 0, limit 0 — a cap of
zero, with a warning — over-quota weight 0, priority 100).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.db import transaction

from kaiweb.audit.choices import AuditSource
from kaiweb.core import inputs
from kaiweb.core.choices import RESOURCES
from kaiweb.core.services import error_dict
from kaiweb.queues import services
from kaiweb.queues.models import Queue
from kaiweb.queues.services import find_cycle
from kaiweb.workloads.choices import ACTIVE_WORKLOAD_STATES
from scheduler_core import queue_crd

# Where a model field lives in the CRD, for error messages.
CRD_PATH = {
    "name": "metadata.name",
    "display_name": "spec.displayName",
    "parent": "spec.parentQueue",
    "priority": "spec.priority",
    "preempt_min_runtime": "spec.preemptMinRuntime",
    "reclaim_min_runtime": "spec.reclaimMinRuntime",
    "labels": "metadata.labels",
    **{f"{r}_quota": f"spec.resources.{r}.quota" for r in RESOURCES},
    **{f"{r}_limit": f"spec.resources.{r}.limit" for r in RESOURCES},
    **{f"{r}_over_quota_weight": f"spec.resources.{r}.overQuotaWeight" for r in RESOURCES},
}


@dataclass(frozen=True, slots=True)
class ImportProblem:
    """One error of an import: the document (1-based), the queue, the CRD field and the rule."""

    document: int
    name: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"document {self.document}" + (f" ({self.name})" if self.name else "")
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class QueueImportError(Exception):
    """The import was rejected; `problems` lists every error found. Nothing was changed."""

    def __init__(self, problems: list[ImportProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


@dataclass(slots=True)
class ImportResult:
    """What an import did (or would do, for a dry run)."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dry_run: bool = False


@dataclass(slots=True)
class _Doc:
    index: int
    name: str
    values: dict[str, Any]


# ------------------------------------------------------------------------------------------ parsing


def _documents(text: str) -> list[Any]:
    docs: list[Any] = []
    # NaN and infinities reach the field checks, which name the CRD field they are in.
    for doc in inputs.load_yaml_documents(text, keep_non_finite=True):
        if doc is None:
            continue
        if isinstance(doc, dict) and doc.get("kind") in ("List", "QueueList") and isinstance(doc.get("items"), list):
            docs.extend(doc["items"])  # `kubectl get queues -o yaml` output
        else:
            docs.append(doc)
    return docs


def _parse_document(index: int, doc: Any, problems: list[ImportProblem], warnings: list[str]) -> _Doc | None:
    """One document through the Queue CRD reader (strict), then the model's own field rules."""
    reading = queue_crd.read(doc, strict=True)
    name = reading.name
    problems.extend(ImportProblem(index, name, p.field, p.message) for p in reading.problems)
    warnings.extend(reading.warnings)
    if reading.spec is None:
        return None
    values = {**Queue.spec_values(reading.spec), "labels": reading.labels, "parent": reading.spec.parent}
    try:  # the remaining field rules (name format, lengths, priority range) of the model
        Queue(**{k: v for k, v in values.items() if k != "parent"}).full_clean(
            exclude=["parent"], validate_unique=False, validate_constraints=False
        )
    except ValidationError as exc:
        for key, messages in error_dict(exc).items():
            for message in messages:
                problems.append(ImportProblem(index, name, CRD_PATH.get(key, key), message))
        return None
    return _Doc(index, name, values)


def plan_import(text: str) -> tuple[list[_Doc], list[str]]:
    """Parse and check a whole file; raise QueueImportError listing every problem."""
    problems: list[ImportProblem] = []
    warnings: list[str] = []
    try:
        raw_docs = _documents(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise QueueImportError([ImportProblem(0, "", "", f"is not valid YAML{where}: {getattr(exc, 'problem', exc)}")]) from exc
    except inputs.InputRejected as exc:
        raise QueueImportError([ImportProblem(0, "", "", f"is not accepted: {exc}")]) from None
    if not raw_docs:
        raise QueueImportError([ImportProblem(0, "", "", "the file holds no Queue documents")])
    docs = [d for i, raw in enumerate(raw_docs, 1) if (d := _parse_document(i, raw, problems, warnings))]
    seen: dict[str, int] = {}
    for doc in docs:
        if doc.name in seen:
            problems.append(
                ImportProblem(doc.index, doc.name, "metadata.name", f"queue {doc.name} is also defined in document {seen[doc.name]}")
            )
        seen.setdefault(doc.name, doc.index)
    by_name = {d.name: d for d in docs}
    existing = {q.name: q for q in Queue.objects.select_related("parent")}
    parents: dict[str, str | None] = {n: (q.parent.name if q.parent else None) for n, q in existing.items()}
    parents.update({d.name: d.values["parent"] for d in docs})
    # A parent defined by a document that has its own errors is not "missing": that error is enough.
    named = {
        raw["metadata"]["name"] for raw in raw_docs
        if isinstance(raw, dict) and isinstance(raw.get("metadata"), dict) and isinstance(raw["metadata"].get("name"), str)
    }
    for doc in docs:
        parent = doc.values["parent"]
        if parent is not None and parent not in by_name and parent not in existing and parent not in named:
            problems.append(
                ImportProblem(doc.index, doc.name, "spec.parentQueue", f"queue {inputs.shown(parent)} does not exist in the file or in kaiweb")
            )
    reported: set[str] = set()
    for doc in docs:
        loop = find_cycle(parents, doc.name)
        if loop and doc.name not in reported:
            reported.update(loop)
            problems.append(
                ImportProblem(doc.index, doc.name, "spec.parentQueue", f"makes a cycle in the tree: {' → '.join(loop)}")
            )
    new_parents = {d.values["parent"] for d in docs if d.values["parent"] in existing}
    busy = dict(
        Queue.objects.filter(name__in=new_parents, workloads__state__in=ACTIVE_WORKLOAD_STATES)
        .values_list("name", "pk")
    )
    for doc in docs:
        if doc.values["parent"] in busy:
            problems.append(
                ImportProblem(
                    doc.index, doc.name, "spec.parentQueue",
                    f"queue {doc.values['parent']} has active workloads; only leaf queues hold workloads, so it cannot get children",
                )
            )
    if problems:
        raise QueueImportError(sorted(problems, key=lambda p: (p.document, p.field)))
    return _topological(docs, parents), warnings


def _topological(docs: list[_Doc], parents: dict[str, str | None]) -> list[_Doc]:
    """Documents ordered so that every parent comes before its children (then by document order)."""
    def depth(name: str) -> int:
        d, node = 0, parents.get(name)
        while node is not None:
            d, node = d + 1, parents.get(node)
        return d

    return sorted(docs, key=lambda d: (depth(d.name), d.index))


def import_queues(
    text: str, *, actor: Any = None, source: str = AuditSource.IMPORT, dry_run: bool = False
) -> ImportResult:
    """Apply a Queue CRD YAML file (one or many documents) all-or-nothing; see the module docstring."""
    result = ImportResult(dry_run=dry_run)
    with transaction.atomic():
        # The tree is read for cycles and then changed: hold it (in id order, as every move does).
        services.lock_tree()
        ordered, warnings = plan_import(text)
        result.warnings.extend(warnings)
        for doc in ordered:
            current = Queue.objects.filter(name=doc.name).first()
            try:
                if current is None:
                    change = services.create_queue(doc.values, actor=actor, source=source)
                    result.created.append(doc.name)
                else:
                    before = {k: getattr(current, k) for k in doc.values if k != "parent"}
                    before_parent = current.parent.name if current.parent_id else None
                    values = {k: v for k, v in doc.values.items() if k != "name"}
                    change = services.update_queue(current, values, actor=actor, source=source)
                    after = {k: getattr(change.obj, k) for k in doc.values if k != "parent"}
                    changed = before != after or before_parent != doc.values["parent"]
                    (result.updated if changed else result.unchanged).append(doc.name)
            except ValidationError as exc:  # a rule the plan could not see; report it the same way
                raise QueueImportError(
                    [
                        ImportProblem(doc.index, doc.name, CRD_PATH.get(k, k), m)
                        for k, ms in error_dict(exc).items() for m in ms
                    ]
                ) from exc
            result.warnings.extend(w for w in change.warnings if w not in result.warnings)
        if dry_run:
            transaction.set_rollback(True)
    return result


# ------------------------------------------------------------------------------------------ export


def queue_to_crd(queue: Queue) -> dict[str, Any]:
    """One queue as a Queue CRD object."""
    return queue_crd.write(queue.to_spec(queue.parent.name if queue.parent_id else None), queue.labels)


def export_queues(queues: Iterable[Queue] | None = None) -> str:
    """Queues as multi-document Queue CRD YAML, parents before children, by name within a level."""
    items = list(queues if queues is not None else Queue.objects.select_related("parent"))
    parents = {q.name: (q.parent.name if q.parent_id else None) for q in items}

    def depth(name: str) -> int:
        d, node = 0, parents.get(name)
        while node is not None and d < len(parents):
            d, node = d + 1, parents.get(node)
        return d

    items.sort(key=lambda q: (depth(q.name), q.name))
    return yaml.safe_dump_all(
        [queue_to_crd(q) for q in items], sort_keys=False, default_flow_style=None, explicit_start=False
    )
