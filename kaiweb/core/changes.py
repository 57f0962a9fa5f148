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

import hashlib
from typing import Any

from django.db import connection

#: The trigger function: moves the counter named by its argument once per committing transaction
#: (the transaction's mark, a setting local to it, tells the later rows of the same transaction).
#: Each trigger is a deferred constraint trigger: it runs at commit, after every statement, so
#: taking the counter's row lock there cannot deadlock with the transaction's other locks, and
#: committing writers move the counter in their commit order.
COUNT_FUNCTION = """
CREATE OR REPLACE FUNCTION kaiweb_count_listing_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    counter text := coalesce(TG_ARGV[0], 'workloads');
    mark text := 'kaiweb.changed_' || counter;
BEGIN
    IF current_setting(mark, true) IS DISTINCT FROM txid_current()::text THEN
        INSERT INTO core_changecounter (name, value, epoch) VALUES (counter, 1, gen_random_uuid())
            ON CONFLICT (name) DO UPDATE SET value = core_changecounter.value + 1;
        PERFORM set_config(mark, txid_current()::text, true);
    END IF;
    RETURN NULL;
END $$;
"""


def install_counter(schema_editor: Any, name: str, trigger: str, tables: tuple[str, ...]) -> None:
    """For a migration: the counter ``name``, moved by trigger ``trigger`` on each of ``tables``
    (Postgres only; elsewhere nothing is cached, so nothing is counted)."""
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(COUNT_FUNCTION)
    schema_editor.execute("INSERT INTO core_changecounter (name, value, epoch) VALUES (%s, 0, gen_random_uuid()) "
                          "ON CONFLICT (name) DO NOTHING", [name])
    for table in tables:
        schema_editor.execute(
            f"CREATE CONSTRAINT TRIGGER {trigger} AFTER INSERT OR UPDATE OR DELETE ON {table} "
            f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION kaiweb_count_listing_change('{name}')")


def remove_counter(schema_editor: Any, name: str, trigger: str, tables: tuple[str, ...]) -> None:
    """Undo ``install_counter``; the shared function goes with the last counter."""
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in tables:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {table}")
    schema_editor.execute("DELETE FROM core_changecounter WHERE name = %s", [name])
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM core_changecounter")
        left = cursor.fetchone()[0]
    if not left:
        schema_editor.execute("DROP FUNCTION IF EXISTS kaiweb_count_listing_change()")


def listing_version(name: str) -> str | None:
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT txid_current_if_assigned(), (SELECT value::text || ':' || epoch::text "
                       "FROM core_changecounter WHERE name = %s)", [name])
        own, version = cursor.fetchone()
    return None if own is not None else version


def state_key(name: str, *parts: str) -> str | None:
    """The cache key of an answer about the committed state that counter ``name`` names, for the
    request ``parts`` (e.g. its URL); None when the answer must not be cached (``listing_version``)."""
    version = listing_version(name)
    if version is None:
        return None
    return f"state:{name}:" + hashlib.sha256(" ".join((version, *parts)).encode()).hexdigest()
