"""e2e/node/image.py: the local image archive the real node imports (no registry, no Docker)."""

from __future__ import annotations

import hashlib
import io
import importlib.util
import json
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _image_module():
    spec = importlib.util.spec_from_file_location("node_image", REPO / "e2e" / "node" / "image.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fake_busybox(tmp_path: Path) -> Path:
    exe = tmp_path / "busybox"
    exe.write_text("#!/bin/sh\nprintf 'sh\\nsleep\\nbusybox\\n'\n")
    exe.chmod(0o755)
    return exe


def test_archive_is_a_docker_save_with_both_images_and_is_deterministic(tmp_path):
    image = _image_module()
    bb = _fake_busybox(tmp_path)
    a, b = tmp_path / "a.tar", tmp_path / "b.tar"
    image.main(str(bb), str(a))
    image.main(str(bb), str(b))
    assert a.read_bytes() == b.read_bytes(), "same binary, different archive: digests would move"
    with tarfile.open(a) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
        assert sorted(t for m in manifest for t in m["RepoTags"]) == sorted(
            [image.BUSYBOX_IMAGE, image.PAUSE_IMAGE])
        (layer_name,) = {m["Layers"][0] for m in manifest}
        layer = tar.extractfile(layer_name).read()
        for m in manifest:
            cfg = json.load(tar.extractfile(m["Config"]))
            # the layer's digest is what the config promises (else containerd refuses it)
            assert cfg["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
            if image.PAUSE_IMAGE in m["RepoTags"]:
                assert cfg["config"]["Entrypoint"][0] == "/bin/sleep"
    with tarfile.open(fileobj=io.BytesIO(layer)) as lt:
        members = {m.name: m for m in lt.getmembers()}
    assert members["bin/busybox"].isfile() and members["bin/busybox"].mode == 0o755
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "busybox"
    assert "bin/sleep" in members and members["tmp"].mode == 0o1777
