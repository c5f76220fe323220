"""``python -m ai4dl``: the same CLI as the ``ai4dl`` command."""

import sys

from ai4dl.command import main

sys.exit(main())
