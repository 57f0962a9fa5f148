from django.db import migrations, models


class Migration(migrations.Migration):
    """A shared-GPU decision's device groups as a list, one per device (was one string, cut at 64)."""

    dependencies = [
        ("scheduling", "0008_preemption_actions_in_engine_spelling"),
    ]

    operations = [
        migrations.AddField(
            model_name="decision",
            name="gpu_groups",
            field=models.JSONField(blank=True, default=list, help_text="A shared-GPU bind's device groups, one per device, in the engine's order."),
        ),
    ]
