"""HTML routes of the accounts app (mounted at /accounts/)."""

from django.urls import path

from kaiweb.accounts import views

app_name = "accounts"
urlpatterns = [
    path("profile/", views.profile, name="profile"),
]
