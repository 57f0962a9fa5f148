"""A real Prometheus server for tests: Debian's `prometheus` binary scraping an exposition served on
loopback by the test itself, started on a free port with a temporary config and storage directory.

`PROMETHEUS` is the binary (KAI_PROMETHEUS_BIN, else the one on PATH); the tests that use it skip,
with a notice, when it is absent (apt-get install prometheus).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

PROMETHEUS = os.environ.get("KAI_PROMETHEUS_BIN") or shutil.which("prometheus") or "/usr/bin/prometheus"
NO_PROMETHEUS = "no prometheus binary (apt-get install prometheus); the real-Prometheus tests were not run"
needs_prometheus = pytest.mark.skipif(not os.access(PROMETHEUS, os.X_OK), reason=NO_PROMETHEUS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Exposition:
    """An exporter on loopback: every GET answers what `body()` gives now (Prometheus text format)."""

    def __init__(self, body: Callable[[], bytes]) -> None:
        self.body = body
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's hook name)
                data = outer.body()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.target = f"127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def running_prometheus(root: Path, target: str, ready_query: str, ready_samples: int = 1) -> Iterator[str]:
    """Prometheus scraping `target` every second; yields its URL once `ready_query` returns a result
    whose first value is at least `ready_samples` (bounded: 60 s)."""
    (root / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: test\n    static_configs:\n      - targets: ['{target}']\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (root / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited with {proc.returncode}: {(root / 'prometheus.log').read_text()[-2000:]}")
            try:
                answer = requests.get(f"{url}/api/v1/query", timeout=2, params={"query": ready_query}).json()
                result = answer["data"]["result"] if answer.get("status") == "success" else []
                if result and float(result[0]["value"][1]) >= ready_samples:
                    break
            except (requests.RequestException, ValueError, KeyError, IndexError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"prometheus did not answer {ready_query!r} within 60 s")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
