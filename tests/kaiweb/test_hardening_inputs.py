"""Bounded work and no 500s on bad input: the reproductions of issue 13 as tests.

YAML alias bombs and deep nesting, 100,000-level JSON, non-finite numbers, huge durations,
oversized bodies, what-if limits and `?limit=`: each gets a 4xx that names the rule.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from kaiweb.core import inputs
from kaiweb.queues import yaml_io
from kaiweb.queues.models import Queue
from tests.factories import ClusterFactory, NodeFactory, PodFactory, QueueFactory, WorkloadFactory

ALIAS_BOMB = "\n".join(
    ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
)


def _queue_doc(name: str = "team-x", **resources: object) -> str:
    gpu = {"quota": 1, "limit": -1, "overQuotaWeight": 1, **resources}
    body = ", ".join(f"{k}: {v}" for k, v in gpu.items())
    return (
        "apiVersion: scheduling.run.ai/v2\nkind: Queue\n"
        f"metadata: {{name: {name}}}\n"
        f"spec:\n  resources:\n    gpu: {{{body}}}\n    cpu: {{quota: -1, limit: -1}}\n    memory: {{quota: -1, limit: -1}}\n"
    )


# ------------------------------------------------------------------------------------------ the readers


def test_yaml_aliases_are_refused_before_they_expand():
    with pytest.raises(inputs.InputRejected, match="aliases are not accepted"):
        inputs.load_yaml_documents(ALIAS_BOMB)


def test_deep_yaml_is_refused_by_the_depth_rule_not_a_recursion_error():
    with pytest.raises(inputs.InputRejected, match="nesting deeper than 32 levels"):
        inputs.load_yaml_documents("[" * 900 + "]" * 900)


def test_deep_json_is_refused_by_the_depth_rule_not_a_recursion_error():
    with pytest.raises(inputs.InputRejected, match="nesting deeper than 32 levels"):
        inputs.load_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(inputs.InputRejected, match="nesting deeper"):
        inputs.load_json("[" * 40 + "]" * 40)  # below the interpreter's limit: the depth walk catches it
    assert inputs.load_json('{"a": [[1]]}') == {"a": [[1]]}


@pytest.mark.parametrize("text", ["a: .nan", "a: .inf", "a: -.Inf", "a: " + "9" * 5000])
def test_yaml_non_finite_and_overlong_numbers_are_refused(text):
    with pytest.raises(inputs.InputRejected):
        inputs.load_yaml_documents(text)


@pytest.mark.parametrize("text", ['{"a": NaN}', '{"a": Infinity}', '{"a": 1e400}'])
def test_json_non_finite_numbers_are_refused(text):
    with pytest.raises(inputs.InputRejected, match="finite"):
        inputs.load_json(text)


def test_an_error_never_echoes_a_whole_value():
    assert len(inputs.shown("x" * 100_000)) < 120


# ------------------------------------------------------------------------------------------ queue import


def _problems(text: str) -> list[str]:
    with pytest.raises(yaml_io.QueueImportError) as exc:
        yaml_io.import_queues(text)
    return [str(p) for p in exc.value.problems]


@pytest.mark.django_db
def test_import_of_an_alias_bomb_is_refused_with_a_short_message():
    problems = _problems(ALIAS_BOMB)
    assert len(problems) == 1
    assert "aliases are not accepted" in problems[0]
    assert len(problems[0]) < 300


@pytest.mark.django_db
def test_import_of_deep_yaml_names_the_depth_rule():
    assert "nesting deeper than" in _problems("a: " + "[" * 900 + "]" * 900)[0]


@pytest.mark.django_db
@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "'nan'", "'1e999'"])
def test_import_refuses_non_finite_quotas_and_writes_nothing(value):
    problems = _problems(_queue_doc(quota=value))
    assert any("spec.resources.gpu.quota" in p and "finite" in p for p in problems), problems
    assert not Queue.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("duration", ["1.0e+300", "99999999999h", "3000000h"])
def test_import_refuses_durations_no_go_duration_can_hold(duration):
    text = _queue_doc() + f"  preemptMinRuntime: {duration}\n"
    problems = _problems(text)
    assert any("spec.preemptMinRuntime" in p for p in problems), problems
    assert not Queue.objects.exists()


@pytest.mark.django_db
def test_import_takes_a_long_but_valid_duration():
    result = yaml_io.import_queues(_queue_doc() + "  preemptMinRuntime: 2000000h\n")
    assert result.created == ["team-x"]
    assert Queue.objects.get().preempt_min_runtime == dt.timedelta(hours=2_000_000)


@pytest.mark.django_db
def test_import_api_answers_400_for_bombs_and_depth(admin_api):
    for text in (ALIAS_BOMB, "a: " + "[" * 900 + "]" * 900, _queue_doc(quota=".nan")):
        response = admin_api.post("/api/v1/queues/import/", text, content_type="application/yaml")
        assert response.status_code == 400, response.content
        assert len(response.content) < 2000
    assert not Queue.objects.exists()


@pytest.mark.django_db
def test_an_oversized_body_is_refused_with_413(admin_api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = admin_api.post("/api/v1/queues/import/", _queue_doc() + "#" * 2000, content_type="application/yaml")
    assert response.status_code == 413
    assert "1000 bytes" in response.json()["detail"]
    response = admin_api.post("/api/v1/queues/", {"name": "x" * 2000}, format="json")
    assert response.status_code == 413


# ------------------------------------------------------------------------------------------ API numbers


@pytest.mark.django_db
def test_deep_json_body_is_a_400_naming_the_rule(admin_api):
    body = "[" * 100_000 + "]" * 100_000
    response = admin_api.post("/api/v1/queues/", body, content_type="application/json")
    assert response.status_code == 400
    assert "nesting deeper than 32 levels" in response.json()["detail"]


@pytest.mark.django_db
@pytest.mark.parametrize("body", ['{"name": "q", "gpu_quota": NaN}', '{"name": "q", "gpu_quota": "nan"}',
                                  '{"name": "q", "gpu_quota": 1e999}', '{"name": "q", "priority": 1e999}',
                                  '{"name": "q", "priority": 99999999999999999999}',
                                  '{"name": "q", "preempt_min_runtime": "99999999999 00:00:00"}',
                                  '{"name": "q", "preempt_min_runtime": "999999999 00:00:00"}',
                                  '{"name": "q", "parent": {"a": 1}}'])
def test_queue_api_answers_400_for_out_of_range_numbers(admin_api, body):
    response = admin_api.post("/api/v1/queues/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert not Queue.objects.exists()


@pytest.mark.django_db
def test_a_list_page_is_capped(viewer_api, settings):
    settings.KAI_API_MAX_PAGE_SIZE = 3
    for i in range(5):
        QueueFactory(name=f"q-{i}")
    response = viewer_api.get("/api/v1/queues/?limit=1000000&offset=99999999999999999999999")
    assert response.status_code == 400  # past the list window (tests/kaiweb/test_list_window.py)
    assert "offset" in response.json()
    data = viewer_api.get("/api/v1/queues/?limit=1000000&offset=5").json()
    assert data["results"] == []
    data = viewer_api.get("/api/v1/queues/?limit=1000000").json()
    assert len(data["results"]) == 3
    assert data["count"] == 5


@pytest.mark.django_db
@pytest.mark.parametrize(("query", "field"), [("limit=abc", "limit"), ("limit=0", "limit"), ("limit=-5", "limit"),
                                               ("offset=-1", "offset"), ("offset=1.5", "offset")])
def test_a_bad_page_parameter_is_a_400_naming_it(viewer_api, query, field):
    for path in ("/api/v1/queues/", "/api/v1/workloads/", "/api/v1/pending-reasons/"):
        response = viewer_api.get(f"{path}?{query}")
        assert response.status_code == 400, (path, response.content)
        assert "whole number" in response.json()[field][0]


# ------------------------------------------------------------------------------------------ what-if

NOW = timezone.now().replace(microsecond=0)


@pytest.fixture
def recorded(db):
    cluster = ClusterFactory()
    NodeFactory(cluster=cluster, name="node-a")
    queues = [QueueFactory(name=n, gpu_quota=4, gpu_limit=-1, cpu_quota=-1, memory_quota=-1) for n in ("alpha", "beta")]
    for q in queues:
        for i in range(3):
            w = WorkloadFactory(cluster=cluster, queue=q, name=f"{q.name}-{i}", state="pending",
                                submitted_at=NOW - dt.timedelta(hours=2, seconds=i))
            PodFactory(workload=w, name=f"{q.name}-{i}-0", gpu=1, duration_seconds=600)
    return queues


def _whatif(client, **body):
    return client.post("/api/v1/what-if/", {"changes": {"alpha": {"gpu_quota": 8}}, **body}, format="json")


@pytest.mark.parametrize(("field", "value", "limit"), [
    ("window_hours", 720, "168"), ("max_cycles", 20000, "2000"), ("max_horizon_hours", 2160, "336"),
    ("max_jobs", 5000, "2000"),
])
def test_whatif_limits_are_400s_naming_the_field_and_the_limit(viewer_api, recorded, field, value, limit):
    response = _whatif(viewer_api, **{field: value})
    assert response.status_code == 400
    assert limit in " ".join(response.json()[field])


def test_whatif_total_work_is_capped(viewer_api, recorded, settings):
    settings.KAI_WHATIF_MAX_WORK = 6 * 50 - 1
    response = _whatif(viewer_api, max_cycles=50, max_horizon_hours=100)
    assert response.status_code == 400
    message = response.json()["max_cycles"][0]
    assert "6 replayed workloads × 50 cycles per run = 300" in message
    assert "KAI_WHATIF_MAX_WORK" in message
    settings.KAI_WHATIF_MAX_WORK = 6 * 50
    assert _whatif(viewer_api, max_cycles=50, max_horizon_hours=100).status_code == 202


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", [1], {"a": 1}])
def test_whatif_non_finite_quota_is_a_400_on_the_field(viewer_api, recorded, value):
    response = viewer_api.post("/api/v1/what-if/", {"changes": {"alpha": {"gpu_quota": value}}}, format="json")
    assert response.status_code == 400, response.content
    assert "changes.alpha.gpu_quota" in response.json()


@pytest.mark.parametrize("value", [{"a": 1}, [1], True, 10**30])
def test_whatif_parent_of_a_wrong_type_is_a_400(viewer_api, recorded, value):
    response = viewer_api.post("/api/v1/what-if/", {"changes": {"alpha": {"parent": value}}}, format="json")
    assert response.status_code == 400, response.content
    assert "changes.alpha.parent" in response.json()


def test_whatif_alias_bomb_is_refused_without_echoing_it(viewer_api, recorded):
    response = viewer_api.post("/api/v1/what-if/", {"yaml": ALIAS_BOMB}, format="json")
    assert response.status_code == 400
    assert "aliases are not accepted" in json.dumps(response.json())
    assert len(response.content) < 1000


def test_whatif_deep_json_is_a_400(viewer_api, recorded):
    body = '{"changes": ' + "[" * 100_000 + "]" * 100_000 + "}"
    response = viewer_api.post("/api/v1/what-if/", body, content_type="application/json")
    assert response.status_code == 400
    assert "nesting deeper" in response.json()["detail"]


def test_whatif_page_refuses_an_alias_bomb(client, viewer, recorded):
    client.force_login(viewer)
    response = client.post("/what-if/", {"mode": "yaml", "yaml": ALIAS_BOMB, "window_hours": "24"})
    assert response.status_code == 200
    body = response.content.decode()
    assert "aliases are not accepted" in body
    assert "lol, lol" not in body.split("</textarea>")[-1]


# ------------------------------------------------------------------------------------------ generated input

_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                  st.text(max_size=20))
_nested = st.recursive(_leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=3), max_leaves=30)


@hsettings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
           deadline=None)
@given(field=st.sampled_from(["gpu_quota", "gpu_limit", "gpu_over_quota_weight", "priority", "parent",
                              "preempt_min_runtime", "cpu_quota"]), value=_nested)
def test_generated_whatif_changes_never_give_a_server_error(viewer_api, recorded, field, value):
    body = json.dumps({"changes": {"alpha": {field: value}}, "max_cycles": 5}, allow_nan=True)
    response = viewer_api.post("/api/v1/what-if/", body, content_type="application/json")
    assert response.status_code in (202, 400), response.content


@hsettings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
           deadline=None)
@given(value=_nested, key=st.sampled_from(["quota", "limit", "overQuotaWeight"]))
def test_generated_import_values_never_give_a_server_error(admin_api, key, value):
    doc = yaml_io.yaml.safe_dump({
        "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "gen"},
        "spec": {"priority": 1, "preemptMinRuntime": value if key == "quota" else "1m",
                 "resources": {"gpu": {key: value}}},
    })
    response = admin_api.post("/api/v1/queues/import/?dry_run=true", doc, content_type="application/yaml")
    assert response.status_code in (200, 400), response.content
