"""HTML and webhook routes of the admission app (mounted at /admission/)."""

from django.urls import path

from kaiweb.admission import views

app_name = "admission"
urlpatterns = [
    path("mutate", views.mutate, name="mutate"),
    path("validate", views.validate, name="validate"),
    path("bindings/", views.bindings, name="bindings"),
]
