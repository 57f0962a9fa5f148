"""HTML routes of the scheduling app: /preemptions/ and /cycles/."""

from __future__ import annotations

from django.urls import path

from kaiweb.scheduling import views

app_name = "scheduling"
urlpatterns = [
    path("preemptions/", views.preemption_list, name="preemptions"),
    path("preemptions/export.csv", views.preemption_csv, name="preemptions_csv"),
    path("preemptions/<int:pk>/", views.preemption_detail, name="preemption"),
    path("cycles/", views.cycle_list, name="cycles"),
    path("cycles/<int:pk>/", views.cycle_detail, name="cycle"),
]
