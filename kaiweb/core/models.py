"""Models of the core app."""
