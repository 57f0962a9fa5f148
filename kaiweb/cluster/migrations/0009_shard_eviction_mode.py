# A shard's eviction mode and KAI's --update-pod-eviction-condition. New shards, and those a
# SchedulingShard object describes, delete the victim as KAI does; the shards of Kubernetes clusters
# that exist keep what kaiweb did before, the Eviction API with PodDisruptionBudgets honoured (README
# "Moving from KAI"). A simulated cluster has no budgets: both modes do the same there.

from django.db import migrations, models


def keep_the_eviction_api_where_it_was_used(apps, schema_editor):
    SchedulingShard = apps.get_model("cluster", "SchedulingShard")
    SchedulingShard.objects.filter(cluster__backend="kubernetes").update(eviction_mode="evict")


class Migration(migrations.Migration):

    dependencies = [
        ("cluster", "0008_topology_aliases"),
    ]

    operations = [
        migrations.AddField(
            model_name="schedulingshard",
            name="eviction_mode",
            field=models.CharField(
                choices=[("delete", "Delete the pod, as KAI does (PodDisruptionBudgets do not apply)"),
                         ("evict", "Eviction API (a PodDisruptionBudget may refuse)")],
                default="delete",
                help_text="Delete: the victim pod is deleted, as KAI does; PodDisruptionBudgets do not stop a "
                "reclaim or preemption. Evict: the Eviction API; a budget may refuse, and the decision fails until "
                "it allows. A SchedulingShard object sets it with spec.args[kaiweb-eviction-mode].",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="schedulingshard",
            name="update_pod_eviction_condition",
            field=models.BooleanField(
                default=False,
                help_text="With delete: set the DisruptionTarget condition (reason PreemptionByScheduler, the "
                "eviction's message) before deleting, as KAI's --update-pod-eviction-condition does.",
            ),
        ),
        migrations.RunPython(keep_the_eviction_api_where_it_was_used, migrations.RunPython.noop),
    ]
