"""Which state of the data a cached listing shows.

``listing_version("workloads")`` names the committed state of everything the workloads listing
shows (workloads, pods, why-pending, and the names of queues, classes and clusters): Postgres
triggers (workloads migration 0006) count the transactions that changed it, in commit order. A
listing computed after reading the version shows that state or a later one, so an answer cached
under it is never older than the version says. None means "do not cache": not Postgres, no
counter yet, or a request inside a transaction that has written (it sees its own changes, which
no version names yet).
"""

from __future__ import annotations

from django.db import connection


def listing_version(name: str) -> str | None:
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT txid_current_if_assigned(), (SELECT value::text || ':' || epoch::text "
                       "FROM core_changecounter WHERE name = %s)", [name])
        own, version = cursor.fetchone()
    return None if own is not None else version
