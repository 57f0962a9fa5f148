"""Liveness of the long-running processes that serve no HTTP: Celery beat and the cluster watcher.

Each touches a file while its loop turns (`beat(name)`); the pod's exec probe runs
``python -m kaiweb.core.heartbeat NAME --max-age SECONDS``, which fails when the file is older than
that or absent. The check imports nothing of Django, so a probe costs a few milliseconds. The folder
is ``KAI_HEARTBEAT_DIR`` (default: the system's temporary folder), the same for the process and its
probe.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

NAMES = ("beat", "watcher")


def folder() -> Path:
    return Path(os.environ.get("KAI_HEARTBEAT_DIR") or Path(tempfile.gettempdir()) / "kaiweb-heartbeat")


def beat(name: str) -> None:
    """Record that `name`'s loop is turning now (a failure to write is never fatal to the loop)."""
    try:
        path = folder()
        path.mkdir(parents=True, exist_ok=True)
        (path / name).touch()
    except OSError:
        pass


def age(name: str, now: float | None = None) -> float | None:
    """Seconds since `name` last beat; None when it never has."""
    try:
        mtime = (folder() / name).stat().st_mtime
    except OSError:
        return None
    return max(0.0, (now if now is not None else time.time()) - mtime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Exit 0 when the named process beat within --max-age seconds.")
    parser.add_argument("name", choices=NAMES)
    parser.add_argument("--max-age", type=float, default=120.0)
    args = parser.parse_args(argv)
    seen = age(args.name)
    if seen is None:
        print(f"{args.name}: no heartbeat in {folder()}", file=sys.stderr)
        return 1
    if seen > args.max_age:
        print(f"{args.name}: last heartbeat {seen:.0f}s ago (more than {args.max_age:g}s)", file=sys.stderr)
        return 1
    print(f"{args.name}: alive ({seen:.0f}s ago)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
