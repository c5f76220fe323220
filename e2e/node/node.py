"""A real node for the e2e tests: containerd + a kubelet against the test API server.

Programs come from ``build.sh``/``install.sh`` (next to this file): the kubelet in
``<cache>/bin``, Debian's containerd/runc/busybox unpacked in ``<cache>/node-runtime``. Nothing
is installed system-wide and no iptables rule is ever written (``makeIPTablesUtilChains:
false``: the kubelet would otherwise add a DROP rule for 127.0.0.0/8 that breaks every
loopback test on the machine).

Everything one node owns is named by its id, so a teardown (or the sweep of a killed session's
leftovers) finds all of it and nothing of anyone else's:

* ``<base>/<id>/`` (default base ``/tmp/ai4dl-node``, short: socket paths are limited to 108
  bytes): containerd's root, state, socket and config; the kubelet's root, certs, config,
  pod logs; runc's state. ``<base>/<id>.lock`` is flock'ed by the owning process while the
  node lives: a folder whose lock can be taken belongs to a dead session.
* cgroup ``/ai4dl-node-<id>`` in every cgroup hierarchy (the kubelet's ``cgroupRoot``:
  ``kubepods/...`` below it).
* processes: the kubelet, containerd and the shims carry the folder in their command line;
  the containers' processes sit in the node's cgroups.
* mounts below the folder (overlay rootfs, /dev/shm, volumes); symlinks in
  ``/var/log/containers`` that point into the folder.

Python use::

    node = RealNode(control_plane).start()   # sweeps dead nodes' leftovers first
    node.name, node.start_seconds
    node.stop()                              # kills, unmounts, removes cgroups and files

Needs root (cgroups, mounts) and cgroup v1 or hybrid (the machines this project runs on).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import fcntl
import json
import os
import shutil
import signal
import stat
import subprocess
import time
import uuid
from pathlib import Path

from e2e.controlplane import cluster as _cp

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
KUBE_VERSION = _cp.KUBE_VERSION
BUSYBOX_IMAGE = "localhost/ai4dl/busybox:1"
PAUSE_IMAGE = "localhost/ai4dl/pause:1"
CGROUP_PREFIX = "ai4dl-node-"
VAR_LOG_CONTAINERS = Path("/var/log/containers")

_LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
_MNT_DETACH = 2


class NodeError(RuntimeError):
    pass


def base_dir() -> Path:
    return Path(os.environ.get("AI4DL_NODE_DIR", "/tmp/ai4dl-node"))


def runtime_dir() -> Path:
    return _cp.cache_dir() / "node-runtime"


def missing_programs() -> list[str]:
    """The programs the node needs that are not built/installed yet (empty: ready)."""
    want = [_cp.bin_dir() / "kubelet"] + [runtime_dir() / "bin" / b for b in (
        "containerd", "containerd-shim-runc-v2", "ctr", "runc")]
    want.append(runtime_dir() / "images" / "busybox.tar")
    return [str(p) for p in want if not p.exists()]


def ensure_programs(*, log_path: Path | None = None, timeout: float = 3600) -> None:
    """Run build.sh (kubelet + runtime; a fast no-op once cached). Raises NodeError."""
    log_path = log_path or _cp.cache_dir() / "node-build.log"
    with open(log_path, "wb") as log:
        res = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True, timeout=timeout)
    if res.returncode != 0:
        raise NodeError(f"{BUILD_SCRIPT} failed (exit {res.returncode}); log {log_path}:\n"
                        f"{_cp._tail(log_path, 30)}")


# ---------------------------------------------------------------------- host inspection
def cgroup_mounts() -> list[Path]:
    """Mount points of every cgroup (v1) and cgroup2 hierarchy."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] in ("cgroup", "cgroup2"):
            out.append(Path(_unescape(left.split(" ")[4])))
    return out


def _unescape(s: str) -> str:
    return s.encode().decode("unicode_escape") if "\\" in s else s


