from django.apps import AppConfig


class WorkloadsConfig(AppConfig):
    name = "kaiweb.workloads"
    label = "workloads"
