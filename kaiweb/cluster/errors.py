"""The errors of every cluster backend, and what a backend can declare it does (`Capability`).

One module, imported by the backends and by everything that calls them; it imports nothing of the
cluster app, so no backend and no caller can form an import cycle through it.
"""

from __future__ import annotations


class Capability:
    """What a backend can do beyond `ClusterGateway` (see the module docstring)."""

    MIRRORED = "mirrored"
    RECONCILES = "reconciles"
    OWN_CLOCK = "own-clock"
    BULK_APPLY = "bulk-apply"
    DRA = "dra"


class ClusterError(Exception):
    """A cluster call failed. ``operation`` says what was attempted, ``status`` the HTTP status
    (0 when no answer came), and the message is meant for an operator."""

    def __init__(self, operation: str, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(f"{operation}: {message}")
        self.operation = operation
        self.status = status
        self.reason = reason
        self.detail = message


class ClusterUnavailable(ClusterError):
    """The API server kept answering 429/5xx or refused connections after the bounded retries."""


class ClusterTimeout(ClusterError):
    """The API server did not answer within the request timeout, after the bounded retries."""


class ClusterRejected(ClusterError):
    """The API server refused the request (a 4xx other than the idempotent cases)."""
