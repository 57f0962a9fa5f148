"""The pod-grouper: for every kind of owner, the PodGroup KAI's pod-grouper would write, and the pod's marks.

Hand-written objects per kind first (they always run), then the kai-e2e corpus: every ``podgroups``
expectation on a pod-grouper-made PodGroup, checked on the PodGroups this module builds from the
scenario's own objects (skipped when the corpus is not next to the checkout).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from kaiweb.cluster import podgrouper
from kaiweb.cluster.podgrouper import Grouping, Problem, Skipped
from tests.kaiweb.cluster.podgrouper_cluster import NS, FakeCluster, obj, pod, priority_class, uid_of

SUBGROUP = "kai.scheduler/subgroup-name"


def grouped(cluster: FakeCluster, the_pod: dict[str, Any], **kwargs: Any) -> Grouping:
    outcome = cluster.group(the_pod, **kwargs)
    assert isinstance(outcome, Grouping), outcome
    return outcome


def spec_of(outcome: Grouping) -> dict[str, Any]:
    return outcome.podgroup["spec"]


def sub_groups(outcome: Grouping) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in spec_of(outcome).get("subGroups", [])}


# ------------------------------------------------------------------------------------------ bare pods


def test_bare_pod_is_its_own_gang_named_after_itself():
    the_pod = pod("solo")
    outcome = grouped(FakeCluster(the_pod), the_pod)
    name = f"pg-solo-{uid_of('Pod', 'solo')}"
    assert outcome.podgroup["metadata"]["name"] == name
    assert outcome.podgroup["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "solo", "uid": uid_of("Pod", "solo")}]
    assert spec_of(outcome) == {"queue": "q", "priorityClassName": "train", "minMember": 1}
    assert outcome.pod_annotations == {"pod-group-name": name}
    assert outcome.pod_labels == {}
    assert outcome.top_owner["kind"] == "Pod"


def test_pod_of_another_scheduler_is_skipped():
    the_pod = pod("other", scheduler="default-scheduler")
    assert FakeCluster(the_pod).group(the_pod) == Skipped("not scheduled by kai-scheduler")


def test_skip_annotation_on_the_pod_or_any_owner_skips_it():
    job = obj("batch/v1", "Job", "j", annotations={"kai.scheduler/skip-podgrouper": "true"})
    owned = pod("j-0", owner=job)
    opted_out = pod("solo", annotations={"kai.scheduler/skip-podgrouper": "true"})
    cluster = FakeCluster(job, owned, opted_out)
    assert cluster.group(owned) == Skipped(f"skip-podgrouper annotation on Job {NS}/j")
    assert cluster.group(opted_out) == Skipped("skip-podgrouper annotation on the pod")


def test_pod_naming_a_hand_made_podgroup_is_left_alone():
    hand = obj("scheduling.run.ai/v2alpha2", "PodGroup", "external-pg", spec={"queue": "q", "minMember": 1})
    job = obj("batch/v1", "Job", "j")
    owned = pod("j-0", owner=job, annotations={"pod-group-name": "external-pg"})
    bare = pod("solo", annotations={"pod-group-name": "external-pg"})
    cluster = FakeCluster(hand, job, owned, bare)
    assert cluster.group(owned) == Skipped("the pod names PodGroup external-pg, made by hand")
    assert cluster.group(bare) == Skipped("the pod names PodGroup external-pg, made by hand")


def test_pod_naming_its_own_grouper_made_podgroup_is_regrouped():
    job = obj("batch/v1", "Job", "j", annotations={"kai.scheduler/batch-min-member": "2"})
    first = pod("j-0", owner=job)
    cluster = FakeCluster(job, first)
    cluster.run_grouper()
    marked = cluster.get("Pod", NS, "j-0")
    assert marked["metadata"]["annotations"]["pod-group-name"].startswith("pg-j-")
    assert spec_of(grouped(cluster, marked))["minMember"] == 2


# ------------------------------------------------------------------------------------------ queue, priority, preemptibility


def test_queue_comes_from_owner_then_pod_then_project_then_namespace_then_default():
    ns = obj("v1", "Namespace", NS, namespace="", labels={"kai.scheduler/queue": "ns-q"})
    job = obj("batch/v1", "Job", "j", labels={"kai.scheduler/queue": "owner-q"})
    plain_job = obj("batch/v1", "Job", "plain")
    project_job = obj("batch/v1", "Job", "proj", labels={"project": "team"})
    cluster = FakeCluster(ns, job, plain_job, project_job)
    assert spec_of(grouped(cluster, pod("a", owner=job, queue="pod-q")))["queue"] == "owner-q"
    assert spec_of(grouped(cluster, pod("b", owner=plain_job, queue="pod-q")))["queue"] == "pod-q"
    assert spec_of(grouped(cluster, pod("c", owner=project_job, queue=None)))["queue"] == "team"
    pooled = pod("d", owner=project_job, queue=None, labels={"kai.scheduler/node-pool": "a100"})
    assert spec_of(grouped(cluster, pooled))["queue"] == "team-a100"
    assert spec_of(grouped(cluster, pod("e", owner=plain_job, queue=None)))["queue"] == "ns-q"
    bare_cluster = FakeCluster(plain_job)
    assert spec_of(grouped(bare_cluster, pod("f", owner=plain_job, queue=None), default_queue="dq"))["queue"] == "dq"


def test_a_pod_naming_no_queue_in_a_projects_namespace_is_the_projects():
    namespace = obj("v1", "Namespace", NS, namespace="", labels={"kai/project": "vision", "kai.scheduler/queue": "ns-q"})
    bare = pod("bare", queue=None)
    assert spec_of(grouped(FakeCluster(namespace, bare), bare))["queue"] == "vision"
    # The pod's own project label and queue label still come first.
    own = pod("own", queue=None, labels={"project": "nlp"})
    assert spec_of(grouped(FakeCluster(namespace, own), own))["queue"] == "nlp"
    named = pod("named", queue="pod-q")
    assert spec_of(grouped(FakeCluster(namespace, named), named))["queue"] == "pod-q"


def test_no_queue_anywhere_is_a_problem_naming_the_label():
    the_pod = pod("lost", queue=None)
    outcome = FakeCluster(the_pod).group(the_pod)
    assert isinstance(outcome, Problem)
    assert outcome.field == "metadata.labels[kai.scheduler/queue]"
    assert "lost" in outcome.message


def test_priority_class_must_exist_to_be_used():
    high = priority_class("high", 150)
    named = pod("named", priority_class="high")
    labelled = pod("labelled", labels={"priorityClassName": "high"}, priority_class="ghost")
    ghost = pod("ghost", priority_class="ghost")
    cluster = FakeCluster(high)
    assert spec_of(grouped(cluster, named))["priorityClassName"] == "high"
    assert spec_of(grouped(cluster, labelled))["priorityClassName"] == "high"
    outcome = grouped(cluster, ghost)
    assert spec_of(outcome)["priorityClassName"] == "train"
    assert any("ghost" in note for note in outcome.notes)


def test_workload_type_defaults_give_priority_and_preemptibility():
    cls = priority_class("batch-low", 40)
    job = obj("batch/v1", "Job", "j")
    cluster = FakeCluster(cls, job)
    defaults = [{"typeName": "Job", "group": "batch", "priorityName": "batch-low", "preemptibility": "Preemptible"}]
    outcome = grouped(cluster, pod("j-0", owner=job), workload_defaults=defaults)
    assert spec_of(outcome)["priorityClassName"] == "batch-low"
    assert spec_of(outcome)["preemptibility"] == "preemptible"


def test_preemptibility_label_owner_first_invalid_values_noted_and_ignored():
    job = obj("batch/v1", "Job", "j", labels={"kai.scheduler/preemptibility": "sometimes"})
    on_pod = pod("j-0", owner=job, labels={"kai.scheduler/preemptibility": "non-preemptible"})
    outcome = grouped(FakeCluster(job), on_pod)
    assert spec_of(outcome)["preemptibility"] == "non-preemptible"
    assert any("sometimes" in note for note in outcome.notes)
    good_job = obj("batch/v1", "Job", "k", labels={"kai.scheduler/preemptibility": "preemptible"})
    outcome = grouped(FakeCluster(good_job), pod("k-0", owner=good_job,
                                                 labels={"kai.scheduler/preemptibility": "non-preemptible"}))
    assert spec_of(outcome)["preemptibility"] == "preemptible"


def test_preemption_delay_and_staleness_are_written_as_go_durations():
    job = obj("batch/v1", "Job", "j", annotations={"kai.scheduler/preemption-delay": "90s",
                                                    "kai.scheduler/staleness-grace-period": "1h"})
    outcome = grouped(FakeCluster(job), pod("j-0", owner=job))
    assert spec_of(outcome)["preemptionDelay"] == "1m30s"
    assert spec_of(outcome)["stalenessGracePeriod"] == "1h0m0s"
    bad_job = obj("batch/v1", "Job", "b", annotations={"kai.scheduler/preemption-delay": "-5m"})
    outcome = grouped(FakeCluster(bad_job), pod("b-0", owner=bad_job,
                                                annotations={"kai.scheduler/preemption-delay": "500ms"}))
    assert spec_of(outcome)["preemptionDelay"] == "500ms"
    assert any("-5m" in note for note in outcome.notes)


def test_topology_annotations_of_the_owner_become_the_topology_constraint():
    job = obj("batch/v1", "Job", "j", annotations={
        "kai.scheduler/topology": "tree", "kai.scheduler/topology-required-placement": "zone",
        "kai.scheduler/topology-preferred-placement": "rack"})
    outcome = grouped(FakeCluster(job), pod("j-0", owner=job))
    assert spec_of(outcome)["topologyConstraint"] == {
        "topology": "tree", "requiredTopologyLevel": "zone", "preferredTopologyLevel": "rack"}


def test_existing_podgroup_keeps_its_queue_and_mark_unschedulable():
    job = obj("batch/v1", "Job", "j", labels={"kai.scheduler/queue": "new-q"})
    name = f"pg-j-{uid_of('Job', 'j')}"
    old = obj("scheduling.run.ai/v2alpha2", "PodGroup", name, labels={"kai.scheduler/queue": "old-q"},
              spec={"queue": "old-q", "minMember": 1, "markUnschedulable": True})
    outcome = grouped(FakeCluster(job, old), pod("j-0", owner=job))
    assert spec_of(outcome)["queue"] == "old-q"
    assert spec_of(outcome)["markUnschedulable"] is True
    assert outcome.podgroup["metadata"]["labels"]["kai.scheduler/queue"] == "old-q"


# ------------------------------------------------------------------------------------------ Kubernetes kinds


def test_job_min_member_from_batch_min_member_annotation():
    job = obj("batch/v1", "Job", "train", annotations={"kai.scheduler/batch-min-member": "3"},
              labels={"team": "a"})
    outcome = grouped(FakeCluster(job), pod("train-0", owner=job))
    assert spec_of(outcome)["minMember"] == 3
    assert outcome.podgroup["metadata"]["name"] == f"pg-train-{uid_of('Job', 'train')}"
    assert outcome.podgroup["metadata"]["labels"] == {"team": "a"}
    assert outcome.podgroup["metadata"]["annotations"]["kai.scheduler/batch-min-member"] == "3"
    assert "kind: Job" in outcome.podgroup["metadata"]["annotations"]["kai.scheduler/top-owner-metadata"]
    assert outcome.top_owner == {"apiVersion": "batch/v1", "kind": "Job", "namespace": NS, "name": "train",
                                 "uid": uid_of("Job", "train")}


@pytest.mark.parametrize("value", ["abc", "", "2.5", "0"])
def test_job_with_unreadable_batch_min_member_is_a_problem(value):
    job = obj("batch/v1", "Job", "train", annotations={"kai.scheduler/batch-min-member": value})
    outcome = FakeCluster(job).group(pod("train-0", owner=job))
    assert isinstance(outcome, Problem)
    assert outcome.field == "Job/train metadata.annotations[kai.scheduler/batch-min-member]"
    assert repr(value) in outcome.message


def test_job_keeps_a_legacy_podgroup_named_after_the_pod():
    job = obj("batch/v1", "Job", "j", annotations={"kai.scheduler/batch-min-member": "4"})
    legacy = obj("scheduling.run.ai/v2alpha2", "PodGroup", f"pg-j-0-{uid_of('Job', 'j')}",
                 spec={"queue": "q", "minMember": 1})
    outcome = grouped(FakeCluster(job, legacy), pod("j-0", owner=job))
    assert outcome.podgroup["metadata"]["name"] == f"pg-j-0-{uid_of('Job', 'j')}"
    assert spec_of(outcome)["minMember"] == 1


def test_cronjob_groups_each_run_by_its_job():
    cron = obj("batch/v1", "CronJob", "nightly", annotations={"kai.scheduler/batch-min-member": "5"})
    job = obj("batch/v1", "Job", "nightly-29000000", owner=cron)
    outcome = grouped(FakeCluster(cron, job), pod("nightly-29000000-p0", owner=job))
    assert outcome.podgroup["metadata"]["name"] == f"pg-nightly-29000000-{uid_of('Job', 'nightly-29000000')}"
    assert outcome.podgroup["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert spec_of(outcome)["minMember"] == 1  # the CronJob grouper does not read batch-min-member
    assert outcome.top_owner["kind"] == "CronJob"


def test_deployment_pods_each_get_their_own_inference_podgroup():
    deploy = obj("apps/v1", "Deployment", "web")
    rs = obj("apps/v1", "ReplicaSet", "web-abc", owner=deploy)
    a, b = pod("web-abc-1", owner=rs), pod("web-abc-2", owner=rs)
    cluster = FakeCluster(deploy, rs, a, b)
    first, second = grouped(cluster, a), grouped(cluster, b)
    assert first.podgroup["metadata"]["name"] == f"pg-web-abc-1-{uid_of('Pod', 'web-abc-1')}"
    assert first.podgroup["metadata"]["name"] != second.podgroup["metadata"]["name"]
    assert first.podgroup["metadata"]["ownerReferences"][0]["kind"] == "Pod"
    assert spec_of(first)["priorityClassName"] == "inference"
    assert first.top_owner["kind"] == "Deployment"


def test_replicaset_and_statefulset_pods_share_their_owner_podgroup():
    rs = obj("apps/v1", "ReplicaSet", "rs")
    sts = obj("apps/v1", "StatefulSet", "db", labels={"priorityClassName": "high"})
    cluster = FakeCluster(rs, sts, priority_class("high", 150))
    rs_names = {grouped(cluster, pod(f"rs-{i}", owner=rs)).podgroup["metadata"]["name"] for i in range(2)}
    assert rs_names == {f"pg-rs-{uid_of('ReplicaSet', 'rs')}"}
    sts_outcome = grouped(cluster, pod("db-0", owner=sts))
    assert sts_outcome.podgroup["metadata"]["name"] == f"pg-db-{uid_of('StatefulSet', 'db')}"
    assert spec_of(sts_outcome)["priorityClassName"] == "high"
    assert spec_of(sts_outcome)["minMember"] == 1


def test_unknown_owner_kind_is_grouped_by_the_last_owner_found():
    crd = obj("example.com/v1", "Thing", "thing")
    child = obj("example.com/v1", "Part", "part", owner=crd)
    orphaned_above = obj("example.com/v1", "Part", "lonely",
                         owner=obj("example.com/v1", "Gone", "gone"))
    cluster = FakeCluster(crd, child, orphaned_above)
    outcome = grouped(cluster, pod("p", owner=child))
    assert outcome.top_owner["kind"] == "Thing"
    assert outcome.podgroup["metadata"]["name"] == f"pg-thing-{uid_of('Thing', 'thing')}"
    assert grouped(cluster, pod("q", owner=orphaned_above)).top_owner["name"] == "lonely"


def test_owner_problems_are_named():
    job = obj("batch/v1", "Job", "j")
    missing = pod("m", owner=obj("batch/v1", "Job", "absent"))
    wrong_uid = pod("w", owner=job)
    wrong_uid["metadata"]["ownerReferences"][0]["uid"] = "not-the-uid"
    two = obj("batch/v1", "Job", "two")
    two["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "A", "name": "a"}, {"apiVersion": "v1", "kind": "B", "name": "b"}]
    cluster = FakeCluster(job, two)
    outcome = cluster.group(missing)
    assert isinstance(outcome, Problem)
    assert outcome.field == "Pod/m metadata.ownerReferences[0]"
    assert "absent" in outcome.message
    outcome = cluster.group(wrong_uid)
    assert isinstance(outcome, Problem)
    assert outcome.field.endswith(".uid")
    outcome = cluster.group(pod("t", owner=two))
    assert isinstance(outcome, Problem)
    assert outcome.field == "Job/two metadata.ownerReferences"


# ------------------------------------------------------------------------------------------ Kubeflow


def kubeflow_job(kind: str, name: str, key: str, replicas: dict[str, int], **spec: Any) -> dict[str, Any]:
    return obj("kubeflow.org/v1", kind, name, labels={"kai.scheduler/queue": "q"},
               spec={key: {t: {"replicas": n, "template": {"spec": {}}} for t, n in replicas.items()}, **spec})


def kubeflow_pod(job: dict[str, Any], replica_type: str, index: int) -> dict[str, Any]:
    name = job["metadata"]["name"]
    return pod(f"{name}-{replica_type}-{index}", owner=job, labels={
        "training.kubeflow.org/job-name": name, "training.kubeflow.org/replica-type": replica_type,
        "training.kubeflow.org/replica-index": str(index)})


def test_tfjob_gang_is_every_replica():
    tf = kubeflow_job("TFJob", "tf", "tfReplicaSpecs", {"Chief": 1, "Worker": 3, "PS": 2})
    outcome = grouped(FakeCluster(tf), kubeflow_pod(tf, "worker", 0))
    assert spec_of(outcome)["minMember"] == 6
    assert "subGroups" not in spec_of(outcome)


def test_run_policy_min_available_overrides_the_replica_count():
    tf = kubeflow_job("TFJob", "tf", "tfReplicaSpecs", {"Worker": 8},
                      runPolicy={"schedulingPolicy": {"minAvailable": 2}})
    assert spec_of(grouped(FakeCluster(tf), kubeflow_pod(tf, "worker", 0)))["minMember"] == 2


def test_xgboost_and_jax_need_their_replica_types():
    xgb = kubeflow_job("XGBoostJob", "xgb", "xgbReplicaSpecs", {"Master": 1, "Worker": 3})
    assert spec_of(grouped(FakeCluster(xgb), kubeflow_pod(xgb, "master", 0)))["minMember"] == 4
    no_master = kubeflow_job("XGBoostJob", "half", "xgbReplicaSpecs", {"Worker": 3})
    outcome = FakeCluster(no_master).group(kubeflow_pod(no_master, "worker", 0))
    assert isinstance(outcome, Problem)
    assert outcome.field == "XGBoostJob/half spec.xgbReplicaSpecs.Master"
    jax = kubeflow_job("JAXJob", "jax", "jaxReplicaSpecs", {"Worker": 3})
    assert spec_of(grouped(FakeCluster(jax), kubeflow_pod(jax, "worker", 1)))["minMember"] == 3
    zero = kubeflow_job("JAXJob", "zero", "jaxReplicaSpecs", {"Worker": 0})
    outcome = FakeCluster(zero).group(kubeflow_pod(zero, "worker", 0))
    assert isinstance(outcome, Problem)
    assert outcome.rule == "must be at least 1"


def test_pytorchjob_has_master_and_worker_subgroups():
    job = kubeflow_job("PyTorchJob", "pt", "pytorchReplicaSpecs", {"Master": 1, "Worker": 3},
                       elasticPolicy={"minReplicas": 2})
    cluster = FakeCluster(job)
    master = grouped(cluster, kubeflow_pod(job, "master", 0))
    worker = grouped(cluster, kubeflow_pod(job, "worker", 2))
    assert spec_of(master)["minMember"] == 2
    assert sub_groups(master) == {"master": {"name": "master", "minMember": 1},
                                  "worker": {"name": "worker", "minMember": 1}}
    assert master.pod_labels == {SUBGROUP: "master"}
    assert worker.pod_labels == {SUBGROUP: "worker"}
    assert spec_of(master) == spec_of(worker)


def test_pytorchjob_workers_in_segments():
    job = kubeflow_job("PyTorchJob", "seg", "pytorchReplicaSpecs", {"Worker": 5})
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {"annotations": {
        "kai.scheduler/segment-size": "2", "kai.scheduler/topology": "tree",
        "kai.scheduler/segment-topology-required-placement": "rack"}}
    outcome = grouped(FakeCluster(job), kubeflow_pod(job, "worker", 3))
    groups = sub_groups(outcome)
    assert groups["worker"] == {"name": "worker", "minSubGroup": 3}
    assert [groups[f"worker-{i}"]["minMember"] for i in range(3)] == [2, 2, 1]
    assert groups["worker-1"]["parent"] == "worker"
    assert groups["worker-1"]["topologyConstraint"] == {"topology": "tree", "requiredTopologyLevel": "rack"}
    assert outcome.pod_labels == {SUBGROUP: "worker-1"}


def mpijob(name: str, api_version: str = "kubeflow.org/v2beta1", **spec: Any) -> dict[str, Any]:
    return obj(api_version, "MPIJob", name, spec={"mpiReplicaSpecs": {
        "Launcher": {"replicas": 1, "template": {}}, "Worker": {"replicas": 2, "template": {}}}, **spec})


def test_mpijob_launcher_job_pod_joins_the_mpijob_podgroup():
    job = mpijob("mpi")
    launcher_job = obj("batch/v1", "Job", "mpi-launcher", owner=job)
    roles = {"training.kubeflow.org/job-name": "mpi"}
    launcher = pod("mpi-launcher-x", owner=launcher_job, labels={**roles, "training.kubeflow.org/job-role": "launcher"})
    worker = pod("mpi-worker-0", owner=job, labels={**roles, "training.kubeflow.org/job-role": "worker"})
    cluster = FakeCluster(job, launcher_job, launcher, worker)
    a, b = grouped(cluster, launcher), grouped(cluster, worker)
    assert a.podgroup["metadata"]["name"] == b.podgroup["metadata"]["name"] == f"pg-mpi-{uid_of('MPIJob', 'mpi')}"
    assert spec_of(a)["minMember"] == 3
    v1 = mpijob("old", api_version="kubeflow.org/v1")
    assert spec_of(grouped(FakeCluster(v1), pod("old-worker-0", owner=v1)))["minMember"] == 3


def test_mpijob_waiting_for_workers_leaves_the_launcher_out_until_it_exists():
    job = mpijob("late", launcherCreationPolicy="WaitForWorkersReady")
    roles = {"training.kubeflow.org/job-name": "late"}
    worker = pod("late-worker-0", owner=job, labels={**roles, "training.kubeflow.org/job-role": "worker"})
    cluster = FakeCluster(job, worker)
    assert spec_of(grouped(cluster, worker))["minMember"] == 2
    assert spec_of(grouped(cluster, worker, list_pods=None))["minMember"] == 2
    launcher_job = obj("batch/v1", "Job", "late-launcher", owner=job)
    launcher = pod("late-launcher-x", owner=launcher_job,
                   labels={**roles, "training.kubeflow.org/job-role": "launcher"})
    cluster.apply(launcher_job, launcher)
    assert spec_of(grouped(cluster, worker))["minMember"] == 3
    assert spec_of(grouped(cluster, worker, list_pods=None))["minMember"] == 3


# ------------------------------------------------------------------------------------------ JobSet, TrainJob


def jobset(name: str, jobs: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return obj("jobset.x-k8s.io/v1alpha2", "JobSet", name, labels={"kai.scheduler/queue": "q"},
               spec={"replicatedJobs": jobs, **spec})


def jobset_pod(js: dict[str, Any], rjob: str, index: int, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    return pod(f"{js['metadata']['name']}-{rjob}-{index}-0", owner=owner or js, labels={
        "jobset.sigs.k8s.io/replicatedjob-name": rjob, "jobset.sigs.k8s.io/job-index": str(index)})


def test_jobset_subgroup_tree_with_in_order_and_min_member_override():
    jobs = [{"name": "driver", "replicas": 1, "template": {"spec": {"parallelism": 1}}},
            {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4}, "metadata": {
                "annotations": {"kai.scheduler/batch-min-member": "3"}}}}]
    js = jobset("js", jobs)
    job = obj("batch/v1", "Job", "js-workers-1", owner=js)
    outcome = grouped(FakeCluster(js, job), jobset_pod(js, "workers", 1, owner=job))
    assert spec_of(outcome)["minSubGroup"] == 2
    assert "minMember" not in spec_of(outcome)
    assert sub_groups(outcome) == {
        "driver": {"name": "driver", "minSubGroup": 1},
        "driver-replica-0": {"name": "driver-replica-0", "parent": "driver", "minMember": 1},
        "workers": {"name": "workers", "minSubGroup": 2},
        "workers-replica-0": {"name": "workers-replica-0", "parent": "workers", "minMember": 3},
        "workers-replica-1": {"name": "workers-replica-1", "parent": "workers", "minMember": 3}}
    assert outcome.pod_labels == {SUBGROUP: "workers-replica-1"}
    in_order = jobset("ordered", jobs, startupPolicy={"startupPolicyOrder": "InOrder"})
    assert spec_of(grouped(FakeCluster(in_order), jobset_pod(in_order, "driver", 0)))["minSubGroup"] == 1
    capped = jobset("capped", jobs)
    capped["metadata"]["annotations"] = {"kai.scheduler/batch-min-member": "9"}
    assert spec_of(grouped(FakeCluster(capped), jobset_pod(capped, "driver", 0)))["minSubGroup"] == 2


def test_jobset_pod_without_its_labels_is_a_problem():
    js = jobset("js", [{"name": "a", "template": {}}])
    outcome = FakeCluster(js).group(pod("stray", owner=js))
    assert isinstance(outcome, Problem)
    assert outcome.field == "Pod/stray metadata.labels[jobset.sigs.k8s.io/replicatedjob-name]"


def test_trainjob_is_grouped_as_the_jobset_below_it():
    train = obj("trainer.kubeflow.org/v1alpha1", "TrainJob", "tj", labels={"kai.scheduler/queue": "train-q"},
                annotations={"kai.scheduler/preemption-delay": "2m"})
    js = obj("jobset.x-k8s.io/v1alpha2", "JobSet", "tj", owner=train,
             spec={"replicatedJobs": [{"name": "node", "replicas": 2, "template": {"spec": {"parallelism": 1}}}]})
    job = obj("batch/v1", "Job", "tj-node-0", owner=js)
    outcome = grouped(FakeCluster(train, js, job), jobset_pod(js, "node", 0, owner=job))
    assert outcome.podgroup["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    assert spec_of(outcome)["queue"] == "train-q"
    assert spec_of(outcome)["preemptionDelay"] == "2m0s"
    assert spec_of(outcome)["minSubGroup"] == 1
    assert outcome.top_owner["kind"] == "TrainJob"


# ------------------------------------------------------------------------------------------ LeaderWorkerSet


def lws_objects(size: int = 3, groups: int = 2, **spec: Any) -> list[dict[str, Any]]:
    lws = obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "lws", labels={"kai.scheduler/queue": "q"},
              spec={"replicas": groups, "leaderWorkerTemplate": {"size": size, "workerTemplate": {}}, **spec})
    leaders = obj("apps/v1", "StatefulSet", "lws", owner=lws)
    out = [lws, leaders]
    for g in range(groups):
        leader = pod(f"lws-{g}", owner=leaders, labels={
            "leaderworkerset.sigs.k8s.io/group-index": str(g), "leaderworkerset.sigs.k8s.io/worker-index": "0"},
            annotations={"leaderworkerset.sigs.k8s.io/size": str(size)})
        workers = obj("apps/v1", "StatefulSet", f"lws-{g}", owner=leader)
        out += [leader, workers]
        for w in range(1, size):
            out.append(pod(f"lws-{g}-{w}", owner=workers, labels={
                "leaderworkerset.sigs.k8s.io/group-index": str(g), "leaderworkerset.sigs.k8s.io/worker-index": str(w)},
                annotations={"leaderworkerset.sigs.k8s.io/size": str(size)}))
    return out


def test_lws_one_podgroup_per_group_with_leader_and_workers():
    cluster = FakeCluster(*lws_objects())
    outcomes = cluster.run_grouper()
    base = f"pg-lws-{uid_of('LeaderWorkerSet', 'lws')}"
    assert sorted(g["metadata"]["name"] for g in cluster.pod_groups()) == [f"{base}-group-0", f"{base}-group-1"]
    worker = outcomes[f"{NS}/lws-1-2"]
    assert worker.podgroup["metadata"]["name"] == f"{base}-group-1"
    assert spec_of(worker)["minMember"] == 3
    assert sub_groups(worker) == {"leader": {"name": "leader", "minMember": 1},
                                  "workers": {"name": "workers", "minMember": 2}}
    assert worker.pod_labels == {SUBGROUP: "workers"}
    assert outcomes[f"{NS}/lws-0"].pod_labels == {SUBGROUP: "leader"}


def test_lws_leader_ready_asks_only_for_an_unscheduled_leader():
    objects = lws_objects(startupPolicy="LeaderReady")
    cluster = FakeCluster(*objects)
    leader = cluster.get("Pod", NS, "lws-0")
    assert spec_of(grouped(cluster, leader))["minMember"] == 1
    leader["spec"]["nodeName"] = "node-1"
    assert spec_of(grouped(cluster, leader))["minMember"] == 3


def test_lws_segments_put_the_leader_in_the_first():
    lws_with_segments = lws_objects(size=5, groups=1)
    lws_with_segments[0]["spec"]["leaderWorkerTemplate"]["subGroupPolicy"] = {"subGroupSize": 2}
    cluster = FakeCluster(*lws_with_segments)
    outcomes = cluster.run_grouper()
    groups = sub_groups(outcomes[f"{NS}/lws-0-4"])
    assert groups["segment-0"] == {"name": "segment-0", "minSubGroup": 2}
    assert groups["segment-1"]["minMember"] == 2
    assert groups["leader"] == {"name": "leader", "parent": "segment-0", "minMember": 1}
    assert groups["workers"] == {"name": "workers", "parent": "segment-0", "minMember": 2}
    assert outcomes[f"{NS}/lws-0-4"].pod_labels == {SUBGROUP: "segment-1"}
    assert outcomes[f"{NS}/lws-0-1"].pod_labels == {SUBGROUP: "workers"}
    assert outcomes[f"{NS}/lws-0"].pod_labels == {SUBGROUP: "leader"}


# ------------------------------------------------------------------------------------------ Ray


def ray_cluster_spec(*groups: dict[str, Any]) -> dict[str, Any]:
    return {"headGroupSpec": {"template": {}}, "workerGroupSpecs": list(groups)}


def ray_pod(cluster_name: str, group: str, i: int, owner: dict[str, Any]) -> dict[str, Any]:
    return pod(f"{cluster_name}-{group}-{i}", owner=owner, labels={"ray.io/cluster": cluster_name, "ray.io/group": group})


def test_raycluster_head_and_worker_groups():
    spec = ray_cluster_spec({"groupName": "small", "replicas": 3, "minReplicas": 1},
                            {"groupName": "multi", "replicas": 2, "numOfHosts": 2},
                            {"groupName": "off", "replicas": 4, "suspended": True},
                            {"replicas": 1})
    rc = obj("ray.io/v1", "RayCluster", "rc", labels={"kai.scheduler/queue": "q"}, spec=spec)
    outcome = grouped(FakeCluster(rc), ray_pod("rc", "small", 0, rc))
    assert spec_of(outcome)["minMember"] == 1 + 1 + 4 + 1
    assert sub_groups(outcome) == {"headgroup": {"name": "headgroup", "minMember": 1},
                                   "small": {"name": "small", "minMember": 1},
                                   "multi": {"name": "multi", "minMember": 4},
                                   "worker-group-3": {"name": "worker-group-3", "minMember": 1}}
    assert outcome.pod_labels == {SUBGROUP: "small"}


def test_rayjob_and_rayservice_find_their_cluster_through_status():
    spec = ray_cluster_spec({"groupName": "w", "replicas": 2})
    job = obj("ray.io/v1", "RayJob", "rj", labels={"ray.io/priority-class-name": "ray-prio"},
              status={"rayClusterName": "rj-abc"})
    service = obj("ray.io/v1", "RayService", "rs", status={"pendingServiceStatus": {"rayClusterName": "rs-abc"}})
    rc_job = obj("ray.io/v1", "RayCluster", "rj-abc", owner=job, spec=spec)
    rc_service = obj("ray.io/v1", "RayCluster", "rs-abc", owner=service, spec=spec)
    cluster = FakeCluster(job, service, rc_job, rc_service)
    by_job = grouped(cluster, ray_pod("rj-abc", "headgroup", 0, rc_job))
    assert by_job.podgroup["metadata"]["name"] == f"pg-rj-{uid_of('RayJob', 'rj')}"
    assert spec_of(by_job)["minMember"] == 3
    assert spec_of(by_job)["priorityClassName"] == "ray-prio"
    assert by_job.pod_labels == {SUBGROUP: "headgroup"}
    by_service = grouped(cluster, ray_pod("rs-abc", "w", 0, rc_service))
    assert by_service.podgroup["metadata"]["ownerReferences"][0]["kind"] == "RayService"
    not_ready = obj("ray.io/v1", "RayJob", "early")
    outcome = FakeCluster(not_ready, rc_job).group(ray_pod("rj-abc", "w", 0, not_ready))
    assert isinstance(outcome, Problem)
    assert outcome.field == "RayJob/early status.rayClusterName"


def test_ray_podgroup_made_without_subgroups_stays_without():
    rc = obj("ray.io/v1", "RayCluster", "rc", spec=ray_cluster_spec({"groupName": "w", "replicas": 2}))
    old = obj("scheduling.run.ai/v2alpha2", "PodGroup", f"pg-rc-{uid_of('RayCluster', 'rc')}",
              spec={"queue": "q", "minMember": 3})
    outcome = grouped(FakeCluster(rc, old), ray_pod("rc", "w", 0, rc))
    assert "subGroups" not in spec_of(outcome)
    assert outcome.pod_labels == {}


def test_ray_worker_group_with_fewer_replicas_than_minimum_is_a_problem():
    rc = obj("ray.io/v1", "RayCluster", "rc", spec=ray_cluster_spec({"groupName": "w", "replicas": 1, "minReplicas": 2}))
    outcome = FakeCluster(rc).group(ray_pod("rc", "w", 0, rc))
    assert isinstance(outcome, Problem)
    assert outcome.field == "RayCluster/rc spec.workerGroupSpecs[0].replicas"


# ------------------------------------------------------------------------------------------ robustness


def test_grouping_again_recomputes_from_the_owner_spec():
    job = kubeflow_job("TFJob", "tf", "tfReplicaSpecs", {"Worker": 2})
    cluster = FakeCluster(job, kubeflow_pod(job, "worker", 0))
    cluster.run_grouper()
    grown = copy.deepcopy(job)
    grown["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 4
    cluster.apply(grown, kubeflow_pod(grown, "worker", 3))
    cluster.run_grouper()
    (pg,) = cluster.pod_groups()
    assert pg["spec"]["minMember"] == 4


def test_same_input_gives_the_same_grouping():
    objects = lws_objects()
    first, second = FakeCluster(*objects), FakeCluster(*copy.deepcopy(objects))
    assert first.run_grouper() == second.run_grouper()


@pytest.mark.parametrize("mangle", [
    lambda p: p.update(metadata="x"),
    lambda p: p["metadata"].update(ownerReferences="x"),
    lambda p: p["metadata"].update(ownerReferences=[{"kind": "Job"}]),
    lambda p: p["metadata"].update(labels=["x"]),
    lambda p: p["metadata"].update(annotations={"pod-group-name": 3}),
    lambda p: p.update(spec=None),
])
def test_malformed_pod_never_raises(mangle):
    the_pod = pod("odd")
    mangle(the_pod)
    outcome = FakeCluster().group(the_pod)
    assert isinstance(outcome, Grouping | Skipped | Problem)


@pytest.mark.parametrize("spec", [
    {"tfReplicaSpecs": "x"}, {"tfReplicaSpecs": {"Worker": {"replicas": "two"}}},
    {"tfReplicaSpecs": {"Worker": {"replicas": True}}}, {"runPolicy": {"schedulingPolicy": {"minAvailable": 1.5}}},
])
def test_malformed_owner_is_a_problem_not_a_crash(spec):
    job = obj("kubeflow.org/v1", "TFJob", "tf", spec=spec)
    outcome = FakeCluster(job).group(pod("tf-0", owner=job))
    assert isinstance(outcome, Problem)
    assert outcome.field.startswith("TFJob/tf spec.")


def test_a_failing_lookup_counts_as_absent():
    def broken(*args: Any) -> None:
        raise RuntimeError("apiserver down")

    the_pod = pod("solo")
    outcome = podgrouper.group_pod(the_pod, broken)
    assert isinstance(outcome, Grouping)
    assert any("apiserver down" in note for note in outcome.notes)


# ------------------------------------------------------------------------------------------ the kai-e2e corpus

CORPUS = Path(os.environ.get("KAI_E2E_CORPUS") or Path(__file__).parents[3] / ".." / "shared" / "corpus" / "kai-e2e")
CHECKED_FIELDS = (("min_member", "minMember"), ("queue", "queue"), ("priority_class", "priorityClassName"),
                  ("preemptibility", "preemptibility"), ("min_subgroup", "minSubGroup"))


def corpus_scenarios() -> list[dict[str, Any]]:
    if not CORPUS.is_dir():
        return []
    out = []
    for path in sorted(CORPUS.rglob("*.json")):
        try:
            loaded = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(loaded, list):
            out += [s for s in loaded if isinstance(s, dict) and "steps" in s]
    return out


SCENARIOS = corpus_scenarios()
needs_corpus = pytest.mark.skipif(not SCENARIOS, reason=f"kai-e2e corpus not found at {CORPUS}")


def with_podgroup_expectations(scenarios: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in scenarios if any((st.get("expect") or {}).get("podgroups") for st in s["steps"])]


def find(cluster: FakeCluster, expectation: dict[str, Any]) -> list[dict[str, Any]]:
    """The PodGroups an expectation selects, as the corpus's evaluate.py selects them."""
    if "for_pod" in expectation:
        namespace, name = expectation["for_pod"].split("/")
        the_pod = cluster.get("Pod", namespace, name) or {}
        wanted = (the_pod.get("metadata", {}).get("annotations") or {}).get("pod-group-name")
        return [g for g in cluster.pod_groups(namespace) if g["metadata"]["name"] == wanted]
    if "owner" in expectation:
        owner = expectation["owner"]
        return [g for g in cluster.pod_groups(owner["namespace"]) if any(
            r.get("kind") == owner["kind"] and r.get("name") == owner["name"]
            for r in g["metadata"].get("ownerReferences") or [])]
    if "name" in expectation:
        return [g for g in cluster.pod_groups(expectation["namespace"]) if g["metadata"]["name"] == expectation["name"]]
    return cluster.pod_groups(expectation["namespace"])


