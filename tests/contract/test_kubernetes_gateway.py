"""KubernetesGateway through the official client, on the fake API server and on a real one.

Tests taking ``apiserver`` run twice: on the fake (``tests.fakes.kube_apiserver``) and on a real
kube-apiserver (`devkube.localkube.LocalKube`, marked ``kube``). Tests that inject faults,
or read what only the fake records, take ``kube_apiserver`` and run on the fake alone.
"""

from __future__ import annotations

from datetime import datetime

import pytest
from kubernetes import client

from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.backends.types import (
    ActionOutcome,
    BindAction,
    EvictAction,
    ObservedQueue,
    PodRef,
    PodState,
    QueueStatusUpdate,
    ResourceAmounts,
)
from kaiweb.cluster.gateway import (
    ClusterGateway,
    ClusterRejected,
    ClusterTimeout,
    ClusterUnavailable,
    get_gateway,
)
from kaiweb.cluster.queue_sync import apply_queue_sync, diff_queues
from scheduler_core.model import QueueResource, QueueSpec
from tests.fakes.kube_apiserver import FakeKubeApiServer, kube_apiserver  # noqa: F401 - fixture
from tests.kube.fixtures import _real_server, apiserver, kube_cluster  # noqa: F401 - fixtures
from tests.kube.servers import FakeServer, RealServer

Server = FakeServer | RealServer

GiB = 1024**3


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def gateway(request: pytest.FixtureRequest, sleeps: list[float]) -> KubernetesGateway:
    # On the server the test asked for: ``apiserver`` (fake, then real) or the fake alone.
    server = request.getfixturevalue("apiserver" if "apiserver" in request.fixturenames else "kube_apiserver")
    # Backoff sleeps are recorded instead of slept: the tests check the schedule, not the clock.
    return KubernetesGateway(server.api_client, request_timeout=2.0, max_attempts=4,
                             backoff_base=0.1, backoff_max=2.0, sleep=sleeps.append)


def _requests_to(server: FakeKubeApiServer, fragment: str, method: str = "GET") -> int:
    return sum(1 for r in server.requests if fragment in r.path and r.method == method
               and "watch" not in r.query)


def test_the_gateway_satisfies_the_protocol(apiserver: Server, gateway: KubernetesGateway) -> None:  # noqa: F811
    assert isinstance(gateway, ClusterGateway)
    assert gateway.ping() == f"Kubernetes {apiserver.git_version}"


# -- nodes --------------------------------------------------------------------------------------


