from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("scheduling", "0010_gpu_groups_tuple_copy"),
    ]

    operations = [
        migrations.RemoveField(model_name="decision", name="gpu_group"),
    ]
