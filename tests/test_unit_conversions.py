"""Memory units are converted in one place: `scheduler_core/units.py` (and `queue_crd.py`, which reads
and writes the Queue CRD with it). Everywhere else calls its functions, so MB (10^6 bytes, queue units)
and MiB (2^20 bytes, GPU memory and the traces) arithmetic cannot come back unseen.

What counts as such arithmetic (`conversions`):

* the constants ``MB`` or ``MIB`` (or ``MiB``, ``MEGABYTE``, ``MEBIBYTE``) named at all, imported or not;
* a product or quotient of something with a constant factor of exactly 2^20 (``x * 1024 * 1024``,
  ``n // (1024 * 1024)``, ``x * 2**20``, ``n //= 1 << 20``), or a shift of something by 20 bits;
* a product or quotient with a constant factor of exactly 10^6 (``x * 1_000_000``, ``x / 10**6``) in
  a statement that speaks of memory (``mem``, ``byte`` or ``mb``): microseconds are not memory.

Sizes written as constants alone (``20 * 1024 * 1024``), GiB, and other factors are not flagged.
"""

from __future__ import annotations

import ast
import doctest
import math
import re
from pathlib import Path

import pytest

from scheduler_core import units

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("kaiweb", "scheduler_core", "harness", "benchmarks")
#: the modules that convert: units itself, and the Queue CRD's reader and writer
CONVERTERS = {Path("scheduler_core/units.py"), Path("scheduler_core/queue_crd.py")}
UNIT_NAMES = frozenset({"MB", "MIB", "MiB", "MEGABYTE", "MEBIBYTE"})
MIB_FACTOR = 1 << 20
MB_FACTOR = 10**6
MEMORY_WORDS = re.compile(r"mem|byte|\bmb\b", re.IGNORECASE)
_MULTIPLICATIVE = (ast.Mult, ast.Div, ast.FloorDiv)


def _constant(node: ast.AST) -> float | None:
    """The value of an expression made of number literals only (``1024 * 1024``, ``2**20``, ``1 << 20``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _constant(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.BinOp):
        left, right = _constant(node.left), _constant(node.right)
        if left is None or right is None:
            return None
        try:
            if isinstance(node.op, ast.Mult):
                return left * right
            if isinstance(node.op, ast.Pow) and abs(right) <= 64:
                return left**right
            if isinstance(node.op, ast.LShift) and isinstance(left, int) and isinstance(right, int) and 0 <= right <= 64:
                return left << right
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
        except (OverflowError, ValueError):
            return None
    return None


def _factors(node: ast.AST, divided: bool = False) -> list[tuple[ast.AST, bool]]:
    """A chain of ``*``, ``/`` and ``//`` as its factors, each with whether it divides."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, _MULTIPLICATIVE) and _constant(node) is None:
        right_divides = divided != isinstance(node.op, ast.Div | ast.FloorDiv)
        return _factors(node.left, divided) + _factors(node.right, right_divides)
    return [(node, divided)]


def _verdict(factors: list[tuple[ast.AST, bool]], statement: str) -> str | None:
    """Why this chain of factors converts MB or MiB, or None."""
    values = [(_constant(f), divides) for f, divides in factors]
    if all(v is not None for v, _ in values):
        return None  # a size written as a constant
    for divides in (False, True):
        consts = [v for v, d in values if v is not None and d == divides]
        if not consts:
            continue
        product = math.prod(consts)
        if product == MIB_FACTOR:
            return "MiB arithmetic (a factor of 2^20)"
        if product == MB_FACTOR and MEMORY_WORDS.search(statement):
            return "MB arithmetic (a factor of 10^6 on memory)"
    return None


