"""WSGI entry point (gunicorn kaiweb.wsgi)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kaiweb.settings")
application = get_wsgi_application()
