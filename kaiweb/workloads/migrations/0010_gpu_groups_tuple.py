from django.db import migrations, models


class Migration(migrations.Migration):
    """A shared-GPU pod's device groups as a list, one per device (was one string, cut at 64)."""

    dependencies = [
        ("workloads", "0009_pod_group_said"),
    ]

    operations = [
        migrations.AddField(
            model_name="pod",
            name="gpu_groups",
            field=models.JSONField(blank=True, default=list, help_text="The shared-GPU groups of a fractional pod, one per device it was given, as the engine names them."),
        ),
    ]
