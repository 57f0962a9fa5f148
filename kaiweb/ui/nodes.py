"""The nodes page: a GPU map (node × device, coloured by the queue using it, fractions as partial cells)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from kaiweb.cluster.models import GpuDevice, Node, OtherPod, SchedulingShard, Topology
from kaiweb.ui.charts import queue_colour
from kaiweb.ui.pages import PER_PAGE_CHOICES, filter_context, filter_queryset, paginate, render_page
from kaiweb.workloads.choices import ALLOCATED_POD_STATES

NODES_PER_PAGE = 100
#: a GPU held by no queue of kaiweb's (a DRA device claimed for another scheduler's pod)
NO_QUEUE_COLOUR = "#8a94a3"


def _filterset_class() -> Any:
    from kaiweb.cluster.filtersets import NodeFilterSet

    return NodeFilterSet


def node_map(request: HttpRequest) -> HttpResponse:
    """Nodes filtered by the API's NodeFilterSet (name, product, `label=key=value`, readiness), plus
    the page's shard filter (a shard is a node-label partition)."""
    shards = list(SchedulingShard.objects.select_related("cluster").order_by("cluster__name", "name"))
    filterset, qs = filter_queryset(request, _filterset_class(), Node.objects.order_by("name"))
    errors: list[str] = []
    shard_id = request.GET.get("shard", "")
    shard = next((s for s in shards if str(s.pk) == shard_id), None)
    if shard_id and shard is None:
        errors.append(f"shard: no shard with id {shard_id!r}")
        qs = qs.none()
    elif shard is not None:
        qs = qs.filter(shard.label_q(), cluster_id=shard.cluster_id)
    page = paginate(request, qs, default=NODES_PER_PAGE)
    nodes = list(page.object_list)
    rows, legend = build_map(nodes)
    from kaiweb.scheduling.fragmentation import annotate_rows

    stranded_total = annotate_rows(rows, shards)  # free GPUs no typical pod of the node's shard fits
    context = {
        "filterset": filterset,
        "shards": shards,
        "shard_id": shard_id,
        **filter_context(request, filterset, ["name_contains", "gpu_product", "label", "ready", "unschedulable"],
                         labels={"name_contains": "Name", "gpu_product": "GPU product", "label": "Label (key=value)",
                                 "ready": "Ready",
                                 "unschedulable": "Cordoned"}),
        "errors": errors,
        "page_obj": page,
        "per_page_choices": PER_PAGE_CHOICES,
        "rows": rows,
        "legend": legend,
        "stranded_total": stranded_total,
        "node_total": Node.objects.count(),
        # read only by the full page (not the map's refresh): the levels and their aliases
        "topologies": Topology.objects.select_related("cluster").order_by("cluster__name", "name"),
    }
    return render_page(request, "cluster/nodes.html", context, partial="cluster/partials/gpu_map.html")


def build_map(nodes: list[Node]) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """Per node, each device as a list of (queue, fraction, colour) parts; two queries for the page.

    Which device a pod holds is not recorded for whole GPUs, so whole-GPU pods fill devices in pod
    order, and each shared-GPU group (fractional pods) takes one device after them: the counts
    and the queues are exact, the device index is illustrative.

    The node's DRA GPU devices (`Node.dra_devices`, as the last cycle that read them stored them) follow,
    each a device of its own: one held by a claim is one whole GPU in use, by the queue of the first of
    the claim's pods found on the node (another scheduler's pod: no queue), as the cycle counts it; a
    free one is free. So the use and the stranded GPUs (`fragmentation.annotate_rows`) count them.
    """
    from kaiweb.workloads.models import Pod

    ids = [n.pk for n in nodes]
    devices: dict[int, list[GpuDevice]] = {}
    for d in GpuDevice.objects.filter(node_id__in=ids).order_by("node_id", "index"):
        devices.setdefault(d.node_id, []).append(d)
    pods: dict[int, list[Any]] = {}
    for p in (Pod.objects.filter(node_id__in=ids, state__in=ALLOCATED_POD_STATES)
              .values("node_id", "name", "gpu", "gpu_fraction", "gpu_devices", "gpu_groups", "workload__queue__name",
                      "workload__namespace", "workload__name").order_by("node_id", "id")):
        pods.setdefault(p["node_id"], []).append(p)
    queues_seen: set[str] = set()
    rows = []
    for n in nodes:
        devs = devices.get(n.pk, [])
        claimed = [r for r in n.dra_devices or [] if isinstance(r, dict) and r.get("gpu")]
        plain = max(len(devs), int(n.allocatable_gpu))
        count = plain + len(claimed)
        cells: list[list[dict[str, Any]]] = [[] for _ in range(count)]
        # Pods are laid out on healthy devices first; an unhealthy device shows as such.
        order = [i for i in range(count) if i >= len(devs) or devs[i].healthy]
        order += [i for i in range(count) if i not in order]
        slot = 0
        groups: dict[str, int] = {}
        used = 0.0
        for p in pods.get(n.pk, []):
            q = p["workload__queue__name"]
            who = f"{p['workload__namespace']}/{p['workload__name']}"
            if p["gpu_fraction"]:
                # one group per device; a pod without its groups yet, devices of its own
                keys = p["gpu_groups"] or [f"anon-{len(groups)}-{i}" for i in range(max(1, p["gpu_devices"] or 1))]
                for key in keys:
                    if key not in groups:
                        groups[key] = slot
                        slot += 1
                parts = [(groups[key], p["gpu_fraction"]) for key in keys]
            else:
                whole = int(round(p["gpu"] or 0))
                parts = [(slot + i, 1.0) for i in range(whole)]
                slot += whole
            for pos, frac in parts:
                if 0 <= pos < plain:
                    idx = order[pos]
                    cells[idx].append({"queue": q, "fraction": frac, "pct": f"{min(1.0, frac) * 100:.0f}",
                                       "colour": "", "who": who})
                    used += frac
                    queues_seen.add(q)
        queue_of = {f"{p['workload__namespace']}/{p['name']}": p["workload__queue__name"] for p in pods.get(n.pk, [])}
        for i, row in enumerate(claimed):
            if Node.dra_device_held(row):
                holders = [str(p) for p in row.get("pods") or []]
                q = next((queue_of[p] for p in holders if p in queue_of), "")
                cells[plain + i].append({"queue": q, "fraction": 1.0, "pct": "100", "colour": "",
                                         "who": ", ".join(holders) or f"claim {row['claim']}"})
                used += 1.0
                if q:
                    queues_seen.add(q)
        dev_rows = []
        for i in range(count):
            d = devs[i] if i < len(devs) else None
            dra = claimed[i - plain] if i >= plain else None
            title = ", ".join(f"{c['who']} ({c['queue'] or 'no queue'}, {c['fraction']:g})" for c in cells[i]) or "free"
            name = f"{dra['driver']}/{dra['pool']}/{dra['device']}" if dra else f"gpu{i}"
            dev_rows.append({"index": i, "device": d, "dra": dra, "parts": cells[i], "healthy": d.healthy if d else True,
                             "mig": bool(d and d.mig_profile), "title": f"{name}: {title}"})
        rows.append({"node": n, "devices": dev_rows, "used": used, "count": count})
    # Colours by position among the queues on the map: distinct for up to a palette's worth of queues.
    shown = sorted(queues_seen)
    colour = {q: queue_colour(q, shown) for q in shown}
    for row in rows:
        for dev in row["devices"]:
            for part in dev["parts"]:
                part["colour"] = colour.get(part["queue"], NO_QUEUE_COLOUR)
    legend = [(q, colour[q]) for q in shown]
    return rows, legend


