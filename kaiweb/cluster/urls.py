"""HTML routes of the cluster app (mounted at /nodes/)."""

from __future__ import annotations

from django.urls import path

from kaiweb.cluster import views

app_name = "cluster"
urlpatterns = [
    path("", views.node_map, name="nodes"),
    path("<str:name>/", views.node_detail, name="node"),
]
