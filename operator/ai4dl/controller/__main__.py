"""``ai4dl-operator``: run the operator (the container image's entrypoint)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ai4dl-operator", description="Phase-based vertical "
                                "autoscaling of opted-in pods (kopf operator).")
    p.add_argument("--prometheus-url", default=os.environ.get("AI4DL_PROMETHEUS_URL", ""),
                   help="Prometheus base URL (env AI4DL_PROMETHEUS_URL); required")
    p.add_argument("--namespace", action="append", default=[],
                   help="watch only these namespaces (repeatable); default: cluster-wide")
    p.add_argument("--metrics-port", type=int, default=int(os.environ.get("AI4DL_METRICS_PORT",
                                                                          "8080")))
    p.add_argument("--liveness", default="http://0.0.0.0:8081/healthz",
                   help="kopf liveness endpoint (empty to disable)")
    p.add_argument("--phasemodel-selector", action="append", default=[], metavar="LABEL=VALUE",
                   help="serve only PhaseModels with these labels (repeatable): shards one "
                        "cluster's PhaseModels across operator replicas (docs/scaling.md)")
    p.add_argument("--peering", default="", help="kopf peering name for HA (default standalone)")
    p.add_argument("--prometheus-timeout", type=float, default=10.0)
    p.add_argument("--prometheus-retries", type=int, default=3)
    p.add_argument("--settle-seconds", type=float, default=1.0,
                   help="wait after a window boundary before querying (scrape lag)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if not args.prometheus_url:
        print("ai4dl-operator: error: --prometheus-url (or AI4DL_PROMETHEUS_URL) is required",
              file=sys.stderr)
        return 2
    shard = {}
    for item in args.phasemodel_selector:
        key, eq, value = item.partition("=")
        if not eq or not key:
            print(f"ai4dl-operator: error: --phasemodel-selector {item!r}: expected LABEL=VALUE",
                  file=sys.stderr)
            return 2
        shard[key] = value
    # Read by the handlers module when it registers the PhaseModel daemon (import below).
    os.environ["AI4DL_PHASEMODEL_SELECTOR"] = ",".join(f"{k}={v}" for k, v in shard.items())
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import kopf

    from ai4dl.controller import handlers, metrics

    handlers.CONFIG.update(prometheus_url=args.prometheus_url,
                           prometheus_timeout=args.prometheus_timeout,
                           prometheus_retries=args.prometheus_retries,
                           settle_seconds=args.settle_seconds)
    if args.metrics_port:
        metrics.serve(args.metrics_port)
    asyncio.run(kopf.operator(
        standalone=not args.peering, peering_name=args.peering or None,
        namespaces=args.namespace, clusterwide=not args.namespace,
        liveness_endpoint=args.liveness or None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
