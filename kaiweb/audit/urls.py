"""HTML routes of the audit app."""

from django.urls import path  # noqa: F401

app_name = "audit"
urlpatterns: list = []
