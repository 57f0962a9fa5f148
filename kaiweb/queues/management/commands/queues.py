"""manage.py queues: list queues like `kubectl get queues` (NAME, PRIORITY, PARENT, CHILDREN)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from kaiweb.queues.selectors import format_listing, queue_listing


class Command(BaseCommand):
    help = "List the queues: NAME, PRIORITY, PARENT, CHILDREN."

    def handle(self, *args: Any, **options: Any) -> None:
        rows = queue_listing()
        if not rows:
            self.stderr.write("No queues.")
            return
        self.stdout.write(format_listing(rows), ending="")
