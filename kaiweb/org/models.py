"""Models of the org app: node pools, departments, projects and the queue each owns per node pool.

The quota numbers live on the queue (`queues.Queue`), the one place the engine reads them; an
`OwnerQueue` says which department or project a queue belongs to and for which node pool.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from kaiweb.core.models import TimeStampedModel
from kaiweb.org.choices import DEFAULT_POOL, NAMESPACE_PREFIX, OwnerKind, PoolPhase
from kaiweb.queues.models import k8s_name_validator


class NodePool(TimeStampedModel):
    """A named slice of a cluster's nodes, chosen by one node label pair; the pool named `default` has
    none and holds every node no other pool claims. Each pool is scheduled by its own shard."""

    cluster = models.ForeignKey("cluster.Cluster", on_delete=models.CASCADE, related_name="node_pools")
    name = models.CharField(max_length=63, validators=[k8s_name_validator])
    label_key = models.CharField(max_length=253, blank=True, help_text="Node label key; empty on the default pool.")
    label_value = models.CharField(max_length=63, blank=True, help_text="Node label value, matched exactly.")
    shard = models.OneToOneField("cluster.SchedulingShard", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="node_pool", help_text="The shard that schedules this pool.")
    preferred_topology = models.CharField(max_length=253, blank=True,
                                          help_text="A KAI Topology preferred for this pool's workloads.")
    phase = models.CharField(max_length=24, choices=PoolPhase.choices, default=PoolPhase.EMPTY)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ("cluster__name", "name")
        constraints = [
            models.UniqueConstraint(fields=("cluster", "name"), name="org_nodepool_unique_name"),
            models.UniqueConstraint(fields=("cluster", "label_key", "label_value"), name="org_nodepool_unique_pair",
                                    condition=~models.Q(label_key="")),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_default(self) -> bool:
        return self.name == DEFAULT_POOL


class Department(TimeStampedModel):
    """A group of projects sharing quota: its queues are the parents of its projects' queues in the same
    pool. Nothing is submitted to a department."""

    name = models.CharField(max_length=63, unique=True, validators=[k8s_name_validator])
    display_name = models.CharField(max_length=200, blank=True)
    admins = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="administered_departments",
                                    help_text="Department admins: they run the department's projects.")

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class Project(TimeStampedModel):
    """A team: it owns quota per node pool and a namespace its workloads are submitted into."""

    name = models.CharField(max_length=63, unique=True, validators=[k8s_name_validator])
    display_name = models.CharField(max_length=200, blank=True)
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    department = models.ForeignKey(Department, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="projects")
    namespace = models.CharField(max_length=63, blank=True, validators=[k8s_name_validator],
                                 help_text="An existing namespace to adopt; empty: kai-<name>, made and kept.")
    enforce_kai_scheduler = models.BooleanField(
        default=False, help_text="Put every pod of the namespace on the scheduler, whatever it asked for.")
    default_node_pools = models.JSONField(default=list, blank=True,
                                          help_text="Node pools, in order, for workloads that name none.")
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="org_projects",
                                     help_text="Project members: they see the project.")

    class Meta:
        ordering = ("name",)
        constraints = [
            models.UniqueConstraint(fields=("namespace",), name="org_project_unique_namespace",
                                    condition=~models.Q(namespace="")),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def namespace_name(self) -> str:
        """The namespace in use: the adopted one, else ``kai-<name>``."""
        return self.namespace or f"{NAMESPACE_PREFIX}{self.name}"


class OwnerQueue(models.Model):
    """The queue a department or a project has in one node pool."""

    department = models.ForeignKey(Department, null=True, blank=True, on_delete=models.CASCADE,
                                   related_name="owned_queues")
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="owned_queues")
    node_pool = models.ForeignKey(NodePool, on_delete=models.PROTECT, related_name="owner_queues")
    queue = models.OneToOneField("queues.Queue", on_delete=models.CASCADE, related_name="org_owner")

    class Meta:
        ordering = ("queue__name",)
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(department__isnull=False, project__isnull=True)
                           | models.Q(department__isnull=True, project__isnull=False)),
                name="org_ownerqueue_one_owner"),
            models.UniqueConstraint(fields=("department", "node_pool"), name="org_ownerqueue_department_pool"),
            models.UniqueConstraint(fields=("project", "node_pool"), name="org_ownerqueue_project_pool"),
        ]

    def __str__(self) -> str:
        return f"{self.owner_name}/{self.node_pool.name}: {self.queue.name}"

    @property
    def owner_kind(self) -> str:
        return OwnerKind.DEPARTMENT if self.department_id else OwnerKind.PROJECT

    @property
    def owner_name(self) -> str:
        owner = self.department or self.project
        return owner.name if owner else ""
