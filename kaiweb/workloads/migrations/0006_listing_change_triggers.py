"""Triggers that count the transactions changing what the workloads listing shows (Postgres only;
``kaiweb.core.changes.install_counter``)."""

from django.db import migrations

from kaiweb.core.changes import install_counter, remove_counter

TABLES = ("workloads_workload", "workloads_pod", "scheduling_pendingreason", "queues_queue", "queues_priorityclass",
          "cluster_cluster")


def create(apps, schema_editor):
    install_counter(schema_editor, "workloads", "kaiweb_listing_change", TABLES)


def drop(apps, schema_editor):
    remove_counter(schema_editor, "workloads", "kaiweb_listing_change", TABLES)


class Migration(migrations.Migration):
    dependencies = [
        ("workloads", "0005_listing_order_index"),
        ("core", "0001_change_counter"),
        ("scheduling", "0005_reason_listing_index"),
        ("queues", "0003_queue_bounds"),
        ("cluster", "0006_shard_fragmentation_aware_gpu_placement"),
    ]

    operations = [migrations.RunPython(create, drop)]
