"""The operator: a pure planning core (pods + samples -> decisions) and thin kopf/Kubernetes
adapters around it. Data flows one way: sources (Prometheus, the pod index) -> plan -> apply."""
