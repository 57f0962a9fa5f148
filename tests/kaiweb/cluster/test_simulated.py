"""The simulated cluster: its clock, pod lifecycle, idempotent actions, the workload generator
and the demo seeding."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kaiweb.cluster.backends.simulated import SimulatedGateway, workload_state
from kaiweb.cluster.backends.types import ActionOutcome, BindAction, EvictAction
from kaiweb.cluster.demo import seed_demo
from kaiweb.cluster.gateway import ClusterRejected
from kaiweb.cluster.models import Cluster, GpuDevice, Node
from kaiweb.cluster.workload_generator import WorkloadGenerator
from kaiweb.queues.models import Queue
from kaiweb.workloads.choices import PodState, WorkloadState
from kaiweb.workloads.models import Pod, Workload
from tests.celery.builders import T0, small_cluster, submit


@pytest.mark.django_db
def test_the_clock_advances_by_the_configured_seconds_per_cycle():
    sc = small_cluster()
    gw = SimulatedGateway(sc.cluster)
    start = gw.now()

    report = gw.advance()
    gw.advance(seconds=5)

    assert report.now == start + 60
    assert gw.now() == start + 65
    assert gw.cluster.settings["simulation"]["tick"] == 3


@pytest.mark.django_db
def test_a_real_time_clock_follows_the_wall_clock():
    sc = small_cluster()
    gw = SimulatedGateway(sc.cluster)
    gw.configure(clock="real")

    report = gw.advance()

    assert abs(report.now - gw.now()) < 60
    assert report.now > T0.timestamp() + 86400


@pytest.mark.django_db
def test_bad_simulation_settings_are_refused_with_the_field_named():
    gw = SimulatedGateway(small_cluster().cluster)
    with pytest.raises(ValueError, match="simulation.clock"):
        gw.configure(clock="sundial")
    with pytest.raises(ValueError, match="unknown setting"):
        gw.configure(speed=3)
    with pytest.raises(ValueError, match="seconds_per_cycle"):
        gw.configure(seconds_per_cycle=0)


@pytest.mark.django_db
def test_pods_complete_after_their_duration_and_free_their_node():
    sc = small_cluster(nodes=1)
    job = submit(sc, "team-a", "short", pods=2, duration=90)
    gw = SimulatedGateway(sc.cluster)
    node = sc.nodes[0].name
    results = gw.apply(binds=[BindAction("ns", p.name, p.uid, node) for p in job.pods.all()])
    assert [r.outcome for r in results] == [ActionOutcome.BOUND, ActionOutcome.BOUND]
    job.refresh_from_db()
    assert job.state == WorkloadState.RUNNING

    first = gw.advance()  # +60 s: still running
    second = gw.advance()  # +120 s: done

    assert first.completed_pods == 0
    assert (second.completed_pods, second.completed_workloads) == (2, 1)
    job.refresh_from_db()
    assert job.state == WorkloadState.COMPLETED
    pods = list(job.pods.all())
    assert {p.state for p in pods} == {PodState.SUCCEEDED}
    assert all(p.finished_at == p.started_at + timedelta(seconds=90) for p in pods)


@pytest.mark.django_db
def test_binding_twice_is_one_bind_and_evicting_recreates_the_pod():
    sc = small_cluster(nodes=1)
    job = submit(sc, "team-a", "j", pods=1)
    pod = job.pods.get()
    gw = SimulatedGateway(sc.cluster)
    bind = BindAction("ns", pod.name, pod.uid, "node-0", idempotency_key="k1")

    assert gw.bind(bind).outcome == ActionOutcome.BOUND
    assert gw.bind(bind).outcome == ActionOutcome.ALREADY_BOUND

    evict = EvictAction("ns", pod.name, pod.uid, idempotency_key="k2")
    assert gw.evict(evict).outcome == ActionOutcome.EVICTED
    assert gw.evict(evict).outcome == ActionOutcome.ALREADY_GONE
    pod.refresh_from_db()
    assert pod.state == PodState.PENDING
    assert pod.node is None
    assert pod.uid != bind.uid  # a new incarnation
    job.refresh_from_db()
    assert job.state == WorkloadState.PENDING
    assert job.last_eviction_at is not None
    # The old incarnation's bind can no longer land.
    assert gw.bind(bind).outcome == ActionOutcome.ALREADY_GONE
    assert gw.is_gone("ns", pod.name, bind.uid)


@pytest.mark.django_db
def test_binding_to_an_unknown_node_names_the_node():
    sc = small_cluster(nodes=1)
    pod = submit(sc, "team-a", "j").pods.get()
    with pytest.raises(ClusterRejected, match="node 'nowhere' is not a node of cluster") as err:
        SimulatedGateway(sc.cluster).bind(BindAction("ns", pod.name, pod.uid, "nowhere"))
    assert err.value.status == 404  # the same error, by kind, as the Kubernetes backend raises


def test_workload_state_follows_its_pods():
    def pods(*states):
        return [Pod(state=s) for s in states]

    assert workload_state(pods(PodState.PENDING, PodState.PENDING), 2) == WorkloadState.PENDING
    assert workload_state(pods(PodState.RUNNING, PodState.PENDING), 2) == WorkloadState.PARTIAL
    assert workload_state(pods(PodState.RUNNING, PodState.PENDING), 1) == WorkloadState.RUNNING
    assert workload_state(pods(PodState.SUCCEEDED, PodState.SUCCEEDED), 2) == WorkloadState.COMPLETED


def test_the_generator_is_deterministic_per_seed_and_tick():
    a, b, c = WorkloadGenerator(seed=3), WorkloadGenerator(seed=3), WorkloadGenerator(seed=4)

    assert a.jobs_for_tick(5) == b.jobs_for_tick(5)
    assert [j.job_id for j in a.jobs_for_tick(0)] == [j.job_id for j in b.jobs_for_tick(0)]
    assert any(a.jobs_for_tick(t) != c.jobs_for_tick(t) for t in range(6))
    with pytest.raises(ValueError, match="tick"):
        a.jobs_for_tick(-1)


def test_the_demo_mix_floods_first_and_brings_inference_and_department_a_later():
    gen = WorkloadGenerator(seed=7)
    flood = gen.jobs_for_tick(0)
    assert sum(j.gpus for j in flood) >= 128  # enough to fill 16 × 8 GPUs
    assert {j.queue for j in flood} >= {"best-effort", "team-training", "team-research-b"}
    assert not {j.queue for j in flood} & {"team-research-a", "team-inference"}
    later = [j for t in range(1, 30) for j in gen.jobs_for_tick(t)]
    inference = [j for j in later if j.kind == "inference"]
    assert inference
    assert all(j.priority_class == "inference" and j.queue == "team-inference" for j in inference)
    assert any(j.queue == "team-research-a" for j in later)
    assert any(0 < j.gpu_per_pod < 1 for j in later)  # fractional GPUs
    assert any(j.num_pods > 1 and j.min_member == j.num_pods for j in later)  # gangs


@pytest.mark.django_db
def test_seed_demo_builds_the_demo_once():
    first = seed_demo()
    counts = (Queue.objects.count(), Node.objects.count(), GpuDevice.objects.count(), Workload.objects.count())

    second = seed_demo()

    assert first.nodes_created == 16
    assert first.workloads_submitted > 0
    assert Node.objects.filter(allocatable_gpu=8).count() == 16
    assert GpuDevice.objects.count() == 128
    names = set(Queue.objects.values_list("name", flat=True))
    assert {"department-a", "department-b", "team-inference", "team-research-a", "team-training",
            "team-research-b", "best-effort"} <= names
    assert Queue.objects.get(name="team-training").gpu_over_quota_weight == 2
    assert (second.queues_created, second.nodes_created, second.workloads_submitted) == (0, 0, 0)
    assert (Queue.objects.count(), Node.objects.count(), GpuDevice.objects.count(),
            Workload.objects.count()) == counts
    sim = Cluster.objects.get(name="default").settings["simulation"]
    assert sim["generate"] is True
    assert sim["tick"] == 1
    # one clock: the demo cluster's time is the wall clock the cycles and pages use
    assert sim["clock"] == "real"
    from kaiweb.core import clock

    gateway = SimulatedGateway(Cluster.objects.get(name="default"))
    before = clock.timestamp()
    report = gateway.advance()
    assert before <= report.now <= clock.timestamp()
    newest = Workload.objects.order_by("-submitted_at").first()
    assert newest.submitted_at.timestamp() <= clock.timestamp()


@pytest.mark.django_db
def test_seed_demo_can_keep_a_simulated_clock_for_traces():
    seed_demo(generate=False, clock="simulated", seconds_per_cycle=60)
    sim = Cluster.objects.get(name="default").settings["simulation"]
    assert sim["clock"] == "simulated"
    assert sim["seconds_per_cycle"] == 60
    with pytest.raises(ValueError, match="clock: must be 'real' or 'simulated'"):
        seed_demo(clock="fast")


@pytest.mark.django_db
def test_the_generator_stops_feeding_a_queue_with_a_backlog():
    sc = small_cluster(nodes=1)
    Queue.objects.create(name="best-effort", gpu_quota=0, gpu_limit=-1, cpu_quota=0, memory_quota=0)
    gw = SimulatedGateway(sc.cluster)
    gw.configure(generate=True, seed=7, tick=0, max_pending_per_queue=2)
    gw.advance()  # tick 0: the flood is accepted whatever the backlog
    flood = Workload.objects.filter(queue__name="best-effort").count()
    assert flood > 2

    for _ in range(5):
        gw.advance()

    assert Workload.objects.filter(queue__name="best-effort").count() == flood
