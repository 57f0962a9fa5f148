"""gunicorn settings for the web Deployment: threads, no preload (Django connections per worker)."""

import os

bind = os.environ.get("KAI_BIND", "0.0.0.0:8000")
workers = int(os.environ.get("KAI_WEB_WORKERS", "2"))
worker_class = "gthread"
threads = int(os.environ.get("KAI_WEB_THREADS", "4"))
timeout = 60
accesslog = "-"
errorlog = "-"
