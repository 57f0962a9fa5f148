"""Fixtures for the simulator tests: the shared trace folder (skip when absent) and tiny traces."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TRACES = ROOT.parent / "shared" / "traces"


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    if not (TRACES / "alibaba_gpu_v2023_openb").is_dir():
        pytest.skip(f"the public trace folder is not present next to the repository ({TRACES.name})")
    return TRACES


NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


def write_openb(tmp: Path, nodes: list[str], pods: list[str], workload: str = "tiny") -> Path:
    """Write a tiny openb folder: node rows and pod rows without headers."""
    folder = tmp / "alibaba_gpu_v2023_openb"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "openb_node_list_gpu_node.csv").write_text(NODE_HEADER + "".join(r + "\n" for r in nodes))
    (folder / f"openb_pod_list_{workload}.csv").write_text(POD_HEADER + "".join(r + "\n" for r in pods))
    return tmp
