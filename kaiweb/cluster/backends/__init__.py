"""Cluster backends: `kubernetes` (the official client) and `simulated` (the cluster in the database).

Both return the neutral objects of `kaiweb.cluster.backends.types`.
"""
