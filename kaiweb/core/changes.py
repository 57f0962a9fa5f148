"""Which state of the data a cached answer shows.

``listing_version(name)`` names a committed state of what one cached answer shows. Postgres
triggers count, in commit order, the transactions that changed it: "workloads" for the workloads
listing (workloads, pods, why-pending, and the names of queues, classes and clusters; workloads
migration 0006), "queues" for the queue tree (queues and their recorded status, so once per
cycle; scheduling migration 0006). An answer computed after reading the version shows that state
or a later one, so an answer cached under it is never older than the version says. None means
"do not cache": not Postgres, no counter yet, or a request inside a transaction that has written
(it sees its own changes, which no version names yet).
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
