"""The Helm chart deploy/helm/kaiweb: lint, rendering, its refusals, and a real kube-apiserver's verdict.

helm comes from ``deploy/helm/build-helm.sh`` (``HELM`` names another binary); the API server from
``devkube.localkube`` (``make kube``). Without them the tests that need them are skipped, with
the command that provides them.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "kaiweb"
RELEASE = "rel"
NAMESPACE = "kaiweb-chart"
SECRETS = ["django.secretKey.existingSecret=kaiweb-django", "database.existingSecret=kaiweb-db",
           "redis.existingSecret=kaiweb-redis"]
INLINE_URLS = ["django.secretKey.existingSecret=kaiweb-django", "database.url=postgres://kaiweb:pw@db:5432/kaiweb",
               "redis.url=redis://redis:6379/0"]
COMPONENTS = ("web", "worker", "whatif", "beat", "watcher")

pytestmark = pytest.mark.kube


def find_helm() -> str | None:
    """HELM, else the cache build-helm.sh installs into, else helm on PATH."""
    if os.environ.get("HELM"):
        return os.environ["HELM"] if os.access(os.environ["HELM"], os.X_OK) else None
    home = os.environ.get("KAI_KUBE_HOME")
    cache = Path(home) if home else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kaiweb-kube"
    built = cache / "bin" / "helm"
    if os.access(built, os.X_OK):
        return str(built)
    return shutil.which("helm")


@pytest.fixture(scope="module")
def helm() -> str:
    path = find_helm()
    if path is None:
        pytest.skip("no helm binary: run deploy/helm/build-helm.sh (or set HELM=/path/to/helm)")
    return path


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, check=False, timeout=120)


def template(helm: str, values: list[str], *extra: str) -> subprocess.CompletedProcess[str]:
    sets = [arg for s in values for arg in ("--set", s)]
    return run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *sets, *extra)


def render(helm: str, values: list[str]) -> list[dict[str, Any]]:
    result = template(helm, values)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def name(component: str) -> str:
    return f"{RELEASE}-kaiweb-{component}"


def pod_templates(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every pod template (Deployments and the migrate Job), by component."""
    return {d["metadata"]["labels"]["app.kubernetes.io/component"]: d["spec"]["template"]
            for d in docs if d["kind"] in ("Deployment", "Job")}


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container["env"]}


# -- lint and rendering (helm only) -----------------------------------------------------------------


def create_once(dynamic: Any, doc: dict[str, Any], default_namespace: str | None = None) -> None:
    """Create ``doc`` for real (in its own namespace, else ``default_namespace``); already there is fine."""
    from kubernetes.dynamic.exceptions import ConflictError

    resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    namespace = (doc["metadata"].get("namespace") or default_namespace) if resource.namespaced else None
    try:
        dynamic.create(resource, body=doc, namespace=namespace)
    except ConflictError:
        pass


@pytest.mark.parametrize("values", [SECRETS, INLINE_URLS], ids=["existing-secrets", "inline-urls"])
def test_lint_strict_passes(helm: str, values: list[str]) -> None:
    sets = [arg for s in values for arg in ("--set", s)]
    result = run_helm(helm, "lint", "--strict", str(CHART), *sets)
    assert result.returncode == 0, result.stdout + result.stderr


def test_renders_a_deployment_per_component_a_service_and_the_migrate_hook(helm: str) -> None:
    docs = render(helm, SECRETS)
    deployments = by_kind(docs, "Deployment")
    assert sorted(deployments) == sorted(name(c) for c in COMPONENTS)
    assert list(by_kind(docs, "Service")) == [name("web")]
    job = by_kind(docs, "Job")[name("migrate")]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["python", "manage.py", "migrate", "--noinput"]
    assert sorted(by_kind(docs, "ServiceAccount")) == sorted(name(c) for c in (*COMPONENTS, "migrate"))
    assert by_kind(docs, "Secret") == {}  # every secret comes from the existing Secrets named


def test_beat_is_a_single_replica_that_never_overlaps_itself(helm: str) -> None:
    beat = by_kind(render(helm, SECRETS), "Deployment")[name("beat")]
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}


