"""HTML routes of the workloads app (mounted at /workloads/)."""

from __future__ import annotations

from django.urls import path

from kaiweb.workloads import views

app_name = "workloads"
urlpatterns = [
    path("", views.workload_list, name="list"),
    path("<int:pk>/", views.workload_detail, name="detail"),
]
