"""Choices of the audit app."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class AuditAction(models.TextChoices):
    """What happened to the object."""

    CREATE = "create", _("Created")
    UPDATE = "update", _("Updated")
    DELETE = "delete", _("Deleted")


class AuditSource(models.TextChoices):
    """Where the change came from."""

    API = "api", _("REST API")
    ADMIN = "admin", _("Django admin")
    UI = "ui", _("Web UI")
    CLI = "cli", _("Command line")
    IMPORT = "import", _("YAML import")
    SYSTEM = "system", _("System")
