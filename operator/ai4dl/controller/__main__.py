"""``ai4dl-operator``: run the operator (the container image's entrypoint)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import ssl
import sys

import kopf

from ai4dl import __version__
from ai4dl.controller import exposition, handlers, memory
from ai4dl.controller.idle import IDLE_AFTER, IDLE_AFTER_SECONDS, IDLE_EVERY
from ai4dl.controller.podstate import StateKey
from ai4dl.controller.query_budget import DEFAULT_BUDGET_SECONDS
from ai4dl.controller.runtime import (DEFAULT_MAX_VALUE, DEFAULT_MAX_WORKLOADS,
                                     DEFAULT_RECORD_SHARE)
from ai4dl.controller.webhook import service_names
from ai4dl.quantity import parse_quantity


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ai4dl-operator",
        description="Phase-based vertical autoscaling of opted-in pods (kopf operator). Pods opt "
                    "in with the label ai4dl.io/managed=true and name their PhaseModel with the "
                    "annotation ai4dl.io/phasemodel.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_metrics_source_args(p)
    _add_fair_share_args(p)
    _add_api_load_args(p)
    _add_scope_args(p)
    _add_bounds_args(p)
    _add_workload_profile_args(p)
    _add_endpoint_args(p)
    _add_webhook_args(p)
    _add_state_key_args(p)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def _add_metrics_source_args(p: argparse.ArgumentParser) -> None:
    """The metrics source: Prometheus, its queries' limits and timing."""
    g = p.add_argument_group("metrics source")
    g.add_argument("--prometheus-url", default=os.environ.get("AI4DL_PROMETHEUS_URL", ""),
                   help="Prometheus base URL (env AI4DL_PROMETHEUS_URL); required")
    g.add_argument("--prometheus-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="timeout of one Prometheus query (default 10)")
    g.add_argument("--prometheus-retries", type=int, default=3, metavar="N",
                   help="attempts per query before the window is skipped as "
                        "PrometheusUnavailable (default 3)")
    g.add_argument("--allow-free-promql", action="store_true",
                   help="send PhaseModels' feature queries as written: a query may then read "
                        "any namespace's series (default: every selector of a query must carry "
                        "{selector}, the PhaseModel's own namespace and pods, else the "
                        "PhaseModel is Degraded, QueryRefused, and nothing is queried)")
    g.add_argument("--max-series-per-query", type=int, default=0, metavar="N",
                   help="refuse a window's answer with more series than N, unparsed (the "
                        "PhaseModel is Degraded, TooManySeries); default 0: 4 per container "
                        "and feature asked for, plus 16")
    g.add_argument("--query-budget-seconds", type=float, default=DEFAULT_BUDGET_SECONDS,
                   metavar="SECONDS",
                   help="what one PhaseModel's window query may cost, in seconds of wall time "
                        "(retries included), plus 2 ms per container it asks for; a PhaseModel "
                        "whose query runs past it, or that Prometheus gives up on at its "
                        "timeout, is not queried for its next "
                        "1, 2, 4 ... up to 16 windows (condition QueryOverBudget), so one "
                        "tenant's expensive query cannot take the others' window workers and "
                        f"Prometheus's time (default {DEFAULT_BUDGET_SECONDS:g}; 0: only "
                        "Prometheus's timeout counts)")
    g.add_argument("--idle-after-seconds", type=float, default=IDLE_AFTER_SECONDS,
                   metavar="SECONDS",
                   help="a PhaseModel whose pod LIST found no pod for this long (and "
                        f"{IDLE_AFTER} windows in a row) is idle: it lists its pods every "
                        f"{IDLE_EVERY}th window only, and at once when admission sees a pod "
                        f"created for it (default {IDLE_AFTER_SECONDS:g}; inf: never idle)")
    g.add_argument("--settle-seconds", type=float, default=1.0, metavar="SECONDS",
                   help="wait after a window boundary before querying, so the window's last "
                        "scrape is in (default 1)")


def _add_fair_share_args(p: argparse.ArgumentParser) -> None:
    """How windows are shared between PhaseModels and namespaces."""
    g = p.add_argument_group("fair shares (a namespace with many PhaseModels cannot delay "
                             "another's windows nor admission)")
    g.add_argument("--min-window-seconds", type=float, default=60.0, metavar="SECONDS",
                   help="serve no PhaseModel more often than this: one whose windowSeconds is "
                        "below it has one window processed per period (the smallest multiple "
                        "of its window not below this) and its condition WindowThrottled says "
                        "so (default 60: a window of cAdvisor scrapes every 15-30 s holds 2-4 "
                        "samples below that, and the CRD allows 4 s windows, which would cost "
                        "a query and a status write per PhaseModel every 4 s; 0 turns it off)")
    g.add_argument("--window-workers", type=int, default=4, metavar="N",
                   help="threads that process windows; namespaces take turns for them and one "
                        "namespace holds at most N-1 at once (default 4)")
    g.add_argument("--window-late-seconds", type=float, default=5.0, metavar="SECONDS",
                   help="a window whose work starts more than this after its boundary + "
                        "--settle-seconds is late: condition WindowsLate True, "
                        "ai4dl_windows_late_total (default 5)")


def _add_api_load_args(p: argparse.ArgumentParser) -> None:
    """How fast the operator writes to the API server (ai4dl.controller.throttle)."""
    g = p.add_argument_group("API server load (the window's pod writes: records, resizes, "
                             "Events)")
    g.add_argument("--kube-api-qps", type=float, default=50.0, metavar="N",
                   help="pod writes per second at most, all windows together, as client-go's "
                        "flag of that name (default 50: 500 resizes, even at 3 writes each, "
                        "take 30 s of a 10-minute window; 0: no limit). A pod's writes not "
                        "started when its PhaseModel's next window is due (its next boundary + "
                        "--settle-seconds) wait for that window (skip reason window-deadline)")
    g.add_argument("--kube-api-burst", type=int, default=100, metavar="N",
                   help="pod writes sent at once above --kube-api-qps after a quiet spell "
                        "(default 100)")
    g.add_argument("--pod-record-share", type=float, default=DEFAULT_RECORD_SHARE,
                   metavar="SHARE",
                   help="a PhaseModel's window writes at most this share of its pods' "
                        "records and Resized Events besides its resizes (at least 50), the "
                        "records a pod needs first; the others wait in memory for a later "
                        "window (default 0.05; 0: only the records a pod needs)")


def _add_scope_args(p: argparse.ArgumentParser) -> None:
    """Which PhaseModels and pods this instance serves."""
    g = p.add_argument_group("what is served")
    g.add_argument("--namespace", action="append", default=[],
                   help="serve only PhaseModels and pods in this namespace (repeatable); "
                        "default: cluster-wide")
    g.add_argument("--phasemodel-selector", action="append", default=[], metavar="LABEL=VALUE",
                   help="serve only PhaseModels with these labels (repeatable): shards one "
                        "cluster's PhaseModels across operator replicas (docs/scaling.md)")
    g.add_argument("--peering", default="",
                   help="kopf peering name, for a guarded second instance (default: standalone)")
    g.add_argument("--orphan-check-seconds", type=float, default=120.0, metavar="SECONDS",
                   help="how often to look for opted-in pods naming no PhaseModel, a missing "
                        "one, or one whose selector they do not match (one Warning Event per "
                        "pod; 0 turns it off; default 120)")


def _add_bounds_args(p: argparse.ArgumentParser) -> None:
    """The largest cpu and memory a container can use."""
    g = p.add_argument_group("bounds (no sample above them is believed, no request set above "
                             "them; set them to your largest node's allocatable)")
    g.add_argument("--max-container-cpu", default=_fmt(DEFAULT_MAX_VALUE["cpu"]),
                   metavar="QUANTITY", help="largest cpu a container can use, e.g. 128 or "
                   "96000m (default %(default)s cores)")
    g.add_argument("--max-container-memory", default="64Ti", metavar="QUANTITY",
                   help="largest memory a container can use, e.g. 1Ti (default %(default)s)")


def _add_workload_profile_args(p: argparse.ArgumentParser) -> None:
    """How many WorkloadProfiles are kept."""
    g = p.add_argument_group("workload profiles (a re-run job starts from its earlier runs)")
    g.add_argument("--max-workloads-per-phasemodel", type=int, default=DEFAULT_MAX_WORKLOADS,
                   metavar="N", help="WorkloadProfiles kept per PhaseModel: past N, the least "
                   "recently ended are deleted (checked hourly; default %(default)s)")


def _add_endpoint_args(p: argparse.ArgumentParser) -> None:
    """The /metrics and /healthz endpoints."""
    g = p.add_argument_group("endpoints")
    g.add_argument("--metrics-bind-address", default="127.0.0.1", metavar="ADDRESS",
                   help="address of /metrics (default 127.0.0.1: local only; the Helm chart "
                        "sets 0.0.0.0 so that Prometheus can scrape it)")
    g.add_argument("--metrics-port", type=int, metavar="PORT",
                   default=int(os.environ.get("AI4DL_METRICS_PORT", "8080")),
                   help="port of /metrics (env AI4DL_METRICS_PORT; default 8080; 0 turns it off)")
    g.add_argument("--health-bind-address", default="127.0.0.1", metavar="ADDRESS",
                   help="address of kopf's liveness endpoint /healthz (default 127.0.0.1; the "
                        "Helm chart sets 0.0.0.0 for the kubelet's probes)")
    g.add_argument("--health-port", type=int, default=8081, metavar="PORT",
                   help="port of /healthz (default 8081; 0 turns it off)")
    g.add_argument("--liveness", default=None, metavar="URL",
                   help="deprecated: kopf's liveness URL, e.g. http://0.0.0.0:8081/healthz "
                        "(overrides --health-bind-address/--health-port; empty turns it off)")


def _add_webhook_args(p: argparse.ArgumentParser) -> None:
    """The mutating admission webhook and its certificates."""
    g = p.add_argument_group("admission webhook (spec.policy.mode Initial and InPlace: new "
                             "pods get their requests at creation)")
    g.add_argument("--webhook-port", type=int, default=0, metavar="PORT",
                   help="serve the mutating admission webhook (HTTPS) on this port (the Helm "
                        "chart: 9443); default 0: no admission")
    g.add_argument("--webhook-bind-address", default="127.0.0.1", metavar="ADDRESS",
                   help="address of the webhook (default 127.0.0.1; the chart sets 0.0.0.0)")
    g.add_argument("--webhook-service", default="", metavar="NAME.NAMESPACE",
                   help="the webhook's Service: its DNS names go into the self-signed "
                        "serving certificate")
    g.add_argument("--webhook-host", action="append", default=[], metavar="HOST",
                   help="another DNS name or IP address for the self-signed certificate "
                        "(repeatable; e.g. 127.0.0.1 for a configuration with a URL)")
    g.add_argument("--webhook-configuration", default="", metavar="NAME",
                   help="self-signed mode: the MutatingWebhookConfiguration whose caBundle "
                        "the operator writes (RBAC: get and patch of that one object)")
    g.add_argument("--webhook-cert-dir", default="", metavar="DIR",
                   help="serve tls.crt / tls.key from DIR instead (e.g. cert-manager's "
                        "Secret mounted as a volume; re-read when they change; the caBundle "
                        "is then cert-manager's business)")
    g.add_argument("--webhook-client-ca-file", default="", metavar="FILE",
                   help="authenticate the API server: accept only callers presenting a client "
                        "certificate signed by a CA in FILE (PEM; the one that signs "
                        "kube-apiserver's webhook client certificate, set by its "
                        "--admission-control-config-file); others fail the TLS handshake. "
                        "Re-read when it changes. Default: no client authentication")
    g.add_argument("--webhook-client-name", action="append", default=[], metavar="CN",
                   help="with --webhook-client-ca-file (required with it): accept only client "
                        "certificates with this common name (repeatable; a CA such as the "
                        "cluster's also signs users' and nodes' certificates)")


def _add_state_key_args(p: argparse.ArgumentParser) -> None:
    """The key that seals the operator's records on pods."""
    g = p.add_argument_group("the operator's records on pods")
    g.add_argument("--state-key-file", default=os.environ.get("AI4DL_STATE_KEY_FILE", ""),
                   metavar="FILE",
                   help="the key (at least 16 bytes) that seals the operator's records on pods "
                        "(ai4dl.io/state, ai4dl.io/admitted), so that a pod's owner cannot "
                        "forge them (env AI4DL_STATE_KEY_FILE; the Helm chart generates one "
                        "into a Secret that the kubelet mounts). Default: a random key per "
                        "process (after a restart the records read as absent)")


def _fmt(cores: float) -> str:
    return f"{cores:g}"


def _client_ca_problem(path: str) -> str:
    """Why ``path`` cannot verify client certificates ("" when it can)."""
    try:
        ctx = ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)
        ctx.load_verify_locations(cafile=path)
    except FileNotFoundError:
        return "no such file"
    except (OSError, ssl.SSLError) as err:
        return f"not a PEM CA certificate ({getattr(err, 'reason', None) or err})"
    if not ctx.get_ca_certs():
        return "holds no CA certificate"
    return ""


