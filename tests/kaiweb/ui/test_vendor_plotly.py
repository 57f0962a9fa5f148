"""`manage.py vendor_plotly`: the pinned plotly.js basic bundle, checked against its npm integrity."""

from __future__ import annotations

import io
import tarfile

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from kaiweb.ui.management.commands import vendor_plotly as vp


def _tarball(body: bytes, member: str = vp.MEMBER) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        info = tarfile.TarInfo(member)
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    return out.getvalue()


def test_a_tarball_with_the_pinned_integrity_is_unpacked_to_the_bundle(tmp_path):
    data = _tarball(b"/* plotly basic */")
    target = tmp_path / "vendor" / "plotly" / "plotly.min.js"
    vp.install(data, target, integrity=vp.integrity_of(data))
    assert target.read_bytes() == b"/* plotly basic */"
    assert not target.with_suffix(".partial").exists()


def test_a_tarball_that_does_not_match_the_pin_is_refused_and_nothing_is_written(tmp_path, settings):
    bad = tmp_path / "other.tgz"
    bad.write_bytes(_tarball(b"/* something else */"))
    settings.PLOTLY_BASIC_BUNDLE = tmp_path / "vendor" / "plotly" / "plotly.min.js"
    with pytest.raises(CommandError, match=r"integrity sha512-\S+ does not match the pinned " + vp.INTEGRITY[:20]):
        call_command("vendor_plotly", from_file=str(bad))
    assert not settings.PLOTLY_BASIC_BUNDLE.exists()


def test_the_pin_names_the_registry_tarball_of_the_version():
    assert vp.tarball_url() == (
        f"https://registry.npmjs.org/plotly.js-basic-dist-min/-/plotly.js-basic-dist-min-{vp.VERSION}.tgz")
    assert vp.tarball_url("https://mirror.example/npm/").startswith("https://mirror.example/npm/plotly.js-basic")


def test_the_basic_bundle_draws_with_the_plotly_version_the_python_package_carries():
    from pathlib import Path

    import plotly

    full = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text(errors="ignore")[:200]
    assert f"plotly.js v{vp.VERSION}" in full
