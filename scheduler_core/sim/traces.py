"""Readers for the public GPU-cluster traces, into neutral arrays and dataclasses.

Invariant: a reader either returns the whole file, every row checked, or raises
``TraceFormatError`` naming the file, the 1-based line and the column of the first bad value;
nothing is returned half-read. Readers are pure functions of the file contents (no clock, no
randomness), so the same file always gives the same result.

Supported formats (each trace folder's README gives the columns and units):

* Alibaba ``openb`` node lists (``sn,cpu_milli,memory_mib,gpu,model``) -> ``NodeList``.
* Alibaba ``openb`` pod lists, the 11-column files and the 5-column ``multigpu`` files -> ``PodList``.
* Microsoft ITP job traces, raw (``job_id,submission_time,duration,num_gpu``) and the ElasticFlow
  form with synthetic columns, and the pkusys Philly VC file -> ``JobTrace``.
* The DIR-LAB Philly / Helios 15k subsets (``user``, ``interval``, ``run_time`` ...) -> ``JobTrace``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scheduler_core.units import mib_to_bytes

__all__ = [
    "Job",
    "JobTrace",
    "NodeList",
    "PodList",
    "TraceFormatError",
    "read_dirlab_jobs",
    "read_itp_jobs",
    "read_job_trace",
    "read_openb_nodes",
    "read_openb_pods",
    "read_philly_vc_jobs",
]


class TraceFormatError(ValueError):
    """A trace file does not have the expected shape; names the file, line and column."""

    def __init__(self, path: str | Path, line: int | None, column: str | None, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.column = column
        where = self.path
        if line is not None:
            where += f", line {line}"
        if column is not None:
            where += f", column '{column}'"
        super().__init__(f"{where}: {message}")


# --------------------------------------------------------------------------- helpers


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield (line number, row) for a CSV with a header that contains every ``required`` column."""
    if not path.is_file():
        raise TraceFormatError(path, None, None, "file not found")
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise TraceFormatError(path, 1, None, "empty file, expected a header row") from None
        header = [h.strip() for h in header]
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceFormatError(
                path, 1, missing[0], f"missing column(s) {', '.join(missing)}; header is {','.join(header)}"
            )
        for values in reader:
            line = reader.line_num
            if not values or all(not v.strip() for v in values):
                continue  # blank lines carry no record
            if len(values) != len(header):
                raise TraceFormatError(
                    path, line, None, f"expected {len(header)} fields ({','.join(header)}), got {len(values)}"
                )
            yield line, dict(zip(header, (v.strip() for v in values)))


def _int(path: Path, line: int, row: dict[str, str], col: str, *, minimum: int | None = 0) -> int:
    raw = row[col]
    if raw.isdigit():  # the common case, parsed without the exception machinery
        value = int(raw)
    else:
        try:
            value = int(raw)
        except ValueError:
            try:
                as_float = float(raw)
            except ValueError:
                raise TraceFormatError(path, line, col, f"expected an integer, got {raw!r}") from None
            if not as_float.is_integer():
                raise TraceFormatError(path, line, col, f"expected an integer, got {raw!r}") from None
            value = int(as_float)
    if minimum is not None and value < minimum:
        raise TraceFormatError(path, line, col, f"must be >= {minimum}, got {value}")
    return value


def _float(path: Path, line: int, row: dict[str, str], col: str, *, minimum: float | None = 0.0) -> float:
    raw = row[col]
    try:
        value = float(raw)
    except ValueError:
        raise TraceFormatError(path, line, col, f"expected a number, got {raw!r}") from None
    if value != value:  # NaN
        raise TraceFormatError(path, line, col, "must be a number, got NaN")
    if minimum is not None and value < minimum:
        raise TraceFormatError(path, line, col, f"must be >= {minimum}, got {value}")
    return value


def _opt_float(path: Path, line: int, row: dict[str, str], col: str) -> float:
    if col not in row or row[col] == "":
        return float("nan")
    return _float(path, line, row, col, minimum=None)


# --------------------------------------------------------------------------- Alibaba openb


