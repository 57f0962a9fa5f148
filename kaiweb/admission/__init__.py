"""Admission webhooks served by kaiweb: the pod mutations KAI's webhook makes, and the checks of
queues, namespace→queue bindings, GPU requests and PodGroups (see `rules` and `services`)."""
