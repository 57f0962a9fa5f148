"""A `default` simulated cluster with one shard for the unlabelled nodes, so a new install can schedule."""

from django.db import migrations


def create_default(apps, schema_editor):
    Cluster = apps.get_model("cluster", "Cluster")
    SchedulingShard = apps.get_model("cluster", "SchedulingShard")
    cluster, _ = Cluster.objects.get_or_create(
        name="default", defaults={"backend": "simulated", "description": "The embedded simulated cluster."}
    )
    SchedulingShard.objects.get_or_create(cluster=cluster, name="default", defaults={"partition_label_value": ""})


def remove_default(apps, schema_editor):
    apps.get_model("cluster", "Cluster").objects.filter(name="default", nodes__isnull=True).delete()


class Migration(migrations.Migration):
    dependencies = [("cluster", "0001_initial")]

    operations = [migrations.RunPython(create_default, remove_default)]
