"""Contract test: schemathesis generates requests from the committed OpenAPI schema and runs them,
authenticated as a platform admin (token auth), against the WSGI app; no request may cause a 500,
and every response must match the schema's status codes and bodies.

Examples are bounded and derandomized so the run is short and repeatable in CI.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
import yaml
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from kaiweb.wsgi import application
from tests.factories import (
    DecisionFactory,
    NodeFactory,
    PendingReasonFactory,
    PodFactory,
    PreemptionEventFactory,
    QueueStatusFactory,
    UsageBucketFactory,
    WorkloadFactory,
)

ROOT = Path(__file__).resolve().parents[2]
# Under pytest-xdist schemathesis's per-operation tests are collapsed into one that does not call them
# all: `make test` runs this module in a process of its own.
pytestmark = pytest.mark.one_process

schema = schemathesis.openapi.from_dict(yaml.safe_load((ROOT / "deploy" / "openapi.yaml").read_text()))
schema.app = application


@pytest.fixture(autouse=True)
def _keep_the_test_connection_open():
    """The WSGI handler closes "old" connections around each request; inside the test's transaction
    that would close the test database connection (Postgres). Django's own test client does the same."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def admin_token(platform_admin, queue_tree) -> str:
    """A token of the platform admin, with some of every kind of row to read, page and filter."""
    NodeFactory()
    workload = WorkloadFactory(queue=queue_tree["team-training"])
    PodFactory(workload=workload)
    PendingReasonFactory(workload=workload)
    DecisionFactory(workload=workload)
    PreemptionEventFactory(victim=workload, victim_queue=queue_tree["team-training"])
    QueueStatusFactory(queue=queue_tree["team-training"])
    UsageBucketFactory(queue=queue_tree["team-training"])
    return Token.objects.create(user=platform_admin).key


@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=3, deadline=None, derandomize=True, database=None,
    phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
)
def test_api_answers_every_generated_request_without_a_server_error(case, admin_token):
    checks = [not_a_server_error, status_code_conformance, response_schema_conformance]
    if case.path.endswith("/export/"):
        # A multi-document YAML file cannot be read as one value; tests/kaiweb/queues checks its content.
        checks.remove(response_schema_conformance)
    case.call_and_validate(headers={"Authorization": f"Token {admin_token}"}, checks=checks)
