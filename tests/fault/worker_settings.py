"""The product's settings plus the fault tests' pause app, for the workers they start."""

from kaiweb.settings import *  # noqa: F403
from kaiweb.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.fault.pause.apps.PauseConfig"]
