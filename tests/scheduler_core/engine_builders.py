"""Small builders for engine snapshots used by the engine tests (no Django, no database)."""

from __future__ import annotations

from scheduler_core import model as m

GIB = 1024**3
NOW = 1_000_000.0
#: a cycle that only allocates
ALLOCATE_ONLY = m.CycleConfig(actions=("allocate",))


def node(name: str, gpus: int = 8, cpu: float = 64000, mem: float = 512 * GIB, **kw) -> m.NodeSpec:
    return m.NodeSpec(name=name, cpu_millis=cpu, memory_bytes=mem, gpus=gpus, **kw)


def queue(name: str, parent: str | None = None, gpu_quota: float = 0, gpu_limit: float = -1, weight: float = 1,
          priority: int = 100, creation: float = 0.0, **kw) -> m.QueueSpec:
    return m.QueueSpec(name=name, parent=parent, priority=priority, creation=creation,
                       gpu=m.QueueResource(gpu_quota, gpu_limit, weight),
                       cpu=m.QueueResource(-1, -1, 1), memory=m.QueueResource(-1, -1, 1), **kw)


def gpu_task(name: str, gpus: float = 1, state: str = m.PENDING, node_name: str | None = None,
             **kw) -> m.TaskSpec:
    req = m.TaskRequest(cpu_millis=1000, memory_bytes=GIB, gpu_kind=m.GPU_WHOLE, gpus=gpus)
    return m.TaskSpec(name=name, request=req, state=state, node=node_name, **kw)


def fraction_task(name: str, fraction: float, state: str = m.PENDING, node_name: str | None = None,
                  groups: tuple[str, ...] = ()) -> m.TaskSpec:
    req = m.TaskRequest(cpu_millis=500, memory_bytes=GIB, gpu_kind=m.GPU_FRACTION, gpu_fraction=fraction)
    return m.TaskSpec(name=name, request=req, state=state, node=node_name, gpu_groups=groups)


def job(name: str, q: str, tasks: list[m.TaskSpec] | None = None, pods: int = 1, gpus: float = 1,
        running_on: list[str] | None = None, priority: int = 50, preemptible: bool | None = None,
        age: float = 0.0, min_available: int | None = None, **kw) -> m.JobSpec:
    """A job of ``pods`` pods × ``gpus`` GPUs; ``running_on`` places them (Running) on these nodes."""
    if tasks is None:
        tasks = []
        for i in range(pods):
            where = running_on[i] if running_on else None
            tasks.append(gpu_task(f"{name}-{i}", gpus, m.RUNNING if where else m.PENDING, where))
    if preemptible is None:
        preemptible = priority < 100
    return m.JobSpec(name=name, queue=q, tasks=tuple(tasks), priority=priority, preemptible=preemptible,
                     creation=NOW - age, min_available=min_available, **kw)


def snapshot(nodes, queues, jobs, **kw) -> m.ClusterSnapshot:
    return m.ClusterSnapshot(nodes=tuple(nodes), queues=tuple(queues), jobs=tuple(jobs), now=NOW, **kw)


def status_of(result: m.CycleResult) -> dict[str, tuple[str, str | None]]:
    return {t.task: (t.status, t.node) for t in result.tasks}


def reclaim_example():
    """Queue qA holds all 8 GPUs of two nodes (its quota is 2) and waits for more; qB (quota 2) asks for 2."""
    nodes = [node("n1", 4), node("n2", 4)]
    qs = [queue("qA", gpu_quota=2), queue("qB", gpu_quota=2, creation=1)]
    jobs = [job(f"a{i}", "qA", running_on=["n1" if i < 4 else "n2"], age=100 - i) for i in range(8)]
    jobs += [job(f"ap{i}", "qA", age=50 - i) for i in range(4)]
    jobs.append(job("b", "qB", pods=1, gpus=2))
    return snapshot(nodes, qs, jobs)
