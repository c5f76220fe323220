"""Our recorded corpus of real PyTorch training runs: a long table, phase logs and a manifest."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from ai4dl.errors import TraceError
from ai4dl.io.loaders.common import parse_csv, read_bytes, why
from ai4dl.io.loaders.long_table import load_long_csv
from ai4dl.method.traces import DEFAULT_MAX_GAP_STEPS, Execution, TraceSet

#: The recorded corpus of real PyTorch training runs shipped with the package
#: (``e2e/workloads/corpus.py`` re-records it); ``dl-corpus`` names it on the command line.
DL_CORPUS = Path(__file__).resolve().parent.parent.parent / "data" / "dlcorpus"
CORPUS_FORMAT = "ai4dl-dl-corpus"


def _corpus_manifest(path: Path) -> dict:
    label = str(path / "manifest.json")
    try:
        doc = json.loads((path / "manifest.json").read_text())
    except OSError as e:
        raise TraceError(f"cannot read file: {why(e.strerror or e)}", path=label) from None
    except ValueError as e:
        raise TraceError(f"not JSON: {why(e)}", path=label) from None
    if not isinstance(doc, dict) or doc.get("format") != CORPUS_FORMAT:
        raise TraceError(f"not a corpus manifest (format is not {CORPUS_FORMAT!r})", path=label)
    if doc.get("version") != 1:
        raise TraceError(f"corpus manifest version {doc.get('version')!r} is not supported "
                         "(this ai4dl reads version 1)", path=label)
    runs = doc.get("executions")
    if not isinstance(runs, list) or not all(isinstance(r, dict) and isinstance(
            r.get("execution"), str) and isinstance(r.get("family"), str) for r in runs):
        raise TraceError("'executions' must be a list of objects with 'execution' and "
                         "'family'", path=label)
    return doc


def load_dl_corpus(path: str | os.PathLike = DL_CORPUS, *, step: float | None = None,
                   max_gap_steps: float = DEFAULT_MAX_GAP_STEPS, on_bad: str = "error",
                   features: Sequence[str] | None = None,
                   families: Sequence[str] | None = None) -> TraceSet:
    """The recorded corpus of real PyTorch training runs (``e2e/workloads/corpus.py``).

    A folder: ``traces.csv.gz`` (the long format with ``group`` = the job: the two ranks of a
    distributed job, the two parts of a preempted one), ``phases.csv.gz`` (each run's own phase
    log) and ``manifest.json`` (per execution: family, job, rank, part, parameters). Each
    execution's ``meta`` carries ``family``, ``job``, ``rank`` and ``part``, so an evaluation can
    hold out whole families (``--split-by family``). ``step`` defaults to the recording's
    (1 s); ``families`` keeps only those.
    """
    p = Path(path)
    doc = _corpus_manifest(p)
    known = {r["execution"]: r for r in doc["executions"]}
    if families is not None:
        unknown = sorted(set(families) - {r["family"] for r in known.values()})
        if unknown:
            raise TraceError(f"no family {', '.join(unknown)} in the corpus (it has "
                             f"{', '.join(sorted({r['family'] for r in known.values()}))})",
                             path=str(p))
    ts = load_long_csv(p / "traces.csv.gz", step=float(step or doc.get("step_seconds") or 1.0),
                       max_gap_steps=max_gap_steps, on_bad=on_bad, features=features)
    out = []
    for e in ts:
        base = e.name.split("#", 1)[0]  # a gap splits an execution into name, name#2...
        if base not in known:
            raise TraceError(f"execution {base!r} is not in the manifest", path=str(p))
        run = known[base]
        if families is not None and run["family"] not in families:
            continue
        meta = {**e.meta, "family": run["family"], "job": run.get("job", e.group),
                "rank": run.get("rank", 0), "part": run.get("part", 1)}
        out.append(Execution(e.name, e.times, e.values, e.features, e.units, e.group, e.step,
                             meta))
    result = TraceSet(out, source=str(p))
    result.warnings = list(ts.warnings)
    return result


def load_corpus_phases(path: str | os.PathLike = DL_CORPUS) -> dict[str, list[tuple[float, str]]]:
    """Each corpus run's own phase log: ``{execution: [(unix time, phase), ...]}``, in order.
    A sample at time t (the end of its interval) belongs to the phase in force at t - step/2."""
    p = Path(path)
    _corpus_manifest(p)
    header, data, _ = parse_csv(read_bytes(p / "phases.csv.gz"), str(p / "phases.csv.gz"))
    index = {h: i for i, h in enumerate(header)}
    out: dict[str, list[tuple[float, str]]] = {}
    for name, t, phase in zip(data[index["execution"]], data[index["timestamp"]],
                              data[index["phase"]]):
        out.setdefault(str(name), []).append((float(t), str(phase)))
    return out