def test_web_probes_healthz_and_readyz(helm: str) -> None:
    web = by_kind(render(helm, SECRETS), "Deployment")[name("web")]
    container = web["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # The kubelet's probes carry the pod's IP as Host: Django must accept it.
    hosts = env_of(container)["DJANGO_ALLOWED_HOSTS"]["value"].split(",")
    assert "$(POD_IP)" in hosts
    assert f"{name('web')}.{NAMESPACE}.svc" in hosts


@pytest.mark.parametrize(("component", "queue"), [("worker", "celery"), ("whatif", "whatif")])
def test_each_worker_probe_pings_the_workers_own_node_name(helm: str, component: str, queue: str) -> None:
    worker = by_kind(render(helm, SECRETS), "Deployment")[name(component)]
    container = worker["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[command.index("--hostname") + 1] == f"{queue}@$(POD_NAME)"
    assert command[command.index("-Q") + 1] == queue
    probe = " ".join(container["livenessProbe"]["exec"]["command"])
    assert "celery -A kaiweb inspect ping" in probe
    assert f'--destination "{queue}@$POD_NAME"' in probe


def consumed_queues(docs: list[dict[str, Any]]) -> dict[str, set[str]]:
    """The Celery queues each rendered worker consumes, by component."""
    out = {}
    for component, template_ in pod_templates(docs).items():
        command = template_["spec"]["containers"][0].get("command") or []
        if command[:4] == ["celery", "-A", "kaiweb", "worker"]:
            out[component] = set(command[command.index("-Q") + 1].split(","))
    return out


def test_the_cycles_have_a_worker_that_serves_no_whatif_and_every_task_has_a_worker(helm: str) -> None:
    from kaiweb.celery import app

    queues = consumed_queues(render(helm, SECRETS))
    # The cycle's queue is served by a worker that takes no what-if or estimate: neither waits in front of it.
    assert queues == {"worker": {"celery"}, "whatif": {"whatif"}}
    app.loader.import_default_modules()
    served = set().union(*queues.values())
    for task in sorted(t for t in app.tasks if not t.startswith("celery.")):
        assert app.amqp.router.route({}, task)["queue"].name in served, task


@pytest.mark.parametrize("component", ["beat", "watcher"])
def test_beat_and_watcher_probes_check_their_heartbeat(helm: str, component: str) -> None:
    pod = by_kind(render(helm, SECRETS), "Deployment")[name(component)]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["exec"]["command"] == [
            "python", "-m", "kaiweb.core.heartbeat", component, "--max-age", "120"], probe
    off = by_kind(render(helm, [*SECRETS, f"{component}.probe.enabled=false"]), "Deployment")[name(component)]
    assert "livenessProbe" not in off["spec"]["template"]["spec"]["containers"][0]


def test_every_container_asks_for_resources_and_the_image_is_pinned(helm: str) -> None:
    for component, pod in pod_templates(render(helm, SECRETS)).items():
        for container in pod["spec"]["containers"]:
            assert container["resources"]["requests"]["cpu"], component
            assert container["resources"]["limits"]["memory"], component
            image = container["image"]
            assert ":" in image.rsplit("/", 1)[-1], image
            assert not image.endswith(":latest"), image


def test_network_policies_let_http_into_web_only_and_out_to_named_ports(helm: str) -> None:
    policies = by_kind(render(helm, SECRETS), "NetworkPolicy")
    everyone = policies[f"{RELEASE}-kaiweb"]
    assert everyone["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "kaiweb",
                                                              "app.kubernetes.io/instance": RELEASE}
    assert everyone["spec"]["ingress"] == []
    ports = {p["port"] for rule in everyone["spec"]["egress"] for p in rule["ports"]}
    assert {53, 5432, 6379, 443, 6443} <= ports
    web = policies[name("web")]
    assert web["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "web"
    assert web["spec"]["ingress"] == [{"ports": [{"port": 8000, "protocol": "TCP"}]}]
    narrowed = by_kind(render(helm, [*SECRETS, "networkPolicy.webFrom[0].namespaceSelector.matchLabels.ingress=yes"]),
                       "NetworkPolicy")[name("web")]
    assert narrowed["spec"]["ingress"][0]["from"] == [{"namespaceSelector": {"matchLabels": {"ingress": "yes"}}}]
    assert by_kind(render(helm, [*SECRETS, "networkPolicy.enabled=false"]), "NetworkPolicy") == {}


def test_every_pod_runs_restricted(helm: str) -> None:
    for component, pod in pod_templates(render(helm, SECRETS)).items():
        spec = pod["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, component
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, component
        volumes = {v["name"]: v for v in spec["volumes"]}
        for container in spec["containers"]:
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, component
            assert sc["allowPrivilegeEscalation"] is False, component
            assert sc["capabilities"]["drop"] == ["ALL"], component
            tmp = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
            assert tmp, f"{component}: /tmp is not mounted"
            assert "emptyDir" in volumes[tmp[0]["name"]], component


def test_secrets_come_from_the_named_secrets(helm: str) -> None:
    for component, pod in pod_templates(render(helm, SECRETS)).items():
        env = env_of(pod["spec"]["containers"][0])
        refs = {k: env[k]["valueFrom"]["secretKeyRef"] for k in ("DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL")}
        assert refs == {"DJANGO_SECRET_KEY": {"name": "kaiweb-django", "key": "secret-key"},
                        "DATABASE_URL": {"name": "kaiweb-db", "key": "database-url"},
                        "REDIS_URL": {"name": "kaiweb-redis", "key": "redis-url"}}, component
        assert env["DJANGO_DEBUG"]["value"] == "false", component


def test_inline_urls_live_in_the_charts_secret_and_a_hook_secret_for_migrate(helm: str) -> None:
    docs = render(helm, INLINE_URLS)
    secrets = by_kind(docs, "Secret")
    expected = {"database-url": "postgres://kaiweb:pw@db:5432/kaiweb", "redis-url": "redis://redis:6379/0"}
    assert secrets[f"{RELEASE}-kaiweb"]["stringData"] == expected
    hook_secret = secrets[name("migrate")]
    assert hook_secret["stringData"] == expected
    assert hook_secret["metadata"]["annotations"]["helm.sh/hook-weight"] == "-10"  # before the Job (weight 0)
    pods = pod_templates(docs)
    migrate_env = env_of(pods["migrate"]["spec"]["containers"][0])
    assert migrate_env["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": name("migrate"), "key": "database-url"}
    web_env = env_of(pods["web"]["spec"]["containers"][0])
    assert web_env["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": f"{RELEASE}-kaiweb", "key": "database-url"}


def test_scheduling_values_reach_the_environment(helm: str) -> None:
    docs = render(helm, [*SECRETS, "scheduling.schedulerName=team-a", "scheduling.cycleSeconds=2",
                         "prometheus.url=http://prometheus.monitoring:9090"])
    env = env_of(pod_templates(docs)["worker"]["spec"]["containers"][0])
    assert env["KAI_SCHEDULER_NAME"]["value"] == "team-a"
    assert env["KAI_CYCLE_SECONDS"]["value"] == "2"
    assert env["KAI_PROMETHEUS_URL"]["value"] == "http://prometheus.monitoring:9090"
    assert env["KAI_CLUSTER_BACKEND"]["value"] == "kubernetes"
    assert env["KAI_RESERVATION_NAMESPACE"]["value"] == "kai-resource-reservation"


def test_only_the_worker_and_the_watcher_are_bound_to_the_scheduler_role(helm: str) -> None:
    docs = render(helm, SECRETS)
    binding = by_kind(docs, "ClusterRoleBinding")[name("scheduler")]
    assert [s["name"] for s in binding["subjects"]] == [name("worker"), name("watcher")]
    # One Role, in the reservation namespace only, for the worker's reservation pods of shared GPUs.
    (role_binding,) = by_kind(docs, "RoleBinding").values()
    assert role_binding["metadata"]["namespace"] == "kai-resource-reservation"
    assert [s["name"] for s in role_binding["subjects"]] == [name("worker")]
    evictor = by_kind(docs, "ClusterRoleBinding")[name("evictor")]
    assert [s["name"] for s in evictor["subjects"]] == [name("worker")]
    assert by_kind(docs, "ClusterRole")[name("evictor")]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}]
    (reservations,) = by_kind(docs, "Role").values()
    assert reservations["metadata"]["namespace"] == "kai-resource-reservation"
    assert reservations["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                                      "verbs": ["get", "list", "create", "delete"]}]
    role = by_kind(docs, "ClusterRole")[name("scheduler")]
    for rule in role["rules"]:
        assert "*" not in rule["verbs"], rule
        assert "*" not in rule["resources"], rule
        assert "secrets" not in rule["resources"], rule
    accounts = by_kind(docs, "ServiceAccount")
    assert accounts[name("beat")]["automountServiceAccountToken"] is False
    assert accounts[name("migrate")]["automountServiceAccountToken"] is False


@pytest.mark.parametrize(("values", "message"), [
    ([], "django.secretKey.existingSecret is required"),
    (["django.secretKey.existingSecret=k", "redis.url=redis://r:6379/0"], "database.url or database.existingSecret is required"),
    (["django.secretKey.existingSecret=k", "database.url=postgres://d/k"], "redis.url or redis.existingSecret is required"),
    ([*SECRETS, "database.url=postgres://d/k"], "database: set database.url or database.existingSecret, not both"),
    ([*SECRETS, "beat.replicas=2"], "beat.replicas must be 1, not 2"),
    ([*SECRETS, "watcher.replicas=2"], "watcher.replicas must be 0 or 1, not 2"),
    ([*SECRETS, "scheduling.backend=volcano"], "/scheduling/backend"),
], ids=["no-secret-key", "no-database", "no-redis", "two-databases", "two-beats", "two-watchers", "bad-backend"])
def test_rendering_refuses_with_a_message_naming_the_value(helm: str, values: list[str], message: str) -> None:
    result = template(helm, values)
    assert result.returncode != 0
    assert message in result.stderr


# -- the derived files are current --------------------------------------------------------------------


# -- admission webhooks ------------------------------------------------------------------------------


ADMISSION = [*SECRETS, "admission.enabled=true"]


def test_admission_webhooks_are_off_unless_asked_for(helm: str) -> None:
    docs = render(helm, SECRETS)
    assert by_kind(docs, "MutatingWebhookConfiguration") == by_kind(docs, "ValidatingWebhookConfiguration") == {}


def test_admission_webhooks_use_kais_failure_policy_and_a_certificate_their_ca_bundle_verifies(
        helm: str, tmp_path: Path) -> None:
    import base64

    docs = render(helm, ADMISSION)
    admission = name("admission")
    secret = by_kind(docs, "Secret")[f"{admission}-tls"]
    mutating = by_kind(docs, "MutatingWebhookConfiguration")[admission]["webhooks"]
    validating = by_kind(docs, "ValidatingWebhookConfiguration")[admission]["webhooks"]
    assert [w["name"] for w in mutating] == ["pod-mutator.kaiweb.io", "pod-scheduler.kaiweb.io"]
    assert [w["name"] for w in validating] == ["pod-validator.kaiweb.io", "podgroup-validator.kaiweb.io"]
    for hook in mutating + validating:
        assert hook["failurePolicy"] == "Fail"
        assert hook["sideEffects"] == "None"
        assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
        assert hook["clientConfig"]["service"]["name"] == admission
        assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                "values": ["kube-system", NAMESPACE]} in hook["namespaceSelector"]["matchExpressions"]
    assert mutating[0]["matchConditions"] == [{"name": "scheduler-name",
                                              "expression": "object.spec.schedulerName == 'kai-scheduler'"}]
    assert mutating[1]["matchConditions"] == [{"name": "other-scheduler",
                                              "expression": "object.spec.schedulerName != 'kai-scheduler'"}]
    assert {"key": "kai/project", "operator": "Exists"} in mutating[1]["namespaceSelector"]["matchExpressions"]
    assert mutating[0]["rules"][0]["operations"] == ["CREATE"]
    assert mutating[0]["reinvocationPolicy"] == "IfNeeded"
    assert validating[1]["rules"][0]["resources"] == ["podgroups"]
    for key in ("ca.crt", "tls.crt"):
        (tmp_path / key).write_bytes(base64.b64decode(secret["data"][key]))
    verified = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), "-verify_hostname",
                               f"{admission}.{NAMESPACE}.svc", str(tmp_path / "tls.crt")],
                              capture_output=True, text=True, check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    pod = pod_templates(docs)["admission"]
    container = pod["spec"]["containers"][0]
    assert env_of(container)["KAI_TLS_CERT_FILE"]["value"] == "/etc/kaiweb/tls/tls.crt"
    assert f"{admission}.{NAMESPACE}.svc" in env_of(container)["DJANGO_ALLOWED_HOSTS"]["value"].split(",")
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert pod["metadata"]["annotations"]["checksum/tls"]  # a new certificate rolls the pods
    role = by_kind(docs, "ClusterRole")[admission]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}]


