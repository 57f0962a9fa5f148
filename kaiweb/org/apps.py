from django.apps import AppConfig


class OrgConfig(AppConfig):
    name = "kaiweb.org"
    label = "org"
    verbose_name = "Departments, projects and node pools"