def mounts_under(folder: Path) -> list[str]:
    prefix = str(folder).rstrip("/") + "/"
    pts = [_unescape(line.split(" ")[4]) for line in
           Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in pts if p.startswith(prefix) or p == str(folder)]


def pids_with_arg(needle: str) -> list[int]:
    """Processes whose command line contains ``needle`` (not this one)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if needle.encode() in cmd:
            out.append(int(d.name))
    return out


def cgroup_dirs(node_id: str) -> list[Path]:
    return [m / f"{CGROUP_PREFIX}{node_id}" for m in cgroup_mounts()
            if (m / f"{CGROUP_PREFIX}{node_id}").is_dir()]


def host_device_problems() -> list[str]:
    """The host's /dev/null must still be the character device after a node's life (it was
    once found replaced by a regular file on this machine, cause not found): said, and put
    back, so the next run does not inherit it."""
    try:
        mode = os.stat("/dev/null").st_mode
    except OSError:
        mode = None
    if mode is not None and stat.S_ISCHR(mode):
        return []
    why = "missing" if mode is None else "not a character device"
    with contextlib.suppress(OSError):
        if mode is not None:
            os.unlink("/dev/null")
        os.mknod("/dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        os.chmod("/dev/null", 0o666)
    return [f"host /dev/null was {why} after the node (recreated)"]


def _kill(pids: list[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _cgroup_pids(root: Path) -> list[int]:
    pids = []
    for d, _, _ in os.walk(root):
        with contextlib.suppress(OSError):
            pids += [int(x) for x in (Path(d) / "cgroup.procs").read_text().split()]
    return pids


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if Path(f"/proc/{p}").exists()
                 and "zombie" not in _proc_state(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _proc_state(pid: int) -> str:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                return line
    except OSError:
        pass
    return "zombie"


def cleanup(node_id: str, folder: Path, *, pids: tuple[int, ...] = ()) -> list[str]:
    """Remove everything node ``node_id`` may have left: processes (``pids``, those naming
    ``folder`` on their command line, those in its cgroups), mounts below ``folder``, its
    cgroups (deepest first), ``/var/log/containers`` links into ``folder``, and ``folder``.
    Returns what could not be removed (empty: clean)."""
    problems: list[str] = []
    needle = str(folder).rstrip("/") + "/"
    # 1. the kubelet first (it would restart containers), then everything else: SIGKILL is
    #    enough, nothing here holds state worth a graceful stop, and it cannot hang.
    for _ in range(3):
        victims = list(pids) + pids_with_arg(needle)
        for d in cgroup_dirs(node_id):
            victims += _cgroup_pids(d)
        victims = sorted(set(victims) - {os.getpid()})
        if not victims:
            break
        _kill(victims)
        _wait_gone(victims, 5)
    # 2. mounts, deepest first; lazy so a busy one cannot block the teardown
    for mp in sorted(mounts_under(folder), key=lambda p: p.count("/"), reverse=True):
        if _LIBC.umount2(mp.encode(), _MNT_DETACH) != 0:
            err = ctypes.get_errno()
            if err not in (errno.EINVAL, errno.ENOENT):
                problems.append(f"umount {mp}: {os.strerror(err)}")
    # 3. cgroups, deepest first (a cgroup can only go once it has no children or tasks)
    for root in cgroup_dirs(node_id):
        for _attempt in range(50):
            for d, _, _ in os.walk(root, topdown=False):
                with contextlib.suppress(OSError):
                    os.rmdir(d)
            if not root.exists():
                break
            _kill(_cgroup_pids(root))
            time.sleep(0.1)
        if root.exists():
            problems.append(f"cgroup {root} still there (tasks: {_cgroup_pids(root)})")
    # 4. the kubelet's links to the pod logs (its podLogsDir is in the folder)
    with contextlib.suppress(OSError):
        for link in VAR_LOG_CONTAINERS.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(needle):
                    link.unlink()
    # 5. the folder (nothing is mounted below it any more)
    if folder.exists():
        shutil.rmtree(folder, ignore_errors=True)
        if folder.exists():
            problems.append(f"folder {folder} still there")
    leftover = pids_with_arg(needle)
    if leftover:
        problems.append(f"processes still running: {leftover}")
    return problems


def _lock_is_free(lock: Path) -> bool:
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing drops a lock we took


def sweep() -> list[str]:
    """Clean up the nodes of dead sessions (their lock is free), never a live one's.
    Returns the ids swept."""
    base = base_dir()
    ids = set()
    if base.is_dir():
        ids |= {p.name for p in base.iterdir() if p.is_dir()}
        ids |= {p.name[:-5] for p in base.glob("*.lock")}
    for m in cgroup_mounts():
        with contextlib.suppress(OSError):
            ids |= {p.name[len(CGROUP_PREFIX):] for p in m.iterdir()
                    if p.is_dir() and p.name.startswith(CGROUP_PREFIX)}
    swept = []
    for node_id in sorted(ids):
        lock = base / f"{node_id}.lock"
        with contextlib.suppress(FileNotFoundError):
            if time.time() - lock.stat().st_mtime < 10:  # maybe just made, not yet flock'ed
                continue
        if not _lock_is_free(lock):
            continue
        cleanup(node_id, base / node_id)
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
        swept.append(node_id)
    return swept


def leftovers(node_id: str, folder: Path) -> list[str]:
    """What of node ``node_id`` is still on the machine (for tests of the teardown)."""
    out = [f"process {p}" for p in pids_with_arg(str(folder).rstrip("/") + "/")]
    out += [f"mount {m}" for m in mounts_under(folder)]
    out += [f"cgroup {d}" for d in cgroup_dirs(node_id)]
    if folder.exists():
        out.append(f"folder {folder}")
    with contextlib.suppress(OSError):
        out += [f"link {p}" for p in VAR_LOG_CONTAINERS.iterdir()
                if p.is_symlink() and os.readlink(p).startswith(str(folder) + "/")]
    return out


# ---------------------------------------------------------------------- the node
class RealNode:
    """containerd + kubelet registered as Node ``name`` with ``control_plane``."""

    def __init__(self, control_plane: _cp.ControlPlane, *, name: str | None = None,
                 ready_timeout: float = 60.0):
        self.cp = control_plane
        self.id = uuid.uuid4().hex[:8]
        self.name = name or f"ai4dl-node-{self.id}"
        self.dir = base_dir() / self.id
        self.cgroup_root = f"/{CGROUP_PREFIX}{self.id}"
        self.ready_timeout = ready_timeout
        self.containerd: subprocess.Popen | None = None
        self.kubelet: subprocess.Popen | None = None
        self.kubelet_port = 0
        self.start_seconds: float | None = None
        self.swept: list[str] = []
        self._lock_fd: int | None = None
        self._logs: list = []

    @property
    def socket(self) -> Path:
        return self.dir / "containerd.sock"

    # ------------------------------------------------------------------ start
    def start(self) -> RealNode:
        if os.geteuid() != 0:
            raise NodeError("a real node needs root (cgroups, mounts)")
        missing = missing_programs()
        if missing:
            raise NodeError(f"not built/installed: {missing}; run `bash {BUILD_SCRIPT}`")
        t0 = time.monotonic()
        self.swept = sweep()
        base_dir().mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(base_dir() / f"{self.id}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        atexit.register(self.stop)
        try:
            self.dir.mkdir(parents=True)
            self._make_cgroup_root()
            self._start_containerd()
            self._import_images()
            self._start_kubelet()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _spawn(self, args: list[str], log_name: str, env: dict | None = None) -> subprocess.Popen:
        log = open(self.dir / log_name, "ab")
        self._logs.append(log)
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=self.dir, env=env,
                                start_new_session=True, preexec_fn=_cp._set_pdeathsig)

    def _make_cgroup_root(self) -> None:
        # The kubelet refuses a cgroupRoot that does not exist in every hierarchy it uses.
        for m in cgroup_mounts():
            d = m / self.cgroup_root.lstrip("/")
            d.mkdir(exist_ok=True)
            if (m / "cpuset.cpus").exists():  # a new cpuset has no cpus/mems until given
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (d / f).write_text((m / f).read_text())

    def _containerd_config(self) -> str:
        d, rt = self.dir, runtime_dir()
        cni_conf = d / "cni" / "net.d"
        cni_conf.mkdir(parents=True)
        (d / "cni" / "bin").mkdir()
        # Only loopback: without a CNI config the node stays NotReady; pods use hostNetwork,
        # so no plugin ever runs.
        (cni_conf / "10-loopback.conf").write_text(json.dumps(
            {"cniVersion": "0.4.0", "name": "lo", "type": "loopback"}) + "\n")
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        return f"""version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/containerd/opt"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # root without CAP_SYS_RESOURCE: without this every sandbox fails with
  # "can't get final child's PID from pipe: EOF"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{rt}/bin/runc"
        Root = "{d}/runc"
  [{cri}.cni]
    bin_dir = "{d}/cni/bin"
    conf_dir = "{cni_conf}"
