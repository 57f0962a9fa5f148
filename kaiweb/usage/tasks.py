"""Celery tasks of the usage app: accounting every minute, retention and roll-up daily."""

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