def test_admission_webhooks_take_their_ca_from_cert_manager_when_asked(helm: str) -> None:
    docs = render(helm, [*ADMISSION, "admission.certManager.enabled=true"])
    admission = name("admission")
    assert f"{admission}-tls" not in by_kind(docs, "Secret")
    certificate = by_kind(docs, "Certificate")[admission]
    assert certificate["spec"]["secretName"] == f"{admission}-tls"
    assert f"{admission}.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"] == {"name": admission, "kind": "Issuer"}
    assert by_kind(docs, "Issuer")[admission]["spec"] == {"selfSigned": {}}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = by_kind(docs, kind)[admission]
        assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/{admission}"}
        assert all("caBundle" not in w["clientConfig"] for w in config["webhooks"])
    issuer = render(helm, [*ADMISSION, "admission.certManager.enabled=true",
                           "admission.certManager.issuerRef.name=corp-ca", "admission.certManager.issuerRef.kind=ClusterIssuer"])
    assert by_kind(issuer, "Certificate")[admission]["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer"}
    assert by_kind(issuer, "Issuer") == {}


def test_chart_crds_are_the_plain_crds() -> None:
    source = ROOT / "deploy" / "kubernetes" / "crds.yaml"
    copy_ = CHART / "crds" / "kai-crds.yaml"
    assert copy_.read_bytes() == source.read_bytes(), f"{copy_} is stale: run deploy/helm/render.sh"


