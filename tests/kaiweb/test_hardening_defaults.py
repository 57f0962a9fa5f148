"""Production-safe defaults (issue 13): DEBUG off, the example key refused, `check --deploy` clean with the
production example env, API docs without a CDN, a 404 that lists nothing, /metrics restricted, login
throttling and expiring tokens."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.cache import cache
from django.utils import timezone
from rest_framework.authtoken.models import Token

from tests.factories import UserFactory

ROOT = Path(__file__).resolve().parents[2]
ENV_EXAMPLE = ROOT / "deploy" / ".env.example"


def _clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "KAI_")) and k != "DATABASE_URL"}
    env.update(KAI_VAR_DIR=str(tmp_path / "var"), DJANGO_SETTINGS_MODULE="kaiweb.settings", **extra)
    return env


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


SHOW = "import django; django.setup(); from django.conf import settings as s; print(s.DEBUG, s.SESSION_COOKIE_SECURE)"


def test_debug_is_off_unless_the_environment_turns_it_on(tmp_path):
    assert _run(SHOW, _clean_env(tmp_path)).stdout.split() == ["False", "False"]
    assert _run(SHOW, _clean_env(tmp_path, KAI_DEBUG="true")).stdout.split()[0] == "True"
    assert _run(SHOW, _clean_env(tmp_path, DJANGO_DEBUG="true")).stdout.split()[0] == "True"
    assert _run(SHOW, _clean_env(tmp_path, DJANGO_DEBUG="true", KAI_DEBUG="false")).stdout.split()[0] == "False"


def test_make_run_turns_debug_on_for_its_processes():
    source = (ROOT / "deploy" / "run_dev.py").read_text()
    assert 'os.environ.setdefault("KAI_DEBUG", "true")' in source


def test_the_published_example_key_is_refused_with_debug_off(tmp_path):
    out = _run(SHOW, _clean_env(tmp_path, DJANGO_SECRET_KEY="change-me"))
    assert out.returncode != 0
    assert "published example" in out.stderr
    # A developer with DEBUG on may keep it.
    assert _run(SHOW, _clean_env(tmp_path, DJANGO_SECRET_KEY="change-me", KAI_DEBUG="true")).returncode == 0


def _production_env(tmp_path: Path) -> dict[str, str]:
    values = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        match = re.match(r"^([A-Z][A-Z0-9_]*)=(\S*)", line)
        if match:
            values[match.group(1)] = match.group(2)
    values["DJANGO_SECRET_KEY"] = secrets.token_urlsafe(50)  # "a key of your own"
    return _clean_env(tmp_path, **values)


def test_check_deploy_is_clean_with_the_production_example_env(tmp_path):
    env = _production_env(tmp_path)
    out = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no issues" in out.stdout
    shown = _run("import django; django.setup(); from django.conf import settings as s; "
                 "print(s.SECURE_PROXY_SSL_HEADER, s.SECURE_HSTS_SECONDS, s.SECURE_SSL_REDIRECT, s.CSRF_COOKIE_SECURE)",
                 env)
    assert shown.stdout.strip() == "('HTTP_X_FORWARDED_PROTO', 'https') 31536000 True True"


def test_check_deploy_warns_about_the_defaults(tmp_path):
    out = subprocess.run([sys.executable, "manage.py", "check", "--deploy"], cwd=ROOT, env=_clean_env(tmp_path),
                         capture_output=True, text=True, timeout=120)
    for code in ("security.W004", "security.W008", "security.W012", "security.W016", "kaiweb.W001"):
        assert code in out.stderr + out.stdout


# ------------------------------------------------------------------------------------------ pages


def test_api_docs_load_swagger_from_the_installed_package(client, viewer):
    client.force_login(viewer)
    for url in ("/api/v1/docs/", "/api/v1/redoc/"):
        body = client.get(url).content.decode()
        assert "drf_spectacular_sidecar" in body
        assert not re.search(r"https?://(cdn\.jsdelivr|unpkg|cdnjs)", body)


def test_the_404_page_lists_no_url_patterns(client, viewer, settings):
    client.force_login(viewer)
    settings.DEBUG = False
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    body = response.content.decode()
    assert "URL patterns" not in body
    assert "api/v1/schema/" not in body
    # Only Django's debug page lists them, and DEBUG is off unless a developer turns it on.
    settings.DEBUG = True
    assert "URL patterns" in client.get("/no-such-page/").content.decode()


# ------------------------------------------------------------------------------------------ /metrics


@pytest.mark.django_db
def test_metrics_need_a_token_or_a_staff_user(client, settings):
    settings.KAI_METRICS_TOKEN = "s3cret-token"
    settings.KAI_METRICS_PUBLIC = False
    anonymous = client.get("/metrics")
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token").status_code == 200
    client.force_login(UserFactory(username="plain"))
    assert client.get("/metrics").status_code == 401
    client.force_login(UserFactory(username="operator", is_staff=True))
    assert client.get("/metrics").status_code == 200


@pytest.mark.django_db
def test_metrics_without_a_token_configured_refuse_every_bearer(client, settings):
    settings.KAI_METRICS_TOKEN = ""
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401


@pytest.mark.django_db
def test_metrics_open_to_anyone_only_when_configured(client, settings):
    settings.KAI_METRICS_PUBLIC = True
    assert client.get("/metrics").status_code == 200


# ------------------------------------------------------------------------------------------ sign-in


@pytest.fixture
def fresh_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.mark.django_db
def test_login_is_throttled_after_repeated_failures(client, settings, fresh_cache):
    settings.KAI_LOGIN_MAX_FAILURES = 3
    UserFactory(username="alice")  # password "pw"
    for _ in range(3):
        assert client.post("/accounts/login/", {"username": "alice", "password": "nope"}).status_code == 200
    locked = client.post("/accounts/login/", {"username": "alice", "password": "pw"})
    assert locked.status_code == 429
    assert "Too many failed sign-in attempts" in locked.content.decode()
    assert "_auth_user_id" not in client.session
    # Another address is locked out for this user name too (a spread-out guess at one account).
    other = client.post("/accounts/login/", {"username": "alice", "password": "pw"}, REMOTE_ADDR="10.0.0.9")
    assert other.status_code == 429
    cache.clear()  # the lockout time passed
    assert client.post("/accounts/login/", {"username": "alice", "password": "pw"}).status_code == 302


@pytest.mark.django_db
def test_a_successful_login_clears_the_failures(client, settings, fresh_cache):
    settings.KAI_LOGIN_MAX_FAILURES = 3
    UserFactory(username="bob")
    for _ in range(2):
        client.post("/accounts/login/", {"username": "bob", "password": "nope"})
    assert client.post("/accounts/login/", {"username": "bob", "password": "pw"}).status_code == 302
    client.logout()
    for _ in range(2):
        client.post("/accounts/login/", {"username": "bob", "password": "nope"})
    assert client.post("/accounts/login/", {"username": "bob", "password": "pw"}).status_code == 302


@pytest.mark.django_db
def test_expired_tokens_are_refused_with_a_clear_401(api_client, settings, fresh_cache, monkeypatch):
    settings.KAI_API_TOKEN_LIFETIME_DAYS = 30
    user = UserFactory(username="robot")
    token = Token.objects.create(user=user)
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    assert api_client.get("/api/v1/me/").status_code == 200  # the token is now remembered (a few seconds)
    later = timezone.now() + timedelta(days=31)
    monkeypatch.setattr(timezone, "now", lambda: later)  # expiry is checked on every call
    response = api_client.get("/api/v1/me/")
    assert response.status_code == 401
    assert "expired" in response.json()["detail"]
    assert "POST /api/v1/me/token/" in response.json()["detail"]
    settings.KAI_API_TOKEN_LIFETIME_DAYS = 0  # never expire
    assert api_client.get("/api/v1/me/").status_code == 200


@pytest.mark.django_db
def test_a_new_token_replaces_an_expired_one(client, api_client, settings, fresh_cache):
    settings.KAI_API_TOKEN_LIFETIME_DAYS = 30
    user = UserFactory(username="robot")
    old = Token.objects.create(user=user)
    Token.objects.filter(pk=old.pk).update(created=timezone.now() - timedelta(days=31))
    client.force_login(user)
    new_key = client.post("/api/v1/me/token/").json()["token"]
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {new_key}")
    assert api_client.get("/api/v1/me/").status_code == 200
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {old.key}")
    assert api_client.get("/api/v1/me/").status_code == 401


@pytest.mark.django_db
def test_guessing_tokens_is_throttled(api_client, settings, fresh_cache):
    settings.KAI_LOGIN_MAX_FAILURES = 3
    user = UserFactory(username="robot")
    good = Token.objects.create(user=user)
    for i in range(3):
        api_client.credentials(HTTP_AUTHORIZATION=f"Token guess{i}")
        assert api_client.get("/api/v1/me/").status_code == 401
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {good.key}")
    assert api_client.get("/api/v1/me/").status_code == 429


# ------------------------------------------------------------------------------------------ Helm chart


@pytest.mark.kube
def test_the_chart_passes_the_metrics_token_from_a_secret_and_keeps_metrics_closed():
    from tests.kube import test_helm_chart as chart

    helm = chart.find_helm()
    if helm is None:
        pytest.skip("no helm binary: run deploy/helm/build-helm.sh (or set HELM=/path/to/helm)")
    docs = chart.render(helm, [*chart.SECRETS, "prometheus.metricsToken.existingSecret=kaiweb-metrics"])
    web = chart.pod_templates(docs)["web"]["spec"]["containers"][0]
    env = chart.env_of(web)
    assert env["KAI_METRICS_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "kaiweb-metrics", "key": "metrics-token"}
    assert env["KAI_METRICS_PUBLIC"]["value"] == "false"
    default = chart.env_of(chart.pod_templates(chart.render(helm, chart.SECRETS))["web"]["spec"]["containers"][0])
    assert "KAI_METRICS_TOKEN" not in default
    assert default["KAI_METRICS_PUBLIC"]["value"] == "false"
