"""The one Queue CRD codec: units at the border, KAI's defaults, strict and lenient reads, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler_core import model as m
from scheduler_core import queue_crd
from scheduler_core.units import MB


def _doc(spec: dict, name: str = "q", **extra: object) -> dict:
    return {"apiVersion": queue_crd.API_VERSION, "kind": queue_crd.KIND, "metadata": {"name": name, **extra},
            "spec": spec}


def test_memory_is_mb_in_the_crd_and_bytes_in_the_engine_and_unlimited_stays_unlimited():
    reading = queue_crd.read(_doc({"resources": {
        "cpu": {"quota": 8000, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": 64000, "limit": -1, "overQuotaWeight": 1},
        "gpu": {"quota": 2, "limit": 4, "overQuotaWeight": 3}}}))
    assert reading.problems == []
    assert reading.warnings == []
    spec = reading.spec
    assert spec.memory == m.QueueResource(64000 * MB, -1, 1)
    assert spec.cpu == m.QueueResource(8000, -1, 1)
    assert spec.gpu == m.QueueResource(2, 4, 3)
    assert queue_crd.write_spec(spec)["resources"]["memory"] == {"quota": 64000, "limit": -1, "overQuotaWeight": 1}


def test_unset_fields_take_kais_meaning_and_a_strict_read_warns_about_a_cap_of_zero():
    reading = queue_crd.read(_doc({"parentQueue": "dept", "resources": {"gpu": {"quota": 1, "limit": 2}}}))
    spec = reading.spec
    assert (spec.parent, spec.priority, spec.display_name) == ("dept", 100, None)
    assert spec.gpu == m.QueueResource(1, 2, 0)
    assert spec.cpu == spec.memory == m.QueueResource(0, 0, 0)
    assert [w.split(":")[1].strip() for w in reading.warnings] == ["spec.resources.cpu.limit is unset, which KAI reads as a cap of 0 (no cpu at all); set -1 for no cap",
                                                                   "spec.resources.memory.limit is unset, which KAI reads as a cap of 0 (no memory at all); set -1 for no cap"]


def test_strict_reports_every_problem_with_its_field_and_reads_no_spec():
    reading = queue_crd.read({"apiVersion": "v1", "kind": "Queue", "metadata": {"name": "q"}, "spec": {
        "priority": "high", "gpus": 4, "reclaimMinRuntime": "soon",
        "resources": {"gpu": {"quota": 4, "limit": 2, "weight": 1}, "disk": {}}}})
    assert reading.spec is None
    assert {p.field: p.message.split(",")[0] for p in reading.problems} == {
        "apiVersion": "must be scheduling.run.ai/v2",
        "spec.gpus": "is not a Queue field (known: displayName",
        "spec.priority": "must be an integer",
        "spec.reclaimMinRuntime": "must be a duration like '90s'",
        "spec.resources.disk": "is not a queue resource (cpu",
        "spec.resources.gpu.weight": "is not a resource field (quota",
        "spec.resources.gpu.limit": "limit 2 is below the quota 4; a limit must be -1 or ≥ the quota",
    }


def test_lenient_reads_what_kai_reads_from_the_cluster():
    doc = {"metadata": {"name": "q"}, "spec": {"futureField": 1, "resources": {
        "gpu": {"quota": 4, "limit": 2, "overQuotaWeight": 1}, "cpu": {"quota": -1, "limit": 8000}}}}
    assert queue_crd.read(doc, strict=True).spec is None
    reading = queue_crd.read(doc, strict=False)
    assert reading.problems == []
    assert reading.warnings == []
    assert reading.spec.gpu == m.QueueResource(2, 2, 1)  # the limit wins over a larger quota
    assert reading.spec.cpu == m.QueueResource(8000, 8000, 0)
    bad = queue_crd.read({"metadata": {"name": "q"}, "spec": {"resources": {"gpu": {"limit": -5}}}}, strict=False)
    assert bad.spec is None
    assert [(p.field, p.value) for p in bad.problems] == [("spec.resources.gpu.limit", -5)]


def test_a_document_that_is_not_a_mapping_is_a_problem_not_an_exception():
    for doc in (None, [], "Queue", 4):
        reading = queue_crd.read(doc)
        assert reading.spec is None
        assert reading.problems


amounts = st.one_of(st.just(-1.0), st.integers(0, 10**6).map(float), st.sampled_from([0.5, 0.25, 2.5]))


@st.composite
def resources(draw: st.DrawFn, scale: float = 1.0) -> m.QueueResource:
    quota = draw(amounts)
    limit = draw(st.one_of(st.just(-1.0), amounts.filter(lambda v: v >= max(quota, 0))))
    if quota == -1 and limit != -1:
        limit = -1.0

    def conv(v: float) -> float:
        return v if v < 0 else v * scale

    return m.QueueResource(conv(quota), conv(limit), draw(st.sampled_from([0.0, 1.0, 2.5])))


specs = st.builds(
    m.QueueSpec,
    name=st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
    parent=st.one_of(st.none(), st.just("dept")),
    priority=st.integers(-(2**31), 2**31 - 1),
    cpu=resources(), gpu=resources(), memory=resources(float(MB)),
    reclaim_min_runtime_s=st.one_of(st.none(), st.integers(0, 10**7).map(float)),
    preempt_min_runtime_s=st.one_of(st.none(), st.sampled_from([0.25, 90.0, 5400.0])),
    display_name=st.one_of(st.none(), st.just("Team Q")),
)


@given(specs)
def test_write_then_read_gives_the_spec_back_both_ways(spec: m.QueueSpec):
    for strict in (True, False):
        reading = queue_crd.read(queue_crd.write(spec), strict=strict)
        assert reading.problems == []
        assert reading.warnings == []
        assert reading.spec == spec
        assert queue_crd.differences(reading.spec, spec) == {}


def test_differences_name_crd_paths_in_crd_units_and_ignore_what_the_crd_does_not_hold():
    a = m.QueueSpec("q", creation=1.0, memory=m.QueueResource(2000 * MB, -1, 1))
    b = m.QueueSpec("q", creation=2.0, priority=150, memory=m.QueueResource(4000 * MB, -1, 1))
    assert queue_crd.differences(a, b) == {"spec.priority": (100, 150),
                                           "spec.resources.memory.quota": (2000, 4000)}


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25), (30, 30)])
def test_durations(text: object, seconds: float):
    assert queue_crd.parse_duration(text) == seconds
    assert queue_crd.parse_duration(queue_crd.format_duration(seconds)) == seconds
