"""The change counter of workloads migration 0006 counts per name, and a second counter, "queues",
counts the transactions that change what the queue tree shows (queues and their recorded status).

The trigger function takes the counter's name as its argument (the workloads triggers, created
without one, keep counting "workloads"); each counter is moved once per committing transaction."""

from django.db import migrations

FUNCTION = """
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
TABLES = ("queues_queue", "scheduling_queuestatus")


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(FUNCTION)
    schema_editor.execute("INSERT INTO core_changecounter (name, value, epoch) VALUES ('queues', 0, gen_random_uuid()) "
                          "ON CONFLICT (name) DO NOTHING")
    for table in TABLES:
        schema_editor.execute(
            f"CREATE CONSTRAINT TRIGGER kaiweb_tree_change AFTER INSERT OR UPDATE OR DELETE ON {table} "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION kaiweb_count_listing_change('queues')")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS kaiweb_tree_change ON {table}")
    schema_editor.execute("DELETE FROM core_changecounter WHERE name = 'queues'")


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0005_reason_listing_index"),
        ("workloads", "0006_listing_change_triggers"),
    ]

    operations = [migrations.RunPython(create, drop)]
