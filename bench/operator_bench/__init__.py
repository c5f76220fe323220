"""The parts of bench/bench_operator.py, one module per seam: :mod:`.common` (paths, helpers,
the markdown table), :mod:`.cluster` (the operator process and the cluster's set-up),
:mod:`.measure` (what is read while the operator runs, and the in-process breakdown),
:mod:`.serving` (--serving) and :mod:`.report` (the tables printed at the end). The script
itself keeps the command line."""