def liveness_url(args: argparse.Namespace) -> str | None:
    if args.liveness is not None:
        return args.liveness or None
    if not args.health_port:
        return None
    host = args.health_bind_address
    return f"http://{'[' + host + ']' if ':' in host else host}:{args.health_port}/healthz"


class _FlagError(Exception):
    """A flag's value the operator cannot run with; the message names the flag."""


def _fail(message: str) -> int:
    """Say ``message`` as the operator's one-line error; the exit status of a usage error."""
    print(f"ai4dl-operator: error: {message}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        shard, max_value, state_key = _checked_flags(args)
        webhook = _webhook_settings(args)
    except _FlagError as err:
        return _fail(str(err))
    memory.configure()          # before any thread: large blocks given back when freed
    # Read by the handlers module when it registers the PhaseModel daemon (below).
    os.environ["AI4DL_PHASEMODEL_SELECTOR"] = ",".join(f"{k}={v}" for k, v in shard.items())
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    handlers.CONFIG.update(_handler_config(args, max_value, webhook, state_key))
    handlers.register_phasemodels()
    if webhook is not None:
        handlers.register_admission()
    if args.metrics_port:
        try:
            exposition.serve(args.metrics_port, args.metrics_bind_address)
        except OSError as err:
            return _fail(f"/metrics on {args.metrics_bind_address}:{args.metrics_port}: "
                         f"{err.strerror or err}")
    asyncio.run(kopf.operator(
        standalone=not args.peering, peering_name=args.peering or None,
        namespaces=args.namespace, clusterwide=not args.namespace,
        liveness_endpoint=liveness_url(args)))
    return 0


def _checked_flags(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, float], object]:
    """(shard labels, largest cpu and memory, state key or None) from ``args``, every flag but
    the webhook's checked, in the order their errors are reported; raises :class:`_FlagError`."""
    if not args.prometheus_url:
        raise _FlagError("--prometheus-url (or AI4DL_PROMETHEUS_URL) is required")
    if args.max_series_per_query < 0:
        raise _FlagError(f"--max-series-per-query {args.max_series_per_query}: must be 0 "
                         f"(automatic) or more")
    shard = _phasemodel_shard(args)
    max_value = _max_values(args)
    state_key = _state_key(args)
    for flag, value in (("--min-window-seconds", args.min_window_seconds),
                        ("--query-budget-seconds", args.query_budget_seconds),
                        ("--window-late-seconds", args.window_late_seconds)):
        if not value >= 0 or value == float("inf"):
            raise _FlagError(f"{flag} {value:g}: must be a number of seconds, 0 or more")
    if not args.idle_after_seconds >= 0:
        raise _FlagError(f"--idle-after-seconds {args.idle_after_seconds:g}: must be a number of "
                         f"seconds, 0 or more (inf: never idle)")
    if args.max_workloads_per_phasemodel < 1:
        raise _FlagError(f"--max-workloads-per-phasemodel {args.max_workloads_per_phasemodel}: "
                         f"must be 1 or more")
    if args.window_workers < 1:
        raise _FlagError(f"--window-workers {args.window_workers}: must be 1 or more")
    if not 0 <= args.kube_api_qps < float("inf"):
        raise _FlagError(f"--kube-api-qps {args.kube_api_qps:g}: must be writes per second, "
                         f"0 (no limit) or more")
    if args.kube_api_burst < 1:
        raise _FlagError(f"--kube-api-burst {args.kube_api_burst}: must be 1 or more")
    if not 0 <= args.pod_record_share <= 1:
        raise _FlagError(f"--pod-record-share {args.pod_record_share:g}: must be a share of "
                         f"the pods, from 0 to 1")
    return shard, max_value, state_key


