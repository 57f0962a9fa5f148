"""Create the platform admin account for a development install and print its login."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Create (once) the 'admin' platform administrator and print how to sign in."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        username = options["username"]
        password_file = settings.VAR_DIR / f"{username}-password"
        user = users.objects.filter(username=username).first()
        if user is None or not password_file.exists():
            password = secrets.token_urlsafe(12)
            if user is None:
                user = users.objects.create_superuser(username=username, email="", password=password)
            else:
                user.set_password(password)
                user.save(update_fields=["password"])
            password_file.write_text(password)
        self.stdout.write(f"Sign in as {username} / {password_file.read_text().strip()}")
