"""scheduler_core stays framework-free: importing all of it pulls in no Django, Celery, DRF or kubernetes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_scheduler_core_imports_no_framework():
    code = (
        "import pkgutil, importlib, sys, scheduler_core\n"
        "for m in pkgutil.walk_packages(scheduler_core.__path__, 'scheduler_core.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        importlib.import_module(m.name)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in {'django','celery','rest_framework','kubernetes','kaiweb'})\n"
        "print(','.join(bad))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"scheduler_core imported framework modules: {out.stdout.strip()}"


# ------------------------------------------------------------------------------- the import graph

#: modules of the UI layer: they may use kaiweb.ui (page rendering, charts, formatting, access)
UI_LAYER = (".views", ".urls", ".display", ".forms")


def _module_graph() -> dict[str, set[str]]:
    """kaiweb module → the kaiweb modules it imports when it runs (at the top or inside a function;
    imports under `if TYPE_CHECKING:` are for the type checker only and are left out)."""
    import ast

    modules: dict[str, Path] = {}
    for path in (ROOT / "kaiweb").rglob("*.py"):
        if "migrations" in path.parts:
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path

    def runtime_nodes(tree: ast.AST) -> list[ast.AST]:
        out, stack = [], [tree]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                stack.extend(node.orelse)
                continue
            out.append(node)
            stack.extend(ast.iter_child_nodes(node))
        return out

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kaiweb"):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    found.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("kaiweb"))
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """An import cycle of the graph (the standard library's topological sort finds one), or []."""
    from graphlib import CycleError, TopologicalSorter

    try:
        TopologicalSorter(graph).prepare()
    except CycleError as exc:
        return list(exc.args[1])
    return []


def test_the_cycle_finder_finds_a_cycle():
    assert sorted(set(_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}))) == ["a", "b", "c"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_kaiweb_has_no_import_cycle_even_through_imports_inside_functions():
    assert _cycle(_module_graph()) == []


def test_the_cluster_gateway_and_its_users_form_no_import_cycle():
    graph = _module_graph()
    modules = {"kaiweb.cluster.errors", "kaiweb.cluster.backends.types", "kaiweb.cluster.backends.kubernetes",
               "kaiweb.cluster.backends.simulated", "kaiweb.cluster.gateway", "kaiweb.cluster.watch",
               "kaiweb.cluster.grouping", "kaiweb.cluster.mirror"}
    assert modules <= set(graph)
    assert _cycle({m: graph[m] & modules for m in modules}) == []


def test_the_engine_imports_no_harness():
    """The decision-scenario harness sits above the engine: nothing in scheduler_core imports it."""
    import ast

    wrong = []
    for path in (ROOT / "scheduler_core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            wrong += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in ("harness", "tests", "kaiweb")]
    assert wrong == []


def test_models_import_only_models_choices_validators_and_the_engine():
    """No model reaches up into scheduling, services, views or the UI."""
    graph = _module_graph()
    allowed_tail = ("models", "choices", "validators")
    wrong = {m: sorted(o for o in imports if not (o.startswith("kaiweb.core.") or o.rsplit(".", 1)[-1] in allowed_tail))
             for m, imports in graph.items() if m.endswith(".models")}
    assert {m: o for m, o in wrong.items() if o} == {}


def test_only_the_ui_layer_imports_the_ui_package():
    graph = _module_graph()
    wrong = {m: sorted(o for o in imports if o == "kaiweb.ui" or o.startswith("kaiweb.ui."))
             for m, imports in graph.items()
             if not m.startswith("kaiweb.ui") and not m.endswith(UI_LAYER) and ".templatetags." not in m}
    assert {m: o for m, o in wrong.items() if o} == {}


def test_every_type_ignore_names_its_code_and_says_why():
    import re

    bare = []
    for package in ("kaiweb", "scheduler_core", "harness"):
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if "type: ignore" in line and not re.search(r"# type: ignore\[[a-z, -]+\]\s+# \S", line):
                    bare.append(f"{path.relative_to(ROOT)}:{n}")
    assert bare == []
