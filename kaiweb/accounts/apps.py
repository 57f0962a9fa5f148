from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "kaiweb.accounts"
    label = "accounts"

    def ready(self) -> None:
        """A change to a token or a user makes this process forget the tokens it remembers
        (``authentication.RecentTokens``; roles are read per request, as before)."""
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete, post_save
        from rest_framework.authtoken.models import Token

        from kaiweb.accounts.authentication import forget_tokens
        from kaiweb.accounts.models import ApiToken

        for model in (Token, ApiToken, get_user_model()):
            post_save.connect(forget_tokens, sender=model, dispatch_uid=f"kaiweb-forget-tokens-save-{model.__name__}")
            post_delete.connect(forget_tokens, sender=model,
                                dispatch_uid=f"kaiweb-forget-tokens-delete-{model.__name__}")
