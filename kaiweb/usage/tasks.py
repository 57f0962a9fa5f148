"""Celery tasks of the usage app: accounting every minute, retention and roll-up daily, and the
shards' Prometheus usage databases when each one's fetchInterval has passed."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="usage.account", acks_late=True, ignore_result=True)
def account_usage_task() -> int:
    """Integrate what every queue has allocated now into its current usage bucket."""
    from kaiweb.core.locks import advisory_lock
    from kaiweb.usage.accounting import account_usage

    with advisory_lock("usage-accounting", wait=False) as got:
        if not got:
            return 0
        return account_usage()


@shared_task(name="usage.retention", acks_late=True, ignore_result=True)
def usage_retention_task() -> dict[str, int]:
    """Roll old minute buckets up into hours and days, and drop what is past retention."""
    from kaiweb.core.locks import advisory_lock
    from kaiweb.usage.accounting import roll_up_and_expire

    with advisory_lock("usage-retention", wait=False) as got:
        if not got:
            return {}
        return roll_up_and_expire()


@shared_task(name="usage.fetch_usage_db", acks_late=True, ignore_result=True)
def fetch_usage_db_task() -> dict[str, str]:
    """Read the usage database of every shard that names one and is due (its fetchInterval passed)."""
    from kaiweb.core.locks import advisory_lock
    from kaiweb.usage.usagedb import refresh_due

    with advisory_lock("usage-database", wait=False) as got:
        if not got:
            return {}
        return refresh_due()
