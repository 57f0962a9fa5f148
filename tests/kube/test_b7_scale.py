"""`benchmarks/b7_scale.py` end to end at a tiny size: the product fills 4 KWOK nodes without breaking
an invariant. Only the outcome is asserted, never a time.

Needs `make kube` (with kwok), DATABASE_URL on Postgres and Redis, like the product's own processes;
skipped, with the reason, otherwise.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devkube.localkube import NO_KWOK, find_binaries, find_tool
from tests.kube.fixtures import NO_BINARIES

pytestmark = [pytest.mark.kube, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _redis_answers() -> bool:
    try:
        import redis

        return bool(redis.Redis.from_url(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0",
                                         socket_timeout=1).ping())
    except Exception:  # noqa: BLE001 - any failure means "not there"
        return False


def _drop_kept_database(stderr: str) -> None:
    """``--keep-logs`` keeps the last scenario's database for a post-mortem and says which
    (``kept as kaiweb_b7_<pid>``); the logs are enough here, so the test leaves no database behind."""
    from benchmarks.b5_control_plane import drop_database

    for name in re.findall(r"database is kept as (kaiweb_b7_[0-9]+)", stderr):
        drop_database(name)


def test_b1_on_four_kwok_nodes_passes_with_no_invariant_violation(tmp_path: Path) -> None:
    bin_dir = find_binaries()
    if bin_dir is None:
        pytest.skip(NO_BINARIES)
    if find_tool("kwok", bin_dir) is None:
        pytest.skip(NO_KWOK)
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        pytest.skip("b7_scale runs the product's processes on Postgres: set DATABASE_URL=postgres://…")
    if not _redis_answers():
        pytest.skip("b7_scale runs a Celery worker and beat: Redis (REDIS_URL) is not answering")
    env = dict(os.environ)
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the benchmark sets up Django itself, on its scratch database

    done = subprocess.run(
        [sys.executable, "benchmarks/b7_scale.py", "--nodes", "4", "--scenarios", "B1", "--json",
         "--keep-logs", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    _drop_kept_database(done.stderr)

    assert done.stdout.strip(), f"no output (exit {done.returncode}); stderr:\n{done.stderr[-3000:]}"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    [result] = out["results"]
    assert result["test_name"] == "B1"
    details = result["details"]
    assert details["invariant_violations"] == 0, details["violations"]
    assert result["status"] == "passed", details
    assert details["pods"] == details["scheduled"] == 32
    assert details["nodes"] == 4
    assert done.returncode == 0
