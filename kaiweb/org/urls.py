"""HTML routes of the org app (mounted at /org/). "-" cannot start a Kubernetes name, so "-/add/" never
shadows an object."""

from __future__ import annotations

from django.urls import path

from kaiweb.org import views

app_name = "org"
urlpatterns = [
    path("", views.tree, name="tree"),
    path("pools/-/add/", views.pool_form, name="pool_create"),
    path("pools/<str:name>/", views.pool_detail, name="pool"),
    path("pools/<str:name>/edit/", views.pool_form, name="pool_edit"),
    path("pools/<str:name>/delete/", views.pool_delete, name="pool_delete"),
    path("departments/-/add/", views.department_form, name="department_create"),
    path("departments/<str:name>/edit/", views.department_form, name="department_edit"),
    path("departments/<str:name>/delete/", views.department_delete, name="department_delete"),
    path("projects/-/add/", views.project_form, name="project_create"),
    path("projects/<str:name>/", views.project_detail, name="project"),
    path("projects/<str:name>/edit/", views.project_form, name="project_edit"),
    path("projects/<str:name>/delete/", views.project_delete, name="project_delete"),
]
