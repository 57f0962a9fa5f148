"""Models of the queues app."""
