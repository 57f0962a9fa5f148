"""HTML routes of the cluster app."""

from django.urls import path  # noqa: F401

app_name = "cluster"
urlpatterns: list = []
