"""HTML routes of the usage app."""

from django.urls import path  # noqa: F401

app_name = "usage"
urlpatterns: list = []
