"""Models of the usage app."""
