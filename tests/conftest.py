"""Shared fixtures: personas (platform admin, queue admin, viewer) and API clients."""

from __future__ import annotations
