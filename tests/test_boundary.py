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


def _imports(path: Path) -> set[str]:
    """Every kaiweb module a file imports, at the top or inside a function."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kaiweb"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("kaiweb"))
    return found


def test_the_cluster_gateway_and_its_users_form_no_import_cycle():
    modules = ["kaiweb.cluster.errors", "kaiweb.cluster.backends.types", "kaiweb.cluster.backends.kubernetes",
               "kaiweb.cluster.backends.simulated", "kaiweb.cluster.gateway", "kaiweb.cluster.watch",
               "kaiweb.cluster.grouping", "kaiweb.cluster.status_writer", "kaiweb.cluster.mirror"]
    edges = {m: {o for o in modules if o != m and o in _imports(ROOT / (m.replace(".", "/") + ".py"))}
             for m in modules}

    def reaches(start: str, target: str, seen: set[str]) -> bool:
        return any(n == target or (n not in seen and reaches(n, target, seen | {n})) for n in edges[start])

    cycles = sorted(m for m in modules if reaches(m, m, {m}))
    assert cycles == [], {m: sorted(edges[m]) for m in cycles}
