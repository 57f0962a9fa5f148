from django.db import migrations


def copy_groups(apps, schema_editor):
    """The old string held the groups joined by commas (a group name has none); a string cut short
    loses its last, partial name."""
    model = apps.get_model("scheduling", "Decision")
    batch = []
    for row in model.objects.exclude(gpu_group="").only("pk", "gpu_group").iterator(chunk_size=2000):
        names = row.gpu_group.split(",")
        if len(row.gpu_group) >= 64 and len(names) > 1:
            names = names[:-1]
        row.gpu_groups = [n for n in names if n]
        batch.append(row)
        if len(batch) == 2000:
            model.objects.bulk_update(batch, ["gpu_groups"])
            batch = []
    model.objects.bulk_update(batch, ["gpu_groups"])


class Migration(migrations.Migration):

    dependencies = [
        ("scheduling", "0009_gpu_groups_tuple"),
    ]

    operations = [
        migrations.RunPython(copy_groups, migrations.RunPython.noop),
    ]
