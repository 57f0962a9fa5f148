"""Top-level URLs: admin, /api/v1/ (+ schema and docs), health, metrics, and the pages of each app."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from kaiweb.accounts.views import ThrottledLoginView
from kaiweb.api_v1 import router
from kaiweb.core import views as core_views

urlpatterns = [
    path("healthz", core_views.healthz, name="healthz"),
    path("readyz", core_views.readyz, name="readyz"),
    path("metrics", core_views.metrics, name="metrics"),
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/", include("kaiweb.accounts.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/schema/", SpectacularAPIView.as_view(api_version="v1"), name="api-v1-schema"),
    path("api/v1/docs/", SpectacularSwaggerView.as_view(url_name="api-v1-schema"), name="api-v1-docs"),
    path("api/v1/redoc/", SpectacularRedocView.as_view(url_name="api-v1-schema"), name="api-v1-redoc"),
    path("api/v1/", include((router.urls, "api-v1"))),
    path("queues/", include("kaiweb.queues.urls")),
    path("org/", include("kaiweb.org.urls")),
    path("workloads/", include("kaiweb.workloads.urls")),
    path("nodes/", include("kaiweb.ui.node_urls")),
    path("usage/", include("kaiweb.usage.urls")),
    path("reports/", include("kaiweb.reports.urls")),
    path("audit/", include("kaiweb.audit.urls")),
    path("admission/", include("kaiweb.admission.urls")),  # the webhooks, namespace bindings
    path("", include("kaiweb.scheduling.urls")),  # /preemptions/, /cycles/
    path("what-if/", include("kaiweb.whatif.urls")),
    path("", include("kaiweb.ui.urls")),  # / (overview)
]

handler404 = "kaiweb.core.views.page_not_found"
handler500 = "kaiweb.core.views.server_error"
