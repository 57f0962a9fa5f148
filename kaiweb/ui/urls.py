"""HTML routes of the UI package: the overview at /."""

from __future__ import annotations

from django.urls import path

from kaiweb.ui import views

app_name = "ui"
urlpatterns = [
    path("", views.overview, name="overview"),
]
