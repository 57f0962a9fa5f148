"""kaiweb settings: one file, everything from the environment (see deploy/.env.example).

Defaults are for a developer's machine (SQLite under var/, a Celery broker that needs no
server — kombu's filesystem transport under var/broker/ —, the simulated cluster) but safe for
production: DEBUG is off unless KAI_DEBUG or DJANGO_DEBUG turns it on (`make run` does), and
with DEBUG off the shipped example key is refused. Production sets DATABASE_URL (Postgres),
REDIS_URL, DJANGO_SECRET_KEY and the HTTPS settings (see deploy/.env.example);
`manage.py check --deploy` is clean with that example.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
from pathlib import Path

import environ
import plotly
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("KAI_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)

env = environ.Env()


def read_secret(name: str, default: str | None = None) -> str | None:
    """Read NAME_FILE first (a mounted secret), then NAME, then the default."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return os.environ.get(name, default)


# ---------------------------------------------------------------- core
# Off unless turned on: KAI_DEBUG wins over DJANGO_DEBUG; `make run` sets KAI_DEBUG=true.
DEBUG = env.bool("KAI_DEBUG", default=env.bool("DJANGO_DEBUG", default=False))
#: Keys that were published (deploy/.env.example, docs): never a production key.
EXAMPLE_SECRET_KEYS = frozenset({"change-me", "changeme"})
SECRET_KEY = read_secret("DJANGO_SECRET_KEY")
if SECRET_KEY in EXAMPLE_SECRET_KEYS and not DEBUG:
    raise ImproperlyConfigured(
        f"DJANGO_SECRET_KEY is the published example {SECRET_KEY!r}; set a random key of your own "
        "(e.g. `openssl rand -base64 48`) or turn DEBUG on for local development"
    )
#: True when no key was configured and one was generated under var/ (`check --deploy` warns).
SECRET_KEY_GENERATED = not SECRET_KEY
if not SECRET_KEY:
    # A key generated once and kept under var/, so sessions survive restarts and every process of
    # one machine (web, worker, tests) shares it. Several replicas need one configured key.
    key_file = VAR_DIR / "dev-secret-key"
    if not key_file.exists():
        key_file.write_text(secrets.token_urlsafe(50))
    SECRET_KEY = key_file.read_text().strip()

ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

# ---------------------------------------------------------------- HTTPS and cookies
# Off by default so plain http works on a laptop; production behind TLS turns them on.
SESSION_COOKIE_SECURE = env.bool("DJANGO_SESSION_COOKIE_SECURE", default=False)
CSRF_COOKIE_SECURE = env.bool("DJANGO_CSRF_COOKIE_SECURE", default=SESSION_COOKIE_SECURE)
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=False)
# Probes and scrapes come over plain http from inside the cluster.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=False)
# "HTTP_X_FORWARDED_PROTO,https" behind a TLS-terminating proxy that sets that header (and strips
# it from clients); empty: no proxy header is trusted.
_proxy_header = env.list("DJANGO_SECURE_PROXY_SSL_HEADER", default=[])
if _proxy_header and len(_proxy_header) != 2:
    raise ImproperlyConfigured(
        "DJANGO_SECURE_PROXY_SSL_HEADER must be 'HEADER,value', e.g. HTTP_X_FORWARDED_PROTO,https"
    )
SECURE_PROXY_SSL_HEADER = tuple(_proxy_header) if _proxy_header else None
USE_X_FORWARDED_HOST = env.bool("DJANGO_USE_X_FORWARDED_HOST", default=False)
SESSION_COOKIE_AGE = env.int("DJANGO_SESSION_COOKIE_AGE", default=14 * 24 * 3600)

# ---------------------------------------------------------------- request bounds
# Largest request body read (forms, JSON, YAML imports), and deepest nesting of a JSON/YAML document.
KAI_MAX_REQUEST_BYTES = env.int("KAI_MAX_REQUEST_BYTES", default=1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = KAI_MAX_REQUEST_BYTES
FILE_UPLOAD_MAX_MEMORY_SIZE = KAI_MAX_REQUEST_BYTES
KAI_MAX_INPUT_DEPTH = env.int("KAI_MAX_INPUT_DEPTH", default=32)
# `?limit=` of any API list is cut to this.
KAI_API_MAX_PAGE_SIZE = env.int("KAI_API_MAX_PAGE_SIZE", default=500)
# How far into any list (API or page) one can read: a list counts at most this many rows (and
# says when there are more), and an offset past it is refused, so a page costs the same however
# many rows the table holds. Filters narrow a list to what lies beyond.
KAI_LIST_WINDOW = env.int("KAI_LIST_WINDOW", default=10_000)

# ---------------------------------------------------------------- apps
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "django_celery_results",
    "django_htmx",
    "django_tables2",
    "kaiweb.core",
    "kaiweb.accounts",
    "kaiweb.audit",
    "kaiweb.queues",
    "kaiweb.cluster",
    "kaiweb.workloads",
    "kaiweb.org",
    "kaiweb.scheduling",
    "kaiweb.usage",
    "kaiweb.reports",
    "kaiweb.ui",
    "kaiweb.whatif",
    "kaiweb.admission",
]
# The development tools (`devkube`: LocalKube, the fake API server, ``manage.py cluster_scenarios``) are
# in a checkout, not in the image.
if importlib.util.find_spec("devkube") is not None:
    INSTALLED_APPS.append("devkube")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "kaiweb.accounts.middleware.TokenOnPagesMiddleware",
    "kaiweb.accounts.middleware.UserTimeZoneMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "kaiweb.urls"
