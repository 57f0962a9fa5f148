"""The admission webhooks on a real kube-apiserver, which calls kaiweb over HTTPS on loopback.

The webhook server is Django's WSGI application behind a TLS socket in a thread of this process, with
a certificate signed by a CA made here (openssl); the API server trusts that CA through the webhook
configurations' caBundle, registered as the chart registers them (rules, failure policy, match condition).
"""

from __future__ import annotations

import base64
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from devkube.localkube import LocalKube
from kaiweb.admission import cluster
from kaiweb.admission.models import NamespaceQueueBinding
from kaiweb.cluster.backends.kubernetes import gpu_sharing
from kaiweb.queues.models import Queue
from tests.factories import QueueFactory

pytestmark = [pytest.mark.kube, pytest.mark.django_db(transaction=True)]
MUTATING, VALIDATING = "rel-kaiweb-admission", "rel-kaiweb-admission"


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, text=True, timeout=60)


def make_certificates(folder: Path) -> dict[str, Path]:
    """A CA, and a server certificate it signs for 127.0.0.1."""
    paths = {name: folder / name for name in ("ca.key", "ca.crt", "tls.key", "tls.csr", "tls.crt", "ext.cnf")}
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=kaiweb-test-ca",
            "-keyout", str(paths["ca.key"]), "-out", str(paths["ca.crt"]))
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", str(paths["tls.key"]), "-out", str(paths["tls.csr"]))
    paths["ext.cnf"].write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", str(paths["tls.csr"]), "-CA", str(paths["ca.crt"]), "-CAkey", str(paths["ca.key"]),
            "-CAcreateserial", "-days", "1", "-extfile", str(paths["ext.cnf"]), "-out", str(paths["tls.crt"]))
    return paths


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class names it so
        pass


@pytest.fixture
def webhook_server(tmp_path: Path) -> Iterator[tuple[str, bytes]]:
    """kaiweb's WSGI application over HTTPS on a free loopback port: its base URL and the CA bundle."""
    from django.core.handlers.wsgi import WSGIHandler
    from django.db import connections

    certs = make_certificates(tmp_path)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    django_app = WSGIHandler()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        try:
            return list(django_app(environ, start_response))
        finally:
            connections.close_all()  # each request has a thread of its own: its connection goes with it

    server = make_server("127.0.0.1", port, app, server_class=_Server, handler_class=_Quiet)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(certs["tls.crt"]), str(certs["tls.key"]))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="admission-webhook", daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{port}", certs["ca.crt"].read_bytes()
    finally:
        server.shutdown()
        server.server_close()


def webhook_configurations(base: str, ca: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """The chart's two configurations (deploy/helm/kaiweb/templates/admission.yaml), pointed at ``base``."""
    bundle = base64.b64encode(ca).decode()
    common = {"admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail", "timeoutSeconds": 10,
              "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                                          "values": ["kube-system", "kaiweb"]}]}}
    pods = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Namespaced"}
    ours = [{"name": "scheduler-name", "expression": "object.spec.schedulerName == 'kai-scheduler'"}]
    theirs = [{"name": "other-scheduler", "expression": "object.spec.schedulerName != 'kai-scheduler'"}]
    projects = {"matchExpressions": [*common["namespaceSelector"]["matchExpressions"],
                                     {"key": "kai/project", "operator": "Exists"}]}
    mutating = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": MUTATING},
                "webhooks": [{**common, "name": "pod-mutator.kaiweb.io", "reinvocationPolicy": "IfNeeded",
                              "clientConfig": {"url": f"{base}/admission/mutate", "caBundle": bundle},
                              "matchConditions": ours, "rules": [{"operations": ["CREATE"], **pods}]},
                             {**common, "name": "pod-scheduler.kaiweb.io", "reinvocationPolicy": "IfNeeded",
                              "namespaceSelector": projects,
                              "clientConfig": {"url": f"{base}/admission/mutate", "caBundle": bundle},
                              "matchConditions": theirs, "rules": [{"operations": ["CREATE"], **pods}]}]}
    validating = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                  "metadata": {"name": VALIDATING},
                  "webhooks": [{**common, "name": "pod-validator.kaiweb.io",
                                "clientConfig": {"url": f"{base}/admission/validate", "caBundle": bundle},
                                "matchConditions": ours, "rules": [{"operations": ["CREATE", "UPDATE"], **pods}]},
                               {**common, "name": "podgroup-validator.kaiweb.io",
                                "clientConfig": {"url": f"{base}/admission/validate", "caBundle": bundle},
                                "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["scheduling.run.ai"],
                                           "apiVersions": ["v2alpha2"], "resources": ["podgroups"],
                                           "scope": "Namespaced"}]}]}
    return mutating, validating


