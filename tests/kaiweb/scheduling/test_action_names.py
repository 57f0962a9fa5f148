"""One spelling of an action: the engine's (`scheduler_core.model.ACTIONS`), in the database, the API, the
filters and the pages; the former database spellings survive only as what `?action=` reads."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.core.exceptions import ValidationError

from kaiweb.scheduling.choices import PREEMPTION_ACTION_BADGE, PreemptionAction
from kaiweb.scheduling.filtersets import FORMER_ACTION_NAMES
from kaiweb.scheduling.models import PreemptionEvent
from kaiweb.scheduling.views import PHASES
from scheduler_core import model as m
from tests.factories import PreemptionEventFactory

FORMER = ("consolidate", "stale-gang")
rename = importlib.import_module("kaiweb.scheduling.migrations.0008_preemption_actions_in_engine_spelling")


def test_the_database_choices_are_the_engines_evicting_actions():
    assert [value for value, _ in PreemptionAction.choices] == list(m.EVICTING_ACTIONS)
    assert dict(PreemptionAction.choices)[m.STALE_GANG_EVICTION] == m.ACTION_TITLES[m.STALE_GANG_EVICTION]
    assert set(PREEMPTION_ACTION_BADGE) == set(m.EVICTING_ACTIONS)
    assert set(m.EVICTING_ACTIONS) <= set(m.ACTIONS)
    assert set(m.ACTION_TITLES) == set(m.ACTIONS)


def test_the_cycle_phases_are_named_by_the_engines_actions():
    assert {f"engine.{a}" for a in m.ACTIONS} <= set(PHASES)
    assert not set(FORMER) & set(PHASES)


@pytest.mark.django_db
def test_every_engine_action_is_a_valid_stored_action_and_no_former_one_is():
    for action in m.EVICTING_ACTIONS:
        PreemptionEventFactory(action=action).full_clean(exclude=["cycle", "decision", "preemptor", "victim"])
    for action in FORMER:
        with pytest.raises(ValidationError, match="action"):
            PreemptionEventFactory.build(action=action).full_clean(exclude=["cycle", "decision", "preemptor",
                                                                           "victim"])


@pytest.mark.django_db
def test_the_data_migration_rewrites_the_former_spellings_and_back():
    rows = {old: PreemptionEventFactory(action=old) for old in (*FORMER, m.RECLAIM)}

    rename.to_engine_names(apps, None)
    assert {old: PreemptionEvent.objects.get(pk=row.pk).action for old, row in rows.items()} == {
        "consolidate": m.CONSOLIDATION, "stale-gang": m.STALE_GANG_EVICTION, m.RECLAIM: m.RECLAIM}

    rename.to_former_names(apps, None)
    assert {old: PreemptionEvent.objects.get(pk=row.pk).action for old, row in rows.items()} == {
        old: old for old in rows}
    assert rename.RENAMED == FORMER_ACTION_NAMES


@pytest.mark.django_db
def test_the_api_filters_by_the_engines_names_and_reads_the_former_ones_as_them(viewer_api):
    for action in m.EVICTING_ACTIONS:
        PreemptionEventFactory(action=action)

    def actions(query: str) -> list[str]:
        response = viewer_api.get(f"/api/v1/preemptions/?{query}")
        assert response.status_code == 200, response.content
        return sorted(r["action"] for r in response.json()["results"])

    assert actions("action=consolidation") == [m.CONSOLIDATION]
    assert actions("action=stalegangeviction&action=reclaim") == [m.RECLAIM, m.STALE_GANG_EVICTION]
    assert actions("action=consolidate") == [m.CONSOLIDATION]
    assert actions("action=stale-gang") == [m.STALE_GANG_EVICTION]
    assert viewer_api.get("/api/v1/preemptions/?action=teleport").status_code == 400


@pytest.mark.django_db
def test_the_preemptions_page_shows_and_filters_the_engines_names(client, viewer):
    PreemptionEventFactory(action=m.STALE_GANG_EVICTION, preemptor_ref="")
    PreemptionEventFactory(action=m.CONSOLIDATION)
    client.force_login(viewer)

    html = client.get("/preemptions/?action=stale-gang").content.decode()
    assert "none (stale gang)" in html
    assert "Stale gang eviction" in html
    assert "Consolidation" not in html.split('id="preemption-table"', 1)[1]