def test_plain_manifests_are_the_charts_rendering(helm: str) -> None:
    result = subprocess.run([str(ROOT / "deploy" / "helm" / "render.sh"), "--check"], capture_output=True,
                            text=True, check=False, timeout=120, env={**os.environ, "HELM": helm})
    assert result.returncode == 0, result.stderr


# -- the real API server ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kube(helm: str) -> Iterator[Any]:
    from devkube.localkube import LocalKube, find_binaries

    if find_binaries() is None:
        pytest.skip("no kube-apiserver/etcd: run `make kube` (deploy/kube/build.sh)")
    with LocalKube(controllers=None) as cluster:
        cluster.install_crds(CHART / "crds" / "kai-crds.yaml")
        yield cluster


@pytest.fixture(scope="module")
def dynamic(kube: Any) -> Any:
    from kubernetes import client
    from kubernetes.dynamic import DynamicClient

    api = kube.api_client()
    namespace = {"metadata": {"name": NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    client.CoreV1Api(api).create_namespace(namespace)
    return DynamicClient(api)


def dry_run_create(dynamic: Any, doc: dict[str, Any]) -> None:
    resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    namespace = doc["metadata"].get("namespace") if resource.namespaced else None
    dynamic.create(resource, body=doc, namespace=namespace, dry_run="All",
                   query_params=[("fieldValidation", "Strict")])


@pytest.mark.parametrize("values", [SECRETS, INLINE_URLS, [*SECRETS, "admission.enabled=true"]],
                         ids=["existing-secrets", "inline-urls", "admission-webhooks"])
def test_api_server_accepts_every_rendered_object_in_a_dry_run(helm: str, dynamic: Any, values: list[str]) -> None:
    from kubernetes.dynamic.exceptions import DynamicApiError

    docs = render(helm, values)
    refused = []
    for doc in docs:
        try:
            if doc["kind"] == "Namespace":  # made for real: the objects that follow are created in it
                create_once(dynamic, doc)
            else:
                dry_run_create(dynamic, doc)
        except DynamicApiError as exc:
            refused.append(f"{doc['kind']} {doc['metadata']['name']}: {exc.status} {exc.summary()}")
    assert refused == []
    assert len(docs) >= 12


def test_api_server_admits_every_pod_under_the_restricted_pod_security_standard(helm: str, dynamic: Any) -> None:
    from kubernetes.dynamic.exceptions import DynamicApiError

    pods = pod_templates(render(helm, SECRETS))
    # The namespace enforces "restricted": a pod without the security context is refused there...
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": NAMESPACE},
             "spec": {"containers": [{"name": "c", "image": "kaiweb:test"}]}}
    with pytest.raises(DynamicApiError) as refused:
        dry_run_create(dynamic, plain)
    assert refused.value.status == 403
    # ...and every kaiweb pod is admitted.
    refusals = []
    for component, template_ in pods.items():
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"{component}-probe", "namespace": NAMESPACE, **copy.deepcopy(template_["metadata"])},
               "spec": copy.deepcopy(template_["spec"])}
        try:
            dry_run_create(dynamic, pod)
        except DynamicApiError as exc:
            refusals.append(f"{component}: {exc.status} {exc.summary()}")
    assert refusals == []
    assert sorted(pods) == ["beat", "migrate", "watcher", "web", "whatif", "worker"]