@pytest.fixture
def admitting(kube_cluster: LocalKube, webhook_server: tuple[str, bytes], settings: Any,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[client.ApiClient]:
    """The real API server with kaiweb's webhooks registered; kaiweb reads namespaces through its kubeconfig."""
    monkeypatch.setenv("KUBECONFIG", str(kube_cluster.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    settings.KAI_CLUSTER_BACKEND = "kubernetes"
    settings.KAI_KUBERNETES_HOST = ""
    settings.KAI_SCHEDULER_NAME = "kai-scheduler"
    cluster.forget()
    api = kube_cluster.api_client()
    registration = client.AdmissionregistrationV1Api(api)
    mutating, validating = webhook_configurations(*webhook_server)
    registration.create_mutating_webhook_configuration(mutating)
    registration.create_validating_webhook_configuration(validating)
    try:
        yield api
    finally:
        registration.delete_mutating_webhook_configuration(MUTATING)
        registration.delete_validating_webhook_configuration(VALIDATING)
        cluster.forget()


def make_namespace(core: client.CoreV1Api, name: str, labels: dict[str, str] | None = None) -> None:
    core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})


def pod(name: str, *, annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
        scheduler: str = "kai-scheduler") -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}},
            "spec": {"schedulerName": scheduler,
                     "containers": [{"name": "main", "image": "cuda", "env": [{"name": "KEEP", "value": "1"}]}]}}


def env_of(created: Any) -> dict[str, Any]:
    return {e.name: e for e in created.spec.containers[0].env or []}


def test_pods_created_through_the_api_server_are_mutated_and_refused_by_kaiwebs_webhooks(admitting):
    core = client.CoreV1Api(admitting)
    QueueFactory(name="research")
    QueueFactory(name="training", parent=QueueFactory(name="department"))
    QueueFactory(name="inference")
    make_namespace(core, "ml", {"kai.scheduler/queue": "training"})
    make_namespace(core, "serving")
    NamespaceQueueBinding.objects.create(namespace="serving", queue=Queue.objects.get(name="inference"))

    # A fractional pod: its container reads GPU_PORTION and the device from the ConfigMap the binder writes.
    half = core.create_namespaced_pod("ml", pod("half", annotations={"gpu-fraction": "0.5"}))
    env = env_of(half)
    raw = admitting.sanitize_for_serialization(half)
    config_map = half.metadata.annotations[gpu_sharing.CONFIG_MAP_ANNOTATION] + "-0"
    assert env["GPU_PORTION"].value_from.config_map_key_ref.to_dict() == {"name": config_map, "key": "GPU_PORTION",
                                                                          "optional": None}
    assert env["NVIDIA_VISIBLE_DEVICES"].value_from.config_map_key_ref.key == "NVIDIA_VISIBLE_DEVICES"
    assert env["KEEP"].value == "1"
    assert half.metadata.labels["kai.scheduler/queue"] == "training"  # from the namespace's label
    written = gpu_sharing.sharing_config_map(raw, portion=0.5, gpu_memory_mib=None, device_index="2")
    assert written["metadata"]["name"] == config_map  # the name the binder will create

    # A GPU-memory pod also gets its memory limit, which its ConfigMap must hold.
    memory = env_of(core.create_namespaced_pod("ml", pod("mem", annotations={"gpu-memory": "4096"})))
    ref = memory["CUDA_DEVICE_MEMORY_LIMIT"].value_from.config_map_key_ref
    assert ref.key == "CUDA_DEVICE_MEMORY_LIMIT"
    assert not ref.optional

    # A pod that asks for no GPU sees none; another scheduler's pod is not ours to touch.
    assert env_of(core.create_namespaced_pod("ml", pod("cpu")))["NVIDIA_VISIBLE_DEVICES"].value == "void"
    assert set(env_of(core.create_namespaced_pod("ml", pod("theirs", scheduler="default-scheduler")))) == {"KEEP"}

    # A namespace bound to its queues may not name another one; the user reads why.
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("serving", pod("sneaky", labels={"kai.scheduler/queue": "research"}))
    assert refused.value.status == 403
    assert ("admission webhook \\\"pod-validator.kaiweb.io\\\" denied the request: "
            "metadata.labels[kai.scheduler/queue]: namespace 'serving' may use only the queues bound to it "
            "(inference), not 'research'") in refused.value.body
    assert core.create_namespaced_pod("serving", pod("fine", labels={"kai.scheduler/queue": "inference"}))

    # A parent queue is refused everywhere, and so is a bad GPU request.
    with pytest.raises(ApiException) as parent:
        core.create_namespaced_pod("ml", pod("parent", labels={"kai.scheduler/queue": "department"}))
    assert "metadata.labels[kai.scheduler/queue]: queue 'department' has child queues (training)" in parent.value.body
    with pytest.raises(ApiException) as whole:
        core.create_namespaced_pod("ml", pod("whole", annotations={"gpu-fraction": "1"}))
    assert "metadata.annotations[gpu-fraction]: must be a number greater than 0 and smaller than 1" in whole.value.body