def test_list_nodes_maps_allocatable_gpu_labels_readiness_and_taints(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    apiserver.add_node("gpu-1", cpu="96", memory="1Ti", gpus=8, pods="110", labels={
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559",
        "topology.kubernetes.io/zone": "z1"})
    apiserver.add_node("mig-1", cpu="3500m", memory="64Gi", gpus=0, ready=False, unschedulable=True,
                            labels={"nvidia.com/mig.strategy": "mixed"},
                            extra_allocatable={"nvidia.com/mig-3g.40gb": "2"})
    node = apiserver.get("nodes", "mig-1")
    node["spec"]["taints"] = [{"key": "gpu", "value": "mig", "effect": "NoSchedule"}]
    apiserver.put("nodes", node)

    listing = gateway.list_nodes()

    assert listing.problems == ()
    assert apiserver.resource_version_is_current(listing.resource_version)
    nodes = {n.name: n for n in listing}
    h100 = nodes["gpu-1"]
    assert (h100.cpu_millis, h100.memory_bytes, h100.gpus, h100.max_pods) == (96_000, 1024 * GiB, 8, 110)
    assert h100.gpu_product == "NVIDIA-H100-80GB-HBM3"
    assert h100.gpu_memory_mib == 81559
    assert h100.ready
    assert not h100.unschedulable
    assert not h100.mig_enabled
    assert h100.labels["topology.kubernetes.io/zone"] == "z1"
    mig = nodes["mig-1"]
    assert mig.cpu_millis == 3500
    assert mig.gpus == 0
    assert mig.allocatable.mig == {"mig-3g.40gb": 2}
    assert mig.mig_enabled
    assert mig.mig_strategy == "mixed"
    assert not mig.ready
    assert mig.unschedulable
    assert [(t.key, t.value, t.effect) for t in mig.taints] == [("gpu", "mig", "NoSchedule")]


def test_gpu_memory_label_given_in_bytes_is_read_as_mib(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    apiserver.add_node("a100", labels={"nvidia.com/gpu.memory": str(40960 * 1024 * 1024)})

    assert gateway.list_nodes().items[0].gpu_memory_mib == 40960


def test_a_node_with_a_malformed_gpu_memory_label_is_reported_and_others_listed(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    apiserver.add_node("good")
    apiserver.add_node("bad", labels={"nvidia.com/gpu.memory": "80GB"})

    listing = gateway.list_nodes()

    assert [n.name for n in listing] == ["good"]
    (problem,) = listing.problems
    assert (problem.kind, problem.name, problem.field) == ("Node", "bad", "metadata.labels[nvidia.com/gpu.memory]")
    assert "whole number of MiB" in problem.rule


# -- pods ---------------------------------------------------------------------------------------


def test_list_pods_returns_only_pods_for_the_configured_scheduler(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    apiserver.add_pod("ours", namespace="ml")
    apiserver.add_pod("theirs", scheduler="default-scheduler")
    apiserver.add_pod("custom", scheduler="kai-scheduler-b")

    assert [p.name for p in gateway.list_pods()] == ["ours"]
    other = KubernetesGateway(apiserver.api_client, scheduler_name="kai-scheduler-b")
    assert [p.name for p in other.list_pods()] == ["custom"]
    if not apiserver.records_requests:
        return
    # The filter runs on the server, not after downloading every pod of the cluster.
    selectors = [r.query.get("fieldSelector") for r in apiserver.requests if r.path == "/api/v1/pods"]
    assert selectors == [["spec.schedulerName=kai-scheduler"], ["spec.schedulerName=kai-scheduler-b"]]


def test_pod_fields_are_mapped(apiserver: Server, gateway: KubernetesGateway) -> None:  # noqa: F811
    apiserver.add_priority_class("train", 50)
    apiserver.add_runtime_class("kata", {"cpu": "100m"})  # a real server takes the overhead from it
    created = apiserver.put("pods", {
        "metadata": {
            "name": "trainer-0", "namespace": "ml",
            "labels": {"kai.scheduler/queue": "team-a", "kai.scheduler/subgroup-name": "workers",
                       "runai-gpu-group": "g-7"},
            "annotations": {"pod-group-name": "pg-trainer", "gpu-fraction": "0.25",
                            "gpu-fraction-num-devices": "2"},
        },
        "spec": {
            "schedulerName": "kai-scheduler", "priorityClassName": "train", "priority": 50,
            "nodeSelector": {"pool": "a"}, "runtimeClassName": "kata",
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1500m", "memory": "4Gi"}}},
                {"name": "side", "image": "busybox", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            ],
            "initContainers": [
                # A regular init container whose peak is above the containers' sum for CPU only.
                {"name": "fetch", "image": "busybox", "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}},
            ],
            "overhead": {"cpu": "100m"},
        },
        "status": {"phase": "Pending"},
    })

    (pod,) = gateway.list_pods()

    assert (pod.namespace, pod.name, pod.uid) == ("ml", "trainer-0", created["metadata"]["uid"])
    assert (pod.queue, pod.pod_group, pod.sub_group) == ("team-a", "pg-trainer", "workers")
    assert (pod.priority_class, pod.priority) == ("train", 50)
    assert pod.requests.cpu_millis == 3100  # max(1500 + 500, 3000) + 100 overhead
    assert pod.requests.memory_bytes == 5 * GiB
    assert (pod.gpu_fraction, pod.gpu_memory_mib, pod.gpu_fraction_num_devices) == (0.25, None, 2)
    assert pod.is_fractional
    assert pod.gpu_groups == ("g-7",)
    assert pod.node_selector == {"pool": "a"}
    assert (pod.node, pod.phase, pod.state) == (None, "Pending", PodState.PENDING)
    assert isinstance(pod.created_at, datetime)
    assert pod.deleted_at is None
    assert pod.resource_version == created["metadata"]["resourceVersion"]


def test_gpu_requests_given_as_limits_only_count_as_requests(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    apiserver.add_pod("whole", requests={"cpu": "2"}, limits={"nvidia.com/gpu": "4"})

    (pod,) = gateway.list_pods()

    assert pod.requests.gpus == 4
    assert not pod.is_fractional


def test_native_sidecars_add_to_the_request(apiserver: Server, gateway: KubernetesGateway) -> None:  # noqa: F811
    pod = apiserver.add_pod("sidecar", requests={"cpu": "1"})
    pod["spec"]["initContainers"] = [
        {"name": "proxy", "image": "busybox", "restartPolicy": "Always", "resources": {"requests": {"cpu": "250m"}}},
        {"name": "setup", "image": "busybox", "resources": {"requests": {"cpu": "1"}}},
    ]
    apiserver.put("pods", pod)

    # containers 1 + sidecar 0.25 = 1.25, above the init peak of 0.25 + 1 = 1.25: equal, so 1250m.
    assert gateway.list_pods().items[0].requests.cpu_millis == 1250


@pytest.mark.parametrize(
    ("phase", "node", "deleting", "gated", "state"),
    [
        ("Pending", None, False, False, PodState.PENDING),
        ("Pending", None, False, True, PodState.GATED),
        ("Pending", "n1", False, False, PodState.BOUND),
        ("Running", "n1", False, False, PodState.RUNNING),
        ("Running", "n1", True, False, PodState.RELEASING),
        ("Succeeded", "n1", False, False, PodState.SUCCEEDED),
        ("Failed", "n1", False, False, PodState.FAILED),
        ("Unknown", "n1", False, False, PodState.UNKNOWN),
    ],
)
def test_pod_phase_maps_to_the_scheduler_state(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
    phase: str, node: str | None, deleting: bool, gated: bool, state: str,
) -> None:
    pod = apiserver.add_pod("p", node=node, phase=phase)
    if gated:
        pod["spec"]["schedulingGates"] = [{"name": "wait"}]
        apiserver.put("pods", pod)
    if deleting:
        apiserver.begin_deletion("p")

    (observed,) = gateway.list_pods()

    assert observed.state == state
    assert (observed.deleted_at is not None) == deleting


@pytest.mark.parametrize(
    ("annotations", "labels", "requests", "field", "rule"),
    [
        ({"gpu-fraction": "abc"}, None, None, "metadata.annotations[gpu-fraction]", "must be a number in (0, 1]"),
        ({"gpu-fraction": "1.5"}, None, None, "metadata.annotations[gpu-fraction]", "must be a number in (0, 1]"),
        ({"gpu-fraction": "0"}, None, None, "metadata.annotations[gpu-fraction]", "must be a number in (0, 1]"),
        ({"gpu-memory": "lots"}, None, None, "metadata.annotations[gpu-memory]", "greater than 0"),
        ({"gpu-memory": "0"}, None, None, "metadata.annotations[gpu-memory]", "greater than 0"),
        ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "0"}, None, None,
         "metadata.annotations[gpu-fraction-num-devices]", "at least 1"),
        (None, None, {"cpu": "-1"}, "spec.containers[0].resources.requests[cpu]", "must not be negative"),
        (None, None, {"memory": "four gigs"}, "spec.containers[0].resources.requests[memory]",
         "must be a Kubernetes quantity"),
        (None, {"no-queue": "x"}, None, "metadata.labels[kai.scheduler/queue]", "is required"),
        (None, None, {"nvidia.com/gpu": "1.5"}, "spec.containers[*].resources.requests[nvidia.com/gpu]",
         "must be whole devices"),
    ],
)
def test_an_unreadable_pod_is_reported_with_field_and_rule_and_the_others_are_returned(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
    annotations: dict[str, str] | None, labels: dict[str, str] | None, requests: dict[str, str] | None,
    field: str, rule: str,
) -> None:
    apiserver.add_pod("good-1")
    if requests is not None and apiserver.kind == "real":
        # A real server checks quantities itself: such a pod never exists there (a text that is no
        # quantity cannot even be decoded, 400; a negative or fractional device count is invalid, 422).
        with pytest.raises(client.ApiException) as refused:
            apiserver.add_pod("bad", namespace="ml", requests=requests)
        assert refused.value.status in (400, 422)
        return
    bad = apiserver.add_pod("bad", namespace="ml", annotations=annotations, labels=labels,
                            requests=requests, queue=None if labels else "team-a")
    apiserver.add_pod("good-2")

    listing = gateway.list_pods()

    assert sorted(p.name for p in listing) == ["good-1", "good-2"]
    (problem,) = listing.problems
    assert (problem.kind, problem.namespace, problem.name, problem.uid) == (
        "Pod", "ml", "bad", bad["metadata"]["uid"])
    assert problem.field == field
    assert rule in problem.rule
    assert problem.message.startswith(f"Pod ml/bad: {field}")
    assert rule in problem.message


def test_objects_of_an_unexpected_shape_are_reported_not_raised(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    kube_apiserver.add_pod("good")
    odd = kube_apiserver.add_pod("odd")
    odd["spec"]["containers"] = [{"name": "main", "resources": {"requests": ["cpu", "1"]}}]
    kube_apiserver.put("pods", odd)
    late = kube_apiserver.add_pod("late")
    late["metadata"]["deletionTimestamp"] = "yesterday"
    kube_apiserver.put("pods", late)

    listing = gateway.list_pods()

    assert [p.name for p in listing] == ["good"]
    problems = {p.name: p for p in listing.problems}
    assert problems["odd"].field == "(object)"
    assert "unexpected shape" in problems["odd"].rule
    assert problems["late"].field == "metadata.deletionTimestamp"
    assert problems["late"].rule == "must be an RFC 3339 time"


def test_a_pod_without_queue_label_is_readable_when_its_pod_group_names_the_queue(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    apiserver.add_pod("member", queue=None, pod_group="pg-1")

    listing = gateway.list_pods()

    assert listing.problems == ()
    assert (listing.items[0].queue, listing.items[0].pod_group) == (None, "pg-1")


# -- PodGroups, Queues, priority classes --------------------------------------------------------


def test_list_pod_groups_maps_the_spec_with_kai_defaults(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    kube_apiserver.add_pod_group("gang", namespace="ml", spec={
        "minMember": 4, "queue": "team-a", "priorityClassName": "train", "preemptibility": "non-preemptible",
        "topologyConstraint": {"topology": "dc", "requiredTopologyLevel": "rack"},
        "subGroups": [{"name": "workers", "minMember": 3}, {"name": "ps", "parent": "workers"}],
    })
    kube_apiserver.add_pod_group("single", spec={"queue": "team-b", "markUnschedulable": False})
    kube_apiserver.add_pod_group("broken", spec={"queue": "team-b", "preemptibility": "sometimes"})
    kube_apiserver.add_pod_group("queueless", spec={"minMember": 2})

    listing = gateway.list_pod_groups()

    groups = {g.name: g for g in listing}
    gang = groups["gang"]
    assert (gang.namespace, gang.min_member, gang.queue, gang.priority_class) == ("ml", 4, "team-a", "train")
    assert gang.preemptibility == "non-preemptible"
    assert [(s.name, s.min_member, s.parent) for s in gang.sub_groups] == [("workers", 3, None), ("ps", None, "workers")]
    assert gang.topology_constraint is not None
    assert (gang.topology_constraint.topology, gang.topology_constraint.required_level,
            gang.topology_constraint.preferred_level) == ("dc", "rack", None)
    single = groups["single"]
    assert (single.min_member, single.preemptibility, single.mark_unschedulable) == (1, None, False)
    assert gang.mark_unschedulable
    problems = {p.name: p for p in listing.problems}
    assert set(problems) == {"broken", "queueless"}
    assert problems["broken"].field == "spec.preemptibility"
    assert problems["queueless"].field == "spec.queue"
    assert "required" in problems["queueless"].rule


def test_list_queues_maps_the_spec_and_unset_values_take_kai_meaning(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    apiserver.add_queue("dept-a", {"priority": 200, "displayName": "Department A", "resources": {
        "cpu": {"quota": 128000, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "gpu": {"quota": 16, "limit": 24, "overQuotaWeight": 2.5}}})
    apiserver.add_queue("team-x", {"parentQueue": "dept-a", "resources": {"gpu": {"quota": 0.5}}})

    listing = gateway.list_queues()

    assert listing.problems == ()
    queues = {q.name: q for q in listing}
    dept = queues["dept-a"].spec
    assert (dept.parent, dept.priority, dept.display_name) == (None, 200, "Department A")
    assert dept.cpu == QueueResource(128000, -1, 1)
    assert dept.memory == QueueResource(-1, -1, 1)
    assert dept.gpu == QueueResource(16, 24, 2.5)
    team = queues["team-x"].spec
    # Unset priority is 100; unset limit is a cap of zero (so the quota of 0.5 reads as capped to 0)
    # and unset weight gets no surplus (KAI).
    assert (team.parent, team.priority) == ("dept-a", 100)
    assert team.gpu == QueueResource(0, 0, 0)
    assert team.cpu == QueueResource(0, 0, 0)


@pytest.mark.parametrize(
    ("spec", "field", "rule"),
    [
        ({"priority": 1}, "spec.resources", "is required"),
        ({"resources": {"gpu": {"quota": "lots"}}}, "spec.resources.gpu.quota", "must be a finite number"),
        ({"resources": {"cpu": {"limit": -5}}}, "spec.resources.cpu.limit",
         "must be -1 (unlimited) or a non-negative amount"),
        ({"resources": {"memory": {"overQuotaWeight": -1}}}, "spec.resources.memory.overQuotaWeight",
         "must not be negative"),
        ({"resources": {"gpu": 4}}, "spec.resources.gpu", "must be a mapping"),
        ({"priority": "high", "resources": {}}, "spec.priority", "must be an integer"),
        ({"resources": {}, "reclaimMinRuntime": "soon"}, "spec.reclaimMinRuntime", "must be a duration"),
    ],
)
def test_a_queue_with_malformed_resources_is_reported_and_the_others_listed(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
    spec: dict[str, object], field: str, rule: str,
) -> None:
    kube_apiserver.add_queue("fine", {"resources": {}})
    kube_apiserver.add_queue("broken", spec)

    listing = gateway.list_queues()

    assert [q.name for q in listing] == ["fine"]
    (problem,) = listing.problems
    assert (problem.kind, problem.namespace, problem.name, problem.field) == ("Queue", "", "broken", field)
    assert rule in problem.rule
    assert problem.message.startswith(f"Queue broken: {field}")


def test_list_priority_classes(apiserver: Server, gateway: KubernetesGateway) -> None:  # noqa: F811
    apiserver.add_priority_class("train", 50, global_default=True)
    apiserver.add_priority_class("inference", 125)

    classes = {c.name: c for c in gateway.list_priority_classes()}

    assert (classes["train"].value, classes["train"].global_default) == (50, True)
    assert (classes["inference"].value, classes["inference"].global_default) == (125, False)


# -- bind ---------------------------------------------------------------------------------------


def test_the_clients_binding_response_quirk_is_reproduced_and_the_gateway_handles_it(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    apiserver.add_pod("p1")
    apiserver.add_pod("p2")
    api = client.CoreV1Api(apiserver.api_client)
    body = client.V1Binding(metadata=client.V1ObjectMeta(name="p1"),
                            target=client.V1ObjectReference(kind="Node", name="n1"))
    # The server answers a Binding with a Status, which the client cannot read as a V1Binding.
    with pytest.raises(ValueError, match="target"):
        api.create_namespaced_binding("default", body)
    assert apiserver.get("pods", "p1")["spec"]["nodeName"] == "n1"

    pod = apiserver.get("pods", "p2")
    result = gateway.bind(BindAction("default", "p2", pod["metadata"]["uid"], "n1"))

    assert result.outcome == ActionOutcome.BOUND


def test_bind_sets_the_node_and_binding_twice_makes_one_binding(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    uid = apiserver.add_pod("p", namespace="ml")["metadata"]["uid"]
    action = BindAction("ml", "p", uid, "gpu-1", idempotency_key="cycle-7/bind/ml/p")

    first = gateway.bind(action)
    second = gateway.bind(action)

    assert (first.outcome, second.outcome) == (ActionOutcome.BOUND, ActionOutcome.ALREADY_BOUND)
    if apiserver.records_requests:
        assert len(apiserver.bindings) == 1
    pod = apiserver.get("pods", "p", "ml")
    assert pod["spec"]["nodeName"] == "gpu-1"
    assert pod["metadata"]["annotations"]["kaiweb.io/bind-key"] == "cycle-7/bind/ml/p"
    (observed,) = gateway.list_pods()
    assert (observed.node, observed.state) == ("gpu-1", PodState.BOUND)


def test_bind_of_a_pod_bound_to_another_node_is_refused_clearly(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    uid = apiserver.add_pod("p", node="gpu-2")["metadata"]["uid"]

    with pytest.raises(ClusterRejected, match="already bound to gpu-2") as err:
        gateway.bind(BindAction("default", "p", uid, "gpu-1"))

    assert err.value.status == 409
    assert apiserver.get("pods", "p")["spec"]["nodeName"] == "gpu-2"


def test_bind_of_a_missing_pod_is_refused(apiserver: Server, gateway: KubernetesGateway) -> None:  # noqa: F811
    with pytest.raises(ClusterRejected, match="no longer exists") as err:
        gateway.bind(BindAction("default", "ghost", "uid-1", "gpu-1"))
    assert err.value.status == 404


def test_bind_of_a_replaced_pod_is_refused(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    # kube-apiserver binds whatever pod has the name (a Binding's metadata.uid is no precondition):
    # the gateway checks the incarnation itself.
    apiserver.add_pod("p")

    with pytest.raises(ClusterRejected, match="replaced"):
        gateway.bind(BindAction("default", "p", "uid-of-an-older-pod", "gpu-1"))

    assert "nodeName" not in apiserver.get("pods", "p")["spec"]


def test_a_fractional_bind_writes_the_gpu_group_and_portion(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    uid = apiserver.add_pod("frac", annotations={"gpu-fraction": "0.5"})["metadata"]["uid"]

    gateway.bind(BindAction("default", "frac", uid, "gpu-1", gpu_groups=("grp-1",), gpu_portion=0.5))

    pod = apiserver.get("pods", "frac")
    assert pod["metadata"]["labels"]["runai-gpu-group"] == "grp-1"
    assert "runai-gpu-group" not in pod["metadata"]["annotations"]  # KAI writes the label only
    assert pod["metadata"]["annotations"]["kaiweb.io/gpu-portion"] == "0.5"
    (observed,) = gateway.list_pods()
    assert (observed.gpu_groups, observed.node) == (("grp-1",), "gpu-1")


def test_a_bind_on_two_shared_gpus_labels_each_device_and_drops_the_groups_of_an_earlier_attempt(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    # An earlier attempt labelled the pod and was not bound (its groups are another cycle's).
    uid = apiserver.add_pod("pair", labels={"runai-gpu-group/old-1": "old-1", "runai-gpu-group/old-2": "old-2"},
                            annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"})["metadata"]["uid"]

    gateway.bind(BindAction("default", "pair", uid, "gpu-1", gpu_groups=("grp-a", "grp-b"), gpu_portion=0.5))

    labels = apiserver.get("pods", "pair")["metadata"]["labels"]
    assert {k: v for k, v in labels.items() if k.startswith("runai-gpu-group")} == {
        "runai-gpu-group/grp-a": "grp-a", "runai-gpu-group/grp-b": "grp-b"}
    (observed,) = gateway.list_pods()
    assert (observed.gpu_groups, observed.node) == (("grp-a", "grp-b"), "gpu-1")


def test_a_fractional_bind_never_relabels_a_pod_bound_elsewhere(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    uid = apiserver.add_pod("frac", node="gpu-2", labels={"runai-gpu-group": "grp-old"},
                                 annotations={"gpu-fraction": "0.5"})["metadata"]["uid"]

    with pytest.raises(ClusterRejected, match="already bound to gpu-2"):
        gateway.bind(BindAction("default", "frac", uid, "gpu-1", gpu_groups=("grp-new",), gpu_portion=0.5))

    assert apiserver.get("pods", "frac")["metadata"]["labels"]["runai-gpu-group"] == "grp-old"


def test_a_fractional_bind_repeated_is_one_binding(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    uid = apiserver.add_pod("frac", annotations={"gpu-fraction": "0.5"})["metadata"]["uid"]
    action = BindAction("default", "frac", uid, "gpu-1", gpu_groups=("grp-1",), gpu_portion=0.5)

    outcomes = [gateway.bind(action).outcome, gateway.bind(action).outcome]

    assert outcomes == [ActionOutcome.BOUND, ActionOutcome.ALREADY_BOUND]
    if apiserver.records_requests:
        assert len(apiserver.bindings) == 1


def test_a_fractional_bind_reads_again_when_the_pod_changed_meanwhile(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    uid = kube_apiserver.add_pod("frac", annotations={"gpu-fraction": "0.5"})["metadata"]["uid"]
    kube_apiserver.fail_next(1, status=409, method="PATCH", path_contains="/pods/frac")

    result = gateway.bind(BindAction("default", "frac", uid, "gpu-1", gpu_groups=("grp-1",), gpu_portion=0.5))

    assert result.outcome == ActionOutcome.BOUND
    assert _requests_to(kube_apiserver, "/pods/frac", "PATCH") == 2
    assert kube_apiserver.get("pods", "frac")["metadata"]["labels"]["runai-gpu-group"] == "grp-1"


def test_a_bind_whose_answer_was_lost_is_recognised_on_retry(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway, sleeps: list[float],  # noqa: F811
) -> None:
    uid = kube_apiserver.add_pod("p")["metadata"]["uid"]
    gateway.bind(BindAction("default", "p", uid, "gpu-1"))
    # A retried task repeats the bind: it reads the pod first (through a passing 503) and finds it bound.
    kube_apiserver.fail_next(1, status=503, path_contains="/pods/p", method="GET")

    result = gateway.bind(BindAction("default", "p", uid, "gpu-1"))

    assert result.outcome == ActionOutcome.ALREADY_BOUND
    assert len(kube_apiserver.bindings) == 1
    assert len(sleeps) == 1


# -- evict --------------------------------------------------------------------------------------


def test_evict_honours_the_grace_period(apiserver: Server, gateway: KubernetesGateway) -> None:  # noqa: F811
    uid = apiserver.add_pod("victim", node="gpu-1", phase="Running")["metadata"]["uid"]

    result = gateway.evict(EvictAction("default", "victim", uid, grace_seconds=30, reason="Preempted",
                                       message="preempted by ml/urgent"))

    assert result.outcome == ActionOutcome.EVICTED
    if apiserver.records_requests:
        assert apiserver.evictions == [{"namespace": "default", "name": "victim", "grace": 30}]
    pod = apiserver.get("pods", "victim")
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 30
    assert gateway.list_pods().items[0].state == PodState.RELEASING
    events = apiserver.list("events", "default")
    assert [(e["reason"], e["message"], e["involvedObject"]["name"]) for e in events] == [
        ("Preempted", "preempted by ml/urgent", "victim")]

    apiserver.complete_terminations()
    assert len(gateway.list_pods()) == 0


def test_evict_with_zero_grace_deletes_and_evicting_again_is_success(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    uid = apiserver.add_pod("victim", node="gpu-1", phase="Running")["metadata"]["uid"]
    action = EvictAction("default", "victim", uid, grace_seconds=0)

    assert gateway.evict(action).outcome == ActionOutcome.EVICTED
    assert apiserver.get("pods", "victim") is None
    assert gateway.evict(action).outcome == ActionOutcome.ALREADY_GONE
    assert gateway.evict(EvictAction("default", "never-was", "x")).outcome == ActionOutcome.ALREADY_GONE


def test_an_old_eviction_never_evicts_a_new_pod_with_the_same_name(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    apiserver.add_pod("worker-0", node="gpu-1", phase="Running")

    result = gateway.evict(EvictAction("default", "worker-0", "uid-of-the-previous-worker-0", grace_seconds=0))

    assert result.outcome == ActionOutcome.ALREADY_GONE
    assert "deletionTimestamp" not in apiserver.get("pods", "worker-0")["metadata"]
    if apiserver.records_requests:
        assert apiserver.evictions == []


# -- errors, retries, timeouts ------------------------------------------------------------------


def test_large_lists_are_read_page_by_page(
    apiserver: Server, gateway: KubernetesGateway, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    monkeypatch.setattr("kaiweb.cluster.backends.kubernetes.client.PAGE_SIZE", 2)
    for i in range(5):
        apiserver.add_pod(f"p{i}")

    listing = gateway.list_pods()

    assert [p.name for p in listing] == ["p0", "p1", "p2", "p3", "p4"]
    assert apiserver.resource_version_is_current(listing.resource_version)
    if not apiserver.records_requests:
        return
    listed_rv = listing.resource_version
    pages = [r.query.get("continue") for r in apiserver.requests if r.path == "/api/v1/pods"]
    assert pages == [None, [f"2:{listed_rv}"], [f"4:{listed_rv}"]]


def test_an_expired_continue_token_lists_again_from_the_start(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    monkeypatch.setattr("kaiweb.cluster.backends.kubernetes.client.PAGE_SIZE", 2)
    for i in range(3):
        kube_apiserver.add_pod(f"p{i}")
    original = kube_apiserver._list_body
    calls = {"n": 0}

    def compact_after_first_page(*args: object, **kwargs: object) -> dict[str, object]:
        body = original(*args, **kwargs)  # type: ignore[arg-type]
        calls["n"] += 1
        if calls["n"] == 1:
            kube_apiserver.add_pod("p3")
            kube_apiserver.compact()
        return body

    monkeypatch.setattr(kube_apiserver, "_list_body", compact_after_first_page)

    assert [p.name for p in gateway.list_pods()] == ["p0", "p1", "p2", "p3"]


@pytest.mark.parametrize("status", [500, 429, 503])
def test_transient_errors_are_retried_with_growing_bounded_backoff(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway, sleeps: list[float], status: int,  # noqa: F811
) -> None:
    kube_apiserver.add_node("n1")
    kube_apiserver.fail_next(3, status=status, path_contains="/nodes")

    assert [n.name for n in gateway.list_nodes()] == ["n1"]

    assert _requests_to(kube_apiserver, "/nodes") == 4
    assert sleeps == [0.1, 0.2, 0.4]


def test_retry_after_is_honoured_up_to_the_cap(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway, sleeps: list[float],  # noqa: F811
) -> None:
    kube_apiserver.fail_next(1, status=429, retry_after="1")
    kube_apiserver.fail_next(1, status=429, retry_after="60")

    gateway.list_nodes()

    assert sleeps == [1.0, 2.0]  # the second Retry-After is capped at backoff_max


def test_persistent_server_errors_raise_cluster_unavailable_after_bounded_attempts(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway, sleeps: list[float],  # noqa: F811
) -> None:
    kube_apiserver.fail_next(10, status=503)

    with pytest.raises(ClusterUnavailable, match=r"list pods: 503 .* \(after 4 attempts\)") as err:
        gateway.list_pods()

    assert err.value.status == 503
    assert _requests_to(kube_apiserver, "/pods") == 4
    assert len(sleeps) == 3


def test_other_client_errors_are_not_retried(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway, sleeps: list[float],  # noqa: F811
) -> None:
    kube_apiserver.fail_next(1, status=403)

    with pytest.raises(ClusterRejected, match="list nodes: 403") as err:
        gateway.list_nodes()

    assert err.value.status == 403
    assert sleeps == []
    assert _requests_to(kube_apiserver, "/nodes") == 1


def test_a_missing_crd_is_named_in_the_error(kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway) -> None:  # noqa: F811
    kube_apiserver.fail_next(1, status=404, path_contains="podgroups")

    with pytest.raises(ClusterRejected, match="CRD installed"):
        gateway.list_pod_groups()


def test_a_request_that_hangs_is_retried_then_surfaced_as_a_timeout(kube_apiserver: FakeKubeApiServer) -> None:  # noqa: F811
    sleeps: list[float] = []
    gateway = KubernetesGateway(kube_apiserver.api_client, request_timeout=0.2, max_attempts=2,
                                backoff_base=0.05, sleep=sleeps.append)
    kube_apiserver.hang_next(2, seconds=1.0, path_contains="/nodes")

    with pytest.raises(ClusterTimeout, match=r"list nodes: no answer within 0.2s after 2 attempts"):
        gateway.list_nodes()

    assert _requests_to(kube_apiserver, "/nodes") == 2
    assert sleeps == [0.05]


def test_one_hanging_request_is_retried_transparently(kube_apiserver: FakeKubeApiServer) -> None:  # noqa: F811
    kube_apiserver.add_node("n1")
    gateway = KubernetesGateway(kube_apiserver.api_client, request_timeout=0.2, max_attempts=3,
                                backoff_base=0.01, sleep=lambda _: None)
    kube_apiserver.hang_next(1, seconds=1.0, path_contains="/nodes")

    assert [n.name for n in gateway.list_nodes()] == ["n1"]


def test_an_unreachable_server_raises_cluster_unavailable() -> None:
    server = FakeKubeApiServer().start()
    api_client = client.ApiClient(server.configuration())
    server.stop()
    gateway = KubernetesGateway(api_client, request_timeout=0.5, max_attempts=2, sleep=lambda _: None)

    with pytest.raises(ClusterUnavailable, match="cannot reach the API server after 2 attempts"):
        gateway.ping()
    api_client.close()


# -- pending explanations and Queue status ------------------------------------------------------


def test_report_pending_sets_the_condition_and_one_warning_event(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    uid = apiserver.add_pod("waiting", namespace="ml")["metadata"]["uid"]
    message = "team-a quota has reached the allowable limit of 8 GPUs"

    gateway.report_pending(PodRef("ml", "waiting", uid), "OverLimit", message)
    gateway.report_pending(PodRef("ml", "waiting", uid), "OverLimit", message)

    pod = apiserver.get("pods", "waiting", "ml")
    (condition,) = pod["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"], condition["message"]) == (
        "PodScheduled", "False", "Unschedulable", message)
    (event,) = apiserver.list("events", "ml")
    assert (event["type"], event["reason"], event["message"], event["count"]) == ("Warning", "OverLimit", message, 2)
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "waiting", "namespace": "ml",
                                       "uid": uid}
    assert event["source"]["component"] == "kai-scheduler"


def test_report_pending_replaces_the_previous_explanation(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    uid = apiserver.add_pod("waiting")["metadata"]["uid"]
    gateway.report_pending(PodRef("default", "waiting", uid), "Unschedulable", "no node has 8 free GPUs")
    gateway.report_pending(PodRef("default", "waiting", uid), "Unschedulable", "gang needs 4 pods, 3 fit")

    (condition,) = apiserver.get("pods", "waiting")["status"]["conditions"]
    assert condition["message"] == "gang needs 4 pods, 3 fit"
    assert len(apiserver.list("events")) == 2


def test_report_pending_for_a_pod_that_is_gone_does_nothing(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    gateway.report_pending(PodRef("default", "gone", "u"), "Unschedulable", "no GPU")

    assert apiserver.list("events") == []


def test_write_queue_status_writes_kai_status_fields(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    apiserver.add_queue("dept-a", {"resources": {"gpu": {"quota": 4, "limit": -1}}})

    gateway.write_queue_status(QueueStatusUpdate(
        "dept-a", allocated=ResourceAmounts(cpu_millis=2500, memory_bytes=8 * 10**9, gpus=2.5),
        requested=ResourceAmounts(gpus=4), child_queues=("team-x",)))

    queue = apiserver.get("queues", "dept-a")
    assert queue["status"]["allocated"] == {"cpu": "2500m", "memory": "8000000000", "nvidia.com/gpu": "2.5"}
    assert queue["status"]["requested"]["nvidia.com/gpu"] == "4"
    assert queue["status"]["childQueues"] == ["team-x"]
    assert queue["spec"]["resources"]["gpu"]["quota"] == 4  # the status write leaves the spec alone


def test_write_queue_status_of_a_missing_queue_is_refused(apiserver: Server, gateway: KubernetesGateway) -> None:  # noqa: F811
    with pytest.raises(ClusterRejected, match="write Queue ghost status: 404"):
        gateway.write_queue_status(QueueStatusUpdate("ghost"))


# -- Queue CRD sync -----------------------------------------------------------------------------


def _spec(name: str, gpu_quota: float = 4, parent: str | None = None, priority: int = 100) -> QueueSpec:
    return QueueSpec(name=name, parent=parent, priority=priority, cpu=QueueResource(0, -1, 1),
                     memory=QueueResource(0, -1, 1), gpu=QueueResource(gpu_quota, -1, 1))


def _observed(spec: QueueSpec, rv: str = "7") -> ObservedQueue:
    return ObservedQueue(spec=spec, uid=f"uid-{spec.name}", resource_version=rv)


def test_queue_sync_diff_creates_updates_deletes_and_imports_with_the_database_winning() -> None:
    database = [_spec("team-b", parent="dept"), _spec("dept", gpu_quota=16), _spec("team-a", parent="dept")]
    cluster = [_observed(_spec("dept", gpu_quota=12, priority=200)), _observed(_spec("team-a", parent="dept")),
               _observed(_spec("old-team", parent="old-dept")), _observed(_spec("old-dept")),
               _observed(_spec("manual"))]

    actions = diff_queues(database, cluster, deleted_in_database=["old-team", "old-dept"])

    assert [(a.op, a.name) for a in actions] == [
        ("create", "team-b"), ("update", "dept"), ("delete", "old-team"), ("delete", "old-dept"),
        ("import", "manual")]
    update = actions[1]
    assert update.message == ("Queue dept differs between the cluster and the database; the database wins: "
                              "priority 200 → 100; resources.gpu.quota 12 → 16.")
    assert update.resource_version == "7"
    assert update.spec == database[1]
    assert "deleted in the database" in actions[2].message
    assert "exists only in the cluster" in actions[4].message


def test_queue_sync_diff_orders_creates_parents_first() -> None:
    database = [_spec("leaf", parent="mid"), _spec("mid", parent="root"), _spec("root")]

    assert [a.name for a in diff_queues(database, [])] == ["root", "mid", "leaf"]


def test_queue_sync_applied_to_the_cluster_converges(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    apiserver.add_queue("dept", {"priority": 300, "resources": {"gpu": {"quota": 1}}})
    apiserver.add_queue("retired", {"resources": {}})
    queue = apiserver.get("queues", "dept")
    queue["metadata"]["labels"] = {"owner": "platform"}
    queue["status"] = {"allocated": {"nvidia.com/gpu": "1"}}
    apiserver.put("queues", queue)
    database = [_spec("dept", gpu_quota=16), _spec("team-a", parent="dept")]

    plan = diff_queues(database, gateway.list_queues().items, deleted_in_database=["retired"])
    messages = apply_queue_sync(gateway, plan)

    assert len(messages) == 3
    assert diff_queues(database, gateway.list_queues().items) == []
    dept = apiserver.get("queues", "dept")
    assert dept["spec"]["priority"] == 100
    assert dept["spec"]["resources"]["gpu"]["quota"] == 16
    assert dept["metadata"]["labels"] == {"owner": "platform"}  # not the database's to remove
    assert dept["status"] == {"allocated": {"nvidia.com/gpu": "1"}}
    assert apiserver.get("queues", "retired") is None
    assert apiserver.get("queues", "team-a")["spec"]["parentQueue"] == "dept"


def test_upsert_queue_round_trips_the_spec_and_delete_is_idempotent(apiserver: Server, gateway: KubernetesGateway) -> None:  # noqa: F811
    spec = QueueSpec("q", parent="p", priority=150, display_name="Q", cpu=QueueResource(1500, 3000, 0.5),
                     memory=QueueResource(-1, -1, 1), gpu=QueueResource(0.7, 2, 1))

    written = gateway.upsert_queue(spec)

    assert written.spec == spec
    assert [q.spec for q in gateway.list_queues()] == [spec]
    assert gateway.delete_queue("q") is True
    assert gateway.delete_queue("q") is False


def test_upsert_queue_retries_when_the_queue_changes_underneath(
    kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    kube_apiserver.add_queue("q", {"resources": {}})
    kube_apiserver.fail_next(1, status=409, method="PUT", path_contains="/queues/q")

    assert gateway.upsert_queue(_spec("q", gpu_quota=2)).spec.gpu.quota == 2


# -- choosing the backend -----------------------------------------------------------------------


def test_get_gateway_builds_the_kubernetes_backend_from_settings(
    kube_apiserver: FakeKubeApiServer, settings: object,  # noqa: F811
) -> None:
    settings.KAI_CLUSTER_BACKEND = "kubernetes"  # type: ignore[attr-defined]
    settings.KAI_KUBERNETES_HOST = kube_apiserver.url  # type: ignore[attr-defined]
    settings.KAI_SCHEDULER_NAME = "kai-b"  # type: ignore[attr-defined]
    kube_apiserver.add_pod("mine", scheduler="kai-b")

    gateway = get_gateway()

    assert isinstance(gateway, KubernetesGateway)
    assert [p.name for p in gateway.list_pods()] == ["mine"]
    gateway.api_client.close()  # type: ignore[attr-defined]


# -- the fake answers like the real server ------------------------------------------------------


def test_the_server_serves_namespaced_lists_with_label_and_field_selectors(
    apiserver: Server,  # noqa: F811
) -> None:
    apiserver.add_pod("a", namespace="ml", labels={"app": "train"}, node="n1")
    apiserver.add_pod("b", namespace="ml", labels={"app": "serve"})
    apiserver.add_pod("c", namespace="other", labels={"app": "train"})
    api = client.CoreV1Api(apiserver.api_client)

    assert [p.metadata.name for p in api.list_namespaced_pod("ml").items] == ["a", "b"]
    assert [p.metadata.name for p in api.list_pod_for_all_namespaces(label_selector="app=train").items] == ["a", "c"]
    assert [p.metadata.name for p in api.list_namespaced_pod("ml", label_selector="app!=train").items] == ["b"]
    assert [p.metadata.name for p in api.list_namespaced_pod("ml", field_selector="spec.nodeName=").items] == ["b"]
    with pytest.raises(client.ApiException) as err:
        api.read_namespaced_pod("missing", "ml")
    assert err.value.status == 404


def test_assign_pod_group_merges_labels_annotation_and_queue_into_that_incarnation_only(
    apiserver: Server, gateway: KubernetesGateway,  # noqa: F811
) -> None:
    made = apiserver.add_pod_group("train", namespace="kai-vision", spec={"queue": "vision", "minMember": 1})
    uid = made["metadata"]["uid"]
    pool, queue_label, said = "kai.scheduler/node-pool", "kai.scheduler/queue", "kaiweb.io/node-pool-assignment"

    assert gateway.assign_pod_group("kai-vision", "train", uid, labels={pool: "h100", queue_label: "vision-h100"},
                                    annotations={said: "assigned to node pool h100"}, queue="vision-h100")
    got = gateway.get_object("scheduling.run.ai/v2alpha2", "PodGroup", "kai-vision", "train")
    assert got["spec"] == {"queue": "vision-h100", "minMember": 1}
    assert (got["metadata"]["labels"][pool], got["metadata"]["labels"][queue_label]) == ("h100", "vision-h100")
    assert got["metadata"]["annotations"][said] == "assigned to node pool h100"

    # The default pool is the label's absence; another incarnation or a missing PodGroup is not written.
    assert gateway.assign_pod_group("kai-vision", "train", uid, labels={pool: None, queue_label: "vision"},
                                    annotations={said: "moved"}, queue="vision")
    assert pool not in gateway.get_object("scheduling.run.ai/v2alpha2", "PodGroup", "kai-vision", "train")[
        "metadata"]["labels"]
    assert not gateway.assign_pod_group("kai-vision", "train", "another-uid", labels={pool: "a100"},
                                        annotations={}, queue="vision-a100")
    assert gateway.get_object("scheduling.run.ai/v2alpha2", "PodGroup", "kai-vision", "train")["spec"]["queue"] == "vision"
    assert not gateway.assign_pod_group("kai-vision", "gone", "", labels={}, annotations={}, queue="q")