WSGI_APPLICATION = "kaiweb.wsgi.application"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# ---------------------------------------------------------------- database
DATABASES = {"default": env.db_url("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'kaiweb.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web, the workers and beat share the file: wait for locks instead of failing at once. A transaction
    # takes the write lock when it begins (IMMEDIATE), so two that both read and then write wait for
    # each other rather than fail with "database is locked" (SQLite does not wait on a lock upgrade);
    # with a shard per node pool, the cycles of two shards run at once. WAL lets readers go on meanwhile.
    sqlite_options = DATABASES["default"].setdefault("OPTIONS", {})
    sqlite_options["timeout"] = 30
    sqlite_options.setdefault("transaction_mode", "IMMEDIATE")
    sqlite_options.setdefault("init_command", "PRAGMA journal_mode=WAL;")
elif DATABASES["default"]["ENGINE"].startswith("django.db.backends.postgresql"):
    # An unreachable server fails a connection in seconds instead of hanging a worker or a probe.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("connect_timeout", 5)
# A connection is kept for this many seconds and reused by the requests (and tasks) of its thread:
# opening one costs a Postgres handshake and its password exchange, more than most API calls.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("KAI_DB_CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# ---------------------------------------------------------------- auth
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
# Login throttling: after this many failed sign-ins (or bad API tokens) from one address, or for one
# user name, further attempts are refused for the lockout time. Counted in the cache: give several
# web replicas a shared one (DJANGO_CACHE_URL=redis://…) so they count together.
KAI_LOGIN_MAX_FAILURES = env.int("KAI_LOGIN_MAX_FAILURES", default=5)
KAI_LOGIN_LOCKOUT_SECONDS = env.int("KAI_LOGIN_LOCKOUT_SECONDS", default=15 * 60)
# API tokens expire this many days after they were issued (0: never); `POST /api/v1/me/token/` issues a new one.
KAI_API_TOKEN_LIFETIME_DAYS = env.float("KAI_API_TOKEN_LIFETIME_DAYS", default=90.0)
# a token that authenticated is remembered this long by each server process (0: looked up on every
# call); a revoked token or a changed user takes effect at once in the process that changed it
KAI_API_AUTH_CACHE_SECONDS = env.float("KAI_API_AUTH_CACHE_SECONDS", default=5.0)
CACHES = {"default": env.cache_url("DJANGO_CACHE_URL", default="locmemcache://")}

# ---------------------------------------------------------------- i18n / time
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# ---------------------------------------------------------------- static files
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# vendor/plotly/plotly.min.js: plotly.js's basic bundle (1.2 MB) when `manage.py vendor_plotly` (run by
# `make install` and the image build) has fetched it, else the full bundle of the plotly package (4.8 MB).
# Neither is in git.
PLOTLY_BASIC_BUNDLE = VAR_DIR / "vendor" / "plotly" / "plotly.min.js"
_PLOTLY_DIR = (PLOTLY_BASIC_BUNDLE.parent if PLOTLY_BASIC_BUNDLE.exists()
               else Path(plotly.__file__).parent / "package_data")
STATICFILES_DIRS = [BASE_DIR / "static", ("vendor/plotly", _PLOTLY_DIR)]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# ---------------------------------------------------------------- REST API
REST_FRAMEWORK = {
    # Token first: an unauthenticated or bad-token request gets 401 with `WWW-Authenticate: Token`.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "kaiweb.accounts.authentication.ExpiringTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["kaiweb.accounts.permissions.RolePermission"],
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_PARSER_CLASSES": [
        "kaiweb.core.api.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "kaiweb.core.api.pagination.BoundedLimitOffsetPagination",
    "EXCEPTION_HANDLER": "kaiweb.core.api.errors.exception_handler",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_VERSIONING_CLASS": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "kaiweb API",
    "DESCRIPTION": "GPU scheduling control plane: queues, workloads, scheduling history and usage.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI and ReDoc from the installed drf-spectacular-sidecar package, never a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    # One schema name per choice set, so clients get stable enum types.
    "ENUM_NAME_OVERRIDES": {
        "PlacementStrategyEnum": "kaiweb.cluster.choices.PlacementStrategy",
        "WorkloadStateEnum": "kaiweb.workloads.choices.WorkloadState",
        "PodStateEnum": "kaiweb.workloads.choices.PodState",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "kaiweb.core.api.schema.add_error_responses",
    ],
}

# ---------------------------------------------------------------- Celery
REDIS_URL = env.str("REDIS_URL", default="")
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL or "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = VAR_DIR / "broker"
    for _sub in ("queue", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
    # kombu's filesystem transport with atomic writes (a worker never reads a half-written message).
    CELERY_BROKER_TRANSPORT = "kaiweb.core.filesystem_broker:Transport"
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default="django-db")
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = TIME_ZONE
# django-celery-beat's database schedule, touching the heartbeat the beat pod's probes check
CELERY_BEAT_SCHEDULER = "kaiweb.core.beat:HeartbeatScheduler"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# A broker restart must not end the worker: retry connecting for ever (also at start-up), with
# keep-alives and a health check so a dead Redis connection is noticed and replaced.
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_keepalive": True, "health_check_interval": 25,
                                       "retry_on_timeout": True, "socket_connect_timeout": 5}
# How often each worker checks its database (paused while it does not answer; /readyz reports it).
KAI_WORKER_HEALTH_SECONDS = env.float("KAI_WORKER_HEALTH_SECONDS", default=10.0)

# ---------------------------------------------------------------- scheduling
KAI_CLUSTER_BACKEND = env.str("KAI_CLUSTER_BACKEND", default="simulated")
if KAI_CLUSTER_BACKEND not in {"simulated", "kubernetes"}:
    raise ImproperlyConfigured(f"KAI_CLUSTER_BACKEND must be 'simulated' or 'kubernetes', not {KAI_CLUSTER_BACKEND!r}")
KAI_CYCLE_SECONDS = env.float("KAI_CYCLE_SECONDS", default=5.0)
KAI_USAGE_SECONDS = env.float("KAI_USAGE_SECONDS", default=60.0)
# The workload label naming the user who submitted it; usage is also broken down by it (workloads
# without it count as their namespace's, "ns/<namespace>").
KAI_USER_LABEL = env.str("KAI_USER_LABEL", default="user")
# Start-time estimates (scheduler_core.eta), refreshed per shard on a worker this often (seconds, at least a few
# cycles apart), with their budget: samples drawn, how far ahead (hours), simulated cycles per sample, and the
# work of all cycles together (jobs + nodes of each simulated snapshot; the default keeps 2,000 nodes / 16,000
# pending within about 2 s of worker time). The run times they draw from: workloads finished in the last
# KAI_ETA_HISTORY_DAYS days, at most KAI_ETA_HISTORY_ROWS of them.
KAI_ETA_SECONDS = env.float("KAI_ETA_SECONDS", default=60.0)
KAI_ETA_SAMPLES = env.int("KAI_ETA_SAMPLES", default=16)
KAI_ETA_HORIZON_HOURS = env.float("KAI_ETA_HORIZON_HOURS", default=7 * 24.0)
KAI_ETA_MAX_CYCLES = env.int("KAI_ETA_MAX_CYCLES", default=200)
KAI_ETA_MAX_WORK = env.int("KAI_ETA_MAX_WORK", default=350_000)
# How many pending jobs, in the engine's order, are run forward; those behind are "beyond-bound".
KAI_ETA_MAX_PENDING = env.int("KAI_ETA_MAX_PENDING", default=2000)
KAI_ETA_HISTORY_DAYS = env.float("KAI_ETA_HISTORY_DAYS", default=14.0)
KAI_ETA_HISTORY_ROWS = env.int("KAI_ETA_HISTORY_ROWS", default=5000)
for _name in ("KAI_ETA_SAMPLES", "KAI_ETA_MAX_CYCLES", "KAI_ETA_MAX_WORK", "KAI_ETA_MAX_PENDING", "KAI_ETA_HISTORY_ROWS"):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name} must be at least 1, not {globals()[_name]}")
for _name in ("KAI_ETA_SECONDS", "KAI_ETA_HORIZON_HOURS", "KAI_ETA_HISTORY_DAYS"):
    if not globals()[_name] > 0:
        raise ImproperlyConfigured(f"{_name} must be > 0, not {globals()[_name]}")