def conversions(source: str) -> list[tuple[int, str]]:
    """(line, why) of each MB or MiB conversion in Python ``source``; see the module docstring."""
    tree = ast.parse(source)
    lines = source.splitlines()
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def statement_of(node: ast.AST) -> str:
        while not isinstance(node, ast.stmt) and node in parents:
            node = parents[node]
        start, end = getattr(node, "lineno", 1), getattr(node, "end_lineno", None) or getattr(node, "lineno", 1)
        return "\n".join(lines[start - 1:end])

    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom):
            named = sorted(a.name for a in node.names if a.name in UNIT_NAMES)
            if named:
                found.append((line, f"imports {', '.join(named)}"))
        elif isinstance(node, ast.Name) and node.id in UNIT_NAMES:
            found.append((line, f"uses {node.id}"))
        elif isinstance(node, ast.Attribute) and node.attr in UNIT_NAMES:
            found.append((line, f"uses .{node.attr}"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.LShift | ast.RShift):
            if _constant(node.right) == 20 and _constant(node.left) is None:
                found.append((line, "MiB arithmetic (a shift by 20 bits)"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, _MULTIPLICATIVE):
            parent = parents.get(node)
            if isinstance(parent, ast.BinOp) and isinstance(parent.op, _MULTIPLICATIVE) and _constant(parent) is None:
                continue  # judged as part of the whole chain
            why = _verdict(_factors(node), statement_of(node))
            if why:
                found.append((line, why))
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, (*_MULTIPLICATIVE, ast.LShift, ast.RShift)):
            if isinstance(node.op, ast.LShift | ast.RShift):
                if _constant(node.value) == 20:
                    found.append((line, "MiB arithmetic (a shift by 20 bits)"))
                continue
            divides = isinstance(node.op, ast.Div | ast.FloorDiv)
            why = _verdict([(node.target, False), *_factors(node.value, divides)], statement_of(node))
            if why:
                found.append((line, why))
    return sorted(found)


def _scanned_files() -> list[Path]:
    return sorted(p for top in SCANNED for p in (ROOT / top).rglob("*.py")
                  if p.relative_to(ROOT) not in CONVERTERS and ".venv" not in p.parts)


def test_only_units_and_queue_crd_convert_memory_units():
    offences = [f"{path.relative_to(ROOT)}:{line}: {why}"
                for path in _scanned_files() for line, why in conversions(path.read_text())]
    assert offences == [], ("convert with scheduler_core.units (mb_to_bytes, bytes_to_mb, mib_to_bytes, "
                            "bytes_to_mib, to_engine_units, to_queue_units, ...):\n" + "\n".join(offences))


def test_the_scan_covers_the_simulator_and_the_apps():
    scanned = {p.relative_to(ROOT) for p in _scanned_files()}
    assert Path("scheduler_core/sim/replay.py") in scanned
    assert Path("kaiweb/whatif/replay.py") in scanned
    assert Path("kaiweb/cluster/workload_generator.py") in scanned
    assert Path("benchmarks/b5_control_plane.py") in scanned
    assert not scanned & CONVERTERS


@pytest.mark.parametrize("source", [
    "from scheduler_core.units import MB",
    "b = q * MB",
    "scale = float(units.MB)",
    "b = mib * 1024 * 1024",
    "b = (mib or 16 * 1024) * 1024 * 1024",
    "mib = max(int(p['memory']) // (1024 * 1024) for p in pods)",
    "n //= 1024 * 1024",
    "b = x * 2**20",
    "b = total * 2**20 / gpus",
    "b = x << 20",
    "mib = n >> 20",
    "memory_bytes = mem * 1_000_000",
    "out = {'memory': row['memory'] / 10**6}",
    "MB = 1_000_000",
])
def test_the_scan_finds_each_way_of_converting(source):
    assert conversions(source), source


@pytest.mark.parametrize("source", [
    "MAX_TARBALL = 20 * 1024 * 1024",
    "UNITS = {'ms': 1_000_000, 's': 10**9}",
    "seconds = ns / 10**9",
    "for unit, size in (('ms', 1_000_000), ('us', 1_000)): pass",
    "micros = seconds * 1e6",
    "size = 1024 * GIB",
    "text = f'{value / (1 << 30):.2f}Gi'",
    "share = allocated / total",
    "b = mib_to_bytes(x)",
    "cores = millicores * 0.001",
])
def test_the_scan_leaves_other_arithmetic_alone(source):
    assert conversions(source) == [], source


# ------------------------------------------------------------------------------ the functions


def test_the_units_examples_hold():
    result = doctest.testmod(units)
    assert result.attempted > 0
    assert result.failed == 0


def test_queue_units_round_trip_and_keep_unlimited():
    for resource in units.QUEUE_RESOURCES:
        for amount in (0.0, 1.0, 2.5, 4096.0, 1e9):
            assert units.to_queue_units(resource, units.to_engine_units(resource, amount)) == pytest.approx(amount)
        assert units.to_engine_units(resource, -1) == -1
        assert units.to_queue_units(resource, -1) == -1
    assert units.to_engine_units("memory", 1) == units.mb_to_bytes(1) == 1_000_000
    assert units.to_engine_units("cpu", 1500) == 1500
    assert units.vector_to_queue_units(units.queue_units_to_vector({"cpu": 500, "memory": 2048, "gpu": 1.5})) == {
        "cpu": 500.0, "memory": 2048.0, "gpu": 1.5}


def test_mib_conversions_are_whole():
    assert units.mib_to_bytes(81920) == 81920 * 1024 * 1024
    assert units.bytes_to_mib(units.mib_to_bytes(81920)) == 81920
    assert units.bytes_to_mib(units.mib_to_bytes(1) - 1) == 0
