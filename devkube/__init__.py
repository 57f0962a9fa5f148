"""Development tools for the Kubernetes path, not shipped in the image (``deploy/Dockerfile`` copies
``kaiweb/`` and ``scheduler_core/`` only):

* `devkube.localkube`: a real kube-apiserver, etcd and controller-manager on loopback (``LocalKube``),
  with KWOK nodes, for the ``kube`` tests, the benchmarks and the end-to-end scenarios;
* `devkube.fake_apiserver`: an in-process fake of the part of the API the gateway calls, for the
  contract tests and quick runs;
* `devkube.e2e`: the runner of KAI's end-to-end scenarios, and `devkube.product`: the product's cycle
  and invariants it runs after each step; ``manage.py cluster_scenarios`` (this package's Django app,
  installed when the package is present) plays them.

It may import everything in kaiweb; nothing in kaiweb, the engine or the harness imports it.
"""
