"""Models of the audit app."""
