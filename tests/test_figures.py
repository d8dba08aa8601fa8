"""Figures say what they measured: the spread of repeated runs, the machine, the scale and
the date, and "after the paper's Fig. N" where the setup is not the paper's."""

from __future__ import annotations

import datetime

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.container import ErrorbarContainer  # noqa: E402


def _runs(rounds: int) -> pd.DataFrame:
    rows = []
    for r in range(rounds):
        for c, base in (("no-opt", 50e6), ("both-lossless", 120e6)):
            rows.append({"query": "YSB", "config": c, "round": r,
                         "tuples_per_s": base * (1 + 0.1 * r), "input_mb_s": 1.0,
                         "bytes_per_tuple": 68.0 if c == "no-opt" else 0.6,
                         "written_mb_s": 1.0})
    out = pd.DataFrame(rows)
    out.attrs["seconds"] = 3.0
    return out


def test_fig11_draws_the_median_and_range_of_its_rounds_with_a_caption():
    from scabbard.experiments import optimization

    runs = _runs(3)
    m = optimization.medians(runs).set_index("config")
    assert m.loc["no-opt", "tuples_per_s"] == pytest.approx(55e6)  # median of 50, 55, 60
    assert (m.loc["no-opt", "lo"], m.loc["no-opt", "hi"]) == (50e6, 60e6)
    assert optimization.summary(runs)["no-opt M tuples/s"].iloc[0] == pytest.approx(55.0)
    fig = optimization.plot(runs, scale="small")
    ax = fig.axes[0]
    assert any(isinstance(c, ErrorbarContainer) for c in ax.containers)
    assert "after the paper's Fig. 11" in ax.get_title()
    text = " ".join(t.get_text() for t in fig.texts)
    assert "3 rounds of 3 s per bar" in text and "small scale" in text
    assert "cores" in text and datetime.date.today().isoformat() in text


def test_one_round_draws_no_range():
    from scabbard.experiments import optimization

    fig = optimization.plot(_runs(1))
    assert not any(isinstance(c, ErrorbarContainer) for c in fig.axes[0].containers)
    assert "1 round per bar, median" in " ".join(t.get_text() for t in fig.texts)


def test_optimization_rounds_must_be_a_positive_integer():
    import pytest

    from scabbard.experiments import optimization

    with pytest.raises(ValueError, match="rounds"):
        optimization.Settings(rounds=0)
