"""Browser tests: pytest-playwright driving Debian's Chromium against pytest-django's live server.

Chromium is not downloaded by Playwright here: it is launched from its executable path
(KAI_CHROMIUM, default /usr/bin/chromium). Playwright's sync API runs an event loop in the test
thread, so Django's async-safety check is turned off for these tests (playwright-pytest#29).
Each test logs in as one of the personas of tests/conftest.py and writes a screenshot of every
page it visits to test-artifacts/screenshots/ (git-ignored).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = os.environ.get("KAI_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
PASSWORD = "pw"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip the browser tests (each module is marked e2e) when Chromium is missing."""
    if Path(CHROMIUM).exists():
        return
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.skip(reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)"))


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"],
    }


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_context_args, "viewport": {"width": 1440, "height": 900}, "accept_downloads": True}


@pytest.fixture
def ui_data(transactional_db: Any, queue_tree: dict[str, Any]) -> Any:
    """The demo-sized dataset: queue tree, 16 nodes × 8 GPUs, workloads, cycles, preemptions, usage.

    It extends the personas' `queue_tree` (same names), so the queue admin's subtree is in it.
    """
    from tests.sample_data import build_dataset

    return build_dataset(nodes=16, workloads=90, cycles=24, seed=11)


@pytest.fixture
def shot(request: pytest.FixtureRequest) -> Callable[[Any, str], Path]:
    """`shot(page, "queue-tree")` saves a full-page screenshot named after the test and the step."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    test = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")

    def take(page: Any, name: str) -> Path:
        page.wait_for_load_state("networkidle")
        path = SCREENSHOTS / f"{test}--{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


@pytest.fixture
def login(live_server: Any) -> Callable[[Any, Any], None]:
    """`login(page, user)`: sign in through the login form as that persona."""

    def do(page: Any, user: Any) -> None:
        page.goto(f"{live_server.url}/accounts/login/")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "login.png"))
        page.fill("#id_username", user.get_username())
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")

    return do