def can(kube: Any, component: str, verb: str, resource: str, *, group: str = "", subresource: str = "",
        namespace: str = "default") -> bool:
    from kubernetes import client

    account = name(component)
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
        "user": f"system:serviceaccount:{NAMESPACE}:{account}",
        "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"],
        "resourceAttributes": {"verb": verb, "resource": resource, "group": group, "subresource": subresource,
                               "namespace": namespace}}}
    with client.ApiClient(kube.configuration()) as api:
        answer = client.AuthorizationV1Api(api).create_subject_access_review(review)
    return bool(answer.status.allowed)


def can_read_path(kube: Any, component: str, path: str) -> bool:
    from kubernetes import client

    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
        "user": f"system:serviceaccount:{NAMESPACE}:{name(component)}",
        "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"],
        "nonResourceAttributes": {"verb": "get", "path": path}}}
    with client.ApiClient(kube.configuration()) as api:
        return bool(client.AuthorizationV1Api(api).create_subject_access_review(review).status.allowed)


@pytest.fixture(scope="module")
def rbac_installed(helm: str, kube: Any, dynamic: Any) -> None:
    """The chart's ServiceAccounts and RBAC objects, created for real."""
    for doc in render(helm, SECRETS):
        if doc["kind"] in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
            create_once(dynamic, doc, NAMESPACE)


