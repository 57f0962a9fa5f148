"""A real Kubernetes API server on loopback: etcd, kube-apiserver and a trimmed controller-manager.

This is the idea of controller-runtime's ``envtest``: the test suite and the end-to-end scenarios
talk to the genuine ``kube-apiserver`` (real validation, real CRD schemas, real Binding and
Eviction subresources, real PodDisruptionBudget enforcement, real watch expiry), without a kubelet
and without containers. Nodes are API objects whose status the caller writes; pods are bound by
the scheduler and never run. The binaries come from ``make kube`` (``deploy/kube/build.sh``), or
from ``KUBEBUILDER_ASSETS`` as envtest lays them out.

Usage::

    with LocalKube() as kube:                     # fresh, empty cluster on free loopback ports
        kube.install_crds(Path("deploy/kubernetes/crds.yaml"))
        core = kubernetes.client.CoreV1Api(kube.api_client())
        ...
        kube.reset()                              # empty again, same kubeconfig path

With ``kwok=True`` the cluster also gets KWOK (``sigs.k8s.io/kwok``, built by ``make kube``) with
our stages (``deploy/kube/kwok-stages.yaml``) and the controllers a cluster of fake nodes needs;
`LocalKube.create_kwok_nodes` then adds GPU nodes that go Ready, heartbeat, run the pods bound to
them and finish Job pods that ask to (any node annotated ``kwok.x-k8s.io/node=fake`` is KWOK's), and
`LocalKube.wait_for_pods` waits until KWOK has taken on what was bound or deleted. ``scheduler=True``
starts kube-scheduler of the same version::

    with LocalKube(kwok=True) as kube:
        names = kube.create_kwok_nodes(50)        # 50 × 8 GPUs, Ready and untainted on return

Every child process is stopped by `LocalKube.stop`, on ``__exit__``, at interpreter exit, and (on
Linux, when started from the main thread) by the kernel if this process dies without cleaning up.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

__all__ = ["KWOK_STAGES", "LocalKube", "LocalKubeError", "find_binaries", "find_tool", "kwok_node", "node_usable"]

DEFAULT_CONTROLLERS = "disruption,garbagecollector,namespace"
# What a cluster of KWOK nodes needs besides those: the not-ready taint the API server puts on every
# new node is lifted only by nodelifecycle; job, replicaset, deployment, statefulset and cronjob make
# workloads create their pods, ttl-after-finished and podgc tidy up after them. Taint-based eviction
# (taint-eviction-controller) is left out: a fake node never really fails, and an eviction nobody
# asked for would only blur what the scheduler under test did.
KWOK_CONTROLLERS = ("nodelifecycle,job,replicaset,deployment,statefulset,cronjob,ttl-after-finished,podgc,"
                    + DEFAULT_CONTROLLERS)
KWOK_STAGES = Path(__file__).resolve().parents[1] / "deploy" / "kube" / "kwok-stages.yaml"
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
KWOK_LEASE_SECONDS = 40
# How long the node-lifecycle controller waits for a KWOK node's lease before marking it NotReady.
KWOK_NODE_GRACE_SECONDS = 300
NO_KWOK = "no kwok binary beside the kube-apiserver: run `make kube` (it builds KWOK too)"
NO_SCHEDULER = "no kube-scheduler binary beside the kube-apiserver: run `make kube` (it builds kube-scheduler too)"
REQUIRED = ("kube-apiserver", "etcd")
POLL = 0.05  # seconds between readiness probes
START_TIMEOUT = 90.0
STOP_TIMEOUT = 5.0
LOG_TAIL_LINES = 30


class LocalKubeError(RuntimeError):
    """The local cluster could not be started (the message carries the failing process's log)."""


def _holds_binaries(folder: Path) -> bool:
    return all(os.access(folder / name, os.X_OK) for name in REQUIRED)


def _candidate_folders() -> list[Path]:
    candidates: list[Path] = []
    if os.environ.get("KUBEBUILDER_ASSETS"):
        candidates.append(Path(os.environ["KUBEBUILDER_ASSETS"]))
    if os.environ.get("KAI_KUBE_HOME"):
        candidates.append(Path(os.environ["KAI_KUBE_HOME"]) / "bin")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    candidates.append(cache / "kaiweb-kube" / "bin")
    return candidates


def find_binaries() -> Path | None:
    """The folder holding ``kube-apiserver`` and ``etcd``, or None.

    Looked for in ``KUBEBUILDER_ASSETS`` (envtest's layout), then ``$KAI_KUBE_HOME/bin``, then
    ``~/.cache/kaiweb-kube/bin`` (``XDG_CACHE_HOME`` honoured), where ``make kube`` puts them.
    """
    return next((c for c in _candidate_folders() if _holds_binaries(c)), None)


def find_tool(name: str, bin_dir: Path | None = None) -> Path | None:
    """The executable ``name`` (``kwok``, ``kube-scheduler``) from ``bin_dir`` or the folders
    `find_binaries` looks in, in that order; None when none holds it (``KUBEBUILDER_ASSETS`` from
    envtest has neither)."""
    folders = ([Path(bin_dir)] if bin_dir is not None else []) + _candidate_folders()
    return next((f / name for f in folders if os.access(f / name, os.X_OK)), None)


def kwok_node(name: str, *, gpus: int = 8, cpu: str = "32", memory: str = "256Gi", pods: int = 110,
              labels: Mapping[str, str] | None = None, gpu_product: str = "NVIDIA-A100-SXM4-80GB",
              gpu_memory_mib: int = 81920) -> dict[str, Any]:
    """A Node object for KWOK to manage, shaped as KAI's scale suite shapes its nodes: ``gpus``
    ``nvidia.com/gpu`` (with the GPU operator's labels), the labels ``type=kwok`` and
    ``kubernetes.io/role=agent``, the taint ``kwok.x-k8s.io/node=fake:NoSchedule`` and KWOK's
    annotation. ``labels`` are added to (or override) those."""
    resources = {"cpu": cpu, "memory": memory, "pods": str(pods), "nvidia.com/gpu": str(gpus)}
    node_labels = {"type": "kwok", "kubernetes.io/role": "agent", "kubernetes.io/hostname": name,
                   "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    if gpus:
        node_labels.update({"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": str(gpus),
                            "nvidia.com/gpu.product": gpu_product, "nvidia.com/gpu.memory": str(gpu_memory_mib)})
    node_labels.update(labels or {})
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": node_labels, "annotations": {KWOK_ANNOTATION[0]: KWOK_ANNOTATION[1]}},
        "spec": {"taints": [{"key": KWOK_ANNOTATION[0], "value": KWOK_ANNOTATION[1], "effect": "NoSchedule"}]},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def node_usable(node: Mapping[str, Any]) -> bool:
    """A node object (as JSON) is Ready and free of the taints the node controllers put on a node
    that is not (``node.kubernetes.io/not-ready``, ``unreachable``, ...)."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    taints = (node.get("spec") or {}).get("taints") or []
    return ready and not any(str(t.get("key", "")).startswith("node.kubernetes.io/") for t in taints)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _die_with_parent() -> None:
    """In the child, before exec: the kernel kills it when the thread that started it ends."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


_LIVE: weakref.WeakSet[LocalKube] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for kube in list(_LIVE):
        kube.stop()


class _Child:
    """One child process with its log file."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name = name
        self.log = log
        main_thread = threading.current_thread() is threading.main_thread()
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent if main_thread and sys.platform == "linux" else None,
            )

    def alive(self) -> bool:
        return self.process.poll() is None

    def failure(self, what: str) -> LocalKubeError:
        code = self.process.poll()
        state = f"exited with {code}" if code is not None else "still running"
        return LocalKubeError(f"{self.name} {what} ({state}); last lines of {self.log}:\n{_tail(self.log)}")

    def stop(self) -> None:
        # The cluster's data is thrown away, so there is nothing a graceful shutdown would save;
        # the API server's own one takes a second.
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(STOP_TIMEOUT)


class LocalKube:
    """etcd + kube-apiserver (+ kube-controller-manager) on free loopback ports, in a temporary folder.

    ``controllers`` lists the controller-manager's controllers (None: no controller-manager). The
    default runs what an API-only cluster needs: ``disruption`` (PodDisruptionBudget status, without
    which every eviction answers 429), ``garbagecollector`` and ``namespace``. Add ``job``,
    ``replicaset`` and ``deployment`` to have workloads create their pods. ``apiserver_args`` are
    added to the API server's command line (e.g. ``--watch-cache-sizes=pods#0`` sends pod watches
    straight to etcd, where a compaction expires old resourceVersions with 410 Gone).

    ``kwok=True`` also starts KWOK on the nodes annotated ``kwok.x-k8s.io/node=fake`` (its stages from
    ``kwok_stages``, its own server off) and, unless ``controllers`` is given, the controller-manager
    with `KWOK_CONTROLLERS`; ``extra_kwok_stages`` are more stage files KWOK loads besides (stages a
    caller adds without touching the default ones). ``scheduler=True`` starts kube-scheduler (leader election off, no
    serving port). Both binaries come from ``bin_dir`` (or where `find_tool` finds them); start
    raises `LocalKubeError` when one asked for is missing (`NO_KWOK`, `NO_SCHEDULER` say why).
    """

    kubeconfig: Path
    version: str

    def __init__(self, bin_dir: Path | None = None, *, controllers: str | None = DEFAULT_CONTROLLERS,
                 workdir: Path | None = None, apiserver_args: Sequence[str] = (), kwok: bool = False,
                 scheduler: bool = False, kwok_stages: Path = KWOK_STAGES,
                 extra_kwok_stages: Sequence[Path] = ()) -> None:
        self.bin_dir = Path(bin_dir) if bin_dir is not None else find_binaries()
        self.kwok = kwok
        self.scheduler = scheduler
        self.kwok_stages = Path(kwok_stages)
        self.extra_kwok_stages = [Path(p) for p in extra_kwok_stages]
        if kwok and controllers == DEFAULT_CONTROLLERS:
            controllers = KWOK_CONTROLLERS
        self.controllers = controllers
        self.workdir = Path(workdir) if workdir is not None else None
        self.apiserver_args = list(apiserver_args)
        self.version = ""
        self._root: Path | None = None
        self._children: list[_Child] = []
        self._token = ""
        self._api_port = 0
        self._etcd_port = 0
        self._peer_port = 0
        self._api_clients: list[client.ApiClient] = []

    # -- public API --------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return f"https://127.0.0.1:{self._api_port}"

    @property
    def etcd_endpoint(self) -> str:
        return f"http://127.0.0.1:{self._etcd_port}"

    @property
    def root(self) -> Path:
        """The temporary folder holding the logs, certificates, kubeconfig and etcd data."""
        if self._root is None:
            raise LocalKubeError("the local cluster is not started")
        return self._root

    def start(self) -> LocalKube:
        if self._children:
            return self
        if self.bin_dir is None or not _holds_binaries(self.bin_dir):
            where = f" in {self.bin_dir}" if self.bin_dir is not None else ""
            raise LocalKubeError(f"no kube-apiserver/etcd binaries{where}: run `make kube` "
                                 "(or point KUBEBUILDER_ASSETS at a folder holding them)")
        if self.kwok and find_tool("kwok", self.bin_dir) is None:
            raise LocalKubeError(NO_KWOK)
        if self.scheduler and find_tool("kube-scheduler", self.bin_dir) is None:
            raise LocalKubeError(NO_SCHEDULER)
        if self._root is None:
            if self.workdir is not None:
                self.workdir.mkdir(parents=True, exist_ok=True)
            self._root = Path(tempfile.mkdtemp(prefix="localkube-", dir=self.workdir))
            self._prepare_credentials()
        _LIVE.add(self)
        try:
            self._launch()
        except BaseException:
            self._stop_children()
            raise
        return self

    def configuration(self) -> client.Configuration:
        """A client configuration for the admin user (bearer token, the server's own CA)."""
        config = client.Configuration()
        config.host = self.host
        config.ssl_ca_cert = str(self.root / "certs" / "apiserver.crt")
        # The whole header value under the historical key: read the same by every client release.
        config.api_key = {"authorization": f"Bearer {self._token}"}
        config.retries = False
        return config

    def api_client(self) -> client.ApiClient:
        """A new `ApiClient` for the admin user; closed by `stop`."""
        api = client.ApiClient(self.configuration())
        self._api_clients.append(api)
        return api

    def install_crds(self, documents: Iterable[dict[str, Any]] | Path) -> None:
        """Create (or replace) every CustomResourceDefinition given, and wait until each is Established."""
        if isinstance(documents, str | Path):
            documents = [d for d in yaml.safe_load_all(Path(documents).read_text()) if d]
        crds = [d for d in documents if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"]
        with client.ApiClient(self.configuration()) as api_client:
            ext = client.ApiextensionsV1Api(api_client)
            for crd in crds:
                name = crd["metadata"]["name"]
                try:
                    ext.create_custom_resource_definition(crd)
                except client.ApiException as exc:
                    if exc.status != 409:
                        raise LocalKubeError(f"CRD {name} refused: {exc.status} {exc.body}") from exc
                    current = ext.read_custom_resource_definition(name)
                    body = {**crd, "metadata": {**crd["metadata"],
                                                "resourceVersion": current.metadata.resource_version}}
                    ext.replace_custom_resource_definition(name, body)
            deadline = time.monotonic() + 30
            for crd in crds:
                name = crd["metadata"]["name"]
                # Established, and then actually served: the first list can still fail for a moment.
                while not (self._established(ext, name) and all(self._get(url) is not None
                                                                 for url in self._crd_urls(crd))):
                    if time.monotonic() > deadline:
                        raise LocalKubeError(f"CRD {name} not Established and served within 30s")
                    time.sleep(POLL)

    def reset(self) -> None:
        """Stop and start again on an empty etcd; the kubeconfig path stays, its contents may change."""
        self._stop_children()
        if self._root is not None:
            shutil.rmtree(self._root / "etcd-data", ignore_errors=True)
        self.start()

    def stop(self) -> None:
        """Stop every child process, wait for them, and remove the temporary folder (idempotent)."""
        self._stop_children()
        for api in self._api_clients:
            with contextlib.suppress(Exception):
                api.close()
        self._api_clients.clear()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
        _LIVE.discard(self)

    def __enter__(self) -> LocalKube:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = self.host if self._children else "stopped"
        return f"<LocalKube {self.version or '?'} {state}>"

    # -- start-up ----------------------------------------------------------------------------

    def _prepare_credentials(self) -> None:
        root = self.root
        (root / "certs").mkdir()
        self._token = secrets.token_hex(16)
        tokens = root / "tokens.csv"
        # token,user,uid,"groups": system:masters is bound to cluster-admin by the RBAC bootstrap.
        tokens.write_text(f'{self._token},admin,admin-uid,"system:masters"\n')
        tokens.chmod(0o600)
        # The service-account token signer needs a key; an EC key is quick to make.
        for argv in (["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                      "-out", str(root / "sa.key")],
                     ["pkey", "-in", str(root / "sa.key"), "-pubout", "-out", str(root / "sa.pub")]):
            try:
                result = subprocess.run(["openssl", *argv], capture_output=True, text=True, check=False)
            except FileNotFoundError as exc:
                raise LocalKubeError("openssl is needed to make the service-account key") from exc
            if result.returncode != 0:
                raise LocalKubeError(f"openssl could not make the service-account key: {result.stderr.strip()}")

    def _pick_ports(self) -> None:
        # Keep the ports of a previous start when they are still free: clients made before a
        # reset() keep working.
        ports = (self._api_port, self._etcd_port, self._peer_port)
        if all(ports) and all(_port_is_free(p) for p in ports):
            return
        chosen: set[int] = set()
        while len(chosen) < 3:
            chosen.add(_free_port())
        self._api_port, self._etcd_port, self._peer_port = sorted(chosen)

    def _launch(self) -> None:
        assert self.bin_dir is not None
        root, bins = self.root, self.bin_dir
        self._pick_ports()
        peer = f"http://127.0.0.1:{self._peer_port}"
        etcd_argv = [
            str(bins / "etcd"), "--name", "localkube", "--data-dir", str(root / "etcd-data"),
            "--listen-client-urls", self.etcd_endpoint, "--advertise-client-urls", self.etcd_endpoint,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"localkube={peer}", "--logger", "zap", "--log-level", "warn",
            # one member: it elects itself; a short election timeout makes that quick
            "--heartbeat-interval", "10", "--election-timeout", "100",
        ]
        if self._etcd_supports("--unsafe-no-fsync"):
            etcd_argv.append("--unsafe-no-fsync")  # throwaway data: durability buys nothing here
        etcd = self._spawn("etcd", etcd_argv)
        self._wait(etcd, lambda: self._get(f"{self.etcd_endpoint}/health", secure=False) is not None,
                   "did not become healthy")

        apiserver = self._spawn("kube-apiserver", [
            str(bins / "kube-apiserver"),
            "--etcd-servers", self.etcd_endpoint,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(self._api_port),
            "--cert-dir", str(root / "certs"),
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-account-key-file", str(root / "sa.pub"),
            "--service-account-signing-key-file", str(root / "sa.key"),
            "--token-auth-file", str(root / "tokens.csv"),
            "--authorization-mode", "RBAC",
            "--service-cluster-ip-range", "10.96.0.0/16",
            "--endpoint-reconciler-type", "none",
            "--disable-admission-plugins", "ServiceAccount",
            "--profiling=false",
            *self.apiserver_args,
        ])
        self._wait(apiserver, lambda: self._get(f"{self.host}/readyz") == b"ok", "did not become ready")
        self._write_kubeconfig()
        version = json.loads(self._get(f"{self.host}/version") or b"{}")
        self.version = str(version.get("gitVersion", ""))

        if self.controllers is not None and os.access(bins / "kube-controller-manager", os.X_OK):
            argv = [str(bins / "kube-controller-manager"), "--kubeconfig", str(self.kubeconfig),
                    "--controllers", self.controllers, "--leader-elect=false", "--secure-port", "0",
                    "--profiling=false",
                    # Its client's default, 20 requests/s, makes lifting the not-ready taint off a few
                    # hundred new nodes take most of a minute.
                    "--kube-api-qps", "500", "--kube-api-burst", "1000"]
            if self.kwok:
                # One KWOK process renews every fake node's lease; on a busy machine with thousands of
                # nodes a renewal can come late, and the default grace (50 s) then marks nodes NotReady
                # and back, again and again, which no real fleet does.
                argv += ["--node-monitor-grace-period", f"{KWOK_NODE_GRACE_SECONDS}s"]
            if self.version.startswith("v1.") and int(self.version.split(".")[1]) < 24:
                argv += ["--port", "0"]  # the insecure port exists (and must be closed) only in old releases
            kcm = self._spawn("kube-controller-manager", argv)
            if not kcm.alive():
                raise kcm.failure("did not start")
        if self.kwok:
            self._launch_kwok()
        if self.scheduler:
            self._launch_scheduler()

    def _launch_kwok(self) -> None:
        kwok_bin = find_tool("kwok", self.bin_dir)
        if kwok_bin is None:
            raise LocalKubeError(NO_KWOK)
        for stages in (self.kwok_stages, *self.extra_kwok_stages):
            if not stages.is_file():
                raise LocalKubeError(f"KWOK's stages file {stages} is missing")
        key, value = KWOK_ANNOTATION
        # No --server-address and no --node-port: KWOK's own server (logs, exec, port-forward) stays off,
        # so it listens nowhere; it only talks to the API server on loopback.
        kwok = self._spawn("kwok", [
            str(kwok_bin), "--kubeconfig", str(self.kubeconfig),
            "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={key}={value}",
            "--config", str(self.kwok_stages),
            *(arg for stages in self.extra_kwok_stages for arg in ("--config", str(stages))),
            "--node-lease-duration-seconds", str(KWOK_LEASE_SECONDS),
            "--node-ip", "127.0.0.1", "--server-address=",
            "--v=WARN",  # at INFO it logs every lease renewal of every node
        ])
        time.sleep(POLL)
        if not kwok.alive():
            raise kwok.failure("did not start")

    def start_scheduler(self) -> None:
        """Start kube-scheduler now, on the running cluster (and again after each `reset`)."""
        self.scheduler = True
        if any(child.name == "kube-scheduler" and child.alive() for child in self._children):
            return
        self._launch_scheduler()

    def _launch_scheduler(self) -> None:
        scheduler_bin = find_tool("kube-scheduler", self.bin_dir)
        if scheduler_bin is None:
            raise LocalKubeError(NO_SCHEDULER)
        kubeconfig = str(self.kubeconfig)
        scheduler = self._spawn("kube-scheduler", [
            str(scheduler_bin), "--kubeconfig", kubeconfig, "--authentication-kubeconfig", kubeconfig,
            "--authorization-kubeconfig", kubeconfig, "--leader-elect=false",
            "--bind-address", "127.0.0.1", "--secure-port", "0", "--profiling=false",
        ])
        time.sleep(POLL)
        if not scheduler.alive():
            raise scheduler.failure("did not start")

    def child_log(self, name: str) -> Path:
        """The log file of one child process (``etcd``, ``kube-apiserver``, ``kwok``, ...)."""
        return self.root / f"{name}.log"

    def create_kwok_nodes(self, count: int, *, prefix: str = "kwok-node-", start: int = 0,
                          timeout: float = 180.0, node: Any = kwok_node, workers: int = 8,
                          **node_options: Any) -> list[str]:
        """Create ``count`` KWOK nodes (``node(name, **node_options)`` gives each object, `kwok_node` by
        default) and wait until every one is Ready and free of the not-ready taint; returns their names.

        The API server taints each new node not-ready; KWOK's stage reports it Ready and the
        controller-manager's nodelifecycle controller then lifts the taint, so both must be running
        (``kwok=True``).
        """
        if not self.kwok:
            raise LocalKubeError("create_kwok_nodes needs a LocalKube started with kwok=True")
        names = [f"{prefix}{i}" for i in range(start, start + count)]
        with client.ApiClient(self.configuration()) as api_client:
            core = client.CoreV1Api(api_client)

            def create(name: str) -> None:
                try:
                    core.create_node(node(name, **node_options))
                except client.ApiException as exc:
                    if exc.status != 409:
                        raise LocalKubeError(f"node {name} refused: {exc.status} {exc.body}") from exc

            with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                list(pool.map(create, names))
            self.wait_for_nodes(names, timeout=timeout, api_client=api_client)
        return names

    def wait_for_nodes(self, names: Iterable[str], *, timeout: float = 180.0,
                       api_client: client.ApiClient | None = None) -> None:
        """Wait until every named node is Ready and untainted by the node controllers."""
        waiting = set(names)
        deadline = time.monotonic() + timeout
        owned = api_client is None
        api = api_client or client.ApiClient(self.configuration())
        try:
            core = client.CoreV1Api(api)
            while waiting:
                # Raw JSON: the client's model classes take seconds to build thousands of nodes.
                response = core.list_node(_preload_content=False, _request_timeout=30)
                items = json.loads(response.data).get("items") or []
                waiting -= {n["metadata"]["name"] for n in items if node_usable(n)}
                if not waiting:
                    break
                for child in self._children:
                    if not child.alive():
                        raise child.failure("exited while the nodes were coming up")
                if time.monotonic() > deadline:
                    sample = ", ".join(sorted(waiting)[:5])
                    raise LocalKubeError(
                        f"{len(waiting)} nodes not Ready and untainted within {timeout:.0f}s (e.g. {sample}); "
                        f"last lines of the kwok log:\n{_tail(self.child_log('kwok'))}")
                time.sleep(0.5)
        finally:
            if owned:
                api.close()

    def wait_for_pods(self, *, timeout: float = 60.0, api_client: client.ApiClient | None = None) -> None:
        """Wait until KWOK has done a kubelet's part for every pod on one of its nodes (annotated
        ``kwok.x-k8s.io/node=fake``): a bound pod is no longer Pending (the stages make it Running) and
        a pod being deleted is gone. A pod with finalizers is left to whoever holds them, and a pod on
        a node KWOK does not manage is not waited for (nothing would move it).

        Raises `LocalKubeError` naming the pods still waiting after ``timeout`` seconds, with the
        last lines of KWOK's log, or at once when the cluster runs no KWOK (``kwok=False``)."""
        if not self.kwok:
            raise LocalKubeError("wait_for_pods needs a LocalKube started with kwok=True: "
                                 "without KWOK nothing plays the kubelets")
        deadline = time.monotonic() + timeout
        owned = api_client is None
        api = api_client or client.ApiClient(self.configuration())
        pause = 0.02
        try:
            core = client.CoreV1Api(api)
            while True:
                waiting = self._pods_awaiting_kwok(core)
                if not waiting:
                    return
                for child in self._children:
                    if not child.alive():
                        raise child.failure("exited while pods waited for KWOK")
                if time.monotonic() > deadline:
                    sample = ", ".join(f"{key} ({why})" for key, why in sorted(waiting.items())[:5])
                    raise LocalKubeError(
                        f"{len(waiting)} pods not taken on by KWOK within {timeout:.0f}s (e.g. {sample}); "
                        f"last lines of the kwok log:\n{_tail(self.child_log('kwok'))}")
                time.sleep(pause)
                pause = min(pause * 1.5, 0.2)
        finally:
            if owned:
                api.close()

    @staticmethod
    def _pods_awaiting_kwok(core: client.CoreV1Api) -> dict[str, str]:
        """``namespace/name`` → what KWOK still has to do, for the pods on KWOK's nodes."""
        key, value = KWOK_ANNOTATION
        # Raw JSON, as in wait_for_nodes: quicker than the client's model classes.
        nodes = json.loads(core.list_node(_preload_content=False, _request_timeout=30).data).get("items") or []
        managed = {n["metadata"]["name"] for n in nodes
                   if ((n["metadata"].get("annotations") or {}).get(key)) == value}
        if not managed:
            return {}
        pods = json.loads(core.list_pod_for_all_namespaces(_preload_content=False, _request_timeout=30).data)
        waiting: dict[str, str] = {}
        for pod in pods.get("items") or []:
            meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            if spec.get("nodeName") not in managed:
                continue
            where = f"{meta.get('namespace')}/{meta.get('name')}"
            if meta.get("deletionTimestamp"):
                if not meta.get("finalizers"):
                    waiting[where] = "being deleted"
            elif ((pod.get("status") or {}).get("phase") or "Pending") == "Pending":
                waiting[where] = f"bound to {spec['nodeName']}, still Pending"
        return waiting

    def _etcd_supports(self, flag: str) -> bool:
        assert self.bin_dir is not None
        key = (str(self.bin_dir), flag)
        if key not in _FLAG_CACHE:
            out = subprocess.run([str(self.bin_dir / "etcd"), "--help"], capture_output=True, text=True,
                                 check=False)
            _FLAG_CACHE[key] = flag in (out.stdout + out.stderr)
        return _FLAG_CACHE[key]

    def _spawn(self, name: str, argv: list[str]) -> _Child:
        child = _Child(name, argv, self.root / f"{name}.log")
        self._children.append(child)
        return child

    def _wait(self, child: _Child, ready: Any, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            if not child.alive():
                raise child.failure("exited during start-up")
            if time.monotonic() > deadline:
                raise child.failure(f"{what} within {START_TIMEOUT:.0f}s")
            time.sleep(POLL)

    def _ssl_context(self) -> ssl.SSLContext | None:
        ca = self.root / "certs" / "apiserver.crt"
        if not ca.exists():
            return None
        try:
            return ssl.create_default_context(cafile=str(ca))
        except ssl.SSLError:
            return None  # the API server is still writing its certificate: not ready yet

    def _get(self, url: str, *, secure: bool = True) -> bytes | None:
        context = None
        headers = {}
        if secure:
            context = self._ssl_context()
            if context is None:
                return None
            headers["Authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=2, context=context) as response:
                return bytes(response.read())
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return None

    def _write_kubeconfig(self) -> None:
        import base64

        ca = base64.b64encode((self.root / "certs" / "apiserver.crt").read_bytes()).decode()
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "localkube",
            "clusters": [{"name": "localkube", "cluster": {"server": self.host,
                                                            "certificate-authority-data": ca}}],
            "users": [{"name": "admin", "user": {"token": self._token}}],
            "contexts": [{"name": "localkube", "context": {"cluster": "localkube", "user": "admin"}}],
        }
        self.kubeconfig = self.root / "kubeconfig"
        partial = self.root / "kubeconfig.new"
        partial.write_text(yaml.safe_dump(config, sort_keys=False))
        partial.chmod(0o600)
        partial.replace(self.kubeconfig)

    def _crd_urls(self, crd: dict[str, Any]) -> list[str]:
        spec = crd.get("spec") or {}
        group, plural = spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
        return [f"{self.host}/apis/{group}/{v['name']}/{plural}?limit=1"
                for v in spec.get("versions") or [] if v.get("served", True)]

    @staticmethod
    def _established(ext: client.ApiextensionsV1Api, name: str) -> bool:
        crd = ext.read_custom_resource_definition(name)
        conditions = (crd.status.conditions if crd.status else None) or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    # -- shutdown ----------------------------------------------------------------------------

    def _stop_children(self) -> None:
        children, self._children = self._children, []
        for child in reversed(children):
            child.stop()


_FLAG_CACHE: dict[tuple[str, str], bool] = {}

