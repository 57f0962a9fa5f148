"""The workloads listing shows a cluster's name only: an update of a cluster row that keeps its name
(the simulated clock, the backend's settings, every cycle) no longer moves the "workloads" change
counter (``kaiweb.core.changes``), so the snapshot and the listing stay cached through it."""

from django.db import migrations

TABLE = "cluster_cluster"
COUNT = "EXECUTE FUNCTION kaiweb_count_listing_change('workloads')"


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP TRIGGER IF EXISTS kaiweb_listing_change ON {TABLE}")
    schema_editor.execute(f"CREATE CONSTRAINT TRIGGER kaiweb_listing_change AFTER INSERT OR DELETE ON {TABLE} "
                          f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW {COUNT}")
    schema_editor.execute(f"CREATE CONSTRAINT TRIGGER kaiweb_listing_rename AFTER UPDATE ON {TABLE} "
                          f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name) {COUNT}")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP TRIGGER IF EXISTS kaiweb_listing_rename ON {TABLE}")
    schema_editor.execute(f"DROP TRIGGER IF EXISTS kaiweb_listing_change ON {TABLE}")
    schema_editor.execute(f"CREATE CONSTRAINT TRIGGER kaiweb_listing_change AFTER INSERT OR UPDATE OR DELETE ON {TABLE} "
                          f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW {COUNT}")


class Migration(migrations.Migration):
    dependencies = [("workloads", "0006_listing_change_triggers")]

    operations = [migrations.RunPython(create, drop)]
