"""Models of the accounts app."""
