"""Connects the pause to the cycle's steps when the fault-test worker starts."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from django.apps import AppConfig


def pause(sender: Any, point: str, **kwargs: Any) -> None:
    if os.environ.get("KAI_TEST_PAUSE_AT") != point:
        return
    marker = Path(os.environ.get("KAI_TEST_PAUSE_FILE", "kai-test-pause"))
    marker.write_text(f"{os.getpid()} {point}\n")
    deadline = time.monotonic() + float(os.environ.get("KAI_TEST_PAUSE_SECONDS", "30"))
    while marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


class PauseConfig(AppConfig):
    name = "tests.fault.pause"
    label = "fault_pause"

    def ready(self) -> None:
        from kaiweb.scheduling.signals import cycle_step

        cycle_step.connect(pause, dispatch_uid="fault-test-pause")
