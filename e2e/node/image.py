"""Write a docker-save image archive from busybox's static binary, without a registry or a
Docker engine: one layer (bin/busybox and a symlink per applet) and two images on it,

    localhost/ai4dl/busybox:1   test pods (Cmd sh; PATH=/bin)
    localhost/ai4dl/pause:1     containerd's sandbox ("pause") image: sleeps until killed

    python3 e2e/node/image.py /path/to/busybox OUT.tar

Deterministic (mtime 0, sorted entries): the same binary gives the same digests, so an image
imported twice is the same image. Imported with `ctr -n k8s.io images import OUT.tar`.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile

BUSYBOX_IMAGE = "localhost/ai4dl/busybox:1"
PAUSE_IMAGE = "localhost/ai4dl/pause:1"


def _layer(busybox: str) -> bytes:
    applets = subprocess.run([busybox, "--list"], check=True, capture_output=True, text=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "tmp", "proc", "sys", "dev", "etc"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755, 0
            tar.addfile(info)
        with open(busybox, "rb") as f:
            data = f.read()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        tar.addfile(info, io.BytesIO(data))
        for name in sorted(set(applets.stdout.split()) - {"busybox"}):
            info = tarfile.TarInfo(f"bin/{name}")
            info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, "busybox", 0o777, 0
            tar.addfile(info)
    return buf.getvalue()


def _config(diff_id: str, cfg: dict) -> bytes:
    return json.dumps({
        "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
        "config": {"Env": ["PATH=/bin"], **cfg},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "e2e/node/image.py"}],
    }, sort_keys=True).encode()


def main(busybox: str, out: str) -> None:
    layer = _layer(busybox)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    layer_name = f"{diff_id[7:]}/layer.tar"
    images = {
        BUSYBOX_IMAGE: _config(diff_id, {"Cmd": ["sh"]}),
        # PID 1 ignores SIGTERM; containerd stops sandboxes with SIGKILL anyway.
        PAUSE_IMAGE: _config(diff_id, {"Entrypoint": ["/bin/sleep", "2147483647"]}),
    }
    files = {layer_name: layer}
    manifest = []
    for tag, cfg in images.items():
        name = hashlib.sha256(cfg).hexdigest() + ".json"
        files[name] = cfg
        manifest.append({"Config": name, "RepoTags": [tag], "Layers": [layer_name]})
    files["manifest.json"] = json.dumps(manifest).encode()
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            if "/" in name:
                info = tarfile.TarInfo(name.split("/")[0])
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                tar.addfile(info)
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(files[name]), 0o644, 0
            tar.addfile(info, io.BytesIO(files[name]))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: image.py BUSYBOX OUT.tar")
    main(sys.argv[1], sys.argv[2])
