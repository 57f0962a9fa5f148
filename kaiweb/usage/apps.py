from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "kaiweb.usage"
    label = "usage"
