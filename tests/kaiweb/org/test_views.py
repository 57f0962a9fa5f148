"""The org pages: the tree per pool, a pool's page, the forms with their preview, refusals by role."""

from __future__ import annotations

import pytest

from kaiweb.audit.models import AuditEntry
from kaiweb.cluster.models import SchedulingShard
from kaiweb.org import services
from kaiweb.org.models import Department, NodePool, Project
from kaiweb.queues.models import Queue
from kaiweb.workloads.choices import PodState, WorkloadState
from tests.factories import ClusterFactory, NodeFactory, PodFactory, UserFactory, WorkloadFactory

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu.product"


def entry(pool, deserved, limit, weight=1):
    return {"pool": pool, "gpu": {"deserved": deserved, "limit": limit, "over_quota_weight": weight}}


@pytest.fixture
def org():
    cluster = ClusterFactory(backend="simulated")
    SchedulingShard.objects.get_or_create(cluster=cluster, name="default")
    for i in range(2):
        NodeFactory(cluster=cluster, name=f"h{i}", labels={GPU: "H100"}, gpu_product="H100", allocatable_gpu=8)
        NodeFactory(cluster=cluster, name=f"a{i}", labels={GPU: "A100"}, gpu_product="A100", allocatable_gpu=8)
    services.create_node_pool({"name": "h100", "label_key": GPU, "label_value": "H100"})
    services.create_node_pool({"name": "a100", "label_key": GPU, "label_value": "A100"})
    services.create_department({"name": "research", "queues": [entry("h100", 8, 16), entry("a100", 8, -1)]})
    services.create_project({"name": "vision", "department": "research",
                             "queues": [entry("h100", 4, 8), entry("a100", 2, -1)]})
    services.create_project({"name": "nlp", "department": "research", "queues": [entry("h100", 4, 8)]})
    return cluster


def run_on(cluster, queue_name, gpus, name):
    workload = WorkloadFactory(cluster=cluster, queue=Queue.objects.get(name=queue_name), name=name,
                               state=WorkloadState.RUNNING)
    node = cluster.nodes.filter(labels__contains={"kai.scheduler/node-pool": queue_name.rsplit("-", 1)[1]}).first()
    PodFactory(workload=workload, state=PodState.RUNNING, gpu=gpus, node=node)
    return workload


def form_data(**fields):
    data = {"display_name": ""}
    data.update(fields)
    return data


def pool_fields(pool, gpu, cpu=(0, 0, 0), memory=(0, 0, 0), priority=100):
    data = {f"q-{pool}-on": "on", f"q-{pool}-priority": priority}
    for r, values in (("gpu", gpu), ("cpu", cpu), ("memory", memory)):
        for a, v in zip(("deserved", "limit", "over_quota_weight"), values, strict=True):
            data[f"q-{pool}-{r}-{a}"] = v
    return data


def test_the_tree_reads_per_pool_guaranteed_at_most_and_in_use(org, client, viewer):
    run_on(org, "vision-h100", 3, "train-1")
    client.force_login(viewer)
    page = client.get("/org/").content.decode()
    assert "h100: 4 guaranteed, 8 at most, 3 in use" in page
    assert "a100: 2 guaranteed, no ceiling, 0 in use" in page
    # the department counts its projects' use
    assert "h100: 8 guaranteed, 16 at most, 3 in use" in page
    assert page.index('data-owner="research"') < page.index('data-owner="nlp"') < page.index('data-owner="vision"')
    assert "2 / 2 ready" in page
    assert "Add a department" not in page


def test_a_pools_page_shows_its_nodes_its_shard_and_its_phase(org, client, viewer):
    client.force_login(viewer)
    page = client.get("/org/pools/h100/").content.decode()
    assert 'id="pool-phase">Ready<' in page
    assert "h0" in page
    assert "a0" not in page
    assert "kai.scheduler/node-pool=h100" in page
    assert client.get("/org/pools/nowhere/").status_code == 404


def test_a_platform_admin_adds_a_pool_from_the_form_and_bad_input_stays_on_the_form(org, client, platform_admin):
    client.force_login(platform_admin)
    bad = client.post("/org/pools/-/add/", {"name": "b200", "label_key": "", "label_value": "",
                                            "gpu_placement": "binpack", "cpu_placement": "binpack", "k_value": 1})
    assert bad.status_code == 200
    assert "give a key and a value" in bad.content.decode()
    assert not NodePool.objects.filter(name="b200").exists()
    good = client.post("/org/pools/-/add/", {"name": "b200", "label_key": GPU, "label_value": "B200",
                                             "gpu_placement": "spread", "cpu_placement": "binpack", "k_value": 0.5,
                                             "reclaim_min_runtime": "00:10:00"})
    assert good.status_code == 302
    pool = NodePool.objects.get(name="b200")
    assert (pool.shard.gpu_placement, pool.shard.k_value, pool.phase) == ("spread", 0.5, "Empty")


