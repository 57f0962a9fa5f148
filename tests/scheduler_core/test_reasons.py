"""One reason-code vocabulary: the engine writes only its codes, and the UI has a headline for each."""

from __future__ import annotations

import ast
from pathlib import Path

from scheduler_core import reasons

ENGINE = Path(__file__).resolve().parents[2] / "scheduler_core"


def test_every_reason_the_engine_builds_names_its_code_from_the_vocabulary():
    """No string literal as the code of a Reason or a reclaim Verdict anywhere in the engine."""
    literal = []
    for path in ENGINE.rglob("*.py"):
        if path.name == "reasons.py" or "sim" in path.parts or path.name == "scenarios.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                    "Reason", "Verdict"):
                args = [*node.args, *(k.value for k in node.keywords if k.arg == "code")]
                code_arg = args[1] if getattr(node.func, "attr", getattr(node.func, "id", "")) == "Verdict" else args[0]
                if isinstance(code_arg, ast.Constant):
                    literal.append(f"{path.name}:{node.lineno} {code_arg.value!r}")
    assert literal == []


def test_the_vocabulary_is_kebab_case_and_knows_its_prefixed_reclaim_verdicts():
    for code in reasons.all_codes():
        assert code == code.lower()
        assert " " not in code
        assert "_" not in code
        assert reasons.is_known(code)
    assert reasons.is_known(reasons.RECLAIM_PREFIX + reasons.VICTIM_PROTECTED)
    assert not reasons.is_known("OverLimit")
    assert not reasons.is_known(reasons.RECLAIM_PREFIX + "nonsense")


def test_a_cycle_writes_only_known_codes():
    from scheduler_core import model as m
    from scheduler_core import run_cycle
    from tests.scheduler_core.engine_builders import job, node, queue, reclaim_example, snapshot

    snaps = [reclaim_example(),
             snapshot([node("n1", 2)], [queue("q", gpu_quota=1, gpu_limit=2)],
                      [job("big", "q", pods=2, gpus=2), job("ok", "q", gpus=1)])]
    for snap in snaps:
        result = run_cycle(snap, m.CycleConfig())
        codes = {r.code for r in result.pending.values()} | {e.reason.code for e in result.evictions}
        assert codes
        assert {c for c in codes if not reasons.is_known(c)} == set()
