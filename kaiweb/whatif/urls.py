"""HTML routes of the what-if app (mounted at /what-if/)."""

from __future__ import annotations

from django.urls import path

from kaiweb.whatif import views

app_name = "whatif"
urlpatterns = [
    path("", views.page, name="page"),
    path("runs/<int:pk>/", views.run_status, name="run"),
]