def _phasemodel_shard(args: argparse.Namespace) -> dict[str, str]:
    """The labels of --phasemodel-selector, as a dict."""
    shard = {}
    for item in args.phasemodel_selector:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise _FlagError(f"--phasemodel-selector {item!r}: expected LABEL=VALUE")
        shard[key] = value
    return shard


def _max_values(args: argparse.Namespace) -> dict[str, float]:
    """--max-container-cpu and --max-container-memory as numbers, by resource."""
    max_value = {}
    for r, flag, text in (("cpu", "--max-container-cpu", args.max_container_cpu),
                          ("memory", "--max-container-memory", args.max_container_memory)):
        try:
            max_value[r] = parse_quantity(text)
        except ValueError:
            raise _FlagError(f"{flag} {text!r}: not a Kubernetes quantity") from None
        if not max_value[r] > 0:
            raise _FlagError(f"{flag} {text!r}: must be above 0")
    return max_value


def _state_key(args: argparse.Namespace):
    """The key read from --state-key-file, or None (a random key per process)."""
    state_key = None
    if args.state_key_file:
        try:
            state_key = StateKey.from_file(args.state_key_file)
        except ValueError as err:
            raise _FlagError(f"--state-key-file: {err}") from None
    return state_key


def _webhook_settings(args: argparse.Namespace) -> dict | None:
    """The admission webhook's settings from the --webhook-* flags, checked; None without
    --webhook-port."""
    if not args.webhook_port:
        if args.webhook_client_ca_file or args.webhook_client_name:
            raise _FlagError("--webhook-client-ca-file and --webhook-client-name need "
                             "--webhook-port")
        return None
    if args.webhook_cert_dir:
        missing = [f for f in ("tls.crt", "tls.key")
                   if not os.path.isfile(os.path.join(args.webhook_cert_dir, f))]
        if missing:
            raise _FlagError(f"--webhook-cert-dir {args.webhook_cert_dir}: no {missing[0]}")
    elif not args.webhook_configuration:
        raise _FlagError("--webhook-port without --webhook-cert-dir needs "
                         "--webhook-configuration (the configuration whose caBundle the "
                         "operator writes for its self-signed certificate)")
    hosts = list(args.webhook_host)
    if args.webhook_service:
        svc, dot, ns = args.webhook_service.partition(".")
        if not dot or not svc or not ns:
            raise _FlagError(f"--webhook-service {args.webhook_service!r}: expected "
                             f"NAME.NAMESPACE")
        hosts = service_names(svc, ns) + hosts
    if not hosts and not args.webhook_cert_dir:
        raise _FlagError("--webhook-port needs --webhook-service or --webhook-host for the "
                         "self-signed certificate's names")
    _check_webhook_client_auth(args)
    return {"port": args.webhook_port, "addr": args.webhook_bind_address,
            "hosts": hosts, "configuration": args.webhook_configuration,
            "cert_dir": args.webhook_cert_dir,
            "client_ca_file": args.webhook_client_ca_file,
            "client_names": list(args.webhook_client_name)}


