"""File adapters: trace files in the supported formats -> ai4dl.traces.TraceSet."""

from ai4dl.io.loaders import (FORMATS, load_ai4dl_csv, load_alibaba, load_gcd_tar,
                              load_long_csv, load_parquet, load_traces)

__all__ = ["FORMATS", "load_traces", "load_ai4dl_csv", "load_long_csv", "load_parquet",
           "load_gcd_tar", "load_alibaba"]
