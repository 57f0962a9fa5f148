from django.apps import AppConfig


class DevkubeConfig(AppConfig):
    name = "devkube"
    label = "devkube"
