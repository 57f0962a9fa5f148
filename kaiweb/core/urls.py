"""HTML routes of the core app."""

from django.urls import path  # noqa: F401

app_name = "core"
urlpatterns: list = []
