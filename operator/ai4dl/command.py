"""The ``ai4dl`` command's entry point (pyproject's console script, ``python -m ai4dl``).

It imports the command line inside its own handlers (importing the ``ai4dl`` package costs no
numpy), so that a Ctrl-C during the imports exits 130 and a missing optional extra is one line
naming it (issue 45: a plain ``pip install .``, what the operator image has, ran ``ai4dl train``
into a ``ModuleNotFoundError`` traceback), never a traceback.
"""

from __future__ import annotations

import sys
from typing import Sequence

#: Modules of the optional extras (pyproject.toml), and the extra that installs each.
EXTRA_OF = {"torch": "train", "sklearn": "train", "matplotlib": "train", "tqdm": "train",
            "pyarrow": "parquet", "pynvml": "gpu"}
#: A Ctrl-C's exit status, as a shell reports a process ended by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from ai4dl.cli.main import main as run

        return run(argv)
    except KeyboardInterrupt:
        print("ai4dl: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ModuleNotFoundError as err:
        top = (err.name or "").split(".")[0]
        if top not in EXTRA_OF:
            raise
        extra = EXTRA_OF[top]
        print(f"ai4dl: error: this command needs the '{extra}' extra (module {top} is not "
              f"installed): pip install 'ai4dl-operator[{extra}]'", file=sys.stderr)
        return 2
