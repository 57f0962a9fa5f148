"""The assigner's decision on plain values (`kaiweb.org.assigner.decide`), and the org scenarios' checker."""

from __future__ import annotations

from devkube import org_scenarios
from kaiweb.org.assigner import GroupFacts, OrgView, ProjectView, affinity_terms_of, decide
from kaiweb.org.choices import NODE_POOL_LABEL, UNASSIGNED_POOL
from kaiweb.org.rules import PoolSpec

POOLS = (PoolSpec("h100", "nvidia.com/gpu.product", "H100"), PoolSpec("a100", "nvidia.com/gpu.product", "A100"))
ORG = OrgView(pools=POOLS, phases={"h100": "Ready", "a100": "Ready", "default": "Ready"},
              shard_pool={"h100": "h100", "a100": "a100", "default": "default"})
VISION = ProjectView("vision", (), {"default": "vision", "h100": "vision-h100", "a100": "vision-a100"})


def assigned(pool: str, queue: str, **more) -> GroupFacts:
    labels = {"kai.scheduler/queue": queue, **({NODE_POOL_LABEL: pool} if pool != "default" else {})}
    return GroupFacts(labels=labels, queue=queue, **more)


def test_a_new_workload_goes_to_its_first_accepting_candidate_with_that_pools_queue():
    want = decide(GroupFacts(labels={}, queue="vision", annotation="h100 a100"), VISION, ORG)
    assert (want.pool_label, want.queue, want.changed, want.source) == ("h100", "vision-h100", True, "annotation")
    phases = {**ORG.phases, "h100": "Unschedulable"}
    want = decide(GroupFacts(labels={}, queue="vision", annotation="h100 a100"), VISION,
                  OrgView(POOLS, phases, ORG.shard_pool))
    assert (want.pool_label, want.queue) == ("a100", "vision-a100")


def test_a_pool_without_the_projects_queue_is_skipped_and_none_left_waits_unassigned():
    no_a100 = ProjectView("nlp", (), {"h100": "nlp-h100"})
    assert decide(GroupFacts(labels={}, queue="nlp", annotation="a100 h100"), no_a100, ORG).pool_label == "h100"
    want = decide(GroupFacts(labels={}, queue="nlp"), no_a100, ORG)
    assert want.pool_label == UNASSIGNED_POOL
    assert want.changed
    assert "default: no queue of project nlp" in want.message


def test_an_assigned_workload_stays_until_its_own_pools_shard_marks_it_unschedulable():
    facts = assigned("h100", "vision-h100", annotation="h100 a100")
    assert not decide(facts, VISION, ORG).changed
    stale = assigned("h100", "vision-h100", annotation="h100 a100", unschedulable_on="a100")
    assert not decide(stale, VISION, ORG).changed
    moved = decide(assigned("h100", "vision-h100", annotation="h100 a100", unschedulable_on="h100"), VISION, ORG)
    assert (moved.pool_label, moved.queue, moved.moved, moved.wrapped) == ("a100", "vision-a100", True, False)


def test_past_the_last_candidate_it_wraps_round_and_says_it_is_unschedulable_everywhere():
    moved = decide(assigned("a100", "vision-a100", annotation="h100 a100", unschedulable_on="a100"), VISION, ORG)
    assert (moved.pool_label, moved.wrapped) == ("h100", True)
    assert "unschedulable on every candidate node pool: h100 a100" in moved.message


def test_a_workload_with_a_bound_pod_is_never_moved_and_is_charged_where_it_runs():
    running = assigned("h100", "vision-h100", annotation="h100 a100", unschedulable_on="h100", bound=True)
    assert not decide(running, VISION, ORG).changed
    new = decide(GroupFacts(labels={}, queue="vision", annotation="a100", bound=True, running_pool="h100"),
                 VISION, ORG)
    assert (new.pool_label, new.queue) == ("h100", "vision-h100")


def test_one_candidate_never_moves():
    facts = assigned("h100", "vision-h100", annotation="h100", unschedulable_on="h100")
    assert not decide(facts, VISION, ORG).changed


def test_the_scenario_checker_reports_what_the_cluster_does_not_show():
    scenario = {"steps": [{"expect": {"pods": {"ns/p": {"scheduled": True, "node_in": ["a"]}},
                                      "podgroups": [{"for_pod": "ns/p", "node_pool": "h100", "queue": "q-h100"}]}}]}
    pod = {"namespace": "ns", "name": "p", "nodeName": "b", "deleted": False, "labels": {},
           "annotations": {"pod-group-name": "pg"}}
    group = {"metadata": {"namespace": "ns", "name": "pg", "labels": {}}, "spec": {"queue": "q"}}
    found = org_scenarios.failures(scenario, [{"pods": [pod], "podgroups": [group], "events": []}])
    assert found == ["expect #1: pod ns/p: on node b, expected one of ['a']",
                     "expect #1: PodGroup of ns/p: queue q, expected q-h100",
                     "expect #1: PodGroup of ns/p: node pool default, expected h100"]
    waiting = {"steps": [{"expect": {"pods": {"ns/p": {"scheduled": False, "why_regex": "every candidate"}}}}]}
    pod["nodeName"], pod["conditions"] = None, [{"type": "PodScheduled", "status": "False", "message": "full"}]
    assert org_scenarios.failures(waiting, [{"pods": [pod], "podgroups": [], "events": []}]) == [
        "expect #1: pod ns/p: why it waits is 'full', expected to match 'every candidate'"]
    pod["nodeName"] = "a"
    group["metadata"]["labels"] = {NODE_POOL_LABEL: "h100"}
    group["spec"]["queue"] = "q-h100"
    assert org_scenarios.failures(scenario, [{"pods": [pod], "podgroups": [group], "events": []}]) == []


def test_a_node_selector_on_a_pools_label_pair_points_at_that_pool_as_required_affinity_does():
    terms = affinity_terms_of(None, {"nvidia.com/gpu.product": "A100"})
    want = decide(GroupFacts(labels={}, queue="vision", affinity_terms=terms), VISION, ORG)
    assert (want.pool_label, want.queue, want.source) == ("a100", "vision-a100", "node affinity")
    # The selector adds to the affinity's terms; with neither, the project's defaults or default decide.
    assert affinity_terms_of(None, {}) == ()
    assert decide(GroupFacts(labels={}, queue="vision"), VISION, ORG).queue == "vision"
