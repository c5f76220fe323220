"""ai4dl: phase-based vertical autoscaling for deep-learning workloads.

The pure core (no I/O): traces -> CRBM codes -> k-means phases -> phase statistics.
Adapters (files, Prometheus, Kubernetes) live in sub-packages and call the core.
"""

from ai4dl.errors import Ai4dlError, TraceError

__all__ = ["Ai4dlError", "TraceError", "Execution", "TraceSet"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # Execution and TraceSet on first use: importing the package costs no numpy, so the
    # ``ai4dl`` command's own handler is in place before any heavy import (a Ctrl-C then
    # exits 130 without a traceback)
    if name in ("Execution", "TraceSet"):
        from ai4dl.method import traces

        return getattr(traces, name)
    raise AttributeError(f"module 'ai4dl' has no attribute {name!r}")
