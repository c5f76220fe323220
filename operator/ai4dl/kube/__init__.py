"""Thin Kubernetes adapters for the command line (the operator has its own, in controller/)."""
