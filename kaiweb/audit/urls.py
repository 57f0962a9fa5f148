"""HTML routes of the audit app (mounted at /audit/)."""

from __future__ import annotations

from django.urls import path

from kaiweb.audit import views

app_name = "audit"
urlpatterns = [
    path("", views.audit_list, name="list"),
]