def failure(cluster: FakeCluster, expectation: dict[str, Any]) -> str | None:
    """Why a podgroups expectation fails on the grouper's PodGroups, or None. Scheduling conditions are
    the scheduler's, not the grouper's: for those only the PodGroup's existence is checked."""
    found = find(cluster, expectation)
    if "count" in expectation and not any(k in expectation for k in ("for_pod", "owner", "name")):
        names = [g["metadata"]["name"] for g in found]
        return None if len(found) == expectation["count"] else f"{len(found)} PodGroups {names}"
    if expectation.get("exists") is False:
        return "exists" if found else None
    if not found:
        return "no such PodGroup"
    spec = found[0]["spec"]
    for key, field in CHECKED_FIELDS:
        if key in expectation and spec.get(field) != expectation[key]:
            return f"spec.{field}={spec.get(field)!r}, want {expectation[key]!r}"
    have = {s["name"]: s for s in spec.get("subGroups") or []}
    if "subgroup_names" in expectation and sorted(have) != sorted(expectation["subgroup_names"]):
        return f"subGroups {sorted(have)}"
    for name, want in (expectation.get("subgroups") or {}).items():
        if name not in have:
            return f"no subGroup {name}"
        for field in ("parent", "minSubGroup", "minMember"):
            if have[name].get(field) != want.get(field):
                return f"subGroup {name} {field}={have[name].get(field)!r}, want {want.get(field)!r}"
    if "subgroups" in expectation and sorted(have) != sorted(expectation["subgroups"]):
        return f"subGroups {sorted(have)}"
    return None


