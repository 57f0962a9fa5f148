"""HTML routes of the node pages (mounted at /nodes/, named in the ``cluster`` namespace)."""

from __future__ import annotations

from django.urls import path

from kaiweb.ui import nodes as views

app_name = "cluster"
urlpatterns = [
    path("", views.node_map, name="nodes"),
    path("<str:name>/", views.node_detail, name="node"),
]
