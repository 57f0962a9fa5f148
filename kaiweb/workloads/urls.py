"""HTML routes of the workloads app."""

from django.urls import path  # noqa: F401

app_name = "workloads"
urlpatterns: list = []
