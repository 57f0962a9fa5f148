from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("workloads", "0007_cluster_rename_only_moves_the_listing"),
    ]

    operations = [
        migrations.AddField(
            model_name="pod",
            name="resource_version",
            field=models.CharField(
                blank=True, default="", max_length=32,
                help_text="Kubernetes: the resourceVersion of the pod as last applied; an older observation never "
                          "overwrites the row.",
            ),
            preserve_default=False,
        ),
    ]
