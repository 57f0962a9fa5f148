"""Org pages: the tree of departments → projects per node pool, a node pool's page, a project's page, and the
forms for pools, departments and projects, with the fair-share preview before a save. Every change goes
through `kaiweb.org.services` (KRM's rules, audited); who may do what is `kaiweb.accounts.roles`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from kaiweb.accounts import roles
from kaiweb.audit.choices import AuditSource
from kaiweb.org import display, services, status
from kaiweb.org.choices import PoolPhase
from kaiweb.org.forms import SHOWN, DepartmentForm, NodePoolForm, OwnerForm, ProjectForm
from kaiweb.org.models import Department, NodePool, Project
from kaiweb.ui import access
from kaiweb.ui.pages import render_page

PHASE_BADGE = {PoolPhase.READY: "green", PoolPhase.EMPTY: "gray", PoolPhase.UNSCHEDULABLE: "red",
               PoolPhase.MISSING_PREREQUISITES: "orange", PoolPhase.DELETING: "orange"}


def _refuse(request: HttpRequest, what: str, who: str) -> HttpResponse:
    return render(request, "errors/403.html", {
        "reason": f"Your role ({access.role_of(request.user).label}) cannot {what}: {who}."}, status=403)


def _delete(request: HttpRequest, kind: str, obj: Any, remove: Callable[..., None], back: HttpResponse,
            done: str) -> HttpResponse:
    """Delete through the service; a refusal goes back to the object's page with each reason."""
    try:
        remove(obj, actor=request.user, source=AuditSource.UI)
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, f"{kind} {obj.name} was not deleted: {message}")
        return back
    messages.success(request, done)
    return redirect("org:tree")


def _errors_to_form(form: Any, exc: ValidationError) -> None:
    """The service's errors on the field they name (others on top of the form, with their key)."""
    for key, errors in (exc.message_dict.items() if hasattr(exc, "error_dict") else [(None, exc.messages)]):
        target = key if key in form.fields and not form.fields[key].disabled else None
        for message in errors:
            form.add_error(target, message if target or key in (None, "__all__") else f"{key}: {message}")


def tree(request: HttpRequest) -> HttpResponse:
    """Departments → projects, a line per node pool each; the node pools with their phase."""
    departments, loose = display.org_tree()
    user = request.user
    context = {
        "departments": departments, "loose": loose, "pools": display.pool_summaries(),
        "phase_badge": PHASE_BADGE, "can_pools": roles.can_manage_node_pools(user),
        "can_departments": roles.can_edit_department(user),
        "editable_departments": None if roles.is_platform_admin(user) else roles.administered_department_ids(user),
        "can_add_project": roles.is_platform_admin(user) or roles.is_department_admin(user),
        "member_of": set(user.org_projects.values_list("pk", flat=True)) if user.is_authenticated else set(),
    }
    return render_page(request, "org/tree.html", context, partial="org/partials/tree_body.html")


# ------------------------------------------------------------------------------------------ node pools


def pool_detail(request: HttpRequest, name: str) -> HttpResponse:
    pool = get_object_or_404(NodePool.objects.select_related("shard", "cluster"), name=name)
    nodes = display.pool_nodes(pool).order_by("name")[:500]
    return render(request, "org/pool.html", {
        "pool": pool, "nodes": nodes, "phase_badge": PHASE_BADGE, "can_pools": roles.can_manage_node_pools(request.user),
        "owners": pool.owner_queues.select_related("queue", "department", "project").order_by("queue__name"),
        "delete_problems": services.pool_delete_problems(pool) if roles.can_manage_node_pools(request.user) else [],
    })


def pool_form(request: HttpRequest, name: str | None = None) -> HttpResponse:
    """Make a pool, or change its shard's settings (its name and label pair are fixed)."""
    if not roles.can_manage_node_pools(request.user):
        return _refuse(request, "add or change node pools", "platform admins manage node pools")
    pool = get_object_or_404(NodePool.objects.select_related("shard"), name=name) if name else None
    form = NodePoolForm(request.POST or None, pool=pool)
    if request.method == "POST" and form.is_valid():
        try:
            if pool is None:
                change = services.create_node_pool(form.values(), actor=request.user, source=AuditSource.UI)
            else:
                change = services.update_node_pool(pool, form.values(), actor=request.user, source=AuditSource.UI)
        except ValidationError as exc:
            _errors_to_form(form, exc)
        else:
            messages.success(request, f"Node pool {change.obj.name} saved ({change.obj.phase}: {change.obj.message}).")
            return redirect("org:pool", name=change.obj.name)
    return render(request, "org/pool_form.html", {"form": form, "pool": pool})


@require_POST
def pool_delete(request: HttpRequest, name: str) -> HttpResponse:
    pool = get_object_or_404(NodePool, name=name)
    if not roles.can_manage_node_pools(request.user):
        return _refuse(request, "delete node pools", "platform admins manage node pools")
    return _delete(request, "Node pool", pool, services.delete_node_pool, redirect("org:pool", name=pool.name),
                   f"Node pool {name} deleted.")


# ------------------------------------------------------------------------------------------ departments, projects


def _pool_names() -> list[str]:
    return list(NodePool.objects.order_by("name").values_list("name", flat=True))


