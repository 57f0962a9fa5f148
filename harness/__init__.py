"""Harnesses that run the KAI corpora against kaiweb: above the engine, beside the tests.

* ``harness.decisions``: KAI's action tests as decision scenarios on the engine alone
  (``python -m harness.decisions ../shared/corpus/kai``).
* The end-to-end corpus runs through the product's Kubernetes path: ``manage.py cluster_scenarios``.
"""
