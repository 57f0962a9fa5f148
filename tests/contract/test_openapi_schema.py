"""The committed OpenAPI schema (deploy/openapi.yaml) is the one the code generates, and it validates.

Generated in-process the way `manage.py spectacular --validate --fail-on-warn` does (`make schema`).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiYamlRenderer
from drf_spectacular.validation import validate_schema

ROOT = Path(__file__).resolve().parents[2]


def generated_schema() -> dict:
    GENERATOR_STATS.reset()
    schema = SchemaGenerator().get_schema(request=None, public=True)
    assert not GENERATOR_STATS, "schema generation produced warnings or errors (run `make schema` to see them)"
    validate_schema(schema)
    return yaml.safe_load(OpenApiYamlRenderer().render(schema, renderer_context={}))


def test_committed_schema_matches_the_code():
    committed = yaml.safe_load((ROOT / "deploy" / "openapi.yaml").read_text())
    assert generated_schema() == committed, "deploy/openapi.yaml is out of date: run `make schema` and commit it"


def test_schema_documents_the_v1_resources():
    schema = yaml.safe_load((ROOT / "deploy" / "openapi.yaml").read_text())
    paths = set(schema["paths"])
    for path in (
        "/api/v1/queues/", "/api/v1/queues/tree/", "/api/v1/queues/import/", "/api/v1/queues/export/",
        "/api/v1/queues/listing/", "/api/v1/priority-classes/", "/api/v1/clusters/", "/api/v1/shards/",
        "/api/v1/nodes/", "/api/v1/workloads/", "/api/v1/cycles/", "/api/v1/decisions/", "/api/v1/preemptions/",
        "/api/v1/usage/", "/api/v1/usage/summary/", "/api/v1/audit/",
    ):
        assert path in paths, path
