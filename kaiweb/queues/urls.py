"""HTML routes of the queues app (mounted at /queues/)."""

from __future__ import annotations

from django.urls import path

from kaiweb.queues import views

app_name = "queues"
urlpatterns = [
    path("", views.tree, name="tree"),
    path("id/<int:pk>/", views.by_id, name="by_id"),
    # "-" cannot start a queue name (Kubernetes names start alphanumeric), so this never shadows a queue.
    path("-/add/", views.create, name="create"),
    path("<str:name>/", views.detail, name="detail"),
    path("<str:name>/edit/", views.edit, name="edit"),
    path("<str:name>/edit/preview/", views.preview, name="preview"),
]
