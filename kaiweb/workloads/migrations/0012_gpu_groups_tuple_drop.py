from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("workloads", "0011_gpu_groups_tuple_copy"),
    ]

    operations = [
        migrations.RemoveField(model_name="pod", name="gpu_group"),
    ]
