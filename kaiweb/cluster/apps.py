from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "kaiweb.cluster"
    label = "cluster"
