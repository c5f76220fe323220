"""The outputs a command declares, checked and held before it starts (issue 45: a folder where
a file was expected was a traceback, for ``evaluate --json`` after all its work; two commands
writing one output lost one's result without a word).

A parser declares each output option with :func:`add_output`; the CLI's ``main`` enters
:func:`claimed_outputs` before the command runs. Standard library only: ``ai4dl record`` declares
its output too, and must start its child without waiting for numpy.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
from pathlib import Path
from typing import IO, Iterator

from ai4dl.errors import Ai4dlError

#: The argparse default under which a command lists the outputs it writes: (dest, flag, kind).
OUTPUTS = "declared_outputs"
#: A file written whole, a folder of files (each claimed by a hidden lock file beside it), a
#: file the command locks itself while it appends to it (``record``: checked only).
FILE, FOLDER, SELF_LOCKED = "file", "folder", "self-locked"


def add_output(parser, *flags: str, kind: str = FILE, unless: tuple[str, ...] = (),
               **kwargs) -> argparse.Action:
    """Add an output option to ``parser`` and declare it, so that :func:`claimed_outputs`
    checks it and holds it before the command starts (issue 45: a folder where a file was
    expected was a traceback, for ``evaluate --json`` after all its work; two commands writing
    one output lost one's result without a word). ``unless``: flags (dests) under which the
    command writes no such output (``train --phasemodel`` stores its model in the cluster)."""
    action = parser.add_argument(*flags, **kwargs)
    declared = parser.get_default(OUTPUTS) or ()
    parser.set_defaults(**{OUTPUTS: (*declared, (action.dest, action.option_strings[0], kind,
                                                 unless))})
    return action


def output_file(path: str | os.PathLike, flag: str = "-o") -> Path:
    """``path`` as a file to write (its folder made if missing), checked before any work
    (issue 45: ``train -o DIR`` lost its finished fit to a traceback): not a folder, and not
    inside a file."""
    p = Path(path)
    if p.is_dir():
        raise Ai4dlError(f"{flag} {path}: is a folder; give a file name (e.g. "
                         f"{p / 'model.json'})")
    _not_inside_a_file(p, flag, path)
    return p


def output_folder(path: str | os.PathLike, flag: str = "-o") -> Path:
    """``path`` as a folder to write into (made if missing), checked before any work: not a
    file, and not inside one."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise Ai4dlError(f"{flag} {path}: is a file; give a folder (it is made if missing)")
    _not_inside_a_file(p, flag, path)
    return p


def _not_inside_a_file(p: Path, flag: str, path) -> None:
    for up in p.absolute().parents:
        if up.exists():
            if not up.is_dir():
                raise Ai4dlError(f"{flag} {path}: {up} is a file, not a folder")
            return


@contextlib.contextmanager
def claimed_outputs(args: argparse.Namespace) -> Iterator[None]:
    """Check every output the parsed command declared (:func:`add_output`) and hold each for
    as long as the command runs: a second command writing the same file or folder is refused
    at once, in one line, not after its work (each file is still written whole by
    :func:`atomic_output`; without the claim the last rename won and the other's result was
    lost silently)."""
    with contextlib.ExitStack() as stack:
        for dest, flag, kind, unless in getattr(args, OUTPUTS, ()):
            value = getattr(args, dest, None)
            if value is None or any(getattr(args, u, None) for u in unless):
                continue
            path = output_folder(value, flag) if kind == FOLDER else output_file(value, flag)
            if kind != SELF_LOCKED:
                stack.enter_context(_held(path, flag, kind))
        yield


@contextlib.contextmanager
def _held(path: Path, flag: str, kind: str) -> Iterator[None]:
    """An advisory lock for ``path`` (the kernel releases it when the holder ends, even
    killed), in a hidden file beside it, removed when released, as are the folders made for
    it if they stay empty: a refused command leaves no trace."""
    target = path.resolve()
    lock = (target.with_name(f".{target.name}.ai4dl.lock") if target.name
            else target / ".ai4dl.lock")                     # the root folder: inside it
    made = [d for d in (lock.parent, *lock.parent.parents) if not d.exists()]
    lock.parent.mkdir(parents=True, exist_ok=True)
    try:
        fh = _locked(lock)
        if fh is None:
            what = "folder" if kind == FOLDER else "file"
            raise Ai4dlError(f"{path} is being written by another ai4dl command: give each "
                             f"its own {flag} {what}")
        try:
            yield
        finally:
            lock.unlink(missing_ok=True)     # while still held: no one can hold the removed one
            fh.close()
    finally:
        for d in made:                       # innermost first
            with contextlib.suppress(OSError):
                d.rmdir()


def _locked(lock: Path, tries: int = 3) -> IO | None:
    """``lock`` opened and exclusively locked, or None while another process holds it. The
    file may be removed by its last holder between our open and our lock: then the lock we got
    is on a removed file, so it is taken again on the path's current file."""
    for _ in range(tries):
        fh = open(lock, "a")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            return None
        try:
            if os.stat(lock).st_ino == os.fstat(fh.fileno()).st_ino:
                return fh
        except FileNotFoundError:
            pass
        fh.close()
    return None
