"""HTML routes of the dashboard app."""

from django.urls import path  # noqa: F401

app_name = "dashboard"
urlpatterns: list = []
