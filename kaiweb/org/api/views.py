"""Viewsets of the org API: node pools, departments and projects, addressed by name. Writes go through
`kaiweb.org.services` (KRM's rules, audited); platform admins change pools and departments, department
admins their departments' projects, every signed-in user reads."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from rest_framework.exceptions import PermissionDenied

from kaiweb.accounts import roles
from kaiweb.core.api.base import ByNameLookupMixin, ServiceModelViewSet, named_detail
from kaiweb.core.services import Change
from kaiweb.org import services
from kaiweb.org.api import serializers as s
from kaiweb.org.models import Department, NodePool, Project


def _with_people(change: Change[Any], people: list[str] | None, view: Any) -> Change[Any]:
    """The owner's admins or members set after its write, in the same transaction."""
    if people is not None:
        services.set_people(change.obj, people, actor=view.request.user, source=view.audit_source)
    return change


@named_detail("The node pool's name, or its numeric id.")
class NodePoolViewSet(ByNameLookupMixin, ServiceModelViewSet):
    """Node pools of the cluster the org layer manages; each is scheduled by its own shard."""

    serializer_class = s.NodePoolSerializer
    ordering_fields = ("name", "created")
    ordering = ("name",)
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> Any:
        return NodePool.objects.select_related("shard", "cluster")

    def service_create(self, data: dict[str, Any]) -> Change[NodePool]:
        return services.create_node_pool(data, actor=self.request.user, source=self.audit_source)

    def service_update(self, instance: NodePool, data: dict[str, Any]) -> Change[NodePool]:
        return services.update_node_pool(instance, data, actor=self.request.user, source=self.audit_source)

    def service_delete(self, instance: NodePool) -> None:
        services.delete_node_pool(instance, actor=self.request.user, source=self.audit_source)


@named_detail("The department's name, or its numeric id.")
class DepartmentViewSet(ByNameLookupMixin, ServiceModelViewSet):
    """Departments: their queue per node pool bounds their projects' queues there (platform admins change them)."""

    serializer_class = s.DepartmentSerializer
    ordering_fields = ("name", "created")
    ordering = ("name",)
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> Any:
        return Department.objects.prefetch_related("admins", "projects")

    @transaction.atomic
    def service_create(self, data: dict[str, Any]) -> Change[Department]:
        people = data.pop("admins", None)
        return _with_people(services.create_department(data, actor=self.request.user, source=self.audit_source),
                            people, self)

    @transaction.atomic
    def service_update(self, instance: Department, data: dict[str, Any]) -> Change[Department]:
        people = data.pop("admins", None)
        return _with_people(services.update_department(instance, data, actor=self.request.user,
                                                       source=self.audit_source), people, self)

    def service_delete(self, instance: Department) -> None:
        services.delete_department(instance, actor=self.request.user, source=self.audit_source)


@named_detail("The project's name, or its numeric id.")
class ProjectViewSet(ByNameLookupMixin, ServiceModelViewSet):
    """Projects: a queue per node pool, a namespace, and KRM's quota status per pool and in total. Department
    admins create, change and delete their departments' projects; platform admins every project."""

    serializer_class = s.ProjectSerializer
    ordering_fields = ("name", "created")
    ordering = ("name",)
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    department_scoped = True

    def get_queryset(self) -> Any:
        return Project.objects.select_related("department").prefetch_related("members")

    def _require_department(self, name: Any) -> None:
        department = Department.objects.filter(name=name).first() if isinstance(name, str) and name else None
        if department is None and isinstance(name, str) and name:
            return  # the service answers 400: no such department
        if not roles.can_edit_project(self.request.user, department):
            where = f"department {department.name}" if department else "no department"
            raise PermissionDenied(f"you may not put projects in {where}; ask a platform admin or its department admin")

    @transaction.atomic
    def service_create(self, data: dict[str, Any]) -> Change[Project]:
        self._require_department(data.get("department"))
        people = data.pop("members", None)
        return _with_people(services.create_project(data, actor=self.request.user, source=self.audit_source),
                            people, self)

    @transaction.atomic
    def service_update(self, instance: Project, data: dict[str, Any]) -> Change[Project]:
        if "department" in data:
            self._require_department(data["department"])
        people = data.pop("members", None)
        return _with_people(services.update_project(instance, data, actor=self.request.user,
                                                    source=self.audit_source), people, self)

    def service_delete(self, instance: Project) -> None:
        services.delete_project(instance, actor=self.request.user, source=self.audit_source)
