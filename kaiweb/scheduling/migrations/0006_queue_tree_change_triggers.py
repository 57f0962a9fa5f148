"""A second change counter, "queues": the transactions that change what the queue tree shows
(queues and their recorded status, so once per cycle; ``kaiweb.core.changes.install_counter``)."""

from django.db import migrations

from kaiweb.core.changes import install_counter, remove_counter

TABLES = ("queues_queue", "scheduling_queuestatus")


def create(apps, schema_editor):
    install_counter(schema_editor, "queues", "kaiweb_tree_change", TABLES)


def drop(apps, schema_editor):
    remove_counter(schema_editor, "queues", "kaiweb_tree_change", TABLES)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0005_reason_listing_index"),
        ("workloads", "0006_listing_change_triggers"),
    ]

    operations = [migrations.RunPython(create, drop)]
