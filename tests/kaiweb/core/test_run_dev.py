"""`make run` (deploy/run_dev.py) refuses a taken or bad port at once, naming KAI_PORT and KAI_HOST."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def run_dev(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "deploy/run_dev.py"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env})


def test_a_taken_port_is_named_with_the_variable_to_change_and_nothing_starts():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        out = run_dev(KAI_HOST="127.0.0.1", KAI_PORT=port)
    assert out.returncode == 2
    assert f"127.0.0.1:{port} is taken" in out.stderr
    assert "KAI_PORT=8001 make run" in out.stderr
    assert "KAI_HOST" in out.stderr
    assert "kaiweb is up" not in out.stdout


def test_a_port_that_is_not_a_number_is_refused():
    out = run_dev(KAI_PORT="eighty")
    assert out.returncode == 2
    assert "KAI_PORT='eighty' is not a port number" in out.stderr