def _proposed(owner: Department | Project, values: dict[str, Any]) -> Department | Project:
    """An unsaved copy of `owner` with the form's values, its entries in ``_proposed_entries``."""
    proposed = type(owner).objects.select_related(*(["department"] if isinstance(owner, Project) else [])).get(
        pk=owner.pk) if owner.pk else owner
    for key, value in values.items():
        if key == "queues":
            proposed._proposed_entries = services.parse_entries(value)
        elif key == "department":
            proposed.department = Department.objects.filter(name=value).first() if value else None
        else:
            setattr(proposed, key, value)
    return proposed


def _owner_page(request: HttpRequest, form: OwnerForm, owner: Department | Project, template_context: dict[str, Any],
                save: Any) -> HttpResponse:
    """The form; with ``action=preview`` the fair shares now and after (nothing saved); else the save."""
    context: dict[str, Any] = {"form": form, "owner": owner, **template_context}
    if request.method == "POST" and form.is_valid():
        values = form.values()
        if request.POST.get("action") == "preview":
            try:
                context["preview"] = display.preview(_proposed(owner, values))
            except ValidationError as exc:
                _errors_to_form(form, exc)
        else:
            try:
                with transaction.atomic():
                    change = save(values)
                    services.set_people(change.obj, form.people(), actor=request.user, source=AuditSource.UI)
            except ValidationError as exc:
                _errors_to_form(form, exc)
            else:
                messages.success(request, f"{type(change.obj)._meta.verbose_name.capitalize()} {change.obj.name} "
                                          "saved.")
                for warning in change.warnings:
                    messages.warning(request, warning)
                if isinstance(change.obj, Project):
                    return redirect("org:project", name=change.obj.name)
                return redirect("org:tree")
    return render(request, "org/owner_form.html", context)


def department_form(request: HttpRequest, name: str | None = None) -> HttpResponse:
    if not roles.can_edit_department(request.user):
        return _refuse(request, "add or change departments", "platform admins set a department's quota; "
                                "department admins run its projects")
    department = get_object_or_404(Department, name=name) if name else Department()
    entries = services.entries_of(department) if department.pk else ()
    form = DepartmentForm(request.POST or None, pools=_pool_names(), owner=department if department.pk else None,
                          entries=entries)

    def save(values: dict[str, Any]) -> Any:
        if department.pk:
            return services.update_department(department, values, actor=request.user, source=AuditSource.UI)
        return services.create_department(values, actor=request.user, source=AuditSource.UI)

    return _owner_page(request, form, department, {"kind": "department"}, save)


def _departments_for(user: Any) -> tuple[list[str], bool]:
    names = Department.objects.order_by("name").values_list("name", "pk")
    if roles.is_platform_admin(user):
        return [n for n, _ in names], True
    mine = roles.administered_department_ids(user)
    return [n for n, pk in names if pk in mine], False


def project_form(request: HttpRequest, name: str | None = None) -> HttpResponse:
    project = get_object_or_404(Project.objects.select_related("department"), name=name) if name else Project()
    if project.pk and not roles.can_edit_project(request.user, project.department_id):
        return _refuse(request, f"change project {project.name}", "its department's admins and platform admins do")
    departments, allow_none = _departments_for(request.user)
    if not project.pk and not (allow_none or departments):
        return _refuse(request, "add projects", "department admins add them to their departments, platform admins "
                                "anywhere")
    form = ProjectForm(request.POST or None, pools=_pool_names(), owner=project if project.pk else None,
                       entries=services.entries_of(project) if project.pk else (), departments=departments,
                       allow_none=allow_none,
                       initial={} if project.pk else {"department": request.GET.get("department", "")})

    def save(values: dict[str, Any]) -> Any:
        if project.pk:
            return services.update_project(project, values, actor=request.user, source=AuditSource.UI)
        return services.create_project(values, actor=request.user, source=AuditSource.UI)

    return _owner_page(request, form, project, {"kind": "project"}, save)


def project_detail(request: HttpRequest, name: str) -> HttpResponse:
    """A project's queues and KRM's quota status per pool and in total; deleting it, or why it cannot go."""
    project = get_object_or_404(Project.objects.select_related("department").prefetch_related("members"), name=name)
    can_edit = roles.can_edit_project(request.user, project.department_id)
    return render(request, "org/project.html", {
        "project": project, "status": status.project_quota_status(project), "can_edit": can_edit,
        "queues": project.owned_queues.select_related("queue", "queue__parent", "node_pool").order_by("node_pool__name"),
        "delete_problems": services.project_delete_problems(project) if can_edit else [],
        "is_member": roles.is_project_member(request.user, project), "resources": SHOWN,
    })


@require_POST
def project_delete(request: HttpRequest, name: str) -> HttpResponse:
    project = get_object_or_404(Project, name=name)
    if not roles.can_edit_project(request.user, project.department_id):
        return _refuse(request, f"delete project {project.name}", "its department's admins and platform admins do")
    return _delete(request, "Project", project, services.delete_project, redirect("org:project", name=project.name),
                   f"Project {name} deleted, with its queues.")


@require_POST
def department_delete(request: HttpRequest, name: str) -> HttpResponse:
    department = get_object_or_404(Department, name=name)
    if not roles.can_edit_department(request.user):
        return _refuse(request, "delete departments", "platform admins do")
    return _delete(request, "Department", department, services.delete_department,
                   redirect("org:department_edit", name=department.name), f"Department {name} deleted, with its queues.")
