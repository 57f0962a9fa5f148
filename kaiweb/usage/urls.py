"""HTML routes of the usage app (mounted at /usage/)."""

from __future__ import annotations

from django.urls import path

from kaiweb.usage import views

app_name = "usage"
urlpatterns = [
    path("", views.usage_report, name="report"),
    path("export.csv", views.usage_csv, name="csv"),
    path("export.json", views.usage_json, name="json"),
    path("idle-gpus/", views.idle_gpus_panel, name="idle_gpus"),
    path("node-utilization/", views.node_utilization_panel, name="node_utilization"),
]
