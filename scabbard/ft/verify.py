"""Compare a run's committed output with a failure-free run's: lost, duplicated, different.

Rows are matched as multisets on their exact columns (window bounds, keys,
integer aggregates); float columns must then agree to ``rtol`` (a recovered
window may sum its panes in another order).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from scabbard.schema import Schema
from scabbard.usage import Usage

USAGE = Usage(  # scabbard check output
    "compare a fault-tolerant run's committed output with a failure-free run",
    "Read the committed output of the fault-tolerant run stored in --storage (its run.json "
    "names the query, the dataset, the tuples and the output folder), run the same query on the "
    "same input in this process without failures, and compare them row for row: results lost, "
    "duplicated, different.  A run that has not consumed its input yet (killed, not recovered) "
    "must have committed a prefix of the failure-free output: whole windows, none lost or "
    "duplicated.  The run must be bounded (--max-tuples).",
    "Exit status 0: exactly once (or a correct prefix); 1: a mismatch.")


@dataclass(frozen=True)
class Verdict:
    compared: int  # rows of the failure-free run
    lost: int  # in the failure-free output, not in this one
    duplicated: int  # more copies than the failure-free output has
    different: int  # rows whose exact columns match nothing, or whose floats differ

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.different == 0

    def __str__(self) -> str:
        verdict = "exactly once" if self.ok else "MISMATCH"
        return (f"{verdict}: {self.compared:,} results compared, {self.lost} lost, "
                f"{self.duplicated} duplicated, {self.different} different")


def compare(got: pd.DataFrame, want: pd.DataFrame, schema: Schema, rtol: float = 1e-9) -> Verdict:
    floats = [f.name for f in schema.fields if f.dtype.startswith("float")]
    exact = [f.name for f in schema.fields if f.name not in floats]
    g, w = got.reset_index(drop=True).copy(), want.reset_index(drop=True).copy()
    for df in (g, w):
        df["_n"] = df.groupby(exact, sort=False).cumcount()
    m = g.merge(w, on=exact + ["_n"], how="outer", suffixes=("_got", "_want"), indicator=True)
    only_got = m[m["_merge"] == "left_only"]
    only_want = m[m["_merge"] == "right_only"]
    known = w[exact].drop_duplicates()
    dup = only_got.merge(known, on=exact, how="inner")  # an extra copy of a real result
    both = m[m["_merge"] == "both"]
    bad = np.zeros(len(both), dtype=bool)
    for f in floats:
        a, b = both[f"{f}_got"].to_numpy(float), both[f"{f}_want"].to_numpy(float)
        bad |= ~np.isclose(a, b, rtol=rtol, atol=0.0, equal_nan=True)
    return Verdict(len(w), len(only_want) - 0, len(dup), len(only_got) - len(dup) + int(bad.sum()))


def failure_free(query, dataset, max_tuples: int | None, config=None) -> pd.DataFrame:
    """The output of ``query`` on ``dataset`` up to ``max_tuples`` input tuples, run in this
    process without failures: what a fault-tolerant run's output is compared with."""
    from scabbard.engine import CollectSink, Replay, run_query

    sink = CollectSink()
    run_query(query, dataset, sink=sink, replay=Replay(max_tuples=max_tuples), config=config)
    return sink.to_pandas()


def prefix_problem(got: pd.DataFrame, want: pd.DataFrame, schema) -> str | None:
    """Whether ``got`` is exactly the failure-free output's windows up to its last one (a
    stateless query's: its first rows, in order)."""
    if not len(got):
        return None
    if schema.stream:
        head = want.iloc[:len(got)]
        v = compare(got, head, schema)
        if v.ok and not got.reset_index(drop=True).equals(head.reset_index(drop=True)):
            return "the rows are the failure-free output's first ones, in another order"
        return None if v.ok else str(v)
    last = got["window_end"].max()
    v = compare(got, want[want["window_end"] <= last], schema)
    return None if v.ok else str(v)


@dataclass(frozen=True)
class RunCheck:
    """A fault-tolerant run's committed output against the same query run failure-free in
    this process on the same input (``scabbard check output``)."""

    query: str
    output: str
    complete: bool  # the run consumed its input: the output must be all of the failure-free
    rows: int  # committed rows read
    verdict: Verdict | None  # complete: the whole comparison
    problem: str | None  # incomplete: why the output is not a prefix (None: it is)

    @property
    def ok(self) -> bool:
        return self.verdict.ok if self.complete else self.problem is None

    def __str__(self) -> str:
        if self.complete:
            return f"{self.query}, {self.output}: {self.verdict}"
        what = "a prefix of the failure-free output (windows whole, none lost or duplicated)" \
            if self.problem is None else f"NOT a prefix of the failure-free output: {self.problem}"
        return (f"{self.query}, {self.output}: the run has not consumed its input (recover it to "
                f"finish); its {self.rows:,} committed rows are {what}")


def verify_run(storage, output=None) -> RunCheck:
    """Check the output of the fault-tolerant run stored in ``storage`` (its ``run.json``
    names the query, the dataset, the tuples and the output folder; ``output`` overrides the
    folder): the dataset must be the one recorded, and the run bounded by a tuple count."""
    from pathlib import Path

    from scabbard import queries
    from scabbard.data import DatasetError, open_dataset
    from scabbard.engine import EngineConfig
    from scabbard.ft.runfile import RunMismatch, recorded_run
    from scabbard.ft.sinks import read_output

    run = recorded_run(storage)
    if run is None:
        raise RunMismatch(f"{storage} holds no fault-tolerant run (no run.json): give the "
                          f"--storage folder of a run started with --checkpoint-interval")
    out = output or run.get("output")
    if out is None or not Path(out).is_dir():
        raise RunMismatch(f"no output folder {out or '(none recorded)'}: give the run's --output")
    out = Path(out)
    if run.get("max_tuples") is None:
        raise RunMismatch(f"{storage} holds an endless run (no --max-tuples): its output has no "
                          f"failure-free twin to compare with")
    where = run["dataset"]["path"]
    try:
        ds = open_dataset(where, verify=False)
    except DatasetError as e:
        raise RunMismatch(f"the run's dataset: {e.one_line()}") from None
    if ds.checksum != run["dataset"]["checksum"]:
        raise RunMismatch(f"the dataset in {where} is no longer the run's input (its checksum "
                          f"changed)")
    q = queries.get(run["query"])
    got = read_output(out)
    want = failure_free(q, ds, run["max_tuples"], EngineConfig(batch_rows=run.get("batch_rows")))
    if "completed" in run:
        return RunCheck(q.name, str(out), True, len(got), compare(got, want, q.schema), None)
    return RunCheck(q.name, str(out), False, len(got), None, prefix_problem(got, want, q.schema))
