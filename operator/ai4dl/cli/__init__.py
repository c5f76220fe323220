"""The command lines: ``ai4dl`` (main), its shared flags (common), ``ai4dl evaluate`` on trace
files (evaluate), the batch trainer's (trainer) and Prometheus replay (replay)."""

from ai4dl.cli.main import main

__all__ = ["main"]
