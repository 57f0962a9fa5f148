from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "kaiweb.audit"
    label = "audit"
