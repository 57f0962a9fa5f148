"""Which queues a namespace's workloads may use."""

from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models

from kaiweb.core.models import TimeStampedModel
from kaiweb.queues.models import Queue

#: a Kubernetes namespace name (an RFC 1123 label)
namespace_validator = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    "a namespace name: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit",
)


class NamespaceQueueBinding(TimeStampedModel):
    """A queue the pods and PodGroups of a namespace may use; a namespace without any may use every queue."""

    namespace = models.CharField(max_length=63, validators=[namespace_validator], db_index=True)
    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="namespace_bindings")

    class Meta:
        ordering = ("namespace", "queue__name")
        constraints = [
            models.UniqueConstraint(fields=("namespace", "queue"), name="%(app_label)s_%(class)s_unique_namespace_queue"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace} → {self.queue}"
