"""File adapters: trace files in the supported formats -> ai4dl.method.traces.TraceSet; model files
(``save_model``/``load_model``, from :mod:`ai4dl.io.modelfile`)."""

from ai4dl.io.loaders import (FORMATS, load_ai4dl_csv, load_alibaba, load_gcd_tar,
                              load_long_csv, load_parquet, load_traces)

__all__ = ["FORMATS", "load_traces", "load_ai4dl_csv", "load_long_csv", "load_parquet",
           "load_gcd_tar", "load_alibaba", "save_model", "load_model"]


def __getattr__(name: str):
    # model files on first use: importing the loaders need not import the phase model
    if name in ("save_model", "load_model"):
        from ai4dl.io import modelfile

        return getattr(modelfile, name)
    raise AttributeError(f"module 'ai4dl.io' has no attribute {name!r}")
