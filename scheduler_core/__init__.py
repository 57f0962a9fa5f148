"""scheduler_core: the scheduling engine. Pure Python + numpy; imports nothing from Django,
Celery, DRF or kubernetes. A snapshot goes in, a CycleResult comes out; same snapshot and
config, same result."""
