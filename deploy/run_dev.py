"""`make run`: migrate, seed the demo, print a login, then run web + worker + beat until Ctrl-C.

Everything runs on embedded defaults (SQLite, the filesystem Celery broker, the simulated
cluster) unless DATABASE_URL / REDIS_URL / KAI_CLUSTER_BACKEND say otherwise.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
HOST = os.environ.get("KAI_HOST", "127.0.0.1")
PORT = os.environ.get("KAI_PORT", "8000")


def manage(*args: str) -> None:
    subprocess.run([PY, "manage.py", *args], cwd=ROOT, check=True)


def has_command(name: str) -> bool:
    out = subprocess.run([PY, "manage.py", "help", "--commands"], cwd=ROOT, capture_output=True, text=True)
    return name in out.stdout.split()


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kaiweb.settings")
    manage("migrate", "--noinput", "-v", "0")
    if has_command("seed_demo"):
        manage("seed_demo")
    manage("ensure_admin")
    if has_command("run_cycle"):
        manage("run_cycle", "--cycles", "1")
    procs = [
        subprocess.Popen([PY, "manage.py", "runserver", f"{HOST}:{PORT}", "--noreload"], cwd=ROOT),
        subprocess.Popen([PY, "-m", "celery", "-A", "kaiweb", "worker", "-l", "warning", "--concurrency", "1",
                          "-Q", "celery", "--without-gossip", "--without-mingle"], cwd=ROOT),
        subprocess.Popen([PY, "-m", "celery", "-A", "kaiweb", "beat", "-l", "warning",
                          "--schedule", str(ROOT / "var" / "celerybeat-schedule")], cwd=ROOT),
    ]
    print(f"\nkaiweb is up: http://{HOST}:{PORT}/  (API docs: http://{HOST}:{PORT}/api/v1/docs/)")
    print("Ctrl-C stops web, worker and beat.\n", flush=True)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        while not stopping and all(p.poll() is None for p in procs):
            time.sleep(0.5)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.time() + 10
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
