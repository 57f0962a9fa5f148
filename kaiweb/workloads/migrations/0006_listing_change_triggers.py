"""Triggers that count the transactions changing what the workloads listing shows (Postgres only).

Each is a deferred constraint trigger: it runs when the writing transaction commits, after every
statement (so taking the counter's row lock there cannot deadlock with the transaction's other
locks), and the first of a transaction moves the counter once; the others see the transaction's
mark and do nothing. Committing writers therefore move the counter in their commit order."""

from django.db import migrations

TABLES = ("workloads_workload", "workloads_pod", "scheduling_pendingreason", "queues_queue", "queues_priorityclass",
          "cluster_cluster")

FUNCTION = """
CREATE OR REPLACE FUNCTION kaiweb_count_listing_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('kaiweb.listing_changed', true) IS DISTINCT FROM txid_current()::text THEN
        INSERT INTO core_changecounter (name, value, epoch) VALUES ('workloads', 1, gen_random_uuid())
            ON CONFLICT (name) DO UPDATE SET value = core_changecounter.value + 1;
        PERFORM set_config('kaiweb.listing_changed', txid_current()::text, true);
    END IF;
    RETURN NULL;
END $$;
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(FUNCTION)
    schema_editor.execute("INSERT INTO core_changecounter (name, value, epoch) VALUES ('workloads', 0, gen_random_uuid()) "
                          "ON CONFLICT (name) DO NOTHING")
    for table in TABLES:
        schema_editor.execute(
            f"CREATE CONSTRAINT TRIGGER kaiweb_listing_change AFTER INSERT OR UPDATE OR DELETE ON {table} "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION kaiweb_count_listing_change()")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS kaiweb_listing_change ON {table}")
    schema_editor.execute("DROP FUNCTION IF EXISTS kaiweb_count_listing_change()")


class Migration(migrations.Migration):
    dependencies = [
        ("workloads", "0005_listing_order_index"),
        ("core", "0001_change_counter"),
        ("scheduling", "0005_reason_listing_index"),
        ("queues", "0003_queue_bounds"),
        ("cluster", "0006_shard_fragmentation_aware_gpu_placement"),
    ]

    operations = [migrations.RunPython(create, drop)]
