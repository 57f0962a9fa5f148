"""Celery task of the org app: what the org gives a Kubernetes cluster, written to it (`krm_sync.publish`),
every KAI_ORG_PUBLISH_SECONDS and after each org change."""

from __future__ import annotations

from celery import shared_task

from kaiweb.org.services import PUBLISH_TASK


@shared_task(name=PUBLISH_TASK, acks_late=True, ignore_result=True)
def publish_task() -> int:
    """Publish the org to the cluster when the backend is Kubernetes; returns the problems found (-1: skipped)."""
    from django.conf import settings

    from kaiweb.cluster.gateway import get_gateway
    from kaiweb.core.locks import advisory_lock
    from kaiweb.org import krm_sync
    from kaiweb.org.models import NodePool

    if settings.KAI_CLUSTER_BACKEND != "kubernetes" or not NodePool.objects.exists():
        return -1
    with advisory_lock("org-publish", wait=False) as got:
        if not got:
            return -1
        return len(krm_sync.publish(get_gateway()).problems)