def _check_webhook_client_auth(args: argparse.Namespace) -> None:
    """--webhook-client-ca-file and --webhook-client-name go together, the file a CA's."""
    if args.webhook_client_ca_file:
        problem = _client_ca_problem(args.webhook_client_ca_file)
        if problem:
            raise _FlagError(f"--webhook-client-ca-file {args.webhook_client_ca_file}: "
                             f"{problem}")
        if not args.webhook_client_name:
            raise _FlagError("--webhook-client-ca-file needs at least one "
                             "--webhook-client-name (the API server's client certificate's "
                             "common name): a CA such as the cluster's also signs admin and "
                             "node certificates, which would be answered")
    elif args.webhook_client_name:
        raise _FlagError("--webhook-client-name needs --webhook-client-ca-file")


def _handler_config(args: argparse.Namespace, max_value: dict[str, float],
                    webhook: dict | None, state_key) -> dict:
    """What the handlers module reads from its CONFIG, from the checked flags."""
    return dict(prometheus_url=args.prometheus_url,
                prometheus_timeout=args.prometheus_timeout,
                prometheus_retries=args.prometheus_retries,
                settle_seconds=args.settle_seconds, max_value=max_value,
                namespaces=list(args.namespace),
                orphan_check_seconds=args.orphan_check_seconds, webhook=webhook,
                state_key=state_key,
                allow_free_promql=args.allow_free_promql,
                max_series_per_query=args.max_series_per_query,
                query_budget_seconds=args.query_budget_seconds,
                idle_after_seconds=args.idle_after_seconds,
                min_window_seconds=args.min_window_seconds,
                window_workers=args.window_workers,
                window_late_seconds=args.window_late_seconds,
                kube_api_qps=args.kube_api_qps, kube_api_burst=args.kube_api_burst,
                pod_record_share=args.pod_record_share,
                max_workloads=args.max_workloads_per_phasemodel)


if __name__ == "__main__":
    sys.exit(main())
