"""Cron strings of five fields (minute hour day-of-month month day-of-week), read by Celery's
`crontab`, and the latest tick at or before a time: where a cron usage window last reset."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from celery.schedules import crontab

MAX_LOOKBACK_DAYS = 4 * 366 + 1  # a 29 February ticks at least once in any four years and a day


def parse_cron(text: str) -> Any:
    """The crontab of `text`; ValueError saying why when it is not five valid fields."""
    fields = str(text or "").split()
    if len(fields) != 5:
        raise ValueError(f"{len(fields)} fields, not 5 (minute hour day-of-month month day-of-week)")
    minute, hour, day_of_month, month, day_of_week = fields
    try:
        return crontab(minute=minute, hour=hour, day_of_month=day_of_month, month_of_year=month,
                       day_of_week=day_of_week)
    except (ValueError, TypeError) as exc:  # celery's ParseException is a ValueError
        raise ValueError(str(exc)) from exc


def previous_tick(text: str, now: datetime) -> datetime:
    """The latest minute at or before `now` (UTC) that the cron string names; bounded to four years back."""
    cron = parse_cron(text)
    now = now.astimezone(UTC)
    # Both day fields restricted: either matches (cron's rule); one restricted: that one.
    dom_any = str(text).split()[2] == "*"
    dow_any = str(text).split()[4] == "*"
    for back in range(MAX_LOOKBACK_DAYS):
        day = (now - timedelta(days=back)).date()
        if day.month not in cron.month_of_year:
            continue
        dom_ok, dow_ok = day.day in cron.day_of_month, (day.isoweekday() % 7) in cron.day_of_week
        if not ((dom_ok or dow_ok) if not (dom_any or dow_any) else (dom_ok and dow_ok)):
            continue
        for hour in sorted(cron.hour, reverse=True):
            for minute in sorted(cron.minute, reverse=True):
                tick = datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)
                if tick <= now:
                    return tick
    raise ValueError(f"cron string {text!r} names no minute in the four years before {now.isoformat()}")
