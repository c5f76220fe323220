"""Trace files -> :class:`~ai4dl.method.traces.TraceSet`.

Every loader ends the same way: rows of (execution, time, feature values) are screened for bad
values, grouped per execution and put on a fixed step with :func:`~ai4dl.method.traces.regularise`
(a gap longer than ``max_gap_steps`` steps splits an execution into ``name``, ``name#2``...).
Formats: the AI4DL tabular CSV, a generic long CSV or Parquet table, the Google cluster
``GCD_VMs`` tar, the Alibaba GenAI 2026 pod tarballs and our recorded corpus of PyTorch training
runs (a folder with ``manifest.json``; see each loader).

Errors. Anything wrong with the input raises :class:`~ai4dl.errors.TraceError`, one line naming
the file, the row (the 1-based line number, header = line 1; for Parquet the 1-based record
number; for a file inside a tar, ``archive/member``) and the column. No ``ValueError``,
``csv.Error``, ``OSError``... escapes: the caller can print the message and stop.

The rule applied to NaN/negatives. A feature value that is NaN (an empty cell counts as NaN),
infinite or negative, or a timestamp that is NaN or infinite, is *bad*:

* ``on_bad="error"`` (default): the first bad value raises a TraceError naming file, row,
  column and value. Silently feeding such values to a model would hide a broken exporter.
* ``on_bad="drop"``: the whole row (one sample of every feature) is dropped and treated as a
  sample that was never taken: resampling interpolates across it, and a run of dropped rows
  longer than ``max_gap_steps`` steps splits the execution like any other gap. The count goes
  into the returned trace set's ``warnings``.

Text that is not a number at all (``"abc"``) is always an error, whatever ``on_bad`` says: it
means the file is not what the loader thinks it is; so is an empty execution name. Percent
values above 100 are kept (the Google trace has memory up to 215 %). For the Alibaba tables
the rule applies to the samples that survive the join (a bad value at a timestamp the other
metrics lack is dropped by the join, not reported).

Every returned TraceSet carries ``warnings``: a list (possibly empty) of one-line notes about
what was dropped or skipped, for the caller to show.

Modules: :mod:`~ai4dl.io.loaders.common` (what every loader shares), one per format family
(:mod:`~ai4dl.io.loaders.ai4dl_csv`, :mod:`~ai4dl.io.loaders.long_table` for CSV and Parquet,
:mod:`~ai4dl.io.loaders.gcd`, :mod:`~ai4dl.io.loaders.alibaba`, :mod:`~ai4dl.io.loaders.corpus`),
:mod:`~ai4dl.io.loaders.size_bound` (``--max-rows``) and :mod:`~ai4dl.io.loaders.dispatch`
(:func:`load_traces`).
"""

# The package's public API (``__all__``), imported from the modules that define it. Patch
# ``load_traces`` here: callers look it up here.
from ai4dl.io.loaders.ai4dl_csv import load_ai4dl_csv
from ai4dl.io.loaders.alibaba import load_alibaba
from ai4dl.io.loaders.corpus import DL_CORPUS, load_corpus_phases, load_dl_corpus
from ai4dl.io.loaders.dispatch import FORMATS, load_traces, option_default, takes_option
from ai4dl.io.loaders.gcd import load_gcd_tar
from ai4dl.io.loaders.long_table import load_long_csv, load_parquet
from ai4dl.io.loaders.size_bound import DEFAULT_MAX_ROWS, check_rows

__all__ = ["FORMATS", "DEFAULT_MAX_ROWS", "load_traces", "check_rows", "load_ai4dl_csv",
           "load_long_csv", "load_parquet", "option_default", "takes_option",
           "load_gcd_tar", "load_alibaba", "load_dl_corpus", "load_corpus_phases", "DL_CORPUS"]
