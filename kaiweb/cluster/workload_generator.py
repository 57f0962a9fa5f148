"""A seeded workload mix for the simulated cluster: what a `make run` user sees arrive.

The mix is built to show, within the first minute of a demo, the things a GPU scheduler is
for: queues filling (department B floods the cluster with training gangs at once), reclaim
(department A, under its share, starts submitting a few cycles later), preemption by
priority (inference, non-preemptible and high priority, arrives in a queue that is already
running its own low-priority batch work), fractional GPUs, and usage accumulating.

Deterministic: the jobs of tick `t` depend only on (seed, t), so two runs of the demo with
the same seed submit the same jobs, whatever happened in between.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, replace

from scheduler_core.sim.traces import Job

# Priority classes the mix uses (KAI's defaults: train is preemptible, inference is not).
TRAIN = "train"
BUILD = "build"
INFERENCE = "inference"

# Jobs of a deliberate burst carry this label; the simulated cluster never drops them.
BURST_LABEL = "kaiweb.io/burst"

DEMO_PRIORITY_CLASSES: tuple[tuple[str, int, bool], ...] = (
    (TRAIN, 50, True),
    (BUILD, 100, False),
    (INFERENCE, 125, False),
)


#: bytes in a gigabyte (10^9): the demo's pods ask for memory in whole GB
GB = 10**9


# The GPU utilization a job shows on the simulated cluster (kaiweb.usage.utilization reads it).
UTILIZATION_LABEL = "kaiweb.io/gpu-utilization"
UTILIZATION_RANGE = {"training": (70, 98), "batch": (40, 90), "inference": (15, 60)}


def with_gpu_utilization(job: Job) -> Job:
    """The job with a plausible utilization label, from its name alone (the seeded stream is untouched).

    About one job in eight is stuck: it holds its GPUs at 0–3 % (waiting on data, a hung process)
    and for at least two simulated hours, so the demo's idle-GPU finding has something to find.
    """
    digest = int.from_bytes(hashlib.blake2b(job.job_id.encode(), digest_size=4).digest(), "big")
    if digest % 8 == 0:
        return replace(job, labels={**job.labels, UTILIZATION_LABEL: str(digest % 4)},
                       duration=max(job.duration, 7200))
    low, high = UTILIZATION_RANGE.get(job.kind, (40, 90))
    return replace(job, labels={**job.labels, UTILIZATION_LABEL: str(low + digest % (high - low + 1))})


# Who submits: the demo's teams each work in a namespace of their own, and label their jobs with
# the submitting user (the label usage accounting reads, settings.KAI_USER_LABEL).
USER_LABEL = "user"
TEAMS = {
    "best-effort": ("sandbox", ("ana", "ben", "chen")),
    "team-training": ("training", ("dmitri", "eva")),
    "team-research-a": ("research", ("farah", "gus")),
    "team-research-b": ("research", ("hana", "ivan", "jo")),
    "team-inference": ("serving", ("kim", "lena")),
}


def with_submitter(job: Job) -> Job:
    """The job in its team's namespace, labelled with a user of that team (from its name alone)."""
    team = TEAMS.get(job.queue)
    if team is None:
        return job
    namespace, users = team
    digest = int.from_bytes(hashlib.blake2b(b"user:" + job.job_id.encode(), digest_size=4).digest(), "big")
    return replace(job, namespace=namespace, labels={**job.labels, USER_LABEL: users[digest % len(users)]})


@dataclass(frozen=True, slots=True)
class QueueRole:
    """How a leaf queue behaves in the mix: when it starts submitting and what."""

    queue: str
    start_tick: int
    kinds: tuple[str, ...]
    rate: float  # mean jobs per tick once started
    flood_gpus: int = 0  # GPUs of training gangs submitted at tick 0
    burst_gpus: int = 0  # GPUs of long preemptible batch jobs submitted at the start tick


# The demo tree (deploy/examples/queues.yaml) plus the best-effort queue seed_demo adds:
# best-effort and department B flood at once, department A (under its share) comes later.
DEMO_ROLES: tuple[QueueRole, ...] = (
    QueueRole("best-effort", 0, ("training",), 0.5, flood_gpus=112),
    QueueRole("team-training", 0, ("training",), 0.5, flood_gpus=24),
    QueueRole("team-research-b", 0, ("training", "batch"), 0.4, flood_gpus=16),
    # Fills its limit with batch work first; the inference that follows preempts it by priority.
    QueueRole("team-inference", 2, ("batch", "inference", "inference"), 0.6, burst_gpus=16),
    QueueRole("team-research-a", 3, ("training", "batch"), 0.6),
)