def replay(scenario: dict[str, Any]) -> tuple[list[tuple[dict[str, Any], str | None]], list[str]]:
    """Apply the scenario's steps, run the grouper after each apply; ([(expectation, failure)], problems)."""
    cluster, results, problems = FakeCluster(), [], []
    for step in scenario["steps"]:
        if "apply" in step:
            cluster.apply(*step["apply"])
            for key, outcome in cluster.run_grouper().items():
                if isinstance(outcome, Problem):
                    problems.append(f"{key}: {outcome.message}")
        for gone in step.get("delete") or []:
            cluster.delete(gone["kind"], gone.get("namespace", ""), gone["name"])
        for expectation in (step.get("expect") or {}).get("podgroups") or []:
            results.append((expectation, failure(cluster, expectation)))
    return results, problems


@needs_corpus
@pytest.mark.parametrize("scenario", with_podgroup_expectations(SCENARIOS), ids=lambda s: s["id"])
def test_corpus_podgroup_expectations(scenario):
    results, problems = replay(scenario)
    assert problems == []
    assert [(json.dumps(e), why) for e, why in results if why] == []


@needs_corpus
def test_corpus_every_pod_of_the_scheduler_is_grouped_or_left_to_a_hand_made_podgroup():
    problems, unmatched = [], []
    for scenario in SCENARIOS:
        _, found = replay(scenario)
        problems += [f"{scenario['id']}: {p}" for p in found]
        hand_made = {(o["metadata"].get("namespace"), o["metadata"]["name"]) for st in scenario["steps"]
                     for o in st.get("apply") or [] if o.get("kind") == "PodGroup"}
        for st in scenario["steps"]:
            for o in st.get("apply") or []:
                named = ((o.get("metadata") or {}).get("annotations") or {}).get("pod-group-name")
                if o.get("kind") == "Pod" and named and (o["metadata"]["namespace"], named) not in hand_made:
                    unmatched.append(f"{scenario['id']}: {o['metadata']['name']} names {named}")
    assert problems == []
    assert unmatched == []


