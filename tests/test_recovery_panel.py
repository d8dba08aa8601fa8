"""Notebook 04's kill panel from Python: its errors, its files, Stop, the rate measured once,
the live recovery phases and a chart that never fails on zero or missing latencies.

(The panel in a real browser: tests/test_browser.py.  Start, Kill and the verdict:
tests/test_fault_tolerance.py.)"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scabbard.experiments import recovery as exp
from scabbard.experiments.recovery_panel import Panel, disk_use, live_timeline, render
from scabbard.ft.controller import Campaign


def settings(data_root, work: Path, seconds: float = 4.0) -> exp.Settings:
    return exp.Settings(query="CM1", scale="tiny", data_dir=str(data_root), seconds=seconds,
                        batch=20_000, interval=0.3, work_dir=str(work))


def until(condition, panel: Panel, what: str, timeout: float = 180) -> None:
    """Wait for a condition of the panel (polled); fail with what the panel says."""
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, f"{what}: {panel.status.value} {panel.errors.value}"
        time.sleep(0.05)


def processes_using(folder: Path) -> list[str]:
    """Command lines of the live processes that name ``folder`` (an engine, a standby)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(folder) in cmd and state != "Z":
            found.append(cmd)
    return found


# -- the chart ----------------------------------------------------------------------------------
def outcome_of(samples: pd.DataFrame, kills=(), recoveries=()) -> exp.Outcome:
    return exp.Outcome(exp.Settings(), 1e6, 2e6, Campaign(kills=len(kills), kill_walls=list(kills)),
                       samples, pd.DataFrame(), origin=0.0, recoveries=list(recoveries))


@pytest.mark.parametrize("latency", [0.0, np.nan])
def test_the_chart_draws_samples_without_latency_on_its_log_scale(latency):
    """Early samples have no result yet: latency 0 (or none).  This raised 'Data cannot be
    log-scaled' in the refresher and stopped the chart."""
    t = np.arange(0, 2, 0.1)
    s = pd.DataFrame({"t": t, "tuples_per_s": np.zeros_like(t)}).assign(
        latency_p25_ms=latency, latency_p50_ms=latency, latency_p75_ms=latency)
    chart = live_timeline()
    assert render(chart, outcome_of(s)).startswith(b"\x89PNG")
    assert chart.empty.get_visible()  # "no latency measured yet"
    s.loc[15:, ["latency_p25_ms", "latency_p50_ms", "latency_p75_ms"]] = [5.0, 8.0, 12.0]
    render(chart, outcome_of(s))
    assert not chart.empty.get_visible()
    lo, hi = chart.bx.get_ylim()
    assert 0 < lo < 5.0 and hi > 12.0


def test_the_chart_marks_each_kill_and_phase_and_forgets_the_last_frames_marks():
    t = np.arange(0, 10, 0.1)
    s = pd.DataFrame({"t": t, "tuples_per_s": 1e6, "latency_p25_ms": 10.0,
                      "latency_p50_ms": 20.0, "latency_p75_ms": 30.0})
    chart = live_timeline()
    render(chart, outcome_of(s, kills=[4.0], recoveries=[{"restart": (4.0, 5.0)}]))
    assert len(chart.marks) == 2 * 2  # a kill line and a span on each axis
    render(chart, outcome_of(s, kills=[4.0], recoveries=[
        {"process start": (4.0, 4.5), "code loading": (4.5, 4.8), "state load": (4.8, 4.9),
         "replay": (4.9, 5.5)}]))
    assert len(chart.marks) == 2 * 5
    assert chart.ax.get_xlim()[1] >= 9.9


def test_the_recovery_phases_show_while_they_happen():
    """Live (``now``): a restart under way, then the replay, then the catch-up, each up to
    now; the first kill's phases once it is over."""
    samples = pd.DataFrame({"t": [-2.0, -1.0, -0.5, 2.0, 2.5, 3.0, 3.5],
                            "tuples_per_s": [1.0] * 7,
                            "latency_p50_ms": [10.0, 10.0, 10.0, 500.0, 100.0, 11.0, 10.0]})
    # as the engine logs them: its phases (with their own times) right after its start
    events = pd.DataFrame({"event": ["start", "start", "phase", "phase", "phase", "phase",
                                     "recovery"],
                           "phase": [None, None, "spawned", "started", "code_loaded",
                                     "state_loaded", "replayed"],
                           "t": [-3.0, 1.35, 0.1, 0.6, 1.2, 1.3, 1.9]})
    restarting = exp.breakdown(samples, events.iloc[:0], kill=0.0, now=0.8)
    assert restarting == {"restart": (0.0, 0.8), "_under_way": "restart"}
    replaying = exp.breakdown(samples, events.iloc[:6], kill=0.0, now=1.6)
    assert replaying["replay"] == (1.3, 1.6) and replaying["_under_way"] == "replay"
    assert replaying["process start"] == (0.0, 0.6)
    catching_up = exp.breakdown(samples.iloc[:4], events, kill=0.0, now=2.2)
    assert catching_up["catch-up"] == (1.9, 2.2) and catching_up["_under_way"] == "catch-up"
    done = exp.breakdown(samples, events, kill=0.0)
    assert done["catch-up"] == (1.9, 3.0) and "_under_way" not in done
    # killed again before it started: the first kill's restart ends at the second kill
    assert exp.breakdown(samples, events.iloc[:1], kill=-2.5, until=-1.5) == {
        "restart": (-2.5, -1.5)}


