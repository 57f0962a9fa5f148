"""Models of the dashboard app."""