#: how much of a node's history its page lists
NODE_EVENTS = 30
NODE_PODS = 200


def node_detail(request: HttpRequest, name: str) -> HttpResponse:
    """One node: its GPUs and their sharers, its pods and queues, its DRA devices and their claims, taints,
    labels and topology, its recent scheduling events. A name in several clusters: `?cluster=` chooses (else the first)."""
    from django.db.models import Q
    from django.http import Http404

    from kaiweb.scheduling.fragmentation import annotate_rows, shard_of
    from kaiweb.scheduling.models import Decision, PreemptionEvent
    from kaiweb.workloads.models import Pod

    nodes = Node.objects.select_related("cluster").filter(name=name[:253]).order_by("cluster__name")
    if request.GET.get("cluster"):
        nodes = nodes.filter(cluster__name=request.GET["cluster"][:253])
    node = nodes.first()
    if node is None:
        raise Http404(f"no node named {name!r}")
    rows, legend = build_map([node])
    shards = list(SchedulingShard.objects.filter(cluster_id=node.cluster_id))
    stranded = annotate_rows(rows, shards)
    pods = list(Pod.objects.filter(node=node, state__in=ALLOCATED_POD_STATES)
                .select_related("workload__queue", "gpu_utilization").order_by("workload__namespace", "name")[:NODE_PODS])
    queues: dict[str, float] = {}
    for p in pods:
        queues[p.workload.queue.name] = queues.get(p.workload.queue.name, 0.0) + (p.gpu_fraction or p.gpu or 0.0)
    for dev in rows[0]["devices"]:  # the DRA GPUs claims hold: a whole GPU each (`build_map`)
        for part in dev["parts"] if dev["dra"] else ():
            if part["queue"]:
                queues[part["queue"]] = queues.get(part["queue"], 0.0) + part["fraction"]
    other_pods = list(OtherPod.objects.filter(cluster_id=node.cluster_id, node_name=node.name)
                      .order_by("namespace", "name")[:NODE_PODS])
    decisions = list(Decision.objects.filter(Q(node=node) | Q(node__isnull=True, node_name=node.name))
                     .select_related("cycle").order_by("-cycle__started_at", "-id")[:NODE_EVENTS])
    preemptions = list(PreemptionEvent.objects.filter(decision__node_name=node.name)
                       .select_related("victim_queue", "preemptor_queue").order_by("-at", "-id")[:NODE_EVENTS])
    topology_keys = set((node.topology or {}).keys()) if isinstance(node.topology, dict) else set()
    workload_of = {f"{p.workload.namespace}/{p.name}": p.workload_id for p in pods}
    dra_devices = [{**row, "held": Node.dra_device_held(row),
                    "pods": [(str(p), workload_of.get(str(p))) for p in row.get("pods") or []]}
                   for row in node.dra_devices or [] if isinstance(row, dict)]
    context = {
        "node": node,
        "row": rows[0],
        "legend": legend,
        "stranded": stranded,
        "pods": pods,
        "pods_capped": len(pods) == NODE_PODS,
        "other_pods": other_pods,
        "other_pods_capped": len(other_pods) == NODE_PODS,
        "queues": sorted(queues.items(), key=lambda kv: (-kv[1], kv[0])),
        "decisions": decisions,
        "preemptions": preemptions,
        "labels": sorted((node.labels or {}).items()),
        "topology": sorted((node.topology or {}).items()) if isinstance(node.topology, dict) else [],
        "topology_keys": topology_keys,
        "shard": getattr(shard_of(node, shards), "name", None),
        "dra_devices": dra_devices,
        "dra_devices_cut": node.dra_devices_total > len(dra_devices),
        "dra_gpus_held": sum(1 for d in dra_devices if d["gpu"] and d["held"]),
    }
    return render_page(request, "cluster/node.html", context)

