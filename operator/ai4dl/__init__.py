"""ai4dl: phase-based vertical autoscaling for deep-learning workloads.

The pure core (no I/O): traces -> CRBM codes -> k-means phases -> phase statistics.
Adapters (files, Prometheus, Kubernetes) live in sub-packages and call the core.
"""

from ai4dl.errors import Ai4dlError, TraceError
from ai4dl.method.traces import Execution, TraceSet

__all__ = ["Ai4dlError", "TraceError", "Execution", "TraceSet"]
__version__ = "0.1.0"