@dataclass(frozen=True)
class NodeList:
    """Nodes of an ``openb`` cluster: one entry per node, in file order."""

    names: tuple[str, ...]
    cpu_milli: np.ndarray  # int64
    memory_mib: np.ndarray  # int64
    gpu_count: np.ndarray  # int64, 0..8
    model: tuple[str, ...]  # "" for CPU-only nodes

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpus(self) -> int:
        return int(self.gpu_count.sum())

    def gpu_nodes(self) -> NodeList:
        """Only the nodes with at least one GPU (the FGD experiment's cluster)."""
        keep = np.flatnonzero(self.gpu_count > 0)
        return NodeList(
            names=tuple(self.names[i] for i in keep),
            cpu_milli=self.cpu_milli[keep],
            memory_mib=self.memory_mib[keep],
            gpu_count=self.gpu_count[keep],
            model=tuple(self.model[i] for i in keep),
        )


@dataclass(frozen=True)
class PodList:
    """Pods of an ``openb`` pod list, in file order.

    ``gpu_milli`` is the per-GPU share (1000 = a whole GPU); a pod's GPU request is
    ``num_gpu * gpu_milli``. ``gpu_spec`` is the ``|``-separated allowed models, "" for any.
    Time columns are NaN when the file has none (the 5-column multigpu lists) or the cell is empty.
    """

    names: tuple[str, ...]
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    num_gpu: np.ndarray
    gpu_milli: np.ndarray
    gpu_spec: tuple[str, ...]
    qos: tuple[str, ...]
    creation_time: np.ndarray
    deletion_time: np.ndarray
    scheduled_time: np.ndarray

    def __len__(self) -> int:
        return len(self.names)

    @property
    def gpu_request_milli(self) -> np.ndarray:
        out: np.ndarray = self.num_gpu * self.gpu_milli
        return out


_MAX_GPUS_PER_NODE = 8


def read_openb_nodes(path: str | Path) -> NodeList:
    """Read an ``openb_node_list_*.csv``. GPU counts must be 0..8; GPU nodes must name a model."""
    p = Path(path)
    names: list[str] = []
    cpu: list[int] = []
    mem: list[int] = []
    gpus: list[int] = []
    models: list[str] = []
    seen: set[str] = set()
    for line, row in _rows(p, ("sn", "cpu_milli", "memory_mib", "gpu", "model")):
        name = row["sn"]
        if not name:
            raise TraceFormatError(p, line, "sn", "node name is empty")
        if name in seen:
            raise TraceFormatError(p, line, "sn", f"duplicate node name {name!r}")
        seen.add(name)
        g = _int(p, line, row, "gpu")
        if g > _MAX_GPUS_PER_NODE:
            raise TraceFormatError(p, line, "gpu", f"at most {_MAX_GPUS_PER_NODE} GPUs per node, got {g}")
        if g > 0 and not row["model"]:
            raise TraceFormatError(p, line, "model", "a node with GPUs must name its GPU model")
        names.append(name)
        cpu.append(_int(p, line, row, "cpu_milli"))
        mem.append(_int(p, line, row, "memory_mib"))
        gpus.append(g)
        models.append(row["model"])
    return NodeList(
        names=tuple(names),
        cpu_milli=np.asarray(cpu, dtype=np.int64),
        memory_mib=np.asarray(mem, dtype=np.int64),
        gpu_count=np.asarray(gpus, dtype=np.int64),
        model=tuple(models),
    )


