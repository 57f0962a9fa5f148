"""HTML routes of the dashboard app: the overview at /."""

from __future__ import annotations

from django.urls import path

from kaiweb.dashboard import views

app_name = "dashboard"
urlpatterns = [
    path("", views.overview, name="overview"),
]
