"""The /api/v1/ router: each app's api/urls.py adds its viewsets through `register(router)`."""

from __future__ import annotations

from rest_framework.routers import DefaultRouter

from kaiweb.accounts.api import urls as accounts_api
from kaiweb.admission.api import urls as admission_api
from kaiweb.audit.api import urls as audit_api
from kaiweb.cluster.api import urls as cluster_api
from kaiweb.org.api import urls as org_api
from kaiweb.queues.api import urls as queues_api
from kaiweb.scheduling.api import urls as scheduling_api
from kaiweb.usage.api import urls as usage_api
from kaiweb.whatif.api import urls as whatif_api
from kaiweb.workloads.api import urls as workloads_api

router = DefaultRouter()
for module in (queues_api, cluster_api, workloads_api, scheduling_api, whatif_api, usage_api, audit_api, accounts_api,
               admission_api, org_api):
    module.register(router)
