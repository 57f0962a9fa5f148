"""The ``replay`` command: reads the queue tree YAML and the trace, runs the replay or the what-if.

YAML is read here and nowhere else in the simulator. Queue files are Queue CRDs
(``scheduling.run.ai/v2``, one document per queue), read by ``scheduler_core.queue_crd``.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scheduler_core import model as m
from scheduler_core import queue_crd
from scheduler_core.sim.replay import ReplayCluster, ReplayConfig, replay
from scheduler_core.sim.traces import Job, JobTrace, read_job_trace
from scheduler_core.sim.whatif import what_if

DATA = Path(__file__).resolve().parent / "data"

#: Named traces: the bundled sample, or files under a traces root (``--traces``).
NAMED_TRACES = {
    "itp-sample": "bundled: data/itp_cluster05_sample.csv",
    "philly": "philly_helios_15k_subsets_dirlab/philly_data_training.csv",
    "helios": "philly_helios_15k_subsets_dirlab/helios_data_training.csv",
    "philly-vc103959": "microsoft_itp_elasticflow/pkusys_elasticflow_philly_vc103959/philly_103959.csv",
    **{f"itp-cluster{n:02d}": f"microsoft_itp_elasticflow/raw/cluster{n:02d}.csv" for n in range(1, 11)},
}


def resolve_trace(name: str, traces_root: str | None) -> Path:
    """A trace name or a CSV path → the file to read. Raises ValueError naming ``--trace``."""
    if name == "itp-sample":
        return DATA / "itp_cluster05_sample.csv"
    if name in NAMED_TRACES:
        if not traces_root:
            raise ValueError(f"--trace: {name!r} lives in the traces folder; pass --traces DIR")
        return Path(traces_root) / NAMED_TRACES[name]
    path = Path(name)
    if path.suffix == ".csv":
        return path
    raise ValueError(f"--trace: unknown trace {name!r}; known: {', '.join(NAMED_TRACES)} or a .csv path")


def queues_from_documents(docs: Sequence[Any], source: str = "queues") -> tuple[m.QueueSpec, ...]:
    """Queue CRD documents → ``QueueSpec``s, read by the one Queue CRD codec (``queue_crd``,
    strict: KAI's defaults, unknown keys refused). Every problem names the document and field."""
    out: list[m.QueueSpec] = []
    seen: set[str] = set()
    for i, doc in enumerate(d for d in docs if d is not None):
        reading = queue_crd.read(doc, strict=True, creation=float(i))
        where = f"{source}[{reading.name or i}]"
        if reading.problems:
            first = reading.problems[0]
            raise ValueError(f"{where}.{first.field}: {first.message}" if first.field else f"{where}: {first.message}")
        assert reading.spec is not None  # a reading without problems has its spec
        if reading.name in seen:
            raise ValueError(f"{where}.metadata.name: duplicate queue {reading.name!r}")
        seen.add(reading.name)
        out.append(reading.spec)
    names = {q.name for q in out}
    for q in out:
        if q.parent and q.parent not in names:
            raise ValueError(f"{source}[{q.name}].spec.parentQueue: unknown queue {q.parent!r}")
    if not out:
        raise ValueError(f"{source}: no Queue documents found")
    return tuple(out)


def load_queues(path: str) -> tuple[m.QueueSpec, ...]:
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--queues: file not found: {path}")
    try:
        docs = list(yaml.safe_load_all(p.read_text(encoding="utf-8")))
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from None
    return queues_from_documents(docs, p.name)


def scale_jobs(jobs: Sequence[Job], factor: float) -> list[Job]:
    """Divide submission times and durations by ``factor`` (a compressed replay)."""
    if factor == 1.0:
        return list(jobs)
    from dataclasses import replace

    t0 = jobs[0].submit_time if jobs else 0.0
    return [replace(j, submit_time=(j.submit_time - t0) / factor, duration=j.duration / factor) for j in jobs]


def default_cluster(jobs: Sequence[Job], target_load: float = 1.1) -> ReplayCluster:
    """Nodes so that the offered GPU load is about ``target_load`` × capacity (a busy cluster,
    where queue configuration matters), and at least the largest job fits."""
    if not jobs:
        return ReplayCluster(nodes=1)
    span = max(j.submit_time for j in jobs) - min(j.submit_time for j in jobs)
    work = sum(j.num_gpu * j.duration for j in jobs)
    span = max(span, max(j.duration for j in jobs))
    gpus = work / span / target_load if span > 0 else 8
    largest = max(j.num_pods for j in jobs)
    return ReplayCluster(nodes=max(largest, math.ceil(gpus / 8)))


def run_replay_command(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise ValueError(f"--jobs: must be at least 1, got {args.jobs}")
    path = resolve_trace(args.trace, args.traces)
    trace: JobTrace = read_job_trace(path)
    jobs = scale_jobs(trace.head(args.jobs).jobs, args.time_scale)
    cluster = ReplayCluster(nodes=args.nodes) if args.nodes else default_cluster(jobs)
    config = ReplayConfig(period_s=args.period, seed=args.seed)
    queues_a = load_queues(args.queues)
    meta = {
        "trace": args.trace,
        "jobs": len(jobs),
        "nodes": cluster.nodes,
        "gpus": cluster.total_gpus,
        "period_s": args.period,
        "time_scale": args.time_scale,
        "queue_mapping": "trace users" if trace.has_users else "hash of job id (the trace has no users)",
    }
    if args.compare:
        queues_b = load_queues(args.compare)
        try:
            compared = what_if(jobs, queues_a, queues_b, cluster, config)
        except ValueError as exc:
            raise SystemExit(f"--compare: {exc}") from None
        out: dict[str, Any] = {
            "meta": {**meta, "current": Path(args.queues).name, "changed": Path(args.compare).name},
            "current_run": compared.current.summary(),
            "changed_run": compared.changed.summary(),
            **compared.to_dict(),
        }
    else:
        res = replay(jobs, queues_a, cluster, config)
        out = {"meta": meta, "result": res.summary()}
        if args.timeline:
            out["timeline"] = res.timeline()
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        _print_text(out)
    return 0


def _print_text(out: dict[str, Any]) -> None:
    meta = out["meta"]
    print(f"trace {meta['trace']}: {meta['jobs']} jobs on {meta['nodes']} nodes ({meta['gpus']} GPUs)")
    runs = {meta.get(k, k): out[f"{k}_run"] for k in ("current", "changed") if f"{k}_run" in out} or {
        "result": out["result"]}
    for label, res in runs.items():
        print(f"\n[{label}] jct_mean {res['jct_mean_s']} s  wait_mean {res['queueing_delay_mean_s']} s  "
              f"jain {res['jain_fairness']} (vs quota {res['jain_fairness_vs_quota']})  preempted {res['preempted_jobs']}  partial_gangs {res['partial_gangs']}")
        print(f"{'queue':<18}{'jobs':>6}{'wait_mean_s':>14}{'wait_p95_s':>12}{'jct_mean_s':>12}{'alloc':>8}{'fair':>8}{'quota':>8}")
        for q, row in res["per_queue"].items():
            print(f"{q:<18}{row['jobs']:>6}{str(row['queueing_delay_mean_s']):>14}{str(row['queueing_delay_p95_s']):>12}"
                  f"{str(row['jct_mean_s']):>12}{str(row['allocated_gpus_avg']):>8}{str(row['fair_share_gpus_avg']):>8}"
                  f"{str(row['quota_gpus_avg']):>8}")
