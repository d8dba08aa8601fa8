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


def test_the_interactive_recovery_chart_breaks_at_the_outage():
    """No line across the time no process ran: throughput drops to zero at the kill and
    rises with the restart; latency is one line per process (its segment), none between."""
    import numpy as np

    from scabbard.experiments import charts
    from scabbard.experiments import recovery as exp
    from scabbard.ft.controller import Campaign

    t = np.concatenate([np.arange(-2, 0, 0.1), np.arange(1.5, 3, 0.1)])  # killed at 0
    s = pd.DataFrame({"t": t, "tuples_per_s": 1e6, "latency_p25_ms": 10.0,
                      "latency_p50_ms": 20.0, "latency_p75_ms": 30.0})
    assert list(exp.outage_segments(t)) == [0] * 20 + [1] * 15
    out = exp.Outcome(exp.Settings(), 1e6, 2e6, Campaign(kills=1, kill_walls=[0.0]), s,
                      pd.DataFrame(), origin=0.0, recoveries=[])
    spec = charts.recovery_timeline(out).to_dict()
    datasets = spec["datasets"].values()
    flow = next(d for d in datasets if len(d) == len(t) + 2)  # two zeros inserted
    inside = [r["M tuples/s"] for r in flow if 0 < r["seconds"] < 1.5]
    assert inside == [0.0, 0.0]
    text = str(spec)
    assert "'detail': {'field': 'segment', 'type': 'nominal'}" in text


def test_every_saved_figure_gets_a_caption_with_the_machine_and_the_date(tmp_path):
    import matplotlib.pyplot as plt

    from scabbard.experiments import finish

    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    finish(fig, tmp_path, "f.png")
    text = " ".join(t.get_text() for t in fig.texts)
    assert text.startswith("measured on") and "cores" in text
    assert datetime.date.today().isoformat() in text and (tmp_path / "f.png").is_file()


def test_a_notebooks_data_dir_of_none_is_the_projects_data(tiny, tmp_path, monkeypatch):
    """A notebook run by hand passes its parameters cell's ``data_dir = None`` ("the project's
    data/"): the experiments read the datasets there, and make no folder named "None"."""
    import scabbard.experiments as ex

    root = tiny["cm"].path.parents[1]
    monkeypatch.setattr(ex, "default_data_dir", lambda: str(root))
    monkeypatch.chdir(tmp_path)
    ds = ex.prepared_dataset("CM1", "tiny", None, 1, 0.05)
    assert ds.path == tiny["cm"].path and not (tmp_path / "None").exists()
