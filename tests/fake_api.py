"""A stand-in for the Kubernetes client's raw answer (a call made with
``_preload_content=False``), for unit tests of one class that fake the client."""

from __future__ import annotations

import json


class RawAnswer:
    def __init__(self, body: dict | None = None):
        self.data = json.dumps(body or {}).encode()

    def read(self) -> bytes:
        return self.data

    def release_conn(self) -> None:
        pass
