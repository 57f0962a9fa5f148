"""manage.py cluster_scenarios PATH: KAI's end-to-end scenarios through the product's Kubernetes path."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = ("Run the kai-e2e scenarios under PATH against a real kube-apiserver on loopback, through the "
            "product's own Kubernetes path, and print the results JSON that the corpus's evaluate.py scores. "
            "Uses a throwaway test database; never touches the configured one.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path, help="a scenario file or a folder of them")
        parser.add_argument("--json", action="store_true", help="print the results JSON on stdout")
        parser.add_argument("--out", type=Path, help="write the results JSON to this file")
        parser.add_argument("--only", default=None, help="a regular expression: run the scenarios whose id matches")
        parser.add_argument("--apiserver", choices=("real", "fake"), default="real",
                            help="real: kube-apiserver + etcd + KWOK built by `make kube` (the default, what CI runs); "
                                 "fake: the in-process fake API server, for quick local runs")
        parser.add_argument("--floor", type=int, default=None,
                            help="score the results (the corpus's own evaluate.py beside PATH; our org and DRA scenarios "
                                 "by their own checkers) and fail "
                                 "when fewer than this many scenarios pass")

    def handle(self, *args: Any, **opts: Any) -> None:
        from devkube import dra_scenarios, e2e, org_scenarios
        from devkube.localkube import NO_KWOK, LocalKube, find_binaries, find_tool
        from devkube.product import cycle_invariants, product_cycle

        path: Path = opts["path"]
        if not path.exists():
            raise CommandError(f"path: {path} does not exist")
        scenarios = [s for s in e2e.load_scenarios(path) if e2e.matches(str(s.get("id")), opts["only"])]
        if not scenarios:
            raise CommandError(f"path: no scenario under {path}" + (f" matches {opts['only']!r}" if opts["only"] else ""))
        if opts["apiserver"] == "fake":
            cluster: Any = e2e.FakeCluster()
        else:
            binaries = find_binaries()
            if binaries is None:
                raise CommandError("apiserver: no kube-apiserver/etcd binaries; run `make kube` "
                                   "(or set KUBEBUILDER_ASSETS), or use --apiserver fake")
            if find_tool("kwok", binaries) is None:
                raise CommandError(f"apiserver: {NO_KWOK}; KWOK plays the kubelets of the scenarios' nodes "
                                   "(or use --apiserver fake)")
            # KWOK plays the kubelets; no workload controllers: the corpus applies what they would
            # create, and nothing else may create or evict pods. Scenarios with DRA claims get the
            # resource-claim controller (`e2e.controllers_for`), which makes and releases claims only.
            cluster = LocalKube(binaries, controllers=e2e.controllers_for(scenarios), kwok=True)
        results: dict[str, e2e.ScenarioResult] = {}
        # Scenarios with an ``org`` (node pools, departments, projects: tests/org_scenarios) set it up
        # through the org services and run every pool's shard in each cycle (`devkube.org_scenarios`).
        with_org = any(s.get("org") for s in scenarios)
        with _throwaway_database(), cluster as kube:
            if with_org:
                runner = e2e.ScenarioRunner(kube, prepare=_prepare, run_cycle=org_scenarios.every_shard_cycle,
                                            check=org_scenarios.every_shard_invariants,
                                            setup=org_scenarios.apply_org)
            else:
                runner = e2e.ScenarioRunner(kube, prepare=_prepare, run_cycle=product_cycle,
                                            check=cycle_invariants)
            for n, scenario in enumerate(scenarios, 1):
                sid = str(scenario.get("id"))
                result = runner.run(scenario)
                results[sid] = result
                status = "error: " + (result.error or "").splitlines()[0][:160] if result.error else "ran"
                self.stderr.write(f"[{n}/{len(scenarios)}] {sid}: {status} ({result.cycles} cycles, {result.seconds:.1f}s)")
        payload = {sid: r.as_json() for sid, r in results.items()}
        if opts["out"]:
            opts["out"].parent.mkdir(parents=True, exist_ok=True)
            opts["out"].write_text(json.dumps(payload, indent=1, default=str))
        if opts["json"] or not opts["out"]:
            sys.stdout.write(json.dumps(payload, default=str) + "\n")
        summary = e2e.summarise(results)
        self.stderr.write(f"{summary['scenarios']} scenarios, {summary['errors']} with errors, "
                          f"{summary['invariant_violations']} invariant violations, {summary['seconds']} s")
        # Our own scenarios are checked by their own checkers (org: `org_scenarios.failures`; DRA, the
        # scenarios under tests/dra_scenarios: `dra_scenarios.failures`); the corpus's by its evaluate.py.
        own = (org_scenarios.failures if with_org
               else dra_scenarios.failures if path.resolve().is_relative_to(dra_scenarios.SCENARIOS) else None)
        if opts["floor"] is not None and own is not None:
            failed = {}
            for s in scenarios:
                result = results[str(s["id"])]
                failed[str(s["id"])] = [result.error] if result.error else own(s, result.observations)
            for sid, why in failed.items():
                if why:
                    self.stderr.write(f"FAIL {sid}: {why[0][:300]}")
            passed = sum(1 for why in failed.values() if not why)
            kind = "org" if with_org else "DRA"
            self.stderr.write(f"{kind} scenarios: {passed}/{len(scenarios)} passed (floor {opts['floor']})")
            if passed < opts["floor"]:
                raise CommandError(f"{kind} scenarios: {passed} passed, below the floor of {opts['floor']}")
        elif opts["floor"] is not None:
            try:
                passed, total, failures = e2e.score(path, scenarios, payload)
            except FileNotFoundError as exc:
                raise CommandError(f"--floor: {exc}") from exc
            for sid, why in failures:
                self.stderr.write(f"FAIL {sid}: {why}")
            self.stderr.write(f"e2e: {passed}/{total} scenarios passed (floor {opts['floor']})")
            if passed < opts["floor"]:
                raise CommandError(f"e2e: {passed} scenarios passed, below the floor of {opts['floor']}")
        if summary["invariant_violations"]:
            raise CommandError(f"e2e: {summary['invariant_violations']} invariant violations after cycles "
                               "(each scenario's invariant_violations says which)")


class _throwaway_database:  # noqa: N801 - used as a context manager, like a function
    """A fresh test database (as the test runner makes one), dropped afterwards."""

    def __enter__(self) -> None:
        from django.test.utils import setup_databases

        self._old = setup_databases(verbosity=0, interactive=False, aliases={"default"})

    def __exit__(self, *exc: object) -> None:
        from django.test.utils import teardown_databases

        teardown_databases(self._old, verbosity=0)


def _prepare(kube: Any) -> None:
    """An empty database, the product pointed at ``kube`` as a deployment would be."""
    from django.core.management import call_command

    from devkube import e2e
    from kaiweb.cluster import mirror

    call_command("flush", interactive=False, verbosity=0)
    e2e.point_product_at(kube)
    mirror.kubernetes_cluster()
