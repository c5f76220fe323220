"""Test and demo helpers around a real Prometheus: install.sh, TraceExporter, PrometheusServer."""
