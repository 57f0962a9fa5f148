from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "kaiweb.scheduling"
    label = "scheduling"