def read_openb_pods(path: str | Path) -> PodList:
    """Read an ``openb_pod_list_*.csv`` (11-column or the 5-column multigpu form).

    Rules checked: ``num_gpu`` in 0..8; ``gpu_milli`` in 0..1000; a fractional share
    (``0 < gpu_milli < 1000``) only with ``num_gpu == 1``.
    """
    p = Path(path)
    names: list[str] = []
    cpu: list[int] = []
    mem: list[int] = []
    ngpu: list[int] = []
    milli: list[int] = []
    spec: list[str] = []
    qos: list[str] = []
    ctime: list[float] = []
    dtime: list[float] = []
    stime: list[float] = []
    for line, row in _rows(p, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")):
        n = _int(p, line, row, "num_gpu")
        if n > _MAX_GPUS_PER_NODE:
            raise TraceFormatError(p, line, "num_gpu", f"at most {_MAX_GPUS_PER_NODE} GPUs per pod, got {n}")
        m = _int(p, line, row, "gpu_milli")
        if m > 1000:
            raise TraceFormatError(p, line, "gpu_milli", f"per-GPU share is at most 1000 milli, got {m}")
        if n > 1 and 0 < m < 1000:
            raise TraceFormatError(
                p, line, "gpu_milli", f"a fractional share ({m}) is only allowed with num_gpu == 1, got {n}"
            )
        names.append(row["name"])
        cpu.append(_int(p, line, row, "cpu_milli"))
        mem.append(_int(p, line, row, "memory_mib"))
        ngpu.append(n)
        milli.append(m)
        spec.append(row.get("gpu_spec", ""))
        qos.append(row.get("qos", ""))
        ctime.append(_opt_float(p, line, row, "creation_time"))
        dtime.append(_opt_float(p, line, row, "deletion_time"))
        stime.append(_opt_float(p, line, row, "scheduled_time"))
    return PodList(
        names=tuple(names),
        cpu_milli=np.asarray(cpu, dtype=np.int64),
        memory_mib=np.asarray(mem, dtype=np.int64),
        num_gpu=np.asarray(ngpu, dtype=np.int64),
        gpu_milli=np.asarray(milli, dtype=np.int64),
        gpu_spec=tuple(spec),
        qos=tuple(qos),
        creation_time=np.asarray(ctime, dtype=np.float64),
        deletion_time=np.asarray(dtime, dtype=np.float64),
        scheduled_time=np.asarray(stime, dtype=np.float64),
    )


# --------------------------------------------------------------------------- job-level traces


@dataclass(frozen=True, slots=True)
class Job:
    """One synthetic job: a gang of ``num_pods`` identical pods, each asking for the per-pod resources
    in the engine's units (millicores, bytes, devices; a ``gpu_per_pod`` below 1 is a shared GPU).

    The one job type of the job-level traces (``read_job_trace``), the replays (``sim.replay``,
    kaiweb's what-if) and the demo's workload generator (``kaiweb.cluster.workload_generator``); each
    fills what it knows. ``submit_time`` and ``duration`` are seconds; ``num_gpu`` is the trace's GPU
    count of the whole job (0: not given). ``user`` is the trace's user/VC id when it has one.
    ``queue``, ``priority_class``, ``min_member`` (None: every pod), ``kind``, ``labels`` and
    ``namespace`` (None: the one the job is submitted with) say where and how a generated job is
    submitted.
    """

    job_id: str
    submit_time: float = 0.0
    duration: float = 0.0
    num_gpu: int = 0
    num_pods: int = 1
    gpu_per_pod: float = 0.0
    cpu_millis_per_pod: int = 0
    memory_bytes_per_pod: int = 0
    gpu_model: str | None = None
    user: str | None = None
    status: str | None = None
    queue: str = ""
    priority_class: str = ""
    min_member: int | None = None
    kind: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    namespace: str | None = None

    @property
    def gpus(self) -> float:
        """GPUs of the whole gang."""
        return self.gpu_per_pod * self.num_pods


@dataclass(frozen=True)
class JobTrace:
    """A job-level trace: jobs sorted by submission time (stable for equal times)."""

    name: str
    jobs: tuple[Job, ...]
    has_users: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __len__(self) -> int:
        return len(self.jobs)

    def head(self, n: int) -> JobTrace:
        """The first ``n`` jobs by submission time."""
        return JobTrace(self.name, self.jobs[:n], self.has_users, self.notes)


# A job larger than one 8-GPU node runs as a gang of 8-GPU pods (how multi-node jobs run on
# Kubernetes); a smaller job is one pod.
_GPUS_PER_NODE = 8


def _gang(num_gpu: int) -> tuple[int, float]:
    if num_gpu <= _GPUS_PER_NODE:
        return 1, float(num_gpu)
    pods = -(-num_gpu // _GPUS_PER_NODE)
    return pods, num_gpu / pods


def _sorted(jobs: list[Job]) -> tuple[Job, ...]:
    return tuple(sorted(jobs, key=lambda j: j.submit_time))  # sorted() is stable


def _read_gpu_jobs(path: str | Path, submit_column: str) -> JobTrace:
    """Jobs from a CSV with `job_id`, `<submit_column>`, `duration` and `num_gpu` (no user or VC)."""
    p = Path(path)
    jobs: list[Job] = []
    for line, row in _rows(p, ("job_id", submit_column, "duration", "num_gpu")):
        n = _int(p, line, row, "num_gpu", minimum=1)
        pods, per = _gang(n)
        jobs.append(
            Job(
                job_id=row["job_id"],
                submit_time=_float(p, line, row, submit_column),
                duration=_float(p, line, row, "duration"),
                num_gpu=n,
                num_pods=pods,
                gpu_per_pod=per,
            )
        )
    return JobTrace(name=p.stem, jobs=_sorted(jobs), has_users=False)


def read_itp_jobs(path: str | Path) -> JobTrace:
    """Read a Microsoft ITP trace (``raw/clusterNN.csv`` or ``elasticflow/clusterNN.csv``).

    The trace has no user or VC; jobs keep their ``job_id`` so a replay can map them to queues.
    """
    return _read_gpu_jobs(path, "submission_time")


def read_philly_vc_jobs(path: str | Path) -> JobTrace:
    """Read the pkusys ElasticFlow Philly VC file (``submit_time``, ``num_gpu``, ``duration``)."""
    return _read_gpu_jobs(path, "submit_time")


def read_dirlab_jobs(path: str | Path, *, include_cpu_jobs: bool = False) -> JobTrace:
    """Read a DIR-LAB Philly / Helios 15k subset.

    Submission time is the running sum of ``interval``. ``node_num`` gives the gang size when it
    is larger than one (GPUs split evenly across pods). Jobs with ``gpu_num == 0`` (Helios CPU jobs)
    are left out unless ``include_cpu_jobs``.
    """
    p = Path(path)
    jobs: list[Job] = []
    clock = 0.0
    for line, row in _rows(p, ("u_id", "user", "gpu_num", "cpu_num", "node_num", "interval", "run_time")):
        clock += _float(p, line, row, "interval")
        n = _int(p, line, row, "gpu_num")
        nodes = _int(p, line, row, "node_num", minimum=0)
        cpus = _int(p, line, row, "cpu_num")
        run = _float(p, line, row, "run_time")
        if n == 0 and not include_cpu_jobs:
            continue
        pods = max(1, nodes)
        if n > 0 and pods > n:
            pods = n  # a pod holds at least one GPU
        if n > 0 and n / pods > _GPUS_PER_NODE:
            pods, _ = _gang(n)
        jobs.append(
            Job(
                job_id=row["u_id"],
                submit_time=clock,
                duration=run,
                num_gpu=n,
                num_pods=pods,
                gpu_per_pod=n / pods,
                cpu_millis_per_pod=(cpus * 1000) // pods,
                user=row["user"],
                status=row.get("new_status") or None,
            )
        )
    return JobTrace(name=p.stem, jobs=_sorted(jobs), has_users=True)



def openb_jobs(pods: PodList, name: str = "openb", since: float = 0.0) -> JobTrace:
    """The GPU pods of an ``openb`` pod list as one-pod jobs for a job-level replay.

    A job arrives at the pod's ``creation_time`` (pods created before ``since`` are left out) and
    runs for ``deletion_time - scheduled_time`` seconds (at least 1); pods without those times, and
    CPU-only pods, are left out. A pod of one GPU asks for ``gpu_milli / 1000`` of it (a shared
    GPU); a pod of several GPUs asks for them whole."""
    jobs: list[Job] = []
    for k, pod_name in enumerate(pods.names):
        n, milli = int(pods.num_gpu[k]), int(pods.gpu_milli[k])
        created, deleted, scheduled = (float(pods.creation_time[k]), float(pods.deletion_time[k]),
                                       float(pods.scheduled_time[k]))
        if n == 0 or milli == 0 or math.isnan(created) or math.isnan(deleted) or math.isnan(scheduled):
            continue
        if created < since:
            continue
        per_pod = milli / 1000.0 if n == 1 else float(n)
        jobs.append(Job(job_id=pod_name, submit_time=created, duration=max(1.0, deleted - scheduled),
                        num_gpu=max(1, n), num_pods=1, gpu_per_pod=per_pod,
                        cpu_millis_per_pod=int(pods.cpu_milli[k]),
                        memory_bytes_per_pod=mib_to_bytes(int(pods.memory_mib[k]))))
    return JobTrace(name=name, jobs=_sorted(jobs), has_users=False)


def read_job_trace(path: str | Path) -> JobTrace:
    """Read any supported job-level trace, picking the reader from the header."""
    p = Path(path)
    if not p.is_file():
        raise TraceFormatError(p, None, None, "file not found")
    with p.open(newline="", encoding="utf-8") as fh:
        header = {h.strip() for h in next(csv.reader(fh), [])}
    if {"u_id", "interval", "run_time"} <= header:
        return read_dirlab_jobs(p)
    if {"submit_time", "num_gpu", "duration"} <= header:
        return read_philly_vc_jobs(p)
    if {"submission_time", "duration", "num_gpu"} <= header:
        return read_itp_jobs(p)
    raise TraceFormatError(p, 1, None, f"unrecognised job trace header: {','.join(sorted(header))}")
