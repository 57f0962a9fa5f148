from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "kaiweb.accounts"
    label = "accounts"