# -- the panel, on real runs --------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.crash
def test_a_failing_chart_is_a_red_line_and_the_run_goes_on(tiny, data_root, tmp_path):
    """The drawing fails on purpose for its first two frames: the panel says so in red, the
    traceback is in its log, the chart goes on, and "keep files" keeps the run's files."""
    panel = Panel(settings(data_root, tmp_path / "work"))
    calls = []

    def failing_at_first(chart, out):
        calls.append(out)
        if len(calls) <= 2:
            raise RuntimeError("the chart failed on purpose")
        return render(chart, out)

    panel.draw = failing_at_first
    panel.keep.value = True
    panel.start_button.click()
    assert panel.wait(240), panel.status.value
    assert "exactly once" in panel.status.value, panel.status.value
    assert "color:#c00" in panel.errors.value
    assert "chart: RuntimeError: the chart failed on purpose" in panel.errors.value
    assert str(panel.log_path) in panel.errors.value
    log = panel.log_path.read_text()
    assert log.count("Traceback (most recent call last)") == 2 and "failing_at_first" in log
    assert len(calls) > 2 and panel.run.frames >= 1  # drawn after the failures
    assert bytes(panel.chart.value).startswith(b"\x89PNG")
    kept = panel.run.folder
    assert (kept / "storage").is_dir() and f"files kept: {kept}" in panel.files.value
    assert "MB" in panel.files.value or "GB" in panel.files.value


@pytest.mark.slow
@pytest.mark.crash
def test_stop_ends_a_run_with_no_process_or_file_left_and_the_rate_is_measured_once(
        tiny, data_root, tmp_path, monkeypatch):
    monkeypatch.setattr(exp, "_SUSTAINABLE", {})  # a new kernel session: nothing measured yet
    work = tmp_path / "work"
    panel = Panel(settings(data_root, work, seconds=60.0))
    before = disk_use(tmp_path)
    panel.start_button.click()
    until(lambda: panel.run.frames >= 1, panel, "no chart")
    folder = panel.run.folder
    assert processes_using(folder) and disk_use(folder) > 0
    assert "measured before" not in panel.status.value
    panel.stop_button.click()
    assert panel.wait(60), panel.status.value
    assert panel.status.value.startswith("<b>stopped</b>"), panel.status.value
    assert not processes_using(folder)
    assert not folder.exists() and not work.exists()  # nothing else was in it
    assert "run files removed" in panel.files.value
    assert disk_use(tmp_path) <= before
    assert not panel.errors.value
    assert not [t for t in threading.enumerate() if t.name.startswith("panel-")]

    # Start again: the sustainable rate measured by the first Start is reused
    panel.start_button.click()
    until(lambda: "running at" in panel.status.value, panel, "not running")
    assert "measured before in this session" in panel.status.value
    panel.stop()
    assert panel.wait(60), panel.status.value
    assert not processes_using(panel.run.folder) and not work.exists()


KERNEL = """
import sys, time
from scabbard.experiments import recovery as exp
from scabbard.experiments.recovery_panel import Panel

panel = Panel(exp.Settings(query="CM1", scale="tiny", data_dir=sys.argv[1], seconds=60.0,
                           batch=20_000, interval=0.3, work_dir=sys.argv[2]))
panel.start_button.click()
deadline = time.time() + 180
while panel.run.frames < 1:  # running: the chart has drawn a sample
    assert time.time() < deadline and not panel.wait(0), panel.status.value
    time.sleep(0.05)
print(panel.run.folder, flush=True)
sys.exit(0)  # the kernel exits in the middle of the run
"""


@pytest.mark.slow
@pytest.mark.crash
def test_a_kernel_that_exits_mid_run_leaves_no_process_or_file(tiny, data_root, tmp_path):
    import subprocess
    import sys

    work = tmp_path / "work"
    done = subprocess.run([sys.executable, "-c", KERNEL, str(data_root), str(work)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = Path(done.stdout.split()[-1])
    assert folder.parent == work
    assert not processes_using(folder)
    assert not work.exists(), list(work.rglob("*"))
