"""HTML routes of the scheduling app."""

from django.urls import path  # noqa: F401

app_name = "scheduling"
urlpatterns: list = []
