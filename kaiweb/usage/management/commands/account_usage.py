"""manage.py account_usage: write the current usage buckets now (and optionally roll up)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Integrate what every queue holds now into its usage buckets (the usage.account task)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--roll-up", action="store_true", help="also roll up and expire old buckets")

    def handle(self, *args: Any, **opts: Any) -> None:
        from kaiweb.usage.accounting import account_usage, roll_up_and_expire

        written = account_usage()
        self.stdout.write(f"{written} usage bucket(s) written")
        if opts["roll_up"]:
            self.stdout.write(f"roll-up: {roll_up_and_expire()}")
