"""The Kubernetes backend of the cluster gateway, by role:

* `client`: `KubernetesGateway`, its transport (retries, backoff, the errors it raises) and its reads
  and writes of nodes, pods, PodGroups, Queues, events and status;
* `transport`: the client's configuration and connection pool;
* `parsing`: raw objects into the gateway's neutral objects (`kaiweb.cluster.backends.types`), one
  parser per kind, never raising; `shards`: SchedulingShard objects;
* `binding`: a cycle's binds and evictions, as KAI's binder carries them out;
* `gpu_sharing`: KAI's GPU sharing (reservation pods, the GPU-group label, fractions and memory);
* `pod_constraints`: affinity, tolerations, taints and host ports as the engine reads them.

Who wins when the database and the cluster disagree on a Queue is one rule in `kaiweb.cluster.queue_sync`.
"""
