"""Models of the accounts app: named API tokens."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

KEY_PREFIX = "kw_"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiToken(models.Model):
    """A named token a user makes for automation: the key is shown once and stored only as its hash.

    It works as `Authorization: Token <key>` (or `Bearer <key>`) on every API and CSV URL until it
    expires or its owner revokes it."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=64)
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12, help_text="The key's first characters, to recognise it.")
    created = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created", "-id")
        constraints = [models.UniqueConstraint(fields=("user", "name"), condition=models.Q(revoked_at__isnull=True),
                                               name="accounts_apitoken_unique_live_name")]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, user: object, name: str, expires_at: object = None) -> tuple[ApiToken, str]:
        """A new token and its key (the only time the key exists in clear)."""
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name, key_hash=hash_key(key), prefix=key[:10],
                                   expires_at=expires_at)
        return token, key

    @property
    def live(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())


class Preference(models.Model):
    """A user's display settings: the time zone every page shows times in (stored times stay UTC)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="preference")
    time_zone = models.CharField(max_length=64, default="UTC", help_text="An IANA zone, e.g. Europe/Paris.")

    def __str__(self) -> str:
        return f"{self.user} ({self.time_zone})"
