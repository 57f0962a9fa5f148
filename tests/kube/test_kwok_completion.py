"""KWOK with an extra stage file (`LocalKube(extra_kwok_stages=...)`): ``deploy/kube/kwok-stages-complete.yaml``
ends a Running pod labelled ``kai-scale/complete-after`` (any owner, or none), and leaves the others.

Skipped, with the reason, without `make kube`'s binaries or its kwok binary. The waits are bounds on
a stuck cluster, not timings.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from devkube.localkube import NO_KWOK, LocalKube, LocalKubeError, find_binaries, find_tool
from tests.kube.fixtures import NO_BINARIES

pytestmark = pytest.mark.kube

STAGES = Path(__file__).resolve().parents[2] / "deploy" / "kube" / "kwok-stages-complete.yaml"
STUCK = 90.0
TOLERATE_KWOK = [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.fixture(scope="module")
def kube() -> Iterator[LocalKube]:
    bin_dir = find_binaries()
    if bin_dir is None:
        pytest.skip(NO_BINARIES)
    if find_tool("kwok", bin_dir) is None:
        pytest.skip(NO_KWOK)
    cluster = LocalKube(bin_dir, kwok=True, extra_kwok_stages=[STAGES]).start()
    try:
        cluster.create_kwok_nodes(1)
        client.CoreV1Api(cluster.api_client()).create_namespace({"metadata": {"name": "ending"}})
        yield cluster
    finally:
        cluster.stop()


def _pod(name: str, labels: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": "kwok-node-0", "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "tolerations": TOLERATE_KWOK,
                     "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"]}]}}


def test_a_labelled_pod_succeeds_after_its_delay_and_an_unlabelled_one_keeps_running(kube: LocalKube) -> None:
    core = client.CoreV1Api(kube.api_client())
    core.create_namespaced_pod("ending", _pod("labelled", {"kai-scale/complete-after": "1s",
                                                           "kai-scale/complete-until": "2s"}))
    core.create_namespaced_pod("ending", _pod("plain", {}))
    deadline = time.monotonic() + STUCK
    while core.read_namespaced_pod("labelled", "ending").status.phase != "Succeeded":
        assert time.monotonic() < deadline, "the labelled pod did not Succeed"
        time.sleep(0.2)
    pod = core.read_namespaced_pod("labelled", "ending")
    assert pod.status.container_statuses[0].state.terminated.exit_code == 0
    assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "False"
    time.sleep(3)  # longer than the labelled pod's delay
    assert core.read_namespaced_pod("plain", "ending").status.phase == "Running"


def test_a_missing_extra_stage_file_is_refused(tmp_path: Path) -> None:
    bin_dir = find_binaries()
    if bin_dir is None or find_tool("kwok", bin_dir) is None:
        pytest.skip(NO_BINARIES)
    cluster = LocalKube(bin_dir, kwok=True, workdir=tmp_path, extra_kwok_stages=[tmp_path / "none.yaml"])
    with pytest.raises(LocalKubeError, match="none.yaml is missing"):
        cluster.start()
    cluster.stop()
