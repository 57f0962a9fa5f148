"""Models of the cluster app."""
