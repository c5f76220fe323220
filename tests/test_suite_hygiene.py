"""The suite's own leak check (``tests/conftest.py``, ``_suite_leaves_nothing``) sees what it
is meant to: a harness folder left in the temporary folder and a child process left running."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile

from conftest import _child_processes, _our_temp_entries


def test_a_harness_folder_left_behind_is_seen():
    before = _our_temp_entries()
    folder = tempfile.mkdtemp(prefix="ai4dl-webhook-")
    try:
        assert _our_temp_entries() - before == {folder.rsplit("/", 1)[1]}
    finally:
        shutil.rmtree(folder)
    assert _our_temp_entries() - before == set()


def test_a_child_process_left_running_is_seen():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert proc.pid in _child_processes()
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in _child_processes()


def test_the_webhooks_own_folder_goes_with_its_certificates():
    """The operator's self-signed key is not left on disk when its holder goes (at the
    latest when the process exits)."""
    import gc
    from pathlib import Path

    from ai4dl.controller.webhook import SelfSignedCertificates

    certs = SelfSignedCertificates(["127.0.0.1"])
    folder = Path(certs.folder)
    assert certs.keyfile.exists()
    del certs
    gc.collect()
    assert not folder.exists()