def test_a_pod_group_with_a_subgroup_cycle_or_an_unbound_queue_is_refused(admitting):
    core, custom = client.CoreV1Api(admitting), client.CustomObjectsApi(admitting)
    QueueFactory(name="inference")
    QueueFactory(name="research")
    make_namespace(core, "groups")
    NamespaceQueueBinding.objects.create(namespace="groups", queue=Queue.objects.get(name="inference"))

    def create(name: str, queue: str, subgroups: list[dict[str, Any]]) -> Any:
        body = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": name},
                "spec": {"minMember": 1, "queue": queue, "subGroups": subgroups}}
        return custom.create_namespaced_custom_object("scheduling.run.ai", "v2alpha2", "groups", "podgroups", body)

    with pytest.raises(ApiException) as cycle:
        create("cycle", "inference", [{"name": "a", "parent": "b", "minMember": 1}, {"name": "b", "parent": "a", "minMember": 1}])
    assert "podgroup-validator.kaiweb.io" in cycle.value.body
    assert "cycle detected in subgroups" in cycle.value.body
    with pytest.raises(ApiException) as unbound:
        create("elsewhere", "research", [])
    assert "spec.queue: namespace 'groups' may use only the queues bound to it (inference)" in unbound.value.body
    assert create("fine", "inference", [{"name": "a", "minMember": 1}])["metadata"]["name"] == "fine"


def test_a_project_that_enforces_our_scheduler_has_every_pod_of_its_namespace_put_on_ours(admitting):
    core = client.CoreV1Api(admitting)
    core.create_namespace({"metadata": {"name": "kai-vision", "labels": {"kai/project": "vision"},
                                        "annotations": {"kai.resources/enforce-scheduler-name": "true"}}})
    make_namespace(core, "kai-nlp", {"kai/project": "nlp"})
    enforced = core.create_namespaced_pod("kai-vision", pod("p", scheduler="default-scheduler"))
    assert enforced.spec.scheduler_name == "kai-scheduler"
    assert env_of(enforced)["NVIDIA_VISIBLE_DEVICES"].value == "void"  # then mutated as ours are
    assert core.create_namespaced_pod("kai-nlp", pod("p", scheduler="default-scheduler")).spec.scheduler_name == (
        "default-scheduler")
