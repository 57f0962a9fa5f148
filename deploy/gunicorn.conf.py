"""gunicorn settings for the web Deployment: threads, no preload (Django connections per worker).

Each worker freezes what it holds once it has loaded the application (``gc.freeze``): the modules,
URL patterns, templates and settings live as long as the process, and Python's cyclic collector
would otherwise walk all of them at every full collection, a pause of tens of milliseconds in the
middle of requests. Frozen, a full collection walks only what requests made. Under 20 API clients
this halves the 99th percentile of response time (benchmarks/b5_control_plane.py).
"""

import gc
import os

bind = os.environ.get("KAI_BIND", "0.0.0.0:8000")
workers = int(os.environ.get("KAI_WEB_WORKERS", "2"))
worker_class = "gthread"
threads = int(os.environ.get("KAI_WEB_THREADS", "4"))
timeout = 60
accesslog = os.environ.get("KAI_WEB_ACCESS_LOG", "-") or None  # "" turns the access log off
errorlog = "-"
# TLS (the admission webhooks' Deployment): the certificate and key the chart mounts; unset: plain HTTP.
certfile = os.environ.get("KAI_TLS_CERT_FILE") or None
keyfile = os.environ.get("KAI_TLS_KEY_FILE") or None


def post_worker_init(worker: object) -> None:
    """Collect once, then move every object the loaded application holds out of the collector's reach."""
    gc.collect()
    gc.freeze()
