"""Models of the workloads app."""
