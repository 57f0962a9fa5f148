"""Node predicates: whether a pod may go to a node at all, and the reason when it may not.

Invariant: every function here is pure and deterministic; nothing reads or changes session
state. The *static* predicates (readiness, cordon, taints, node selector and node affinity, the
GPU/MIG type rules, extended resources the node does not offer) depend only on the pod's shape
and the node's spec, so ``allocate.Placer`` evaluates them once per pod shape and caches the
result. The *dynamic* ones (host ports, pod affinity and anti-affinity) depend on which pods
are on a node and are checked at every placement.

Reason texts are Kubernetes' and KAI's (``node(s) had untolerated taint {key: value}``,
``node(s) didn't match Pod's node affinity/selector``, ...), so a fit-error summary reads as
KAI's: ``0/3 nodes are available: 1 node(s) had untolerated taint {gpu: true}, 2 ...``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler_core import model as m

NOT_READY = "node(s) were not ready"
UNSCHEDULABLE = "node(s) were unschedulable"
NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
GPU_MEMORY_UNSYNCED = "node(s) are not GPU nodes or their GPU memory count was not synced yet"
MIG_ONLY = "node(s) offer only MIG devices"
SHARED_ON_MIG = "node(s) have MIG enabled, which GPU sharing cannot use"
HOST_PORTS = "node(s) didn't have free ports for the requested pod ports"
POD_AFFINITY = "node(s) didn't match pod affinity rules"
POD_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
POD_NUMBER = "node(s) pod number exceeded"

#: the taint a cordoned node is treated as having (Kubernetes' NodeUnschedulable plugin)
UNSCHEDULABLE_TAINT = m.Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
#: field name matchFields may use
NAME_FIELD = "metadata.name"
#: preferred node affinity: kube's NodeAffinity score (0..100, normalised over the candidate
#: nodes) times this weight is added to the node score. 1 puts it above bin-packing (0..9) and
#: resource type (10), below node availability (1000): a preferred node that must wait for
#: releasing pods loses to a node that fits now.
PREFERRED_NODE_AFFINITY_WEIGHT = 1.0
#: preferred pod (anti-)affinity: normalised 0..100 like the node affinity score, then weighted;
#: KAI's podaffinity plugin puts it above everything else but the nominated node.
PREFERRED_POD_AFFINITY_WEIGHT = 10_000.0


def untolerated_taint_reason(taint: m.Taint) -> str:
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"


def insufficient(resource: str) -> str:
    return f"node(s) didn't have enough resources: {resource}"


def insufficient_mig(profile: str) -> str:
    return f"node(s) didn't have enough of mig profile: {profile}"


# --------------------------------------------------------------------------------------------
# Taints


def tolerates(tol: m.Toleration, taint: m.Taint) -> bool:
    """Kubernetes' ``ToleratesTaint``: effect empty or equal; key empty (with Exists) or equal;
    Exists ignores the value, Equal (or empty) compares it."""
    if tol.effect and tol.effect != taint.effect:
        return False
    if tol.key and tol.key != taint.key:
        return False
    if tol.operator == "Exists":
        return True
    if not tol.key:
        return False  # an empty key only means "every key" with Exists
    return tol.operator in ("Equal", "") and tol.value == taint.value


def untolerated_taint(taints: Iterable[m.Taint], tolerations: tuple[m.Toleration, ...]) -> m.Taint | None:
    """The first NoSchedule / NoExecute taint no toleration matches; None when the pod may go."""
    for taint in taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(tolerates(tol, taint) for tol in tolerations):
            return taint
    return None


# --------------------------------------------------------------------------------------------
# Node selector and node affinity


def requirement_matches(req: m.NodeSelectorRequirement, value: str | None) -> bool:
    """One requirement against a label (or field) value; None = the node lacks the label.
    Gt / Lt compare integers; a value that is not one never matches."""
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or len(req.values) != 1:
            return False
        try:
            have, bound = int(value), int(req.values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def term_matches(node: m.NodeSpec, term: m.NodeSelectorTerm) -> bool:
    """A nodeSelectorTerm: every expression on the node's labels and every field requirement
    (``metadata.name``) hold. An empty term matches no node, as in Kubernetes."""
    if not term.match_expressions and not term.match_fields:
        return False
    for req in term.match_expressions:
        if not requirement_matches(req, node.label(req.key)):
            return False
    for req in term.match_fields:
        if not requirement_matches(req, node.name if req.key == NAME_FIELD else None):
            return False
    return True


def node_affinity_matches(node: m.NodeSpec, spec: m.TaskSpec) -> bool:
    """nodeSelector, required node affinity and KAI's ``kai.scheduler/type`` affinity all hold."""
    if spec.node_affinity is not None and node.label(m.NODE_TYPE_LABEL) not in spec.node_affinity:
        return False
    for key, want in spec.node_selector.items():
        if node.label(key) != want:
            return False
    terms = spec.required_node_affinity
    return terms is None or any(term_matches(node, t) for t in terms)


