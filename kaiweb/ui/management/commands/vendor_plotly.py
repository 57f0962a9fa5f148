"""Fetch plotly.js's basic bundle (scatter, bar, pie: every chart the pages draw) from the npm registry.

The pages then load 1.2 MB of plotly.js instead of the 4.8 MB full bundle that the plotly Python
package carries. The package version and its integrity are pinned here; the file is kept under
KAI_VAR_DIR, never in git. Without it (offline), the full bundle from the Python package is served.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

PACKAGE = "plotly.js-basic-dist-min"
VERSION = "4.1.1"  # the plotly.js version the pinned plotly Python package draws with
INTEGRITY = "sha512-1oNF8PeQx2hv/y7tqEVWKD3JGwn/MGEMQ8mL9HUwsaqG9FGy/OU5FHUHvzqbqxN4mnwZGI9abTiE775C4kkjMQ=="
MEMBER = "package/plotly-basic.min.js"
MAX_TARBALL = 20 * 1024 * 1024


def tarball_url(registry: str = "https://registry.npmjs.org") -> str:
    return f"{registry.rstrip('/')}/{PACKAGE}/-/{PACKAGE}-{VERSION}.tgz"


def integrity_of(data: bytes) -> str:
    """npm's Subresource Integrity string for a tarball."""
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def install(data: bytes, target: Path, integrity: str = INTEGRITY) -> Path:
    """Check the tarball against the pinned integrity and write its bundle to `target` (atomically)."""
    got = integrity_of(data)
    if got != integrity:
        raise CommandError(f"{PACKAGE}@{VERSION}: integrity {got} does not match the pinned {integrity}")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        member = tar.getmember(MEMBER)
        handle = tar.extractfile(member)
        if handle is None:
            raise CommandError(f"{PACKAGE}@{VERSION}: {MEMBER} is not a file")
        body = handle.read()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.write_bytes(body)
    partial.replace(target)
    return target


class Command(BaseCommand):
    help = "Fetch plotly.js's basic bundle (pinned version and integrity) into KAI_VAR_DIR/vendor/plotly."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--from-file", help="Use this npm tarball instead of downloading it.")
        parser.add_argument("--registry", default="https://registry.npmjs.org", help="The npm registry to use.")
        parser.add_argument("--force", action="store_true", help="Fetch again even if the bundle is there.")

    def handle(self, *args: Any, **options: Any) -> None:
        target = settings.PLOTLY_BASIC_BUNDLE
        if target.exists() and not options["force"]:
            self.stdout.write(f"plotly.js basic bundle already in {target.parent.name}/")
            return
        if options["from_file"]:
            data = Path(options["from_file"]).read_bytes()
        else:
            url = tarball_url(options["registry"])
            try:
                with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 - a fixed https URL
                    data = response.read(MAX_TARBALL + 1)
            except OSError as exc:
                raise CommandError(f"could not fetch {url}: {exc}; the pages keep plotly's full bundle") from exc
            if len(data) > MAX_TARBALL:
                raise CommandError(f"{url} is larger than {MAX_TARBALL} bytes")
        path = install(data, target)
        self.stdout.write(f"plotly.js {VERSION} basic bundle: {path.stat().st_size:,} bytes")
