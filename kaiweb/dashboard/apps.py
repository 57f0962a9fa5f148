from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "kaiweb.dashboard"
    label = "dashboard"
