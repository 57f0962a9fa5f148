"""Login throttling: failed sign-ins and bad API tokens are counted per client address and per user name.

After ``KAI_LOGIN_MAX_FAILURES`` failures within ``KAI_LOGIN_LOCKOUT_SECONDS`` the address (or the
user name) is locked out for that long: the login form answers 429 without checking the password,
and token authentication answers 429 without looking the token up. A successful sign-in clears the
counts of its address and user name. Counts live in Django's cache (shared by every web process
when DJANGO_CACHE_URL points at Redis).
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from django.core.cache import cache

_PREFIX = "kaiweb:login-failures:"


def client_address(request: Any) -> str:
    """The address failures are counted for: the peer's address (a trusted proxy's is its own)."""
    return str(getattr(request, "META", {}).get("REMOTE_ADDR") or "unknown")


def _keys(request: Any, username: str | None) -> list[str]:
    keys = [f"{_PREFIX}addr:{client_address(request)}"]
    if username:
        digest = hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]
        keys.append(f"{_PREFIX}user:{digest}")
    return keys


def locked_out(request: Any, username: str | None = None) -> bool:
    """Too many recent failures from this address, or for this user name."""
    limit = int(settings.KAI_LOGIN_MAX_FAILURES)
    if limit <= 0:
        return False
    counts = cache.get_many(_keys(request, username))
    return any(int(n) >= limit for n in counts.values())


def record_failure(request: Any, username: str | None = None) -> None:
    """Count one failed attempt (the window starts with the first failure)."""
    timeout = int(settings.KAI_LOGIN_LOCKOUT_SECONDS)
    for key in _keys(request, username):
        if not cache.add(key, 1, timeout):
            try:
                cache.incr(key)
            except ValueError:  # expired between add and incr
                cache.add(key, 1, timeout)


def clear(request: Any, username: str | None = None) -> None:
    """Forget the failures of this address and user name (after a successful sign-in)."""
    cache.delete_many(_keys(request, username))


def lockout_message() -> str:
    minutes = max(1, round(int(settings.KAI_LOGIN_LOCKOUT_SECONDS) / 60))
    return (f"Too many failed sign-in attempts: try again in {minutes} minute(s) "
            f"(after {settings.KAI_LOGIN_MAX_FAILURES} failures, sign-in is paused).")
