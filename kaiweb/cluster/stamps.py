"""KAI's stamps on a PodGroup and the workload fields that keep them, read and written as KAI does.

KAI keeps three times on each PodGroup, as annotations (`POD_GROUP_STAMPS`): when the gang last
started (its minimum runtime counts from it), when it was last evicted (its preemption delay starts
again from it) and since when it has been stale (its staleness grace counts from it). kaiweb keeps
them on the workload: ``last_start_at``, ``last_eviction_at``, ``stale_since``. So that a cluster moved
from KAI to kaiweb, or back, loses none of them, both sides follow one rule, `later`:

* reading (`merged`; the mirror applies it to each PodGroup the watcher sees added and at each full
  sync): where the row and the annotation disagree, the later time wins;
* writing (`annotations_wanted`; the write-back after each cycle): a row's time goes onto the PodGroup
  where it is later than what the PodGroup says, in KAI's format (RFC 3339, UTC, whole seconds, so two
  times in the same second are the same stamp). A gang that is no longer stale loses its stale stamp,
  and a stamp that cannot be read is taken away when the row has none, as KAI does with both; a start
  or an eviction that can be read is never taken away.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kaiweb.cluster.backends.kubernetes.parsing import read_stamp, stamp_text
from kaiweb.cluster.backends.types import POD_GROUP_STAMPS, STALE_SINCE_ANNOTATION, ObservedPodGroup

FIELDS = tuple(f for f, _ in POD_GROUP_STAMPS)


def later(ours: datetime | None, theirs: datetime | None) -> datetime | None:
    """The one rule where the database and a PodGroup disagree: the later time; none is no time at all."""
    if ours is None or theirs is None:
        return theirs if ours is None else ours
    return max(ours, theirs)


def merged(row: Mapping[str, datetime | None], group: ObservedPodGroup) -> dict[str, datetime]:
    """The fields of a workload's row (field → time) that its PodGroup's stamps change: each
    stamp later than the row's time, or where the row has none."""
    out: dict[str, datetime] = {}
    for field in FIELDS:
        theirs = getattr(group, field)
        if theirs is not None and later(row.get(field), theirs) != row.get(field):
            out[field] = theirs
    return out


def _second(at: datetime) -> datetime:
    return at.replace(microsecond=0)


def annotations_wanted(row: Mapping[str, datetime | None], annotations: Mapping[str, Any]) -> dict[str, str | None]:
    """What to merge into a PodGroup's annotations so that they hold its workload's times (``row``:
    field → time): annotation → text, or None to take it away. Empty when nothing is to be written."""
    out: dict[str, str | None] = {}
    for field, key in POD_GROUP_STAMPS:
        ours, text = row.get(field), annotations.get(key)
        if ours is not None and text == stamp_text(ours):
            continue  # says it already (the common case, without reading the text back)
        theirs: datetime | None = None
        readable = True
        if text:
            try:
                theirs = read_stamp(text)
            except ValueError:
                readable = False
        if ours is None:
            if text and (key == STALE_SINCE_ANNOTATION or not readable):
                out[key] = None
            continue
        if theirs is None or _second(ours) > _second(theirs):
            out[key] = stamp_text(ours)
    return out
