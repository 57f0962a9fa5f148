"""KAI's installed priority classes: train 50, build-preemptible 75, build 100, inference 125."""

from django.db import migrations

DEFAULTS = {
    "train": (50, True, "Training: preemptible; the default for general workloads."),
    "build-preemptible": (75, True, "Interactive builds that may be preempted."),
    "build": (100, False, "Interactive builds (e.g. notebooks): non-preemptible."),
    "inference": (125, False, "Inference services: non-preemptible."),
}


def create_defaults(apps, schema_editor):
    PriorityClass = apps.get_model("queues", "PriorityClass")
    for name, (value, preemptible, description) in DEFAULTS.items():
        PriorityClass.objects.get_or_create(
            name=name, defaults={"value": value, "preemptible": preemptible, "description": description}
        )


def remove_defaults(apps, schema_editor):
    PriorityClass = apps.get_model("queues", "PriorityClass")
    PriorityClass.objects.filter(name__in=DEFAULTS, workloads__isnull=True).delete()


class Migration(migrations.Migration):
    dependencies = [("queues", "0001_initial"), ("workloads", "0001_initial")]

    operations = [migrations.RunPython(create_defaults, remove_defaults)]
