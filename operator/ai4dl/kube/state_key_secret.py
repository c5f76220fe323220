"""The state key's Secret made in the cluster, once (issue 43 item 5).

The chart's default makes the key that seals the operator's records with helm's ``lookup``,
which ``helm template`` (Argo CD, Flux's post-renderers, any GitOps rendering) cannot do: the
key would be new at every render, a rotation at every sync. With
``operator.stateKey.createInCluster`` the chart renders no Secret at all; a hook Job runs this
before each install and upgrade, as cert-manager makes a certificate's Secret:

    python -m ai4dl.kube.state_key_secret --namespace ai4dl-system --name ai4dl-operator-state-key

It creates the Secret with a random key when there is none and otherwise leaves it as it is:
it never reads a Secret (its Role may only create them), so an existing key, a rotated one
and its ``previous`` included, is kept by the API server's own refusal (409 AlreadyExists).
Exit status 0 both ways (one line says which); 1 with one line for anything else.
"""

from __future__ import annotations

import argparse
import secrets
import sys

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ai4dl.kube.phasemodels import KubeError, api_client

#: Random bytes of a new key, as URL-safe text (48 characters; the operator needs 16 bytes).
KEY_BYTES = 36


def ensure_state_key_secret(core, namespace: str, name: str, labels: dict | None = None
                            ) -> bool:
    """Create Secret ``namespace/name`` holding a new random key under ``key``; True when
    created, False when one of that name exists (left untouched, and not read). ApiException
    for anything else."""
    body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
            "stringData": {"key": secrets.token_urlsafe(KEY_BYTES)}}
    try:
        core.create_namespaced_secret(namespace, body, _preload_content=False).release_conn()
    except ApiException as err:
        if err.status == 409:
            return False
        raise
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--name", required=True, help="the Secret's name")
    ap.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                    help="a label for a new Secret (repeatable)")
    ap.add_argument("--kubeconfig", default=None,
                    help="default: in-cluster credentials, else $KUBECONFIG")
    args = ap.parse_args(argv)
    labels = dict(item.partition("=")[::2] for item in args.label)
    where = f"Secret {args.namespace}/{args.name}"
    try:
        core = client.CoreV1Api(api_client(args.kubeconfig))
        created = ensure_state_key_secret(core, args.namespace, args.name, labels)
    except KubeError as err:
        print(f"state key: {err}", file=sys.stderr)
        return 1
    except ApiException as err:
        print(f"state key: creating {where}: HTTP {err.status} {err.reason}", file=sys.stderr)
        return 1
    print(f"state key: {where} "
          f"{'created with a new random key' if created else 'exists: kept as it is'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
