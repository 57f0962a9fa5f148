"""`make run`: migrate, seed the demo, print a login, then run web, the two workers and beat until Ctrl-C.

Everything runs on embedded defaults (SQLite, the filesystem Celery broker, the simulated
cluster) unless DATABASE_URL / REDIS_URL / KAI_CLUSTER_BACKEND say otherwise. It is for a
developer's machine, so DEBUG is on (KAI_DEBUG=true) unless KAI_DEBUG says otherwise. While it runs, a
line per new scheduling cycle shows what the scheduler does. Ctrl-C (or SIGTERM) stops the web
server, the workers (the cycles' on the "celery" queue, the what-ifs' and estimates' on "whatif") and beat,
and waits until none of their processes is left.
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


def port_problem(host: str, port: str) -> str | None:
    """Why the web server could not listen on host:port (a message naming KAI_HOST / KAI_PORT), or None."""
    import socket

    if not port.isdigit() or not 0 < int(port) < 65536:
        return f"KAI_PORT={port!r} is not a port number (1-65535)."
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except OSError as exc:
        return f"KAI_HOST={host!r} does not resolve ({exc})."
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(address)
        except OSError as exc:
            return (f"{host}:{port} is taken or not allowed ({exc.strerror or exc}). Start on another port with "
                    f"KAI_PORT, e.g. `KAI_PORT=8001 make run` (KAI_HOST sets the address, now {host}).")
    return None


def wait_until_serving(host: str, port: str, web: subprocess.Popen[bytes], timeout: float = 60.0) -> bool:
    """True once GET /healthz answers; False if the web server exited or `timeout` passed first."""
    import urllib.request

    deadline = time.time() + timeout
    while time.time() < deadline:
        if web.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=2) as response:  # noqa: S310
                if response.status == 200:
                    return True
        except OSError:
            time.sleep(0.3)
    return False


def manage(*args: str, capture: bool = False) -> str:
    out = subprocess.run([PY, "manage.py", *args], cwd=ROOT, check=True, text=True,
                         capture_output=capture)
    return out.stdout if capture else ""


def has_command(name: str) -> bool:
    out = subprocess.run([PY, "manage.py", "help", "--commands"], cwd=ROOT, capture_output=True, text=True)
    return name in out.stdout.split()


def start(args: list[str]) -> subprocess.Popen[bytes]:
    # Own session: the terminal's Ctrl-C reaches only this launcher, which then stops each
    # service in order (a second SIGINT would make Celery abandon its task mid-cycle).
    return subprocess.Popen(args, cwd=ROOT, start_new_session=True)


def cycle_lines(last_id: int) -> tuple[int, list[str]]:
    """One line per cycle recorded since `last_id` (read from the database)."""
    from kaiweb.scheduling.models import SchedulingCycle

    lines = []
    for c in SchedulingCycle.objects.filter(pk__gt=last_id).exclude(status="running").order_by("pk")[:20]:
        last_id = c.pk
        took = f"{(c.duration_seconds or 0) * 1000:.0f} ms"
        lines.append(f"[cycle {c.pk}] {c.status}: {c.binds} bind(s), {c.evictions} eviction(s), "
                     f"{c.pipelined} pipelined, {c.pending} pending, {took}"
                     + (f" — {c.error.splitlines()[0]}" if c.error else ""))
    return last_id, lines


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.time() + 15
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            pass
    # Whatever is left (e.g. a pool child of the worker) goes with its process group.
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def services() -> dict[str, list[str]]:
    """The processes `make run` starts, by name. The cycles and the what-ifs/estimates have workers of
    their own, as the chart runs them: a long estimate never waits in front of a cycle."""
    return {
        "web": [PY, "manage.py", "runserver", f"{HOST}:{PORT}", "--noreload"],
        "worker": [PY, "-m", "celery", "-A", "kaiweb", "worker", "-l", "warning", "--concurrency", "2",
                   "-Q", "celery", "-n", "celery@%h", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        "whatif": [PY, "-m", "celery", "-A", "kaiweb", "worker", "-l", "warning", "--concurrency", "1",
                   "-Q", "whatif", "-n", "whatif@%h", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        "beat": [PY, "-m", "celery", "-A", "kaiweb", "beat", "-l", "warning"],
    }


def main() -> int:
    problem = port_problem(HOST, PORT)
    if problem:
        print(f"kaiweb cannot start: {problem}", file=sys.stderr, flush=True)
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kaiweb.settings")
    # Local development: tracebacks in the browser. The settings keep DEBUG off everywhere else.
    os.environ.setdefault("KAI_DEBUG", "true")
    sys.path.insert(0, str(ROOT))
    manage("migrate", "--noinput", "-v", "0")
    if has_command("seed_demo"):
        manage("seed_demo")
    login = manage("ensure_admin", capture=True).strip()
    if has_command("run_cycle"):
        manage("run_cycle", "--cycles", "1")

    import django

    django.setup()
    from kaiweb.scheduling.models import SchedulingCycle

    last_id = SchedulingCycle.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    commands = services()
    running = {name: start(cmd) for name, cmd in commands.items()}
    restarts: dict[str, list[float]] = {name: [] for name in commands}
    procs = list(running.values())
    if not wait_until_serving(HOST, PORT, running["web"]):
        print(f"kaiweb cannot start: the web server did not answer on {HOST}:{PORT} "
              "(see its output above; KAI_PORT / KAI_HOST choose another address).", file=sys.stderr, flush=True)
        stop_all(procs)
        return 2
    print(f"\nkaiweb is up: http://{HOST}:{PORT}/  (API: http://{HOST}:{PORT}/api/v1/, "
          f"docs: http://{HOST}:{PORT}/api/v1/docs/, metrics: http://{HOST}:{PORT}/metrics)")
    print(login)
    print("Web, the workers and beat are running; a line per scheduling cycle follows. Ctrl-C stops all of it.\n",
          flush=True)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        next_poll = 0.0
        while not stopping:
            # A service that dies (e.g. the worker when the broker restarts) is started again, as
            # a process supervisor would; one that keeps dying stops the launcher.
            for name, proc in list(running.items()):
                if proc.poll() is None:
                    continue
                recent = [t for t in restarts[name] if t > time.time() - 60] + [time.time()]
                restarts[name] = recent
                if len(recent) > 3:
                    print(f"{name} exited {len(recent)} times in a minute (code {proc.returncode}); stopping.",
                          flush=True)
                    stopping = True
                    break
                print(f"{name} exited (code {proc.returncode}); starting it again.", flush=True)
                running[name] = start(commands[name])
                procs.append(running[name])
            if time.time() >= next_poll:
                try:
                    last_id, lines = cycle_lines(last_id)
                    for line in lines:
                        print(line, flush=True)
                except Exception as exc:  # noqa: BLE001 - the monitor must never stop the services
                    print(f"(cycle monitor: {exc.__class__.__name__}: {exc})", flush=True)
                next_poll = time.time() + 2
            time.sleep(0.2)
    finally:
        print("\nstopping web, the workers and beat …", flush=True)
        stop_all(procs)
        print("stopped.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
