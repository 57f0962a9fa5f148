"""Models of the audit app: who changed what, when, before and after."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from kaiweb.audit.choices import AuditAction, AuditSource


class AuditEntry(models.Model):
    """One change to a queue, priority class, shard, cluster or setting."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_entries"
    )
    actor_name = models.CharField(max_length=150, blank=True, help_text="Kept when the user is deleted.")
    source = models.CharField(max_length=16, choices=AuditSource.choices, default=AuditSource.SYSTEM)
    object_type = models.CharField(max_length=64, help_text="app_label.model, e.g. queues.queue")
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=300)
    action = models.CharField(max_length=16, choices=AuditAction.choices)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ("-at", "-id")
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=("object_type", "object_id"), name="audit_entry_object")]

    def __str__(self) -> str:
        return f"{self.actor_name or 'system'} {self.action} {self.object_type} {self.object_repr}"

    def changes(self) -> dict[str, tuple[object, object]]:
        """Fields whose value differs between before and after."""
        before, after = self.before or {}, self.after or {}
        return {k: (before.get(k), after.get(k)) for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)}
