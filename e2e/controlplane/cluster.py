"""Run a real kube-apiserver + etcd on loopback, without Docker (what envtest does).

Binaries come from ``build.sh`` (next to this file), cached in
``${AI4DL_CACHE:-~/.cache/ai4dl}/bin``. There is no kube-controller-manager, scheduler or kubelet:

* no default ServiceAccount per namespace, deleted namespaces stay ``Terminating``,
  no ownerReference garbage collection;
* pods are never scheduled or run: create them with ``spec.nodeName`` set and patch
  ``pods/<name>/status`` yourself (see ``tests/e2e_fixtures_k8s.py``: ``FakeKubelet``), and
  delete them with ``grace_period_seconds=0``.

Python use::

    from e2e.controlplane.cluster import ControlPlane, ensure_binaries
    ensure_binaries()                 # builds once per machine (minutes), then a no-op
    with ControlPlane() as cp:
        print(cp.kubeconfig)          # admin (system:masters) client certificate
        cp.impersonation_kubeconfig("system:serviceaccount:ns:sa")

CLI::

    python -m e2e.controlplane.cluster build
    python -m e2e.controlplane.cluster up     # prints the kubeconfig path, runs until Ctrl-C

Certificates are made with the ``openssl`` command (the ``cryptography`` package is not a
dependency). Only the standard library is used.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"

#: Versions build.sh builds by default (keep in sync with build.sh).
KUBE_VERSION = os.environ.get("AI4DL_KUBE_VERSION", "1.35.4").lstrip("v")
ETCD_VERSION = os.environ.get("AI4DL_ETCD_VERSION", "3.6.16").lstrip("v")

__all__ = [
    "BuildError",
    "ControlPlane",
    "ControlPlaneError",
    "bin_dir",
    "cache_dir",
    "ensure_binaries",
    "main",
]


class ControlPlaneError(RuntimeError):
    """etcd or kube-apiserver failed to start or to become ready."""


class BuildError(RuntimeError):
    """build.sh failed (no Go toolchain, no network to the Go proxy, compile error...)."""


#: The common name of the webhook client certificate (``webhook_client_cert=True``).
WEBHOOK_CLIENT_CN = "kube-apiserver-webhook-client"


def cache_dir() -> Path:
    return Path(os.environ.get("AI4DL_CACHE") or Path.home() / ".cache" / "ai4dl")


def bin_dir() -> Path:
    return cache_dir() / "bin"


def ensure_binaries(*, log_path: Path | None = None, quiet: bool = False, timeout: float = 3600) -> Path:
    """Run build.sh (a fast no-op when the binaries are there) and return the bin dir.

    A cold build takes several minutes. Its output goes to ``log_path`` (default
    ``<cache>/build.log``) and, unless ``quiet``, to stderr as well.
    Raises :class:`BuildError` with the log tail on failure.
    """
    log_path = Path(log_path) if log_path else cache_dir() / "build.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        # Own process group: on Ctrl-C the whole build (go, compile, link) is stopped, not
        # just bash (orphaned go processes would keep the build lock held).
        proc = subprocess.Popen(
            ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if not quiet:
                    sys.stderr.buffer.write(line)
                    sys.stderr.flush()
            rc = proc.wait(timeout=timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            raise
    if rc != 0:
        raise BuildError(f"{BUILD_SCRIPT} failed (exit {rc}); log {log_path}:\n{_tail(log_path, 30)}")
    return bin_dir()


def _tail(path: Path, n: int = 40) -> str:
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(lines[-n:])


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _b64(path: Path) -> str:
    return base64.b64encode(Path(path).read_bytes()).decode()


def _openssl(*args: str, cwd: Path) -> None:
    res = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if res.returncode != 0:
        raise ControlPlaneError(f"openssl {' '.join(args)} failed:\n{res.stderr}")


try:  # loaded before any fork: importing in the child between fork and exec is unsafe
    import ctypes

    _LIBC = ctypes.CDLL("libc.so.6", use_errno=True) if sys.platform.startswith("linux") else None
except (ImportError, OSError):
    _LIBC = None


def _set_pdeathsig() -> None:
    """Runs in the child before exec: SIGKILL it when the parent dies (e.g. pytest killed -9).

    SIGKILL, not SIGTERM: on SIGTERM etcd and kube-apiserver both shut down at once and the
    apiserver then hangs for minutes in its graceful shutdown, waiting for the gone etcd.
    """
    if _LIBC is not None:
        _LIBC.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


class PKI:
    """A throwaway CA, apiserver serving cert, SA signing key and client certs (openssl CLI).

    ECDSA P-256 keys, like envtest's TinyCA; certificates are valid for 7 days.
    """

    def __init__(self, directory: Path, *, hosts: Sequence[str] = ("localhost", "127.0.0.1")):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.hosts = list(hosts)
        self.ca_crt = self.dir / "ca.crt"
        self.ca_key = self.dir / "ca.key"
        self.serving_crt = self.dir / "apiserver.crt"
        self.serving_key = self.dir / "apiserver.key"
        self.sa_key = self.dir / "sa-signer.key"
        self.sa_pub = self.dir / "sa-signer.pub"

    def generate(self) -> PKI:
        d = self.dir
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "7",
                 "-subj", "/O=ai4dl-e2e/CN=ai4dl-e2e-ca",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature", cwd=d)
        sans = ["IP:" + h if _is_ip(h) else "DNS:" + h for h in self.hosts]
        # In-cluster names, so the certificate also fits the `kubernetes` Service.
        sans += ["DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
                 "IP:10.0.0.1"]
        self._sign("apiserver", "/CN=kube-apiserver", "serverAuth", sans)
        # Service-account token signer (RSA: the most widely supported JWT alg, RS256).
        _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                 "-out", self.sa_key.name, cwd=d)
        _openssl("pkey", "-in", self.sa_key.name, "-pubout", "-out", self.sa_pub.name, cwd=d)
        return self

    def client_cert(self, name: str, user: str, groups: Iterable[str] = ()) -> tuple[Path, Path]:
        """Sign a client certificate: CN=user, O=each group. Returns (crt, key)."""
        subj = "".join(f"/O={g}" for g in groups) + f"/CN={user}"
        self._sign(name, subj, "clientAuth", [])
        return self.dir / f"{name}.crt", self.dir / f"{name}.key"

    def _sign(self, name: str, subj: str, eku: str, sans: list[str]) -> None:
        d = self.dir
        ext = d / f"{name}.ext"
        lines = ["basicConstraints=critical,CA:FALSE",
                 "keyUsage=critical,digitalSignature,keyEncipherment",
                 f"extendedKeyUsage={eku}"]
        if sans:
            lines.append("subjectAltName=" + ",".join(sans))
        ext.write_text("\n".join(lines) + "\n")
        _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subj, cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "7", "-sha256", "-extfile", ext.name,
                 "-out", f"{name}.crt", cwd=d)


def _is_ip(h: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in h else socket.AF_INET, h)
        return True
    except OSError:
        return False


def _kubeconfig_text(server: str, ca_crt: Path, user: dict[str, object], name: str = "ai4dl-e2e") -> str:
    """A kubeconfig as JSON (valid YAML; kubectl and the Python client both read it)."""
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {
            "server": server, "certificate-authority-data": _b64(ca_crt)}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "preferences": {},
    }
    return json.dumps(cfg, indent=2) + "\n"


class ControlPlane:
    """etcd + kube-apiserver on free loopback ports, in a temporary directory.

    ``start()`` (or ``with ControlPlane() as cp:``) generates the PKI, starts both processes,
    waits for ``/readyz`` and writes ``cp.kubeconfig`` (admin: CN=admin, O=system:masters).
    ``stop()`` terminates both and removes the directory (unless ``keep_dir``).

    Logs: ``cp.dir / "etcd.log"`` and ``cp.dir / "kube-apiserver.log"``.
    """

    def __init__(
        self,
        *,
        bin_dir: Path | str | None = None,
        workdir: Path | str | None = None,
        startup_timeout: float = 60.0,
        extra_apiserver_args: Sequence[str] = (),
        keep_dir: bool = False,
        webhook_client_cert: bool = False,
    ):
        self.bin_dir = Path(bin_dir) if bin_dir else cache_dir() / "bin"
        self._own_dir = workdir is None
        self._workdir_arg = Path(workdir) if workdir else None
        self.startup_timeout = startup_timeout
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.keep_dir = keep_dir
        # Present a client certificate (CN=WEBHOOK_CLIENT_CN, signed by the cluster CA) to
        # admission webhooks that ask for one, as a production API server configured with an
        # --admission-control-config-file does; a webhook that asks for none sees no change.
        self.webhook_client_cert = webhook_client_cert
        self.webhook_client_crt: Path | None = None
        self.webhook_client_key: Path | None = None
        self.dir: Path | None = None
        self.pki: PKI | None = None
        self.etcd: subprocess.Popen | None = None
        self.apiserver: subprocess.Popen | None = None
        self.etcd_url = ""
        self.port = 0
        self.url = ""
        self.kubeconfig: Path | None = None
        self.admin_crt: Path | None = None
        self.admin_key: Path | None = None
        self.startup_seconds: float | None = None
        self._logs: list = []

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def binary(self, name: str) -> Path:
        path = self.bin_dir / name
        if not os.access(path, os.X_OK):
            raise ControlPlaneError(
                f"{path} not found; build it with `bash {BUILD_SCRIPT}` "
                "(or `python -m e2e.controlplane.cluster build`)")
        return path

    def start(self) -> ControlPlane:
        if self.apiserver is not None:
            return self
        t0 = time.monotonic()
        etcd_bin, kas_bin = self.binary("etcd"), self.binary("kube-apiserver")
        if self._own_dir:
            self.dir = Path(tempfile.mkdtemp(prefix="ai4dl-cp-"))
        else:
            self.dir = self._workdir_arg
            self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self.pki = PKI(self.dir / "pki").generate()
            self.admin_crt, self.admin_key = self.pki.client_cert("admin", "admin", ["system:masters"])
            if self.webhook_client_cert:
                self.webhook_client_crt, self.webhook_client_key = self.pki.client_cert(
                    "webhook-client", WEBHOOK_CLIENT_CN)
            self._start_etcd(etcd_bin)
            self._start_apiserver(kas_bin)
            self._wait_ready()
            self.kubeconfig = self.dir / "kubeconfig"
            self.kubeconfig.write_text(_kubeconfig_text(self.url, self.pki.ca_crt, {
                "client-certificate-data": _b64(self.admin_crt),
                "client-key-data": _b64(self.admin_key)}))
            self.kubeconfig.chmod(0o600)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        atexit.register(self.stop)  # a forgotten stop() still cleans up at interpreter exit
        return self

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen:
        assert self.dir is not None
        log = open(self.dir / log_name, "ab")
        self._logs.append(log)
        return subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=self.dir, start_new_session=True,  # no Ctrl-C from the terminal's process group
            preexec_fn=_set_pdeathsig if _LIBC is not None else None,
        )

    def _start_etcd(self, etcd_bin: Path) -> None:
        assert self.dir is not None
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        self.etcd = self._spawn([
            str(etcd_bin),
            "--name=default",
            f"--data-dir={self.dir / 'etcd-data'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=default={peer_url}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ], "etcd.log")

    def _start_apiserver(self, kas_bin: Path, port: int | None = None) -> None:
        assert self.dir is not None and self.pki is not None
        self.port = port or free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        p = self.pki
        cert_dir = self.dir / "apiserver-certs"
        cert_dir.mkdir(exist_ok=True)
        self.apiserver = self._spawn([
            str(kas_bin),
            f"--etcd-servers={self.etcd_url}",
            f"--cert-dir={cert_dir}",
            f"--tls-cert-file={p.serving_crt}",
            f"--tls-private-key-file={p.serving_key}",
            f"--client-ca-file={p.ca_crt}",
            f"--secure-port={self.port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            # The default "lease" reconciler rejects a loopback advertise address for the
            # `kubernetes` Endpoints (log noise) and stalls shutdown 20 s in RemoveEndpoints.
            "--endpoint-reconciler-type=none",
            "--authorization-mode=RBAC",
            # No kube-controller-manager: nothing would create the default ServiceAccount.
            "--disable-admission-plugins=ServiceAccount",
            f"--service-account-issuer={self.url}/",
            f"--service-account-key-file={p.sa_pub}",
            f"--service-account-signing-key-file={p.sa_key}",
            *self._webhook_client_args(),
            *self.extra_apiserver_args,
        ], "kube-apiserver.log")

    def _webhook_client_args(self) -> list[str]:
        """--admission-control-config-file giving both webhook plugins a kubeconfig whose user
        "*" (every webhook host) is the webhook client certificate."""
        if not self.webhook_client_cert:
            return []
        assert self.dir is not None and self.webhook_client_crt is not None
        kubeconfig = self.dir / "webhook-client.kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config",
            "users": [{"name": "*", "user": {
                "client-certificate": str(self.webhook_client_crt),
                "client-key": str(self.webhook_client_key)}}]}) + "\n")
        config = self.dir / "admission-config.json"
        config.write_text(json.dumps({
            "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
            "plugins": [{"name": name, "configuration": {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "WebhookAdmissionConfiguration", "kubeConfigFile": str(kubeconfig)}}
                for name in ("MutatingAdmissionWebhook", "ValidatingAdmissionWebhook")]}) + "\n")
        return [f"--admission-control-config-file={config}"]

    def _ssl_context(self) -> ssl.SSLContext:
        assert self.pki is not None and self.admin_crt is not None
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_crt))
        ctx.load_cert_chain(str(self.admin_crt), str(self.admin_key))
        return ctx

    def _wait_ready(self) -> None:
        assert self.dir is not None
        deadline = time.monotonic() + self.startup_timeout
        ctx = self._ssl_context()
        last = "no answer yet"
        while True:
            for proc, name in ((self.etcd, "etcd"), (self.apiserver, "kube-apiserver")):
                if proc is not None and proc.poll() is not None:
                    raise ControlPlaneError(
                        f"{name} exited with code {proc.returncode} during startup; "
                        f"last lines of {self.dir / (name + '.log')}:\n{_tail(self.dir / (name + '.log'))}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", context=ctx, timeout=5) as r:
                    if r.status == 200:
                        return
                    last = f"HTTP {r.status}"
            except urllib.error.HTTPError as exc:
                body = exc.read().decode(errors="replace")
                failing = [ln for ln in body.splitlines() if ln.startswith("[-]")]
                last = f"HTTP {exc.code}: " + (", ".join(failing) if failing else body[-500:])
            except (OSError, ssl.SSLError) as exc:
                last = repr(exc)
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"kube-apiserver at {self.url} not ready after {self.startup_timeout:g} s "
                    f"(last /readyz: {last}); last lines of {self.dir / 'kube-apiserver.log'}:\n"
                    f"{_tail(self.dir / 'kube-apiserver.log')}\n"
                    f"--- etcd.log:\n{_tail(self.dir / 'etcd.log', 10)}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Terminate kube-apiserver then etcd (SIGTERM, SIGKILL after 10 s); remove the dir."""
        atexit.unregister(self.stop)
        for attr in ("apiserver", "etcd"):
            proc: subprocess.Popen | None = getattr(self, attr)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            setattr(self, attr, None)
        for log in self._logs:
            with contextlib.suppress(OSError):
                log.close()
        self._logs.clear()
        if self.dir is not None and self._own_dir and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def stop_apiserver(self, *, kill: bool = False, timeout: float = 30.0) -> None:
        """Stop kube-apiserver only (SIGTERM, or SIGKILL with ``kill``); etcd keeps running.

        :meth:`start_apiserver` brings it back on the same port, certificates and etcd, so
        clients (kubeconfigs, bound ServiceAccount tokens) keep working across the outage.
        """
        proc = self.apiserver
        if proc is None or proc.poll() is not None:
            return
        if kill:
            proc.kill()
        else:
            proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def start_apiserver(self) -> float:
        """Start kube-apiserver again after :meth:`stop_apiserver` (same port, PKI and etcd)
        and wait for ``/readyz``. Returns the seconds it took to be ready."""
        if self.etcd is None or self.etcd.poll() is not None or self.pki is None or not self.port:
            raise ControlPlaneError("start_apiserver needs a started control plane with etcd up")
        if self.apiserver is not None and self.apiserver.poll() is None:
            return 0.0
        t0 = time.monotonic()
        port = self.port
        deadline = t0 + 30
        while True:   # the old listener's port is normally free at once; wait if not yet
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", port))
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise ControlPlaneError(f"port {port} still taken after 30 s") from None
            time.sleep(0.2)
        self._start_apiserver(self.binary("kube-apiserver"), port=port)
        self._wait_ready()
        return time.monotonic() - t0

    def restart_apiserver(self, *, down_seconds: float = 0.0, kill: bool = False) -> float:
        """Stop kube-apiserver, stay down ``down_seconds``, start it again on the same port with
        the same etcd and certificates. Returns the seconds from the stop to ``/readyz``."""
        t0 = time.monotonic()
        self.stop_apiserver(kill=kill)
        time.sleep(down_seconds)
        self.start_apiserver()
        return time.monotonic() - t0

    @property
    def running(self) -> bool:
        return (self.apiserver is not None and self.apiserver.poll() is None
                and self.etcd is not None and self.etcd.poll() is None)

    # ------------------------------------------------------------------ raw API access
    def request(self, method: str, path: str, body: object | None = None, *,
                headers: dict[str, str] | None = None, timeout: float = 30) -> tuple[int, object]:
        """One admin request with the standard library. Returns (status, decoded JSON or text)."""
        data = None if body is None else json.dumps(body).encode()
        hdrs = {"Accept": "application/json", **(headers or {})}
        if data is not None:
            hdrs.setdefault("Content-Type", "application/json")
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, context=self._ssl_context(), timeout=timeout) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def version(self) -> dict:
        status, body = self.request("GET", "/version")
        if status != 200 or not isinstance(body, dict):
            raise ControlPlaneError(f"/version: HTTP {status}: {body}")
        return body

    # ------------------------------------------------------------------ kubeconfigs for other identities
    def impersonation_kubeconfig(self, user: str, groups: Sequence[str] = (),
                                 path: Path | str | None = None) -> Path:
        """Admin credentials + ``as``/``as-groups``: every request acts as ``user``.

        E.g. ``user="system:serviceaccount:ns:name"`` (kubectl adds nothing: pass the SA groups
        ``system:serviceaccounts`` and ``system:serviceaccounts:ns`` too if a rule needs them).
        kubectl honours it; the Python ``kubernetes`` client ignores ``as`` in kubeconfigs, so
        set ``Impersonate-User``/``Impersonate-Group`` headers there instead. Plain
        ``kubectl --kubeconfig=<admin> auth can-i ... --as=...`` needs no file at all.
        """
        assert self.pki is not None and self.admin_crt is not None
        user_entry: dict[str, object] = {
            "client-certificate-data": _b64(self.admin_crt),
            "client-key-data": _b64(self.admin_key),
            "as": user,
        }
        if groups:
            user_entry["as-groups"] = list(groups)
        return self._write_kubeconfig(path, "as-" + _safe(user), user_entry)

    def token_kubeconfig(self, token: str, path: Path | str | None = None, name: str = "token") -> Path:
        """A kubeconfig that authenticates with a bearer token."""
        return self._write_kubeconfig(path, name, {"token": token})

    def client_cert_kubeconfig(self, user: str, groups: Sequence[str] = (),
                               path: Path | str | None = None) -> Path:
        """A kubeconfig with a fresh client certificate for ``user`` in ``groups``."""
        assert self.pki is not None
        crt, key = self.pki.client_cert("user-" + _safe(user), user, groups)
        return self._write_kubeconfig(path, "user-" + _safe(user), {
            "client-certificate-data": _b64(crt), "client-key-data": _b64(key)})

    def service_account_token(self, namespace: str, name: str, *, expiration_seconds: int = 3600,
                              create: bool = True) -> str:
        """A bound token for a ServiceAccount via the TokenRequest API (creates the SA if asked)."""
        if create:
            status, body = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                                        {"apiVersion": "v1", "kind": "ServiceAccount",
                                         "metadata": {"name": name}})
            if status not in (201, 409):
                raise ControlPlaneError(f"create ServiceAccount {namespace}/{name}: HTTP {status}: {body}")
        status, body = self.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": expiration_seconds}})
        if status != 201 or not isinstance(body, dict):
            raise ControlPlaneError(f"TokenRequest {namespace}/{name}: HTTP {status}: {body}")
        return body["status"]["token"]

    def service_account_kubeconfig(self, namespace: str, name: str,
                                   path: Path | str | None = None) -> Path:
        """A kubeconfig holding a real token of ServiceAccount ``namespace/name``."""
        token = self.service_account_token(namespace, name)
        return self.token_kubeconfig(token, path, name=f"sa-{namespace}-{name}")

    def _write_kubeconfig(self, path: Path | str | None, stem: str, user: dict[str, object]) -> Path:
        assert self.dir is not None and self.pki is not None
        out = Path(path) if path else self.dir / f"kubeconfig-{stem}"
        out.write_text(_kubeconfig_text(self.url, self.pki.ca_crt, user))
        out.chmod(0o600)
        return out


