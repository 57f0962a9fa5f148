"""The FGD (USENIX ATC '23) fragmentation experiment on the Alibaba ``openb`` GPU cluster.

Protocol (the authors' artifact, as ``FGD.md`` §1 describes it): the 1,213-node / 6,212-GPU
``openb`` cluster; one pod list; per seed the pods are shuffled, topped up by resampling with
replacement to 130 % of GPU capacity (or thinned at random when already above it), then placed
one at a time, each once, dropped if no node fits. After every pod we record the arrived GPU
request (placed or not), the allocated GPU milli and the cluster fragmentation; the headline metric
is "unallocated GPU %" = 100 − mean allocation over the events whose arrived % rounds to x.

Invariants:
* Deterministic: same cluster, pod list, policy and seed give the same result, bit for bit.
* A pod is placed only where it fits: CPU, memory, GPU model, and either one GPU with at least its
  share free (fractional pods) or ``num_gpu`` whole free GPUs on one node.
* Fragmentation is the authors' measure (§1.5): on the empty cluster it equals their published
  values for every pod list.

Speed: node state lives in numpy arrays (free CPU, free memory, per-GPU free milli padded to 8).
A node's score for a pod depends only on (GPU model, free CPU, multiset of free GPU milli) and the
pod's shape, so scores are cached per distinct node *state* and per pod shape, computed lazily and
vectorised; one placement creates at most one new state. This turns the authors' O(nodes) Python-
free recomputation per pod into a table gather.
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scheduler_core import placement
from scheduler_core.placement import TypicalPods, node_fragmentation
from scheduler_core.sim.traces import NodeList, PodList, read_openb_nodes, read_openb_pods

__all__ = [
    "POLICIES",
    "PUBLISHED_POLICY_NAMES",
    "Cluster",
    "ExperimentResult",
    "TypicalPods",
    "Workload",
    "arrival_order",
    "bin_by_arrival",
    "cluster_fragmentation",
    "load_experiment_inputs",
    "node_fragmentation",
    "run_experiment",
    "typical_pods",
]

GPUS_PER_NODE = 8
MILLI = 1000
# The BestFit score normalises free resources by the largest node spec (FGD.md §1.4).
MAX_SPEC_CPU_MILLI = 128_000
MAX_SPEC_GPU_MILLI = 8 * MILLI
TUNE = 1.3
TYPICAL_COVERAGE = 0.95

POLICIES = ("random", "bestfit", "fgd", "kaiweb")
# Our policy names -> the authors' short names in the published tables.
PUBLISHED_POLICY_NAMES = {"random": "Random", "bestfit": "BestFit", "fgd": "FGD"}


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Cluster:
    """The GPU nodes of an ``openb`` cluster as arrays; ``model_idx`` indexes ``models``."""

    names: tuple[str, ...]
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    gpu_count: np.ndarray
    model_idx: np.ndarray
    models: tuple[str, ...]

    @classmethod
    def from_nodes(cls, nodes: NodeList) -> Cluster:
        gpu = nodes.gpu_nodes()
        models = tuple(sorted(set(gpu.model)))
        index = {m: i for i, m in enumerate(models)}
        return cls(
            names=gpu.names,
            cpu_milli=gpu.cpu_milli.copy(),
            memory_mib=gpu.memory_mib.copy(),
            gpu_count=gpu.gpu_count.copy(),
            model_idx=np.asarray([index[m] for m in gpu.model], dtype=np.int64),
            models=models,
        )

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpu_milli(self) -> int:
        return int(self.gpu_count.sum()) * MILLI

    def empty_gpu_free(self) -> np.ndarray:
        """Per-node free milli per GPU slot, padded to 8 with 0 (a missing GPU is never free)."""
        slots = np.arange(GPUS_PER_NODE)[None, :]
        return np.where(slots < self.gpu_count[:, None], MILLI, 0).astype(np.int64)


def _spec_mask(spec: str, models: Sequence[str]) -> int:
    """Bitmask of the cluster models a ``gpu_spec`` allows; "" allows all."""
    if not spec:
        return (1 << len(models)) - 1
    allowed = set(spec.split("|"))
    return sum(1 << i for i, m in enumerate(models) if m in allowed)


def typical_pods(pods: PodList, models: Sequence[str], coverage: float = TYPICAL_COVERAGE) -> TypicalPods:
    """Count distinct ``(cpu_milli, gpu_milli, num_gpu, gpu_spec)`` over the pod list (CPU-only
    pods included), sort by count, descending, and equal counts by the spec tuple, also
    descending (the order that reproduces the authors' empty-cluster values for all 24 pod lists;
    it decides which specs make the cut at the 95 % boundary), and keep specs until they cover at
    least ``coverage`` of the pods. Deterministic."""
    counts: dict[tuple[int, int, int, str], int] = {}
    for c, m, n, s in zip(pods.cpu_milli.tolist(), pods.gpu_milli.tolist(), pods.num_gpu.tolist(), pods.gpu_spec):
        key = (c, m, n, s)
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    total = len(pods)
    kept: list[tuple[tuple[int, int, int, str], int]] = []
    covered = 0
    for key, cnt in ranked:
        kept.append((key, cnt))
        covered += cnt
        if covered >= coverage * total:
            break
    kept_total = sum(c for _, c in kept)
    return TypicalPods(
        cpu_milli=np.asarray([k[0] for k, _ in kept], dtype=np.int64),
        gpu_milli=np.asarray([k[1] if k[2] > 0 else 0 for k, _ in kept], dtype=np.int64),
        num_gpu=np.asarray([k[2] for k, _ in kept], dtype=np.int64),
        mask=np.asarray([_spec_mask(k[3], models) for k, _ in kept], dtype=np.int64),
        prob=np.asarray([c / kept_total for _, c in kept], dtype=np.float64),
        coverage=covered / total,
        n_specs=len(counts),
    )


@dataclass(frozen=True)
class Workload:
    """A pod list prepared for the experiment: request arrays plus its typical-pod distribution."""

    name: str
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    num_gpu: np.ndarray
    gpu_milli: np.ndarray  # per-GPU share, 0 for CPU-only pods
    mask: np.ndarray  # allowed-model bitmask per pod
    typical: TypicalPods

    @classmethod
    def from_pods(cls, name: str, pods: PodList, cluster: Cluster) -> Workload:
        # Sort by name first: the protocol shuffles the name-sorted list (FGD.md §1.3 step 3).
        order = sorted(range(len(pods)), key=lambda i: pods.names[i])
        idx = np.asarray(order, dtype=np.int64)
        num = pods.num_gpu[idx]
        milli = np.where(num > 0, np.clip(pods.gpu_milli[idx], 1, MILLI), 0)
        masks = np.asarray([_spec_mask(pods.gpu_spec[i], cluster.models) for i in order], dtype=np.int64)
        return cls(
            name=name,
            cpu_milli=pods.cpu_milli[idx],
            memory_mib=pods.memory_mib[idx],
            num_gpu=num,
            gpu_milli=milli,
            mask=masks,
            typical=typical_pods(pods, cluster.models),
        )

    def __len__(self) -> int:
        return len(self.cpu_milli)

    @property
    def gpu_request_milli(self) -> np.ndarray:
        out: np.ndarray = self.num_gpu * self.gpu_milli
        return out


def load_experiment_inputs(traces_dir: str | Path, workload: str) -> tuple[Cluster, Workload]:
    """Read the GPU-node list and ``openb_pod_list_<workload>.csv`` from an ``openb`` trace folder.

    ``traces_dir`` may be the ``openb`` folder itself or its parent (the traces root).
    """
    root = Path(traces_dir)
    if (root / "alibaba_gpu_v2023_openb").is_dir():
        root = root / "alibaba_gpu_v2023_openb"
    name = workload.removeprefix("openb_pod_list_")
    cluster = Cluster.from_nodes(read_openb_nodes(root / "openb_node_list_gpu_node.csv"))
    pods = read_openb_pods(root / f"openb_pod_list_{name}.csv")
    return cluster, Workload.from_pods(name, pods, cluster)


# --------------------------------------------------------------------------- fragmentation


def cluster_fragmentation(cluster: Cluster, typical: TypicalPods) -> float:
    """F_cluster (milli-GPU) of the empty cluster."""
    return float(
        node_fragmentation(cluster.cpu_milli, cluster.empty_gpu_free(), cluster.model_idx, typical).sum()
    )


# --------------------------------------------------------------------------- arrival process


def arrival_order(workload: Workload, total_gpu_milli: int, seed: int, tune: float = TUNE) -> np.ndarray:
    """Indices into the workload in submission order for one seed (FGD.md §1.3).

    Shuffle the name-sorted list; if its GPU request is at most ``tune`` × capacity, append pods
    drawn uniformly with replacement while the running total is ≤ the target — the total grows by
    the clone's *per-GPU* milli, not its full request (the artifact's quirk, kept for fidelity);
    otherwise remove pods at random until the (true) total fits ("tune down").
    """
    rng = np.random.default_rng(seed)
    n = len(workload)
    order = rng.permutation(n)
    req = workload.gpu_request_milli
    target = tune * total_gpu_milli
    total = float(req.sum())
    if total > target:
        keep = np.ones(n, dtype=bool)
        removal = rng.permutation(n)
        # Remove in random order until the remaining total fits.
        cum = total - np.cumsum(req[order][removal])
        k = int(np.argmax(cum <= target)) + 1 if (cum <= target).any() else n
        keep[removal[:k]] = False
        return order[keep]
    extra: list[np.ndarray] = []
    per_gpu = workload.gpu_milli
    while total <= target:
        # Draw in batches; the stop rule is applied in draw order, so this equals one-at-a-time.
        draws = rng.integers(0, n, size=4096)
        cum = total + np.cumsum(per_gpu[draws])
        over = np.flatnonzero(cum > target)
        if over.size:
            extra.append(draws[: over[0] + 1])
            break
        extra.append(draws)
        total = float(cum[-1])
    return np.concatenate([order, *extra]) if extra else order


def bin_by_arrival(
    arrived_milli: np.ndarray, values: np.ndarray, total_gpu_milli: int, percents: Iterable[int]
) -> dict[int, float]:
    """Mean of ``values`` over the events whose arrived % (rounded half up) equals each percent.

    An empty bin falls back to the events in percent−1…percent+1 (the artifact's rule); NaN if
    those are empty too.
    """
    x = np.floor(arrived_milli * 100.0 / total_gpu_milli + 0.5).astype(np.int64)
    out: dict[int, float] = {}
    for k in percents:
        sel = x == k
        if not sel.any():
            sel = (x >= k - 1) & (x <= k + 1)
        out[int(k)] = float(values[sel].mean()) if sel.any() else float("nan")
    return out


# --------------------------------------------------------------------------- simulation


@dataclass
class ExperimentResult:
    """One experiment: the per-event series and the summary."""

    workload: str
    policy: str
    seed: int
    pods_submitted: int
    pods_placed: int
    seconds: float
    total_gpu_milli: int
    arrived_milli: np.ndarray
    used_milli: np.ndarray
    frag_milli: np.ndarray
    initial_frag_milli: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)
    # Final per-node free resources, in the cluster's node order (for diagnostics and reports).
    final_cpu_free: np.ndarray | None = None
    final_gpu_free: np.ndarray | None = None
    final_model_idx: np.ndarray | None = None

    def unallocated_gpu_pct(self, percents: Iterable[int]) -> dict[int, float]:
        used_pct = self.used_milli * 100.0 / self.total_gpu_milli
        return {k: 100.0 - v for k, v in bin_by_arrival(self.arrived_milli, used_pct, self.total_gpu_milli, percents).items()}

    def frag_pct(self, percents: Iterable[int]) -> dict[int, float]:
        frag = self.frag_milli * 100.0 / self.total_gpu_milli
        return bin_by_arrival(self.arrived_milli, frag, self.total_gpu_milli, percents)


class _StateTable:
    """Distinct node states (model, free CPU, sorted free GPU milli) and per-shape cached scores."""

    def __init__(self, n_shapes: int, typical: TypicalPods, need_delta: bool, prefer_fuller_gpu: bool = False) -> None:
        self.typical = typical
        self.prefer_fuller_gpu = prefer_fuller_gpu
        self.need_delta = need_delta
        self.n = 0
        self.cap = 1024
        self.keys: dict[tuple[int, int, tuple[int, ...]], int] = {}
        self.cpu = np.zeros(self.cap, dtype=np.int64)
        self.gpu = np.zeros((self.cap, GPUS_PER_NODE), dtype=np.int64)
        self.model = np.zeros(self.cap, dtype=np.int64)
        self.frag = np.zeros(self.cap, dtype=np.float64)
        self.computed = np.zeros((n_shapes, self.cap), dtype=bool)
        self.fit = np.zeros((n_shapes, self.cap), dtype=bool)
        self.delta = np.zeros((n_shapes, self.cap), dtype=np.float64)
        self.score = np.zeros((n_shapes, self.cap), dtype=np.float64)  # FGD's integer score of delta
        self.choice = np.zeros((n_shapes, self.cap), dtype=np.int64)

    def _grow(self) -> None:
        new = self.cap * 2

        def pad(a: np.ndarray, axis: int) -> np.ndarray:
            shape = list(a.shape)
            shape[axis] = new - self.cap
            return np.concatenate([a, np.zeros(shape, dtype=a.dtype)], axis=axis)

        self.cpu, self.model, self.frag = pad(self.cpu, 0), pad(self.model, 0), pad(self.frag, 0)
        self.gpu = pad(self.gpu, 0)
        self.computed, self.fit = pad(self.computed, 1), pad(self.fit, 1)
        self.delta, self.choice, self.score = pad(self.delta, 1), pad(self.choice, 1), pad(self.score, 1)
        self.cap = new

    def state_of(self, model: int, cpu: int, gpu_row: np.ndarray) -> int:
        sorted_gpu = tuple(sorted(gpu_row.tolist(), reverse=True))
        key = (model, cpu, sorted_gpu)
        sid = self.keys.get(key)
        if sid is not None:
            return sid
        if self.n == self.cap:
            self._grow()
        sid = self.n
        self.n += 1
        self.keys[key] = sid
        self.cpu[sid] = cpu
        self.gpu[sid] = sorted_gpu
        self.model[sid] = model
        self.frag[sid] = node_fragmentation(
            self.cpu[sid : sid + 1], self.gpu[sid : sid + 1], self.model[sid : sid + 1], self.typical
        )[0]
        return sid

    def compute(self, shape: int, cpu_req: int, milli: int, num: int, states: np.ndarray) -> None:
        """Fill fit / best Δfragmentation / chosen GPU value for ``shape`` on ``states``."""
        cpu = self.cpu[states]
        gpu = self.gpu[states]
        model = self.model[states]
        cpu_ok = cpu >= cpu_req
        if num == 0:
            fit = cpu_ok
        elif milli >= MILLI:
            fit = cpu_ok & ((gpu >= MILLI).sum(axis=1) >= num)
        else:
            fit = cpu_ok & (gpu[:, 0] >= milli)  # rows are sorted, slot 0 is the largest
        self.fit[shape, states] = fit
        self.computed[shape, states] = True
        if not self.need_delta or not fit.any():
            return
        rows = np.flatnonzero(fit)
        # the engine's scorer (scheduler_core.placement), on the distinct node states
        delta, chosen = placement.placement_deltas(
            cpu[rows], gpu[rows], model[rows], cpu_req, milli, num, self.typical, self.frag[states[rows]],
            prefer_fuller_gpu=self.prefer_fuller_gpu,
        )
        self.delta[shape, states[rows]] = delta
        self.score[shape, states[rows]] = placement.fgd_score(delta)
        self.choice[shape, states[rows]] = chosen


def run_experiment(
    cluster: Cluster,
    workload: Workload,
    policy: str,
    seed: int,
    *,
    tune: float = TUNE,
    order: np.ndarray | None = None,
) -> ExperimentResult:
    """Run one experiment: submit the seed's arrival order one pod at a time, place or drop each.

    Policies (FGD.md §1.4): ``random`` (uniform over feasible nodes, random fitting GPU),
    ``bestfit`` (least leftover CPU+GPU, normalised by the largest spec; best-fit GPU), ``fgd``
    (least fragmentation growth, the artifact's integer-truncated sigmoid score; the GPU that
    grows fragmentation least), and ``kaiweb`` (our production policy: ``scheduler_core.placement``,
    the scorer the scheduler's ``fragmentation-aware`` placement runs).
    Node ties go to the first node in the seed's node order (the artifact shuffles node names).
    Deterministic for (cluster, workload, policy, seed).
    """
    if policy not in POLICIES:
        raise ValueError(f"policy: unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    started = time.perf_counter()
    cpu_started = time.process_time()
    total = cluster.total_gpu_milli
    if order is None:
        order = arrival_order(workload, total, seed, tune)
    rng = np.random.default_rng([seed, 1])
    # Node order per seed: the artifact prefixes node names with a random permutation index.
    perm = rng.permutation(len(cluster))
    n_model = cluster.model_idx[perm]
    n_cpu = cluster.cpu_milli[perm].copy()
    n_mem = cluster.memory_mib[perm].copy()
    n_gpu = cluster.empty_gpu_free()[perm].copy()
    n_gpu_total = n_gpu.sum(axis=1)

    # Pod shapes (cpu, milli, num) index the score tables; the model mask is checked per node.
    shape_keys: dict[tuple[int, int, int], int] = {}
    pod_shape = np.empty(len(workload), dtype=np.int64)
    for i, key in enumerate(zip(workload.cpu_milli.tolist(), workload.gpu_milli.tolist(), workload.num_gpu.tolist())):
        pod_shape[i] = shape_keys.setdefault(key, len(shape_keys))
    shapes = list(shape_keys)

    table = _StateTable(
        len(shapes), workload.typical, need_delta=policy in ("fgd", "kaiweb"), prefer_fuller_gpu=policy == "kaiweb"
    )
    node_pressure = placement.model_pressure(cluster.model_idx, cluster.gpu_count, len(cluster.models),
                                             workload.typical)[n_model]
    n_state = np.asarray(
        [table.state_of(int(n_model[k]), int(n_cpu[k]), n_gpu[k]) for k in range(len(perm))], dtype=np.int64
    )
    frag_total = float(table.frag[n_state].sum())
    initial_frag = frag_total

    events = len(order)
    arrived_series = np.empty(events, dtype=np.float64)
    used_series = np.empty(events, dtype=np.float64)
    frag_series = np.empty(events, dtype=np.float64)
    arrived = 0.0
    used = 0.0
    placed = 0
    req_all = workload.gpu_request_milli
    for e, p in enumerate(order.tolist()):
        s = int(pod_shape[p])
        cpu_req, milli, num = shapes[s]
        arrived += float(req_all[p])
        need = ~table.computed[s, n_state]
        if need.any():
            table.compute(s, cpu_req, milli, num, np.unique(n_state[need]))
        feas = table.fit[s, n_state] & (n_mem >= workload.memory_mib[p])
        if num > 0:
            feas &= ((workload.mask[p] >> n_model) & 1).astype(bool)
        cand = np.flatnonzero(feas)
        if cand.size:
            if policy == "random":
                node = int(cand[rng.integers(cand.size)])
            elif policy == "bestfit":
                left = 0.5 * (n_cpu[cand] - cpu_req) / MAX_SPEC_CPU_MILLI + 0.5 * (
                    n_gpu_total[cand] - num * milli
                ) / MAX_SPEC_GPU_MILLI
                score = np.floor((1.0 - left) * 100.0)
                node = int(cand[np.argmax(score)])
            elif policy == "fgd":
                node = int(cand[np.argmax(table.score[s, n_state[cand]])])
            else:
                # our production placement (scheduler_core.placement, as the scheduler runs it);
                # free milli left on the GPU a fractional pod would share (0 for other pods)
                fractional = 0 < milli < MILLI
                sliver = table.choice[s, n_state[cand]] - milli if fractional else np.zeros(cand.size)
                node = int(
                    cand[
                        placement.pick(
                            table.score[s, n_state[cand]],
                            n_cpu[cand] - cpu_req,
                            n_gpu_total[cand] - num * milli,
                            sliver,
                            node_pressure[cand],
                            fractional=fractional,
                            cpu_scale=MAX_SPEC_CPU_MILLI,
                            gpu_scale=MAX_SPEC_GPU_MILLI,
                        )
                    ]
                )
            row = n_gpu[node]
            if num == 0:
                pass
            elif milli >= MILLI:
                free_slots = np.flatnonzero(row >= MILLI)[:num]
                row[free_slots] = 0
            else:
                if policy == "random":
                    slots = np.flatnonzero(row >= milli)
                    slot = int(slots[rng.integers(slots.size)])
                elif policy == "bestfit":
                    masked = np.where(row >= milli, row, MILLI + 1)
                    slot = int(np.argmin(masked))
                else:
                    slot = int(np.flatnonzero(row == table.choice[s, n_state[node]])[0])
                row[slot] -= milli
            n_cpu[node] -= cpu_req
            n_mem[node] -= int(workload.memory_mib[p])
            n_gpu_total[node] -= num * milli
            old = int(n_state[node])
            new = table.state_of(int(n_model[node]), int(n_cpu[node]), row)
            n_state[node] = new
            frag_total += float(table.frag[new] - table.frag[old])
            used += num * milli
            placed += 1
        arrived_series[e] = arrived
        used_series[e] = used
        frag_series[e] = frag_total
    return ExperimentResult(
        workload=workload.name,
        policy=policy,
        seed=seed,
        pods_submitted=events,
        pods_placed=placed,
        seconds=time.perf_counter() - started,
        total_gpu_milli=total,
        arrived_milli=arrived_series,
        used_milli=used_series,
        frag_milli=frag_series,
        initial_frag_milli=initial_frag,
        extra={"node_states": float(table.n), "cpu_seconds": time.process_time() - cpu_started},
        final_cpu_free=_unpermute(n_cpu, perm),
        final_gpu_free=_unpermute(n_gpu, perm),
        final_model_idx=_unpermute(n_model, perm),
    )


def _unpermute(values: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """Rows indexed by position in the seed's node order -> rows in the cluster's order."""
    out = np.empty_like(values)
    out[perm] = values
    return out


def summarize(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; 0 for one value)."""
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return float("nan"), float("nan")
    mean = sum(vals) / len(vals)
    if len(vals) < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)
    return mean, math.sqrt(var)


DEFAULT_PERCENTS = (90, 100, 110, 130)


def run_seeds(
    cluster: Cluster,
    workload: Workload,
    policy: str,
    seeds: Sequence[int],
    percents: Sequence[int] = DEFAULT_PERCENTS,
) -> dict[str, Any]:
    """Run the experiment for each seed; JSON-ready per-seed and overall (mean ± sd) results.

    ``unallocated_gpu_pct`` is keyed by the arrived percentage (as a string, for JSON).
    """
    if not seeds:
        raise ValueError("seeds: give at least one seed")
    per_seed: list[dict[str, object]] = []
    values: dict[int, list[float]] = {int(k): [] for k in percents}
    frag: dict[int, list[float]] = {int(k): [] for k in percents}
    seconds: list[float] = []
    cpu_seconds: list[float] = []
    for seed in seeds:
        res = run_experiment(cluster, workload, policy, int(seed))
        un = res.unallocated_gpu_pct(percents)
        fr = res.frag_pct(percents)
        for k in values:
            values[k].append(un[k])
            frag[k].append(fr[k])
        seconds.append(res.seconds)
        cpu_seconds.append(res.extra["cpu_seconds"])
        per_seed.append(
            {
                "seed": int(seed),
                "unallocated_gpu_pct": {str(k): round(v, 4) for k, v in un.items()},
                "frag_pct_of_capacity": {str(k): round(v, 4) for k, v in fr.items()},
                "pods_submitted": res.pods_submitted,
                "pods_placed": res.pods_placed,
                "seconds": round(res.seconds, 3),
                "cpu_seconds": round(res.extra["cpu_seconds"], 3),
            }
        )
    overall: dict[str, object] = {}
    for k, vals in values.items():
        mean, sd = summarize(vals)
        overall[str(k)] = {"mean": round(mean, 4), "sd": round(sd, 4)}
    mean_s, _ = summarize(seconds)
    return {
        "workload": workload.name,
        "policy": policy,
        "seeds": [int(s) for s in seeds],
        "per_seed": per_seed,
        "unallocated_gpu_pct": overall,
        "seconds_per_experiment": round(mean_s, 3),
        # CPU time of this process: the machine may be shared, so wall time can overstate the cost
        "cpu_seconds_per_experiment": round(summarize(cpu_seconds)[0], 3),
    }


def published_unallocated(summary_csv: str | Path, arrived_pct: int = 100) -> dict[tuple[str, str], tuple[float, float]]:
    """Published mean ± sd of unallocated GPU % at ``arrived_pct`` per (workload, policy short name),
    from the authors' results in long format (``summary_by_workload_policy_arrival.csv``)."""
    out: dict[tuple[str, str], tuple[float, float]] = {}
    with Path(summary_csv).open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if row["metric"] != "gpu_unalloc_pct" or int(row["arrived_pct"]) != arrived_pct:
                continue
            wl = row["workload"].removeprefix("openb_pod_list_")
            out[(wl, row["policy"])] = (float(row["mean"]), float(row["std"]))
    return out
