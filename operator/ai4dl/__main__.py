"""``python -m ai4dl``: the same CLI as the ``ai4dl`` command."""

import os
import sys

from ai4dl.command import EXIT_INTERRUPTED, main

code = main()
if code == EXIT_INTERRUPTED:
    # Under -m, CPython ends a process by SIGINT (status -2, not 130) at exit when it saw a
    # KeyboardInterrupt escape one of its C-level run calls (Py_RunMain's "unhandled keyboard
    # interrupt" flag), even though main caught and handled it: 2 of 12 Ctrl-Cs of a demo
    # ended so here, 0 of 12 through the console script. The streams are flushed and the
    # process ends now, with the status a shell expects.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
