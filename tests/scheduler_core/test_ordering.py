"""Job ordering: the cached queue comparator agrees with the proportion contract; tasks to allocate."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core import model as m
from scheduler_core.cycle import open_session
from scheduler_core.ordering import JobsOrder, QueueComparator, tasks_to_allocate
from scheduler_core.proportion import QueueAttrs, compare_queues
from tests.scheduler_core.engine_builders import job, node, queue, snapshot

amount = st.sampled_from([-1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 8.0])
used = st.sampled_from([0.0, 1.0, 2.0, 3.0, 5.0, 8.0])


@st.composite
def queue_attrs(draw, name):
    return QueueAttrs(
        name=name, parent=None, priority=draw(st.sampled_from([50, 100, 150])), creation=draw(st.sampled_from([0.0, 1.0])),
        deserved=[draw(amount) for _ in range(3)], limit=[draw(amount) for _ in range(3)],
        weight=[1.0, 1.0, 1.0], allocated=[draw(used) for _ in range(3)], fair=[draw(used) for _ in range(3)],
    )


@settings(max_examples=300, deadline=None)
@given(queue_attrs("a"), queue_attrs("b"), st.lists(used, min_size=3, max_size=3) | st.none(),
       st.lists(used, min_size=3, max_size=3) | st.none())
def test_cached_comparator_agrees_with_the_queue_order_contract(left, right, lreq, rreq):
    total = [16.0, 16.0, 16.0]
    fast = QueueComparator(total)
    assert fast(left, right, lreq, rreq) == compare_queues(left, right, lreq, rreq, total)


@settings(max_examples=300, deadline=None)
@given(queue_attrs("a"), queue_attrs("b"), st.lists(used, min_size=3, max_size=3),
       st.lists(used, min_size=3, max_size=3))
def test_queue_keys_with_the_tie_break_decide_as_the_pairwise_cascade(left, right, lreq, rreq):
    cmp = QueueComparator([16.0, 16.0, 16.0])
    lk, rk = cmp.key(left, lreq), cmp.key(right, rreq)
    by_keys = -1 if lk < rk else 1 if lk > rk else cmp.tie(left, right)
    assert by_keys == cmp(left, right, lreq, rreq)


def _pop_all(local_changes: bool, pairwise: bool = False) -> list[str]:
    qs = [queue("d1", gpu_quota=8), queue("d2", gpu_quota=8, creation=1),
          queue("a", gpu_quota=2, parent="d1"), queue("b", gpu_quota=6, parent="d1"),
          queue("c", gpu_quota=4, parent="d2", creation=1), queue("e", gpu_quota=4, parent="d2", creation=2)]
    jobs = [job(f"{q}{i}", q, age=20 - i, gpus=1 + (i % 2)) for q in "abce" for i in range(4)]
    s, _ = open_session(snapshot([node("n", 8)], qs, jobs), m.CycleConfig())
    cascade = s.queue_comparator
    compare = (lambda *a: cascade(*a)) if pairwise else None  # a plain callable: the pairwise loop
    order = JobsOrder(s, s.jobs, compare=compare, local_changes=local_changes)
    seen = []
    while (j := order.pop()) is not None:
        seen.append(j.uid)
        for q in s.chain[j.queue]:  # as a commit would: only the popped job's queues change
            q.allocated[2] += j.tasks[0].qvec[2]
    return seen


def test_kept_queue_keys_give_the_order_of_the_pairwise_cascade():
    pairwise = _pop_all(False, pairwise=True)
    assert _pop_all(True) == pairwise
    assert _pop_all(False) == pairwise
    assert len(set(pairwise)) == 16


def test_jobs_come_out_round_robin_across_queues_by_dominant_share():
    qs = [queue("q1", gpu_quota=4), queue("q2", gpu_quota=4, creation=1)]
    jobs = [job(f"a{i}", "q1", age=10 - i) for i in range(3)] + [job(f"b{i}", "q2", age=10 - i) for i in range(3)]
    s, _ = open_session(snapshot([node("n", 8)], qs, jobs), m.CycleConfig())
    order = JobsOrder(s, s.jobs)
    seen = []
    while (j := order.pop()) is not None:
        seen.append(j.uid)
        # pretend the job got its pod: the queue's allocation grows, so the other queue goes next
        for q in s.chain[j.queue]:
            q.allocated[2] += 1
    assert seen == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_a_gang_batch_is_its_minimum_and_an_elastic_job_then_grows_one_pod_at_a_time():
    s, _ = open_session(snapshot([node("n", 8)], [queue("q", gpu_quota=8)],
                                 [job("e", "q", pods=5, min_available=3)]), m.CycleConfig())
    j = s.jobs[0]
    assert [t.name for t in tasks_to_allocate(j)] == ["e-0", "e-1", "e-2"]
    for t in j.tasks[:3]:
        s.set_task(t, m.RUNNING, 0, ())
    assert [t.name for t in tasks_to_allocate(j)] == ["e-3"]
