"""The LocalKube harness: finding binaries, starting, resetting, stopping, and failing clearly."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes import config as kube_config

from devkube.localkube import LocalKube, LocalKubeError, find_binaries, find_tool, kwok_node
from tests.kube.fixtures import CRDS


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_find_binaries_prefers_kubebuilder_assets_then_kai_kube_home_then_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    assets, home, cache = tmp_path / "assets", tmp_path / "home", tmp_path / "xdg"
    for folder in (assets, home / "bin", cache / "kaiweb-kube" / "bin"):
        folder.mkdir(parents=True)
        for name in ("kube-apiserver", "etcd"):
            _executable(folder / name)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    monkeypatch.setenv("KAI_KUBE_HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))

    assert find_binaries() == assets
    (assets / "etcd").unlink()  # an incomplete folder is passed over
    assert find_binaries() == home / "bin"
    monkeypatch.delenv("KAI_KUBE_HOME")
    assert find_binaries() == cache / "kaiweb-kube" / "bin"
    (cache / "kaiweb-kube" / "bin" / "kube-apiserver").unlink()
    monkeypatch.setenv("HOME", str(tmp_path / "nobody"))
    assert find_binaries() is None


def test_without_binaries_start_says_how_to_get_them(tmp_path: Path) -> None:
    with pytest.raises(LocalKubeError, match=r"no kube-apiserver/etcd binaries .*make kube"):
        LocalKube(tmp_path).start()


def test_a_child_that_dies_at_start_up_is_reported_with_its_log(tmp_path: Path) -> None:
    bins = tmp_path / "bin"
    bins.mkdir()
    _executable(bins / "etcd", "#!/bin/sh\necho 'etcd: cannot open the data dir' >&2\nexit 3\n")
    _executable(bins / "kube-apiserver")
    kube = LocalKube(bins, workdir=tmp_path / "work")

    with pytest.raises(LocalKubeError, match=r"(?s)etcd exited during start-up \(exited with 3\).*cannot open"):
        kube.start()

    kube.stop()
    assert list((tmp_path / "work").iterdir()) == []


@pytest.mark.kube
def test_start_serves_a_real_api_reset_empties_it_and_stop_ends_every_process(tmp_path: Path) -> None:
    bin_dir = find_binaries()
    if bin_dir is None:
        pytest.skip("no kube-apiserver/etcd binaries: run `make kube`")
    kube = LocalKube(bin_dir, controllers=None, workdir=tmp_path)
    with kube:
        assert kube.version.startswith("v1.")
        kube.install_crds(CRDS)
        core = client.CoreV1Api(kube.api_client())
        core.create_namespace({"metadata": {"name": "ml"}})
        # The kubeconfig is a complete one: the official loader reaches the server with it.
        loaded = client.Configuration()
        kube_config.load_kube_config(config_file=str(kube.kubeconfig), client_configuration=loaded)
        with client.ApiClient(loaded) as api:
            assert "ml" in {ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items}
        before = list(kube._children)
        kubeconfig = kube.kubeconfig

        kube.reset()

        assert kube.kubeconfig == kubeconfig
        assert kubeconfig.exists()
        assert [child.process.returncode is not None for child in before] == [True, True]
        names = {ns.metadata.name for ns in client.CoreV1Api(kube.api_client()).list_namespace().items}
        assert "ml" not in names
        assert "default" in names
        crds = client.ApiextensionsV1Api(kube.api_client()).list_custom_resource_definition().items
        assert crds == []
        root = kube.root
        after = list(kube._children)

    assert not root.exists()
    assert [child.process.returncode is not None for child in after] == [True, True]
    kube.stop()  # twice is fine


def test_kwok_node_is_shaped_as_the_kai_scale_suite_shapes_its_nodes() -> None:
    node = kwok_node("gpu-7", labels={"cloud.provider.com/topology-rack": "rack3"})

    assert node["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    assert node["metadata"]["labels"]["type"] == "kwok"
    assert node["metadata"]["labels"]["kubernetes.io/role"] == "agent"
    assert node["metadata"]["labels"]["cloud.provider.com/topology-rack"] == "rack3"
    assert node["spec"]["taints"] == [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]
    assert node["status"]["allocatable"] == {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}
    assert node["status"]["capacity"] == node["status"]["allocatable"]


def test_without_a_kwok_binary_a_kwok_cluster_says_how_to_get_one(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KUBEBUILDER_ASSETS", "KAI_KUBE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    bins = tmp_path / "bin"
    bins.mkdir()
    for name in ("kube-apiserver", "etcd"):
        _executable(bins / name)

    assert find_tool("kwok", bins) is None
    with pytest.raises(LocalKubeError, match=r"no kwok binary .*make kube"):
        LocalKube(bins, kwok=True, workdir=tmp_path / "work").start()
    with pytest.raises(LocalKubeError, match=r"no kube-scheduler binary .*make kube"):
        LocalKube(bins, scheduler=True, workdir=tmp_path / "work").start()


def test_waiting_for_kwok_on_a_cluster_without_it_says_so_at_once(tmp_path: Path) -> None:
    with pytest.raises(LocalKubeError, match=r"kwok=True"):
        LocalKube(tmp_path, workdir=tmp_path / "work").wait_for_pods(timeout=0)
