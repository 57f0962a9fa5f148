"""manage.py seed_demo: the demo queue tree, a simulated 16×8-GPU cluster and a workload mix."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Create the demo queues, a simulated cluster and a seeded workload mix (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", type=int, default=16, help="simulated nodes (default 16)")
        parser.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
        parser.add_argument("--seed", type=int, default=7, help="seed of the workload generator")
        parser.add_argument("--clock", choices=("real", "simulated"), default="real",
                            help="the cluster's clock: the wall clock (default; one clock for everything the "
                                 "product shows) or a simulated one that advances --seconds-per-cycle per cycle")
        parser.add_argument("--seconds-per-cycle", type=float, default=30,
                            help="with --clock simulated: seconds the clock advances per cycle (default 30)")
        parser.add_argument("--no-workloads", action="store_true", help="do not generate workloads")

    def handle(self, *args: Any, **opts: Any) -> None:
        from kaiweb.cluster.demo import seed_demo

        if opts["nodes"] < 1 or opts["gpus_per_node"] < 0:
            raise CommandError("--nodes must be at least 1 and --gpus-per-node not negative")
        try:
            report = seed_demo(nodes=opts["nodes"], gpus_per_node=opts["gpus_per_node"], seed=opts["seed"],
                               generate=not opts["no_workloads"], seconds_per_cycle=opts["seconds_per_cycle"],
                               clock=opts["clock"])
        except (ValueError, LookupError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"demo on cluster {report.cluster}: {report.queues_created} queue(s) created, "
            f"{report.nodes_created} node(s) created, {report.workloads_submitted} workload(s) submitted"
        )