def preferred_node_affinity_raw(node: m.NodeSpec, prefs: tuple[m.PreferredSchedulingTerm, ...]) -> int:
    """Sum of the weights of the preferred terms the node matches (kube's raw NodeAffinity score)."""
    return sum(p.weight for p in prefs if term_matches(node, p.term))


# --------------------------------------------------------------------------------------------
# The static predicates of one pod shape on one node


def static_failure(node: m.NodeSpec, spec: m.TaskSpec, predicates: bool) -> str | None:
    """Why ``spec`` may never go to ``node`` in this cycle, whatever runs there; None if it may.

    ``predicates`` False (KAI's predicates plugin off) keeps only the GPU/MIG type rules, which
    are part of resource fit. Checks run in Kubernetes' filter order and the first failure is
    the node's reason."""
    r = spec.request
    if predicates:
        if not node.ready:
            return NOT_READY
        if node.unschedulable and not any(tolerates(t, UNSCHEDULABLE_TAINT) for t in spec.tolerations):
            return UNSCHEDULABLE
        taint = untolerated_taint(node.taints, spec.tolerations) if node.taints else None
        if taint is not None:
            return untolerated_taint_reason(taint)
        if not node_affinity_matches(node, spec):
            return NODE_AFFINITY
        if r.gpu_kind == m.GPU_MEMORY and not node.gpu_memory_synced:
            return GPU_MEMORY_UNSYNCED
    if r.gpu_kind == m.GPU_MIG:
        if not node.mig_enabled or node.mig_strategy == "single":
            return insufficient_mig(_first(r.mig))
        for profile, count in sorted(r.mig.items()):
            if node.mig_instances.get(profile, 0) < count:
                return insufficient_mig(profile)
    elif r.gpu_kind == m.GPU_WHOLE:
        if node.mig_strategy == "mixed":
            return MIG_ONLY
    elif r.gpu_kind in (m.GPU_FRACTION, m.GPU_MEMORY):
        if node.mig_enabled:
            return SHARED_ON_MIG
    for name, amount in sorted(r.extended.items()):
        if amount > 0 and node.extended.get(name, 0.0) < amount:
            return insufficient(name)
    return None


def _first(mig: Mapping[str, int]) -> str:
    return sorted(mig)[0] if mig else "mig"


# --------------------------------------------------------------------------------------------
# Host ports


def _port_parts(port: str) -> tuple[str, str, str]:
    parts = port.split("/", 2)
    while len(parts) < 3:
        parts.append("")
    return parts[0], parts[1], parts[2]


def ports_conflict(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Two pods' host ports clash: same protocol and port, and the same host IP or either one on
    every address (empty or 0.0.0.0)."""
    for pa in a:
        proto_a, num_a, ip_a = _port_parts(pa)
        for pb in b:
            proto_b, num_b, ip_b = _port_parts(pb)
            if proto_a != proto_b or num_a != num_b:
                continue
            if ip_a in ("", "0.0.0.0") or ip_b in ("", "0.0.0.0") or ip_a == ip_b:
                return True
    return False


# --------------------------------------------------------------------------------------------
# Pod affinity


def pod_term_selects(term: m.PodAffinityTerm, own_namespace: str, namespace: str, labels: Mapping[str, str]) -> bool:
    """Whether a pod (its namespace and labels) is one the term refers to."""
    namespaces = term.namespaces or (own_namespace,)
    if namespace not in namespaces and "*" not in namespaces:
        return False
    if term.match_labels is None:
        return False
    if not term.match_labels and not term.match_expressions:
        return True  # an empty selector selects every pod of those namespaces
    for key, want in term.match_labels:
        if labels.get(key) != want:
            return False
    for req in term.match_expressions:
        if req.operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
        if not requirement_matches(req, labels.get(req.key)):
            return False
    return True


__all__ = [
    "EXISTING_ANTI_AFFINITY", "HOST_PORTS", "NODE_AFFINITY", "NOT_READY", "POD_AFFINITY", "POD_ANTI_AFFINITY",
    "POD_NUMBER", "PREFERRED_NODE_AFFINITY_WEIGHT", "PREFERRED_POD_AFFINITY_WEIGHT", "UNSCHEDULABLE",
    "insufficient", "insufficient_mig", "node_affinity_matches", "pod_term_selects", "ports_conflict",
    "preferred_node_affinity_raw", "requirement_matches", "static_failure", "term_matches", "tolerates",
    "untolerated_taint", "untolerated_taint_reason",
]
