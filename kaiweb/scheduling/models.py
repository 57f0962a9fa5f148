"""Models of the scheduling app."""