def _safe(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s)


# ---------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m e2e.controlplane.cluster",
        description="A local kube-apiserver + etcd for tests (no Docker). Binaries live in "
                    f"{bin_dir()} (set AI4DL_CACHE to move them).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="build/verify the binaries (build.sh); minutes the first time")
    up = sub.add_parser("up", help="start a control plane, print the kubeconfig path, run until "
                                   "Ctrl-C / SIGTERM")
    up.add_argument("--no-build", action="store_true", help="do not run build.sh first")
    up.add_argument("--workdir", type=Path, help="keep PKI, logs, etcd data and kubeconfig here "
                                                  "(default: a temp dir removed on exit)")
    up.add_argument("--timeout", type=float, default=60.0, help="readiness timeout, s (default 60)")
    up.add_argument("--apiserver-arg", action="append", default=[], metavar="ARG",
                    help="extra kube-apiserver flag, repeatable (e.g. --apiserver-arg=--v=2)")
    args = ap.parse_args(argv)

    if args.cmd == "build":
        try:
            ensure_binaries()
        except BuildError as exc:
            print(exc, file=sys.stderr)
            return 1
        return 0

    if not args.no_build:
        try:
            ensure_binaries()
        except BuildError as exc:
            print(exc, file=sys.stderr)
            return 1
    stop = False

    def _on_signal(signum, frame):  # noqa: ARG001
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    cp = ControlPlane(workdir=args.workdir, startup_timeout=args.timeout,
                      extra_apiserver_args=args.apiserver_arg)
    try:
        cp.start()
    except ControlPlaneError as exc:
        print(exc, file=sys.stderr)
        return 1
    try:
        v = cp.version().get("gitVersion")
        print(f"kube-apiserver {v} at {cp.url} ready in {cp.startup_seconds:.1f} s; logs in {cp.dir}",
              file=sys.stderr)
        print(f"export KUBECONFIG={cp.kubeconfig}   # Ctrl-C to stop", file=sys.stderr)
        print(cp.kubeconfig, flush=True)
        while not stop:
            if not cp.running:
                print(f"a control-plane process exited; see logs in {cp.dir}", file=sys.stderr)
                return 1
            time.sleep(0.5)
    finally:
        cp.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