KAI_SCHEDULER_NAME = env.str("KAI_SCHEDULER_NAME", default="kai-scheduler")
# The queue of a pod whose pod, owner and namespace name none (empty: such a pod is reported, not scheduled).
KAI_DEFAULT_QUEUE = env.str("KAI_DEFAULT_QUEUE", default="")
# Shared GPUs: the namespace of the reservation pods that hold them, and their container's image.
KAI_RESERVATION_NAMESPACE = env.str("KAI_RESERVATION_NAMESPACE", default="kai-resource-reservation")
KAI_RESERVATION_IMAGE = env.str("KAI_RESERVATION_IMAGE", default="registry.k8s.io/pause:3.10")
# How long a shared-GPU bind waits for a new reservation pod to report its device (KAI's binder
# --resource-reservation-allocation-timeout, 40 s); past it the reservation is deleted and the bind
# fails. 0 (the default) binds at once: the default image (pause) reports no device. Set it with an
# image that reports, such as KAI's resource-reservation image.
KAI_RESERVATION_ALLOCATION_TIMEOUT = env.float("KAI_RESERVATION_ALLOCATION_TIMEOUT", default=0.0)
# Kubernetes backend: API server URL (empty: in-cluster, else KUBECONFIG), request timeout, and how
# recent a heartbeat of `manage.py watch_cluster` must be for the cycle to skip its own full list.
KAI_KUBERNETES_HOST = env.str("KAI_KUBERNETES_HOST", default="")
KAI_KUBERNETES_TIMEOUT = env.float("KAI_KUBERNETES_TIMEOUT", default=10.0)
# Concurrent API calls when a cycle binds and evicts (KAI's binder: 100 concurrent reconciles).
KAI_BIND_CONCURRENCY = env.int("KAI_BIND_CONCURRENCY", default=32)
# PodGroups whose time stamps a cycle writes back at most (the rest in the cycles after it), so a
# burst of starts does not hold up the next cycle.
KAI_STAMP_WRITES_PER_CYCLE = env.int("KAI_STAMP_WRITES_PER_CYCLE", default=50)
# Kubernetes: PodGroups whose place in line and start estimate (kaiweb.io/queue-position, …) an idle
# cycle writes at most, the head of the line first (a tenth after a cycle that acted).
KAI_LINE_WRITES_PER_CYCLE = env.int("KAI_LINE_WRITES_PER_CYCLE", default=100)
# Kubernetes: pending pods whose why-pending (PodScheduled condition and event) an idle cycle writes at
# most, concurrently, those never explained first (a tenth after a cycle that acted).
KAI_PENDING_WRITES_PER_CYCLE = env.int("KAI_PENDING_WRITES_PER_CYCLE", default=1000)
# watch_cluster's pod-grouper: threads writing PodGroups and pod marks, and how long a namespace's
# labels and an owner it read are reused for further pods.
KAI_GROUPER_WORKERS = env.int("KAI_GROUPER_WORKERS", default=8)
KAI_GROUPER_CACHE_SECONDS = env.float("KAI_GROUPER_CACHE_SECONDS", default=5.0)
KAI_WATCH_HEARTBEAT_SECONDS = env.float("KAI_WATCH_HEARTBEAT_SECONDS", default=30.0)
# Admission webhooks (/admission/mutate, /admission/validate): the largest AdmissionReview read (an
# object and its old version; etcd keeps objects up to 1.5 MiB each). 413 above it.
KAI_ADMISSION_MAX_BYTES = env.int("KAI_ADMISSION_MAX_BYTES", default=4 * 1024 * 1024)
KAI_USAGE_DB_CHECK_SECONDS = env.float("KAI_USAGE_DB_CHECK_SECONDS", default=15.0)
# Kubernetes: how often the org (node pools, departments, projects) is written to the cluster: the pools'
# SchedulingShards, the derived queues' labels, project namespaces, node pool labels, KRM objects' status.
KAI_ORG_PUBLISH_SECONDS = env.float("KAI_ORG_PUBLISH_SECONDS", default=30.0)
# Periodic work, seeded into django-celery-beat's tables (editable at runtime in the admin):
# one cycle per enabled shard every KAI_CYCLE_SECONDS, usage accounting, daily roll-up.
CELERY_BEAT_SCHEDULE = {
    "scheduling-cycles": {"task": "scheduling.dispatch_cycles", "schedule": KAI_CYCLE_SECONDS,
                          "options": {"expires": KAI_CYCLE_SECONDS * 2}},
    "usage-accounting": {"task": "usage.account", "schedule": KAI_USAGE_SECONDS,
                         "options": {"expires": KAI_USAGE_SECONDS * 2}},
    "usage-retention": {"task": "usage.retention", "schedule": 24 * 3600.0},
    # Start-time estimates of each shard's pending workloads, on the what-if queue (off the cycle's).
    "start-estimates": {"task": "scheduling.dispatch_estimates", "schedule": KAI_ETA_SECONDS,
                        "options": {"expires": KAI_ETA_SECONDS}},
    # Shards whose SchedulingShard names a Prometheus usage database: fetched when their
    # fetchInterval has passed (checked this often; the queries have their own time limit).
    "usage-database": {"task": "usage.fetch_usage_db", "schedule": KAI_USAGE_DB_CHECK_SECONDS,
                       "options": {"expires": KAI_USAGE_DB_CHECK_SECONDS * 2}},
    "org-publish": {"task": "org.publish", "schedule": KAI_ORG_PUBLISH_SECONDS,
                    "options": {"expires": KAI_ORG_PUBLISH_SECONDS * 2}},
}

