"""HTML routes of the reports app (mounted at /reports/)."""

from __future__ import annotations

from django.urls import path

from kaiweb.reports import views

app_name = "reports"
urlpatterns = [
    path("", views.report_list, name="list"),
    path("new/", views.report_edit, name="create"),
    path("<int:pk>/", views.report_detail, name="detail"),
    path("<int:pk>/edit/", views.report_edit, name="edit"),
    path("<int:pk>/run/", views.report_run_now, name="run"),
    path("runs/<int:pk>/", views.run_detail, name="run_detail"),
    path("runs/<int:pk>/<str:fmt>/", views.run_download, name="download"),
]