def test_a_department_preview_shows_each_pools_fair_shares_now_and_after_and_saves_nothing(org, client,
                                                                                          platform_admin):
    client.force_login(platform_admin)
    data = form_data(name="platform", action="preview", **pool_fields("h100", (8, -1, 1)))
    page = client.post("/org/departments/-/add/", data).content.decode()
    assert 'class="table compact preview-table" data-pool="h100"' in page
    assert 'data-queue="platform-h100"' in page
    assert "new</span>" in page
    assert not Department.objects.filter(name="platform").exists()
    saved = client.post("/org/departments/-/add/", {**data, "action": "save"})
    assert saved.status_code == 302
    assert Queue.objects.get(name="platform-h100").gpu_quota == 8
    assert AuditEntry.objects.filter(object_repr="platform", action="create").exists()
    audit = client.get("/audit/?object_repr=platform").content.decode()
    assert "queues: " in audit
    assert "h100 (platform-h100): GPU 8 guaranteed, no ceiling, weight 1" in audit


def test_lowering_a_quota_below_use_shows_what_becomes_reclaimable_before_saving(org, client, platform_admin):
    run_on(org, "vision-h100", 3, "train-old")
    run_on(org, "vision-h100", 2, "train-new")
    client.force_login(platform_admin)
    data = form_data(department="research", namespace="", default_node_pools="", action="preview",
                     **pool_fields("h100", (1, 8, 1)), **pool_fields("a100", (2, -1, 1)))
    page = client.post("/org/projects/vision/edit/", data).content.decode()
    assert 'id="preview-reclaimable"' in page
    assert "vision-h100 (h100): 5 gpu in use, quota 1: 4 becomes reclaimable" in page.replace("  ", " ")
    assert "team/train-new" in page
    assert Queue.objects.get(name="vision-h100").gpu_quota == 4


def test_deleting_a_project_with_running_work_shows_why_and_keeps_it(org, client, platform_admin):
    run_on(org, "nlp-h100", 1, "serve")
    client.force_login(platform_admin)
    page = client.get("/org/projects/nlp/").content.decode()
    assert "still has 1 workload(s) pending or running" in page
    answer = client.post("/org/projects/nlp/delete/", follow=True)
    assert "was not deleted" in answer.content.decode()
    assert Project.objects.filter(name="nlp").exists()


def test_a_department_admin_adds_projects_to_their_department_but_not_departments_or_pools(org, client):
    admin = UserFactory(username="dept-admin")
    Department.objects.get(name="research").admins.add(admin)
    client.force_login(admin)
    assert client.get("/org/departments/research/edit/").status_code == 403
    assert client.get("/org/pools/-/add/").status_code == 403
    form = client.get("/org/projects/-/add/").content.decode()
    assert '<option value="research"' in form
    assert "(none)" not in form
    made = client.post("/org/projects/-/add/", form_data(name="speech", department="research", namespace="",
                                                          default_node_pools="h100", action="save",
                                                          **pool_fields("h100", (1, 2, 1))))
    assert made.status_code == 302
    assert Queue.objects.get(name="speech-h100").parent.name == "research-h100"
    assert AuditEntry.objects.filter(object_repr="speech", actor=admin).exists()
    services.create_project({"name": "elsewhere"})
    assert client.get("/org/projects/elsewhere/edit/").status_code == 403
    assert client.post("/org/projects/elsewhere/delete/").status_code == 403


def test_a_platform_admin_names_department_admins_in_the_form_and_a_bad_name_saves_nothing(org, client,
                                                                                           platform_admin):
    UserFactory(username="ada")
    client.force_login(platform_admin)
    data = form_data(action="save", admins="ada ghost", **pool_fields("h100", (6, 16, 1)),
                     **pool_fields("a100", (8, -1, 1)))
    page = client.post("/org/departments/research/edit/", data).content.decode()
    assert "no user named ghost" in page
    research = Department.objects.get(name="research")
    assert (list(research.admins.all()), Queue.objects.get(name="research-h100").gpu_quota) == ([], 8)
    assert client.post("/org/departments/research/edit/", {**data, "admins": "ada"}).status_code == 302
    assert [u.username for u in research.admins.all()] == ["ada"]
    assert Queue.objects.get(name="research-h100").gpu_quota == 6
    assert 'value="ada"' in client.get("/org/departments/research/edit/").content.decode()


def test_a_projects_edit_form_starts_from_its_values(org, client, platform_admin):
    client.force_login(platform_admin)
    form = client.get("/org/projects/vision/edit/").content.decode()
    assert '<option value="research" selected>' in form
    assert 'name="q-h100-gpu-deserved" value="4.0"' in form
    assert 'name="q-h100-on" id="id_q-h100-on" checked' in form