# What-if (replay of recorded history): the largest run one request may ask for. Work is counted as
# replayed jobs × cycles per run; both runs (current and changed tree) together cost twice that.
KAI_WHATIF_MAX_WINDOW_HOURS = env.float("KAI_WHATIF_MAX_WINDOW_HOURS", default=7 * 24.0)
KAI_WHATIF_MAX_HORIZON_HOURS = env.float("KAI_WHATIF_MAX_HORIZON_HOURS", default=14 * 24.0)
KAI_WHATIF_MAX_CYCLES = env.int("KAI_WHATIF_MAX_CYCLES", default=2000)
KAI_WHATIF_MAX_JOBS = env.int("KAI_WHATIF_MAX_JOBS", default=2000)
KAI_WHATIF_MAX_WORK = env.int("KAI_WHATIF_MAX_WORK", default=400_000)
# What-ifs run on a worker: at most this long each, and this many queued or running per user at once.
KAI_WHATIF_TIME_LIMIT_S = env.int("KAI_WHATIF_TIME_LIMIT_S", default=300)
# What-ifs have a queue of their own, served by a worker of its own (the chart's "whatif" Deployment,
# `make run`'s second worker), so a long one never holds a scheduling cycle back: the cycles' worker
# consumes "celery" only. Start-time estimates go there too.
CELERY_TASK_ROUTES = {"whatif.run": {"queue": "whatif"}, "scheduling.estimate_starts": {"queue": "whatif"}}
KAI_WHATIF_MAX_RUNNING_PER_USER = env.int("KAI_WHATIF_MAX_RUNNING_PER_USER", default=2)
KAI_WHATIF_KEEP_PER_USER = env.int("KAI_WHATIF_KEEP_PER_USER", default=20)

