from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "kaiweb.core"
    label = "core"
