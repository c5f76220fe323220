"""End-to-end test tooling (a local Kubernetes control plane, scenario drivers)."""
