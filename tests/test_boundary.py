"""The boundaries: the engine stays framework-free, the README's layer table holds (import-linter's
contracts, checked against the table), kaiweb has no import cycle, models import only models."""

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
# The README's layer table is held by import-linter's contracts (`[tool.importlinter]` in
# pyproject.toml, `lint-imports` in `make lint`); these tests run them, check that they say what the
# table says, and hold the two rules the contracts do not express.

APPS = ("core", "cluster", "queues", "workloads", "org", "scheduling", "admission", "usage", "reports", "whatif",
        "audit", "accounts", "ui")
DOMAIN_APPS = ("cluster", "queues", "workloads", "admission", "audit", "accounts")


def _import_linter() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def _module_graph() -> dict[str, set[str]]:
    """kaiweb module → the kaiweb modules it imports when it runs (at the top or inside a function;
    imports under `if TYPE_CHECKING:` are for the type checker only and are left out), as the
    contracts see it."""
    import grimp

    graph = grimp.build_graph("kaiweb", exclude_type_checking_imports=True, cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules if ".migrations" not in m}


def test_the_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def _table() -> dict[str, str]:
    """The README's "What is where" table: app → its "may import" cell."""
    import re

    text = (ROOT / "README.md").read_text()
    section = text[text.index("## What is where"):]
    cells: dict[str, str] = {}
    for line in section.splitlines()[2:]:
        if line.startswith("## "):
            break
        if not line.startswith("| `"):
            continue
        path, _, may = (c.strip() for c in line.strip("|").rsplit("|", 2))
        # A row of two apps: what they share, then "; `app`: what that one may import too".
        shared, *own = may.split("; ")
        for app in re.findall(r"`kaiweb/(\w+)/`", path):
            cells[app] = ", ".join([shared, *(part.split(": ", 1)[1] for part in own if part.startswith(f"`{app}`: "))])
    return cells


def _mentions(cell: str) -> dict[str, set[str]]:
    """App → how a "may import" cell names it: ``full``, ``models`` (the models of `x`), ``services``
    (the services and YAML import of `x`) or ``backends`` (the gateway's backends)."""
    import re

    found: dict[str, set[str]] = {}
    for phrase in re.findall(r"the models of ((?:`\w+`(?:, | and )?)+)", cell):
        for app in re.findall(r"`(\w+)`", phrase):
            found.setdefault(app, set()).add("models")
    cell = re.sub(r"the models of ((?:`\w+`(?:, | and )?)+)", "", cell)
    for app in re.findall(r"the services and YAML import of `(\w+)`", cell):
        found.setdefault(app, set()).add("services")
    cell = re.sub(r"the services and YAML import of `\w+`", "", cell)
    if "the gateway's backends" in cell:
        found.setdefault("cluster", set()).add("backends")
        cell = cell.replace("the gateway's backends", "")
    named = set(re.findall(r"`(\w+)`", cell)) & set(APPS)
    named |= {"cluster"} if "the gateway" in cell else set()
    named |= set(DOMAIN_APPS) if "the domain apps" in cell else set()
    named |= set(APPS) if "everything below it" in cell else set()
    for app in named:
        found.setdefault(app, set()).add("full")
    return found


#: what each kind of protected contract (by the start of its name) lets a row's mention through
TIERS = ((": ", {"full", "models", "services", "backends"}),
         ("'s backends: ", {"full", "backends"}),
         (", all but its models and backends: ", {"full"}),
         (", all but its models: ", {"full", "services"}),
         (", all but its models, services and YAML import: ", {"full"}))


def test_the_readme_table_and_the_contracts_agree():
    """Each protected contract lets exactly the apps import its package that the table's rows let."""
    table = _table()
    assert set(table) == set(APPS)
    mentions = {app: _mentions(cell) for app, cell in table.items()}
    contracts = [c for c in _import_linter()["contracts"] if c["type"] == "protected"]
    assert contracts
    for contract in contracts:
        app = contract["name"].split(":")[0].split(",")[0].split("'")[0]
        tier = contract["name"][len(app):]
        admits = next(kinds for start, kinds in sorted(TIERS, key=lambda t: -len(t[0])) if tier.startswith(start))
        allowed = {i.removeprefix("kaiweb.") for i in contract["allowed_importers"]} & set(APPS)
        wanted = {other for other in APPS if other != app and mentions[other].get(app, set()) & admits}
        assert allowed - {app} == wanted, contract["name"]


def test_every_contract_lets_the_ui_layer_import():
    contracts = [c for c in _import_linter()["contracts"] if c["type"] == "protected"]
    ui = next(c for c in contracts if c["protected_modules"] == ["kaiweb.ui"])["allowed_importers"]
    assert all(set(ui) <= set(c["allowed_importers"]) for c in contracts)


def test_the_contracts_that_name_modules_name_every_module_of_their_app():
    """A contract on "all but its models" lists the app's other modules: a new module is in one."""
    graph = _module_graph()
    contracts = _import_linter()["contracts"]
    # the UI layer's modules of every app, as the ui contract names them ("kaiweb.*.views", ...)
    ui = {e.rsplit(".", 1)[1] for e in next(c for c in contracts if c.get("protected_modules") == ["kaiweb.ui"])
          ["allowed_importers"] if e.startswith("kaiweb.*.")}
    checked = set()
    for contract in contracts:
        app, _, tier = contract["name"].partition(", ")
        if not tier.startswith(("all but its models: ", "all but its models and backends: ")):
            continue
        app = "kaiweb." + app
        below = {"models", "choices", "validators", "apps"} | ({"backends"} if "backends:" in tier else set())
        children = {m for m in graph if m.count(".") == 2 and m.startswith(app + ".")}
        rest = {m for m in children if m.rsplit(".", 1)[1] not in below | ui}
        assert set(contract["protected_modules"]) == rest, contract["name"]
        checked.add(app)
    assert checked == {"kaiweb.cluster", "kaiweb.queues", "kaiweb.workloads"}


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


def test_models_import_only_models_choices_validators_and_the_engine():
    """No model reaches up into scheduling, services, views or the UI."""
    graph = _module_graph()
    allowed_tail = ("models", "choices", "validators")
    wrong = {m: sorted(o for o in imports if o.startswith("kaiweb") and not (
                 o.startswith("kaiweb.core.") or o.rsplit(".", 1)[-1] in allowed_tail))
             for m, imports in graph.items() if m.endswith(".models")}
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