# ---------------------------------------------------------------- utilization, idle GPUs, reports
# Prometheus with NVIDIA's DCGM exporter metrics (empty: utilization from the simulated cluster only).
KAI_PROMETHEUS_URL = env.str("KAI_PROMETHEUS_URL", default="")
KAI_PROMETHEUS_TIMEOUT = env.float("KAI_PROMETHEUS_TIMEOUT", default=10.0)
# /metrics names every queue and its allocation: it answers a scraper that sends
# `Authorization: Bearer <KAI_METRICS_TOKEN>` or a signed-in staff user; anyone only with KAI_METRICS_PUBLIC.
KAI_METRICS_TOKEN = read_secret("KAI_METRICS_TOKEN", "") or ""
KAI_METRICS_PUBLIC = env.bool("KAI_METRICS_PUBLIC", default=False)
# A job holding GPUs whose utilization stays under this percentage for this long is reported idle.
KAI_IDLE_GPU_UTILIZATION_PERCENT = env.float("KAI_IDLE_GPU_UTILIZATION_PERCENT", default=5.0)
KAI_IDLE_GPU_WINDOW_SECONDS = env.float("KAI_IDLE_GPU_WINDOW_SECONDS", default=600.0)
# Scheduled usage reports go out through Django's email backend (the console in development).
EMAIL_BACKEND = env.str("DJANGO_EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env.str("EMAIL_HOST", default="localhost")
EMAIL_PORT = env.int("EMAIL_PORT", default=25)
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = read_secret("EMAIL_HOST_PASSWORD", "") or ""
EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", default=False)
KAI_REPORTS_FROM_EMAIL = env.str("KAI_REPORTS_FROM_EMAIL", default="kaiweb-reports@localhost")

# ---------------------------------------------------------------- logging
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("DJANGO_LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}
