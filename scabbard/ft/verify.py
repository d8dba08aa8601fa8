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