SCHEDULER_NEEDS = [
    ("list", "nodes", "", ""), ("watch", "pods", "", ""), ("patch", "pods", "", ""),
    ("create", "pods", "", "binding"), ("create", "pods", "", "eviction"), ("patch", "pods", "", "status"),
    ("create", "events", "", ""), ("list", "priorityclasses", "scheduling.k8s.io", ""),
    ("get", "namespaces", "", ""), ("create", "podgroups", "scheduling.run.ai", ""),
    ("patch", "podgroups", "scheduling.run.ai", "status"), ("patch", "queues", "scheduling.run.ai", "status"),
    ("update", "queues", "scheduling.run.ai", ""), ("list", "topologies", "kai.scheduler", ""),
    ("get", "jobs", "batch", ""), ("get", "replicasets", "apps", ""), ("create", "configmaps", "", ""),
    ("get", "persistentvolumeclaims", "", ""), ("get", "storageclasses", "storage.k8s.io", ""),
]
NOBODY_NEEDS = [
    ("get", "secrets", "", ""), ("create", "pods", "", ""),
    ("update", "nodes", "", ""), ("delete", "podgroups", "scheduling.run.ai", ""),
    ("create", "clusterrolebindings", "rbac.authorization.k8s.io", ""), ("list", "jobs", "batch", ""),
]


@pytest.mark.usefixtures("rbac_installed")
@pytest.mark.parametrize("component", ["worker", "watcher"])
def test_scheduler_components_may_do_what_a_scheduler_does_and_no_more(kube: Any, component: str) -> None:
    missing = [need for need in SCHEDULER_NEEDS
               if not can(kube, component, need[0], need[1], group=need[2], subresource=need[3])]
    assert missing == []
    excess = [extra for extra in NOBODY_NEEDS
              if can(kube, component, extra[0], extra[1], group=extra[2], subresource=extra[3])]
    assert excess == []


@pytest.mark.usefixtures("rbac_installed")
def test_only_the_worker_makes_reservation_pods_and_only_in_their_namespace(kube: Any) -> None:
    reservations = "kai-resource-reservation"
    assert can(kube, "worker", "create", "pods", namespace=reservations)
    assert can(kube, "worker", "delete", "pods", namespace=reservations)
    assert not can(kube, "worker", "create", "pods", namespace="team-a")
    assert not can(kube, "watcher", "create", "pods", namespace=reservations)
    assert not can(kube, "web", "create", "pods", namespace=reservations)


@pytest.mark.usefixtures("rbac_installed")
def test_only_the_worker_deletes_pods_as_kais_evictor_does(kube: Any) -> None:
    """A shard's eviction mode ``delete`` deletes the victim wherever it runs; no one else may delete a pod."""
    assert can(kube, "worker", "delete", "pods", namespace="team-a")
    assert not can(kube, "worker", "deletecollection", "pods", namespace="team-a")
    for component in ("watcher", "web", "beat", "migrate"):
        assert not can(kube, component, "delete", "pods", namespace="team-a"), component


