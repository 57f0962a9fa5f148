from django.apps import AppConfig


class QueuesConfig(AppConfig):
    name = "kaiweb.queues"
    label = "queues"