def test_a_project_member_sees_the_project_and_changes_nothing(org, client, viewer):
    Project.objects.get(name="vision").members.add(viewer)
    client.force_login(viewer)
    page = client.get("/org/projects/vision/").content.decode()
    assert "you are a member" in page
    assert "kai-vision" in page
    assert "/org/projects/vision/edit/" not in page
    assert client.get("/org/projects/vision/edit/").status_code == 403
    assert client.get("/org/projects/-/add/").status_code == 403


def test_the_signed_out_are_sent_to_sign_in(org, client):
    answer = client.get("/org/")
    assert answer.status_code == 302
    assert "login" in answer["Location"]


def test_the_django_admin_lists_the_org_read_only(org, client, platform_admin):
    platform_admin.is_superuser = True
    platform_admin.save()
    client.force_login(platform_admin)
    page = client.get("/admin/org/project/").content.decode()
    assert "vision" in page
    assert "kai-vision" in page
    assert client.get("/admin/org/project/add/").status_code == 403


def test_the_trees_queries_do_not_grow_with_the_projects(org, client, viewer, django_assert_max_num_queries):
    client.force_login(viewer)
    client.get("/org/")
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as few:
        client.get("/org/")
    for i in range(5):
        services.create_project({"name": f"extra-{i}", "department": "research", "queues": [entry("h100", 0, 1)]})
        run_on(org, f"extra-{i}-h100", 1, f"job-{i}")
    with django_assert_max_num_queries(len(few)):
        page = client.get("/org/").content.decode()
    assert "h100: 0 guaranteed, 1 at most, 1 in use" in page


def test_the_tree_refreshes_its_body_alone_for_htmx(org, client, viewer):
    client.force_login(viewer)
    whole = client.get("/org/").content.decode()
    assert 'hx-get="/org/"' in whole
    body = client.get("/org/", HTTP_HX_REQUEST="true").content.decode()
    assert "h100: 4 guaranteed, 8 at most, 0 in use" in body
    assert "<html" not in body


def test_a_department_ceiling_lowered_in_the_preview_binds_its_projects_fair_shares(org, client, platform_admin):
    import re

    from kaiweb.org.choices import NODE_POOL_LABEL

    for project, gpus in (("vision", 6), ("nlp", 6)):
        workload = WorkloadFactory(cluster=org, queue=Queue.objects.get(name=f"{project}-h100"),
                                   labels={NODE_POOL_LABEL: "h100"}, name=f"{project}-wants")
        PodFactory(workload=workload, gpu=gpus, cpu=0, memory=0)
    client.force_login(platform_admin)
    data = form_data(action="preview", **pool_fields("h100", (8, 10, 1), cpu=(0, -1, 1), memory=(0, -1, 1)),
                     **pool_fields("a100", (8, -1, 1), cpu=(0, -1, 1), memory=(0, -1, 1)))
    page = client.post("/org/departments/research/edit/", data).content.decode()

    def gpu(queue):
        row = re.search(rf'data-pool="h100".*?<tr class="[^"]*" data-queue="{queue}">(.*?)</tr>', page, re.S).group(1)
        cells = re.findall(r'<td class="num">(?:<strong>)?([\d.]+)', row)
        return float(cells[0]), float(cells[1])

    # 12 H100s asked for under a department of 8 guaranteed, 16 at most: at most 10 now, 5 each
    assert gpu("research-h100") == (12, 10)
    assert gpu("vision-h100") == (6, 5)
    assert gpu("nlp-h100") == (6, 5)
    assert Queue.objects.get(name="research-h100").gpu_limit == 16


def test_a_pools_edit_form_changes_its_shard_but_never_its_label_pair(org, client, platform_admin):
    client.force_login(platform_admin)
    form = client.get("/org/pools/h100/edit/").content.decode()
    assert 'name="label_value" value="H100"' in form
    assert "disabled" in form
    answer = client.post("/org/pools/h100/edit/", {"name": "other", "label_key": "x", "label_value": "y",
                                                   "gpu_placement": "spread", "cpu_placement": "spread",
                                                   "k_value": 2, "preempt_min_runtime": "00:05:00"})
    assert answer.status_code == 302
    pool = NodePool.objects.select_related("shard").get(name="h100")
    assert (pool.label_key, pool.label_value) == (GPU, "H100")
    assert (pool.shard.gpu_placement, pool.shard.k_value, str(pool.shard.preempt_min_runtime)) == (
        "spread", 2, "0:05:00")
    assert AuditEntry.objects.filter(object_repr="h100", action="update").exists()


def test_a_department_with_projects_is_not_deleted_and_says_why(org, client, platform_admin):
    client.force_login(platform_admin)
    answer = client.post("/org/departments/research/delete/", follow=True)
    assert "still has project(s) nlp, vision" in answer.content.decode()
    assert Department.objects.filter(name="research").exists()