@pytest.mark.usefixtures("rbac_installed")
@pytest.mark.parametrize("component", ["web", "beat", "migrate"])
def test_web_beat_and_migrate_get_no_cluster_permissions(kube: Any, component: str) -> None:
    granted = [need for need in SCHEDULER_NEEDS + NOBODY_NEEDS
               if can(kube, component, need[0], need[1], group=need[2], subresource=need[3])]
    assert granted == []
    # /version, all the web pods' readiness check reads, stays open to any authenticated account.
    assert can_read_path(kube, component, "/version")


def test_helm_installs_upgrades_and_uninstalls_a_release_on_the_api_server(helm: str, kube: Any, tmp_path: Path) -> None:
    """A real `helm install`/`upgrade`/`uninstall` (without hooks: no kubelet runs the migrate Job here)."""
    from kubernetes import client

    env = {**os.environ, "KUBECONFIG": str(kube.kubeconfig), "HELM_CACHE_HOME": str(tmp_path / "cache"),
           "HELM_CONFIG_HOME": str(tmp_path / "config"), "HELM_DATA_HOME": str(tmp_path / "data")}
    namespace = "kaiweb-release"
    # Its own reservation namespace: a second release in one cluster must not share the first one's.
    sets = [arg for s in [*INLINE_URLS, "gpuSharing.reservationNamespace=live-reservations"] for arg in ("--set", s)]

    def helm_run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([helm, "--namespace", namespace, *args], capture_output=True, text=True,
                              check=False, timeout=120, env=env)

    def worker_env() -> dict[str, str]:
        worker = apps.read_namespaced_deployment("live-kaiweb-worker", namespace)
        return {e.name: e.value for e in worker.spec.template.spec.containers[0].env}

    api = kube.api_client()
    apps = client.AppsV1Api(api)
    installed = helm_run("install", "live", str(CHART), "--create-namespace", "--no-hooks", *sets)
    assert installed.returncode == 0, installed.stderr
    assert "live-kaiweb-migrate hook migrates the database" in installed.stdout  # NOTES.txt
    names = sorted(d.metadata.name for d in apps.list_namespaced_deployment(namespace).items)
    assert names == sorted(f"live-kaiweb-{c}" for c in COMPONENTS)
    assert worker_env()["KAI_CYCLE_SECONDS"] == "5"
    assert worker_env()["KAI_RESERVATION_NAMESPACE"] == "live-reservations"
    core = client.CoreV1Api(api)
    assert core.read_namespace("live-reservations").metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"

    upgraded = helm_run("upgrade", "live", str(CHART), "--no-hooks", *sets, "--set", "scheduling.cycleSeconds=3")
    assert upgraded.returncode == 0, upgraded.stderr
    assert worker_env()["KAI_CYCLE_SECONDS"] == "3"

    # The admission webhooks' certificate is made once and kept by later upgrades (lookup).
    with_admission = [*sets, "--set", "admission.enabled=true"]
    assert helm_run("upgrade", "live", str(CHART), "--no-hooks", *with_admission).returncode == 0
    first = core.read_namespaced_secret("live-kaiweb-admission-tls", namespace).data
    again = helm_run("upgrade", "live", str(CHART), "--no-hooks", *with_admission, "--set", "scheduling.cycleSeconds=4")
    assert again.returncode == 0, again.stderr
    assert core.read_namespaced_secret("live-kaiweb-admission-tls", namespace).data == first
    renewed = helm_run("upgrade", "live", str(CHART), "--no-hooks", *with_admission,
                       "--set", "admission.selfSigned.renewBeforeDays=4000")  # past the renewal point: made again
    assert renewed.returncode == 0, renewed.stderr
    assert core.read_namespaced_secret("live-kaiweb-admission-tls", namespace).data["tls.crt"] != first["tls.crt"]

    removed = helm_run("uninstall", "live", "--no-hooks")
    assert removed.returncode == 0, removed.stderr
    assert apps.list_namespaced_deployment(namespace).items == []
    rbac = client.RbacAuthorizationV1Api(api)
    assert "live-kaiweb-scheduler" not in {r.metadata.name for r in rbac.list_cluster_role().items}
