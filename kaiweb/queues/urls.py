"""HTML routes of the queues app."""

from django.urls import path  # noqa: F401

app_name = "queues"
urlpatterns: list = []
