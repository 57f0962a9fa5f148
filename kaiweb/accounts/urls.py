"""HTML routes of the accounts app."""

from django.urls import path  # noqa: F401

app_name = "accounts"
urlpatterns: list = []