class WorkloadGenerator:
    """Jobs per tick for a set of leaf queues, from a seeded random mix.

    Tick 0 is the initial flood (enough training gangs to fill a 16×8 GPU cluster); after that
    each queue submits a Poisson-like number of jobs per tick from its start tick on.
    """

    def __init__(self, seed: int = 7, roles: tuple[QueueRole, ...] = DEMO_ROLES) -> None:
        if not roles:
            raise ValueError("roles: at least one leaf queue is needed to generate workloads")
        self.seed = seed
        self.roles = roles

    def jobs_for_tick(self, tick: int) -> list[Job]:
        """The jobs submitted at `tick` (0-based); same (seed, tick), same jobs."""
        if tick < 0:
            raise ValueError(f"tick must be >= 0, got {tick}")
        rng = random.Random(self.seed * 1_000_003 + tick)
        jobs: list[Job] = []
        if tick == 0:
            jobs.extend(self._flood(rng))
        for role in self.roles:
            if tick < role.start_tick:
                continue
            if tick == role.start_tick and role.burst_gpus:
                jobs.extend(self._burst(rng, role))
                continue
            count = self._arrivals(rng, role.rate * (3 if tick == role.start_tick else 1))
            for i in range(count):
                kind = role.kinds[rng.randrange(len(role.kinds))]
                jobs.append(self._job(rng, role.queue, kind, f"t{tick}-{i}"))
        return [with_submitter(with_gpu_utilization(job)) for job in jobs]

    def _flood(self, rng: random.Random) -> list[Job]:
        # Queues with a flood target fill the cluster at once with training gangs.
        jobs: list[Job] = []
        for role in self.roles:
            total, n = 0.0, 0
            while total < role.flood_gpus:
                job = self._job(rng, role.queue, "training", f"flood-{n}", min_gpus=4)
                jobs.append(job)
                total += job.gpus
                n += 1
        return jobs

    def _burst(self, rng: random.Random, role: QueueRole) -> list[Job]:
        # Long single-pod batch jobs of 2 GPUs, preemptible, up to the role's burst size.
        return [
            Job(
                job_id=f"{role.queue}-batch-burst-{n}", queue=role.queue, priority_class=TRAIN, num_pods=1,
                min_member=1, gpu_per_pod=2.0, cpu_millis_per_pod=8000, memory_bytes_per_pod=32 * GB,
                duration=rng.randrange(1800, 3600, 60), kind="batch", labels={BURST_LABEL: "true"},
            )
            for n in range(role.burst_gpus // 2)
        ]

    @staticmethod
    def _arrivals(rng: random.Random, mean: float) -> int:
        # Knuth's Poisson sampler: small means, deterministic given the generator.
        limit = pow(2.718281828459045, -mean)
        k, p = 0, 1.0
        while True:
            p *= rng.random()
            if p <= limit:
                return k
            k += 1

    def _job(self, rng: random.Random, queue: str, kind: str, suffix: str, min_gpus: int = 0) -> Job:
        if kind == "inference":
            # Serving: non-preemptible, small, often on a shared GPU, runs long.
            fraction = rng.choice((0.25, 0.5, 1.0, 1.0, 2.0))
            pods = rng.choice((1, 2))
            return Job(
                job_id=f"{queue}-inf-{suffix}", queue=queue, priority_class=INFERENCE, num_pods=pods, min_member=1,
                gpu_per_pod=fraction, cpu_millis_per_pod=4000, memory_bytes_per_pod=16 * GB,
                duration=rng.randrange(600, 1800, 60), kind="inference",
            )
        if kind == "batch":
            # Short preemptible batch work: single pods, sometimes fractional.
            fraction = rng.choice((0.5, 1.0, 1.0, 2.0))
            return Job(
                job_id=f"{queue}-batch-{suffix}", queue=queue, priority_class=TRAIN, num_pods=1, min_member=1,
                gpu_per_pod=fraction, cpu_millis_per_pod=8000, memory_bytes_per_pod=32 * GB,
                duration=rng.randrange(120, 600, 30), kind="batch",
            )
        # Training: a gang of whole-GPU workers, preemptible.
        while True:
            pods = rng.choice((1, 2, 2, 4))
            per_pod = rng.choice((1, 2, 4, 8))
            if pods * per_pod >= min_gpus and pods * per_pod <= 16:
                break
        return Job(
            job_id=f"{queue}-train-{suffix}", queue=queue, priority_class=TRAIN, num_pods=pods, min_member=pods,
            gpu_per_pod=float(per_pod), cpu_millis_per_pod=8000 * per_pod, memory_bytes_per_pod=64 * GB * per_pod,
            duration=rng.randrange(300, 1500, 60), kind="training",
        )