@needs_corpus
def test_corpus_podgroup_expectation_count():
    scenarios = with_podgroup_expectations(SCENARIOS)
    results = [why for s in scenarios for _, why in replay(s)[0]]
    passed = sum(1 for why in results if why is None)
    print(f"\nkai-e2e podgroup expectations: {passed}/{len(results)} pass in {len(scenarios)} scenarios")
    assert results
    assert passed == len(results)


def test_a_new_pod_group_in_a_projects_namespace_waits_for_its_node_pool_and_keeps_the_one_given():
    namespace = obj("v1", "Namespace", NS, namespace="", labels={"kai/project": "vision"})
    the_pod = pod("solo")
    cluster = FakeCluster(namespace, the_pod)
    made = grouped(cluster, the_pod)
    assert made.podgroup["metadata"]["labels"]["kai.scheduler/node-pool"] == "kai-unexisting-node-pool"
    # Assigned to the default pool (the label taken away): the grouper's next pass keeps it so.
    assigned = copy.deepcopy(made.podgroup)
    del assigned["metadata"]["labels"]["kai.scheduler/node-pool"]
    cluster.apply(assigned)
    assert "kai.scheduler/node-pool" not in grouped(cluster, the_pod).podgroup["metadata"]["labels"]
    # A pod that names its pool is not held back; outside a project's namespace nothing is added.
    named = pod("named", labels={"kai.scheduler/node-pool": "h100"})
    cluster.apply(named)
    assert grouped(cluster, named).podgroup["metadata"]["labels"]["kai.scheduler/node-pool"] == "h100"
    plain = pod("plain")
    assert "kai.scheduler/node-pool" not in grouped(FakeCluster(plain), plain).podgroup["metadata"]["labels"]
