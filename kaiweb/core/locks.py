"""Named mutual-exclusion locks that work across processes and machines.

On Postgres a lock is a session-level advisory lock (`pg_try_advisory_lock(key, subkey)`):
it is held by the database connection, so a worker that dies (even by SIGKILL) releases it
when its connection closes, and every worker on every machine sees it. On SQLite, which has
no advisory locks, a file lock (`flock`) under the var directory plays the same role for the
processes of one machine — enough for `make run`, where web, worker and beat share a file.

Keys live in one registry (`LOCK_KEYS`) so that two features never share a number by accident.
A shard name becomes the second half of the key (a stable CRC32), so each shard has its own lock.
"""

from __future__ import annotations

import fcntl
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connections

# One number per feature; never reuse a number for something else.
LOCK_KEYS: dict[str, int] = {
    "scheduling-cycle": 7100,
    "start-estimates": 7110,
    "usage-accounting": 7200,
    "usage-retention": 7300,
    "seed-demo": 7400,
    "usage-database": 7500,
    "org-publish": 7600,
}


def subkey(shard: str) -> int:
    """A stable signed 32-bit number for a shard name (Postgres' int4 range)."""
    value = zlib.crc32(shard.encode("utf-8"))
    return value - (1 << 32) if value >= (1 << 31) else value


def _key(name: str) -> int:
    try:
        return LOCK_KEYS[name]
    except KeyError:
        raise KeyError(f"lock name {name!r} is not registered in LOCK_KEYS ({', '.join(sorted(LOCK_KEYS))})") from None


@contextmanager
def advisory_lock(name: str, shard: str = "default", *, wait: bool = False, using: str = "default") -> Iterator[bool]:
    """Hold the lock `name` for `shard` while the block runs; yield whether it was obtained.

    With `wait=False` (what tasks use) a second holder gets `False` at once and should return
    without doing the work; with `wait=True` it blocks until the lock is free.
    """
    key = _key(name)
    sub = subkey(shard)
    connection = connections[using]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            if wait:
                cursor.execute("SELECT pg_advisory_lock(%s, %s)", [key, sub])
                got = True
            else:
                cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [key, sub])
                got = bool(cursor.fetchone()[0])
        try:
            yield got
        finally:
            if got:
                _pg_unlock(connection, key, sub)
        return
    with _file_lock(f"{name}-{sub & 0xFFFFFFFF:08x}-{_database_tag(connection)}", wait=wait) as got:
        yield got


def _database_tag(connection: Any) -> str:
    """Which database a file lock guards: two databases never share a lock. An in-memory database
    lives in one process, so its locks are that process's own."""
    name = str(connection.settings_dict.get("NAME") or "")
    if not name or "memory" in name:
        name = f"{name}@{os.getpid()}"
    return f"{zlib.crc32(name.encode('utf-8')):08x}"


def _pg_unlock(connection: Any, key: int, sub: int) -> None:
    # If the connection was lost, Postgres has already released the lock with the session.
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [key, sub])
    except Exception:  # noqa: BLE001 - nothing to release on a dead connection
        connection.close_if_unusable_or_obsolete()


def lock_dir() -> Path:
    path = Path(getattr(settings, "VAR_DIR", ".")) / "locks"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def _file_lock(filename: str, *, wait: bool) -> Iterator[bool]:
    # flock locks belong to the open file description: two opens conflict even in one process,
    # and the kernel drops the lock when the holder dies.
    fd = os.open(lock_dir() / f"{filename}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            got = True
        except BlockingIOError:
            got = False
        try:
            yield got
        finally:
            if got:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def is_locked(name: str, shard: str = "default", using: str = "default") -> bool:
    """Whether someone holds the lock now (for readiness and tests); takes and releases it."""
    with advisory_lock(name, shard, wait=False, using=using) as got:
        return not got
