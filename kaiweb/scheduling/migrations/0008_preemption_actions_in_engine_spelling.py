"""Preemption events recorded under the database's former action names take the engine's names, the one
spelling left (``scheduler_core.model.EVICTING_ACTIONS``): consolidate → consolidation, stale-gang →
stalegangeviction. Reversible, for a rollback to 0006 (whose column holds at most 16 characters)."""

from django.db import migrations

# Frozen here: a migration must not follow the code's names as they change later.
RENAMED = {"consolidate": "consolidation", "stale-gang": "stalegangeviction"}


def _rename(apps, names):
    PreemptionEvent = apps.get_model("scheduling", "PreemptionEvent")
    for old, new in names.items():
        PreemptionEvent.objects.filter(action=old).update(action=new)


def to_engine_names(apps, schema_editor):
    _rename(apps, RENAMED)


def to_former_names(apps, schema_editor):
    _rename(apps, {new: old for old, new in RENAMED.items()})


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0007_preemption_action_engine_names")]

    operations = [migrations.RunPython(to_engine_names, to_former_names)]
