"""Read, apply and roll back PhaseModels for the batch trainer (server-side apply, field
manager ``ai4dl-trainer``).

The trainer owns ``spec.model`` and ``spec.previousModel`` (one apply carries both) and, on the
status subresource, ``status.training``; it never sends other fields, so it does not fight a
user over ``spec.policy`` or the operator over its conditions. Applies are forced: the model
fields are the trainer's by design, and a model first written by hand (``kubectl apply`` of a
model.json) is taken over rather than refused.

Errors become :class:`KubeUnavailable` (the API server could not be reached: worth a retry) or
:class:`KubeError` (refused: not found, forbidden, invalid), each one line.
"""

from __future__ import annotations

import json
import os
import re

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError

from ai4dl.crd import GROUP, PLURAL, TRAINER_FIELD_MANAGER as FIELD_MANAGER, VERSION
from ai4dl.errors import Ai4dlError

APPLY = "application/apply-patch+yaml"


class KubeError(Ai4dlError):
    """The API server refused a request (the message says what and why)."""

    def __init__(self, message: str, status: int = 0):
        self.status = status
        super().__init__(message)


class KubeUnavailable(Ai4dlError):
    """The API server could not be reached."""


def parse_ref(text: str) -> tuple[str, str]:
    """'NAMESPACE/NAME' -> (namespace, name); Ai4dlError when malformed."""
    m = re.fullmatch(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?)/([a-z0-9]([-.a-z0-9]*[a-z0-9])?)",
                     (text or "").strip())
    if not m:
        raise Ai4dlError(f"--phasemodel expects NAMESPACE/NAME (lower-case DNS names), "
                         f"got {text!r}")
    return m.group(1), m.group(3)


def api_client(kubeconfig: str | None = None):
    """In-cluster credentials when running in a pod (KUBERNETES_SERVICE_HOST set) and no
    kubeconfig is given, else the kubeconfig (``--kubeconfig``, ``$KUBECONFIG``,
    ~/.kube/config)."""
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
            return client.ApiClient()
        return config.new_client_from_config(config_file=kubeconfig)
    except (ConfigException, OSError, TypeError, ValueError) as err:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise KubeError(f"no Kubernetes credentials ({where}): {' '.join(str(err).split())}") \
            from None


def _message(err) -> str:
    try:
        return json.loads(err.body).get("message") or f"HTTP {err.status}"
    except (TypeError, ValueError, AttributeError):
        return f"HTTP {err.status}: {err.reason}"


class PhaseModels:
    """PhaseModel reads and the trainer's applies."""

    def __init__(self, api):
        self.api = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)     # the trainer's pod lists (which pods are served)
        self.host = api.configuration.host

    def _call(self, what: str, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except ApiException as err:
            if err.status == 0 or err.status in (502, 503, 504):
                raise KubeUnavailable(f"Kubernetes API at {self.host} unavailable: "
                                      f"{_message(err)}") from None
            raise KubeError(f"{what}: {_message(err)}", err.status) from None
        except (HTTPError, OSError) as err:
            reason = getattr(err, "reason", None) or err
            raise KubeUnavailable(f"Kubernetes API at {self.host} unavailable: "
                                  f"{' '.join(str(reason).split())[:300]}") from None

    def get(self, namespace: str, name: str) -> dict | None:
        """The PhaseModel as a dict, or None when it does not exist."""
        try:
            return self._call(f"reading PhaseModel {namespace}/{name}",
                              self.api.get_namespaced_custom_object, GROUP, VERSION, namespace,
                              PLURAL, name, _request_timeout=30)
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def apply_spec(self, body: dict) -> dict:
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        return self._call(f"applying PhaseModel {ns}/{name}",
                          self.api.patch_namespaced_custom_object, GROUP, VERSION, ns, PLURAL,
                          name, body, field_manager=FIELD_MANAGER, force=True,
                          _content_type=APPLY, _request_timeout=60)

    def apply_status(self, body: dict) -> dict:
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        return self._call(f"applying the status of PhaseModel {ns}/{name}",
                          self.api.patch_namespaced_custom_object_status, GROUP, VERSION, ns,
                          PLURAL, name, body, field_manager=FIELD_MANAGER, force=True,
                          _content_type=APPLY, _request_timeout=60)