"""

    def _start_containerd(self) -> None:
        cfg = self.dir / "containerd.toml"
        cfg.write_text(self._containerd_config())
        env = dict(os.environ)
        # containerd finds its shim on PATH, the shim finds runc by BinaryName
        env["PATH"] = f"{runtime_dir() / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        self.containerd = self._spawn(
            [str(runtime_dir() / "bin" / "containerd"), "--config", str(cfg)],
            "containerd.log", env)
        deadline = time.monotonic() + 30
        while True:
            if self.containerd.poll() is not None:
                raise NodeError(f"containerd exited with {self.containerd.returncode}:\n"
                                f"{_cp._tail(self.dir / 'containerd.log')}")
            if self.socket.exists() and self._ctr("version", check=False).returncode == 0:
                return
            if time.monotonic() > deadline:
                raise NodeError(f"containerd not ready in 30 s:\n"
                                f"{_cp._tail(self.dir / 'containerd.log')}")
            time.sleep(0.1)

    def _ctr(self, *args: str, check: bool = True,
             timeout: float = 60) -> subprocess.CompletedProcess:
        res = subprocess.run([str(runtime_dir() / "bin" / "ctr"), "--address", str(self.socket),
                              "-n", "k8s.io", *args], capture_output=True, text=True,
                             timeout=timeout)
        if check and res.returncode != 0:
            raise NodeError(f"ctr {' '.join(args)}: {res.stderr.strip()}")
        return res

    def _import_images(self) -> None:
        self._ctr("images", "import", str(runtime_dir() / "images" / "busybox.tar"))

    def import_image(self, archive: Path, timeout: float = 300) -> float:
        """Import a docker-save (or OCI) archive into the node's containerd, where the kubelet
        finds its images (``imagePullPolicy: Never``: nothing can be pulled here). It lives in
        the node's folder and goes with it. Returns the seconds it took. Raises NodeError."""
        t0 = time.monotonic()
        self._ctr("images", "import", str(archive), timeout=timeout)
        return time.monotonic() - t0

    def _kubelet_files(self) -> tuple[Path, Path]:
        d = self.dir / "kubelet"
        d.mkdir()
        pki = self.cp.pki
        assert pki is not None
        user = f"system:node:{self.name}"
        crt, key = pki.client_cert(f"kubelet-{self.id}", user, ["system:nodes"])
        # RBAC only (no Node authorizer here): the kubelet's user gets the system:node role.
        status, body = self.cp.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": f"ai4dl-node-{self.id}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "system:node"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
        if status not in (201, 409):
            raise NodeError(f"ClusterRoleBinding for the kubelet: HTTP {status}: {body}")
        kubeconfig = d / "kubeconfig"
        kubeconfig.write_text(_cp._kubeconfig_text(self.cp.url, pki.ca_crt, {
            "client-certificate": str(crt), "client-key": str(key)}))
        self.kubelet_port = _cp.free_port()
        config = d / "config.json"
        config.write_text(json.dumps({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": "127.0.0.1", "port": self.kubelet_port, "readOnlyPort": 0,
            "healthzPort": 0,
            # Who may read /metrics/cadvisor, /pods...: a client certificate of the harness CA.
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(pki.ca_crt)}},
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "cgroupDriver": "cgroupfs", "cgroupRoot": self.cgroup_root, "cgroupsPerQOS": True,
            "failCgroupV1": False, "failSwapOn": False,
            # CRUCIAL: else the kubelet installs KUBE-FIREWALL with a DROP rule for
            # 127.0.0.0/8 that breaks every loopback test on the machine.
            "makeIPTablesUtilChains": False,
            # Local images cannot be pulled again: never garbage-collect them.
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            # The machine is shared: do not evict test pods because of others' disk/memory use.
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%",
                             "nodefs.inodesFree": "1%", "imagefs.available": "1%"},
            "podLogsDir": str(self.dir / "pod-logs"),
            "volumePluginDir": str(self.dir / "volume-plugins"),
            "registerNode": True, "serializeImagePulls": False,
            "syncFrequency": "5s", "nodeStatusUpdateFrequency": "2s",
            "resolvConf": "/etc/resolv.conf",
        }, indent=1))
        return kubeconfig, config

    def _start_kubelet(self) -> None:
        kubeconfig, config = self._kubelet_files()
        self.kubelet = self._spawn([
            str(_cp.bin_dir() / "kubelet"),
            f"--config={config}", f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.dir / 'kubelet' / 'root'}",
            f"--cert-dir={self.dir / 'kubelet' / 'pki'}",
            f"--hostname-override={self.name}",
            f"--containerd={self.socket}",  # cAdvisor's container labels
            "--v=2",
        ], "kubelet.log")

    def node_object(self) -> dict | None:
        status, body = self.cp.request("GET", f"/api/v1/nodes/{self.name}")
        return body if status == 200 and isinstance(body, dict) else None

    def ready(self) -> bool:
        node = self.node_object() or {}
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in node.get("status", {}).get("conditions", []))

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while not self.ready():
            for proc, log in ((self.kubelet, "kubelet.log"), (self.containerd, "containerd.log")):
                if proc is not None and proc.poll() is not None:
                    raise NodeError(f"{log[:-4]} exited with {proc.returncode}:\n"
                                    f"{_cp._tail(self.dir / log)}")
            if time.monotonic() > deadline:
                raise NodeError(f"node {self.name} not Ready after {self.ready_timeout:g} s; "
                                f"kubelet.log:\n{_cp._tail(self.dir / 'kubelet.log')}")
            time.sleep(0.2)

    # ------------------------------------------------------------------ stop
    def stop(self) -> list[str]:
        """Kill everything, unmount, remove cgroups, links and the folder. Idempotent.
        Returns what could not be removed (empty: clean)."""
        atexit.unregister(self.stop)
        pids = tuple(p.pid for p in (self.kubelet, self.containerd) if p is not None)
        problems = cleanup(self.id, self.dir, pids=pids)
        problems += host_device_problems()
        for p in (self.kubelet, self.containerd):
            if p is not None:
                with contextlib.suppress(Exception):
                    p.wait(timeout=5)
        self.kubelet = self.containerd = None
        for log in self._logs:
            with contextlib.suppress(OSError):
                log.close()
        self._logs.clear()
        if self._lock_fd is not None:
            with contextlib.suppress(FileNotFoundError):
                (base_dir() / f"{self.id}.lock").unlink()
            os.close(self._lock_fd)
            self._lock_fd = None
        return problems

    def leftovers(self) -> list[str]:
        return leftovers(self.id, self.dir)
