"""What if a project or department had other numbers in a node pool? Replayed per pool, on the pool's shard."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from kaiweb.cluster.models import SchedulingShard
from kaiweb.org import services
from kaiweb.org.choices import NODE_POOL_LABEL
from kaiweb.queues.models import Queue
from kaiweb.whatif import pools
from kaiweb.whatif.replay import WhatIfInputError
from tests.factories import ClusterFactory, NodeFactory, PodFactory, WorkloadFactory

NOW = timezone.now().replace(microsecond=0)
SUBMIT = NOW - dt.timedelta(hours=3)
GPU_LABEL = "nvidia.com/gpu.product"


@pytest.fixture
def research(db) -> dict:
    """Pools h100 and a100 of one 8-GPU node each; department research (6 H100s guaranteed) with projects vision
    (2 H100s, 4 A100s) and nlp (4 H100s). Each project has 12 one-GPU jobs of 10 minutes waiting on H100s at once,
    vision 4 on A100s."""
    cluster = ClusterFactory()
    SchedulingShard.objects.get_or_create(cluster=cluster, name="default")
    NodeFactory(cluster=cluster, name="h1", labels={GPU_LABEL: "H100"})
    NodeFactory(cluster=cluster, name="a1", labels={GPU_LABEL: "A100"}, gpu_product="NVIDIA-A100-SXM4-80GB")
    services.create_node_pool({"name": "h100", "label_key": GPU_LABEL, "label_value": "H100"})
    services.create_node_pool({"name": "a100", "label_key": GPU_LABEL, "label_value": "A100"})
    services.create_department({"name": "research", "queues": [_entry("h100", 6)]})
    services.create_project({"name": "vision", "department": "research", "queues": [_entry("h100", 2),
                                                                                    _entry("a100", 4)]})
    services.create_project({"name": "nlp", "department": "research", "queues": [_entry("h100", 4)]})
    queues = {q.name: q for q in Queue.objects.all()}
    for queue, pool, count in (("vision-h100", "h100", 12), ("nlp-h100", "h100", 12), ("vision-a100", "a100", 4)):
        for i in range(count):
            w = WorkloadFactory(cluster=cluster, queue=queues[queue], name=f"{queue}-{i:02d}", state="pending",
                                labels={NODE_POOL_LABEL: pool}, submitted_at=SUBMIT + dt.timedelta(seconds=i))
            PodFactory(workload=w, name=f"{queue}-{i:02d}-0", gpu=1, duration_seconds=600)
    return queues


def _entry(pool: str, gpus: float) -> dict:
    """A queue in `pool` guaranteeing `gpus`, with no cap on GPUs, CPU or memory."""
    unlimited = {"deserved": 0, "limit": -1}
    return {"pool": pool, "gpu": {"deserved": gpus, "limit": -1}, "cpu": unlimited, "memory": unlimited}


def _row(result: dict, queue: str) -> dict:
    return next(r for r in result["queues"] if r["queue"] == queue)


def test_more_h100s_for_a_project_shows_the_h100_pools_effect_alone(research):
    result = pools.run_pools_whatif({"project": "vision", "entries": [{"pool": "h100", "gpu": {"deserved": 6}}]},
                                    now=NOW)
    assert result["org"] == {"kind": "project", "name": "vision"}
    assert [p["pool"] for p in result["pools"]] == ["h100"]
    h100 = result["pools"][0]
    assert (h100["shard"], h100["queue"]) == ("h100", "vision-h100")
    replayed = h100["result"]
    assert replayed["changes"] == [{"queue": "vision-h100", "field": "gpu_quota", "current": 2, "changed": 6}]
    assert replayed["cluster"] == {"nodes": 1, "gpus": 8}  # the H100 node only
    assert {r["queue"] for r in replayed["queues"]} == {"vision-h100", "nlp-h100"}  # the A100 jobs are not here
    vision, nlp = _row(replayed, "vision-h100"), _row(replayed, "nlp-h100")
    assert vision["difference"]["queueing_delay_mean_s"] < 0
    assert nlp["difference"]["queueing_delay_mean_s"] > 0


def test_a_department_change_in_two_pools_gives_one_comparison_per_pool(research):
    with pytest.raises(WhatIfInputError) as exc:
        pools.run_pools_whatif({"department": "research", "entries": [
            {"pool": "h100", "gpu": {"deserved": 8}}, {"pool": "a100", "gpu": {"deserved": 8}}]}, now=NOW)
    assert "research has no queue in node pool 'a100'" in exc.value.message_dict["org.entries[1].pool"][0]
    result = pools.run_pools_whatif({"project": "vision", "entries": [
        {"pool": "h100", "gpu": {"deserved": 6}}, {"pool": "a100", "gpu": {"deserved": 2, "limit": 2}}]}, now=NOW)
    assert [p["pool"] for p in result["pools"]] == ["a100", "h100"]
    a100 = result["pools"][0]["result"]
    assert {r["queue"] for r in a100["queues"]} == {"vision-a100"}
    # Capped at 2 A100s, vision's four jobs wait longer there.
    assert _row(a100, "vision-a100")["difference"]["queueing_delay_mean_s"] > 0


@pytest.mark.parametrize(
    ("org", "key", "words"),
    [
        ({"project": "nobody", "entries": [{"pool": "h100", "gpu": {"deserved": 1}}]}, "org.project", "no project"),
        ({"project": "vision", "department": "research", "entries": []}, "org", "exactly one owner"),
        ({"project": "vision", "entries": []}, "org.entries", "at least one entry"),
        ({"project": "vision", "entries": [{"pool": "l4", "gpu": {"deserved": 1}}]}, "org.entries[0].pool",
         "no queue in node pool 'l4'"),
        ({"project": "vision", "entries": [{"pool": "h100", "gpu": {"deserved": 9, "limit": 4}}]},
         "org.entries[0].gpu.limit", "below the quota"),
        ({"project": "vision", "entries": [{"pool": "h100", "gpu": {"guaranteed": 3}}]}, "org.entries[0].gpu",
         "takes deserved"),
        ({"project": "vision", "entries": [{"pool": "h100", "gpu": {"deserved": 2}}]}, "org.entries[0]",
         "no value differs"),
        ({"project": "vision", "entries": [{"pool": "h100", "gpu": {"deserved": 3}},
                                           {"pool": "h100", "gpu": {"deserved": 4}}]},
         "org.entries[1].pool", "given twice"),
    ],
)
def test_bad_entries_name_the_input_path_and_the_rule_and_write_nothing(research, org, key, words):
    before = list(Queue.objects.order_by("name").values())
    with pytest.raises(WhatIfInputError) as exc:
        pools.run_pools_whatif(org, now=NOW)
    assert key in exc.value.message_dict, exc.value.message_dict
    assert words in " ".join(exc.value.message_dict[key])
    assert list(Queue.objects.order_by("name").values()) == before


def test_the_pools_together_stay_within_one_whatifs_work(research, settings):
    org = {"project": "vision", "entries": [{"pool": "h100", "gpu": {"deserved": 6}},
                                            {"pool": "a100", "gpu": {"deserved": 2}}]}
    # 24 jobs × 20 cycles on h100 fit alone, and 4 × 20 on a100 too, but not both together.
    settings.KAI_WHATIF_MAX_WORK = 500
    pools.run_pools_whatif({"project": "vision", "entries": org["entries"][:1]}, now=NOW, max_cycles=20,
                           check_only=True)
    with pytest.raises(WhatIfInputError) as exc:
        pools.run_pools_whatif(org, now=NOW, max_cycles=20)
    assert "add up to 560" in exc.value.message_dict["max_cycles"][0]


def test_api_runs_a_pool_whatif_and_refuses_mixing_it(viewer_api, research):
    body = {"org": {"project": "vision", "entries": [{"pool": "h100", "gpu": {"deserved": 6}}]}, "window_hours": 24}
    response = viewer_api.post("/api/v1/what-if/", body, format="json")
    assert response.status_code == 202, response.content
    run = viewer_api.get(f"/api/v1/what-if/{response.json()['id']}/").json()
    assert run["state"] == "done"
    assert run["result"]["pools"][0]["pool"] == "h100"
    assert _row(run["result"]["pools"][0]["result"], "vision-h100")["difference"]["queueing_delay_mean_s"] < 0
    mixed = viewer_api.post("/api/v1/what-if/", {**body, "changes": {"nlp-h100": {"gpu_quota": 1}}}, format="json")
    assert mixed.status_code == 400
    assert "org" in mixed.json()
    bad = viewer_api.post("/api/v1/what-if/", {"org": {"project": "vision", "entries": [
        {"pool": "h100", "cpu": {"limit": "lots"}}]}}, format="json")
    assert bad.status_code == 400
    assert "org.entries[0].cpu.limit" in bad.json()


def test_the_page_runs_an_owners_change_in_one_pool(client, viewer, research):
    client.force_login(viewer)
    page = client.get(reverse("whatif:page")).content.decode()
    assert 'value="project:vision"' in page
    # Choosing the owner and the pool reloads the form with its numbers there.
    prefilled = client.get(reverse("whatif:page"), {"owner": "project:vision", "pool": "a100"}).content.decode()
    assert 'name="gpu_quota" value="4"' in prefilled
    assert '<option value="owner" selected>' in prefilled
    response = client.post(reverse("whatif:page"), {"mode": "owner", "owner": "project:vision", "pool": "h100",
                                                    "gpu_quota": "6", "window_hours": "24"})
    html = response.content.decode()
    assert response.status_code == 200
    assert 'In node pool <strong>h100</strong>' in html
    assert "<code>vision-h100.gpu_quota</code> 2 → <strong>6</strong>" in html
    assert 'data-queue="vision-h100"' in html
    refused = client.post(reverse("whatif:page"), {"mode": "owner", "owner": "project:vision", "pool": "default",
                                                   "gpu_quota": "6", "window_hours": "24"}).content.decode()
    assert "project vision has no queue in node pool &#x27;default&#x27;" in refused
    unchosen = client.post(reverse("whatif:page"), {"mode": "owner", "owner": "project:vision",
                                                    "gpu_quota": "6"}).content.decode()
    assert "choose the node pool" in unchosen
