"""Notebook 04's kill panel: a fault-tolerant run started, killed and stopped by hand, drawn live.

Pick a query, the load, the checkpoint interval and the input's length, press **Start**: the
query's sustainable rate is measured (once per query in a kernel session, then reused:
:func:`recovery.measured_rate`) and the query runs at ``load`` of it through a
:class:`~scabbard.ft.controller.Controller`.  **Kill** sends SIGKILL whenever, as often as you
like; the controller restarts the engine with ``--recover``.  **Stop** ends the run early.  Once
the input is consumed, the committed output is compared with a failure-free run: the verdict.

The chart is an ``ipywidgets.Image`` whose value - a PNG of :class:`recovery.Timeline`, the
figure notebook 04 saves, drawn on matplotlib's Agg canvas - a refresher thread sets once a
second, with each kill and each recovery phase as it happens.  A widget's value reaches the
page as a comm message, which may be sent from any thread; an ``Output`` widget used as a
context manager (what the panel did before) captures only the output of the message being
handled, so from a thread nothing reached the page.  An image rather than a Vega-Lite chart
replaced in an ``Output``: the page swaps a decoded picture in place, where a Vega chart is
removed and drawn again each time - blank while the browser draws it, and on this shared
2-core machine under load the browser's drawing took longer than a second, so the chart
stayed blank for the whole run.  The timeline's artists are made once and updated: 0.1-0.2 s
of the kernel's CPU a frame (a new figure each time took 0.5-0.6 s).

Every thread of the panel runs guarded: an exception is a red line in the panel, its traceback
goes to the panel's log (``<work>/panel.log``, written only then) and the chart goes on with
its next frame.  A run's files (persisted input, checkpoints, output, engine logs) are in
``<work>/run-<time>``; they are removed when the run ends - completed, stopped or failed - and
when the kernel exits, unless "keep files" is ticked (the panel then says where they are and
how much space they take).  ``<work>`` is ``<data_dir>/panel-recovery`` unless the settings
name another folder.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import shutil
import threading
import time
import traceback
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path

from scabbard import queries, workloads
from scabbard.experiments.recovery import (
    NoSamples,
    Outcome,
    Settings,
    Timeline,
    controller,
    measured_rate,
    outcome,
)
from scabbard.ft.controller import Campaign, Controller

_PANELS: weakref.WeakSet = weakref.WeakSet()  # the panels of this process: stopped at exit


@dataclass
class Run:
    """One Start of the panel: its settings, folder and progress (read by its two threads)."""

    settings: Settings
    folder: Path
    rate: float = 0.0
    sustainable: float = 0.0
    reused: bool = False  # the sustainable rate was measured before in this session
    began: float | None = None  # wall clock when the engine was started (t = 0 of the chart)
    controller: Controller | None = None
    campaign: Campaign | None = None
    frames: int = 0  # charts drawn
    stopping: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)


def disk_use(path: Path) -> int:
    """Bytes a folder takes on disk (allocated blocks, so pre-allocated pool files count); a
    file removed while it is counted (a live run recycles its files) counts nothing."""
    total = 0
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    with contextlib.suppress(FileNotFoundError):
        total += os.lstat(path).st_blocks * 512
    return total


def size(nbytes: int) -> str:
    return f"{nbytes / 1e9:.2f} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:.1f} MB"


def live_timeline() -> Timeline:
    """The panel's chart: a :class:`Timeline` on its own Agg figure (no pyplot: it is drawn
    from a thread), 720 x 400 pixels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5), dpi=80)
    FigureCanvasAgg(fig)
    chart = Timeline(fig)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.94, bottom=0.09, hspace=0.1)
    return chart


def render(chart: Timeline, out: Outcome) -> bytes:
    """One frame: the chart moved to ``out``, as PNG bytes."""
    chart.update(out)
    buf = io.BytesIO()
    chart.fig.savefig(buf, format="png")
    return buf.getvalue()


class Panel:
    """Failure injection by hand: query, load, interval, input length; Start, Kill, Stop."""

    def __init__(self, settings: Settings):
        import ipywidgets as w

        self.settings = settings
        self.work = Path(settings.work_dir or Path(settings.data_dir) / "panel-recovery")
        self.log_path = self.work / "panel.log"
        self.draw = render  # (chart, outcome) -> PNG bytes; a test may make it fail
        label = {"description_width": "initial"}  # labels never cut off
        self.query = w.Dropdown(options=list(queries.NAMES), value=settings.query,
                                description="query", style=label,
                                layout=w.Layout(width="140px"))
        self.load = w.FloatSlider(value=settings.load, min=0.1, max=0.9, step=0.05,
                                  description="load (of the sustainable rate)",
                                  readout_format=".0%", style=label,
                                  layout=w.Layout(width="390px"))
        self.interval = w.FloatSlider(value=settings.interval, min=0.2, max=5.0, step=0.1,
                                      description="checkpoint every (s)", style=label,
                                      layout=w.Layout(width="330px"))
        self.seconds = w.FloatSlider(value=settings.seconds, min=2, max=120, step=1,
                                     description="input (s)", readout_format=".0f",
                                     style=label, layout=w.Layout(width="270px"))
        self.standby = w.Checkbox(value=settings.standby, description="warm standby",
                                  indent=False, layout=w.Layout(width="auto"))
        self.keep = w.Checkbox(value=False, description="keep files", indent=False,
                               layout=w.Layout(width="auto"))
        self.start_button = w.Button(description="Start", button_style="success")
        self.kill_button = w.Button(description="Kill (SIGKILL)", button_style="danger",
                                    disabled=True)
        self.stop_button = w.Button(description="Stop", button_style="warning", disabled=True)
        self.status = w.HTML("press Start: the sustainable rate is measured first (3 s, once "
                             "per query in this session)")
        self.errors = w.HTML("")
        self.files = w.HTML("")
        self.chart = w.Image(format="png", layout=w.Layout(width="100%", max_width="720px"))
        for widget, name in ((self.status, "status"), (self.errors, "errors"),
                             (self.files, "files"), (self.chart, "chart")):
            widget.add_class(f"scabbard-panel-{name}")
        self.start_button.on_click(lambda _: self.start())
        self.kill_button.on_click(lambda _: self.kill())
        self.stop_button.on_click(lambda _: self.stop())
        wrap = w.Layout(flex_flow="row wrap", align_items="center")
        self.widget = w.VBox([
            w.HBox([self.query, self.load, self.interval], layout=wrap),
            w.HBox([self.seconds, self.standby, self.keep, self.start_button, self.kill_button,
                    self.stop_button], layout=wrap),
            self.status, self.errors, self.files, self.chart])
        self.widget.add_class("scabbard-panel")
        self.run: Run | None = None
        self._starts = 0
        self._lock = threading.Lock()  # the error lines
        self._done = threading.Event()  # the last run ended, its files are handled
        self._done.set()
        self._runner: threading.Thread | None = None
        _PANELS.add(self)

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)

    # -- the buttons ---------------------------------------------------------------------------
    def start(self) -> None:
        if not self._done.is_set():
            return
        s = replace(self.settings, query=self.query.value, load=self.load.value,
                    interval=self.interval.value, seconds=self.seconds.value,
                    standby=self.standby.value, kill_at=None)
        self._done.clear()
        self.start_button.disabled = True
        self.stop_button.disabled = False
        self.errors.value = self.files.value = ""
        self._starts += 1  # (two Starts in one second get two folders)
        run = self.run = Run(s, self.work / time.strftime(f"run-%Y%m%d-%H%M%S-{self._starts}"))
        refresher = threading.Thread(target=self._guarded, args=("chart", self._refresh, run),
                                     daemon=True, name="panel-chart")
        refresher.start()
        self._runner = threading.Thread(target=self._guarded,
                                        args=("run", self._campaign, run, refresher),
                                        daemon=True, name="panel-run")
        self._runner.start()

    def kill(self) -> None:
        run = self.run
        if run is not None and run.controller is not None:
            run.controller.request_kill()

    def stop(self) -> None:
        """End the run early: every engine process is killed, nothing is verified."""
        run = self.run
        if run is None or run.ended.is_set():
            return
        run.stopping.set()
        if run.controller is not None:
            run.controller.abort()
        self.stop_button.disabled = self.kill_button.disabled = True
        self.status.value = "stopping ..."

    def wait(self, timeout: float | None = None) -> bool:
        """Until the last run ended, its files were handled and its thread is gone (False: timed
        out)."""
        end = None if timeout is None else time.monotonic() + timeout
        if not self._done.wait(timeout):
            return False
        runner = self._runner
        if runner is not None:  # (its last statement sets _done: it is about to return)
            runner.join(None if end is None else max(0.0, end - time.monotonic()))
            return not runner.is_alive()
        return True

    # -- errors --------------------------------------------------------------------------------
    def _guarded(self, where: str, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - every error is shown in the panel
            self._error(where, e)

    def _error(self, where: str, e: BaseException) -> None:
        """A red line in the panel; the traceback in the panel's log."""
        import html

        with self._lock:
            self.work.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "a") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {where}:\n")
                f.write("".join(traceback.format_exception(e)) + "\n")
            line = (f"<div style='color:#c00'>{where}: {html.escape(type(e).__name__)}: "
                    f"{html.escape(str(e).splitlines()[0] if str(e) else '')} (traceback in "
                    f"{html.escape(str(self.log_path))})</div>")
            lines = self.errors.value.split("\n") if self.errors.value else []
            if line not in lines:  # the same error again is not a new line
                self.errors.value = "\n".join((lines + [line])[-5:])

    # -- the run -------------------------------------------------------------------------------
    def _campaign(self, run: Run, refresher: threading.Thread) -> None:
        s = run.settings
        try:
            ds = workloads.dataset(queries.workload_of(s.query), s.scale, root=s.data_dir)
            self.status.value = (f"measuring {s.query}'s sustainable rate with fault tolerance "
                                 f"(3 s; once per query in this session) ...")
            run.sustainable, run.reused = measured_rate(s, ds, self.work / "sustainable")
            run.rate = s.load * run.sustainable
            if run.stopping.is_set():
                return
            c = controller(s, ds, run.rate, run.folder)
            run.controller = c
            if run.stopping.is_set():
                c.abort()
            run.began = time.time()
            self.status.value = (f"starting the engine at {run.rate / 1e6:.2f} M tuples/s (a new "
                                 f"process: interpreter, imports, compiled code) ...")
            self.kill_button.disabled = False
            run.campaign = c.run([], timeout=s.seconds * 10 + 120)
        except Exception as e:  # noqa: BLE001 - shown in the panel
            if not run.stopping.is_set():  # (a stopped engine may die of the kernel's exit)
                self._error("run", e)
        finally:
            self.kill_button.disabled = self.stop_button.disabled = True
            run.ended.set()
            refresher.join()  # the chart shows the end before the panel says done
            self._guarded("files", self._clean, run)
            self.status.value = self._final(run)
            self.start_button.disabled = False
            self._done.set()

    def _final(self, run: Run) -> str:
        camp = run.campaign
        if camp is None:
            return ("stopped before the run began" if run.stopping.is_set()
                    else "<b style='color:#c00'>failed: see the red line above</b>")
        if camp.aborted:
            return (f"<b>stopped</b> after {time.time() - run.began:.0f} s and {camp.kills} "
                    f"kill(s); the output was not verified")
        return f"<b>{camp.kills} kill(s): {camp.verdict}</b>"

    def _clean(self, run: Run) -> None:
        """Remove the run's files unless they are to be kept; say what stays."""
        if run.controller is not None:  # no engine or standby left running, whatever happened
            run.controller.kill()
            run.controller._drop_spare()
        used = disk_use(run.folder)
        if self.keep.value and run.folder.exists():
            self.files.value = f"files kept: {run.folder} ({size(used)})"
            return
        shutil.rmtree(run.folder, ignore_errors=True)
        shutil.rmtree(self.work / "sustainable", ignore_errors=True)
        if self.work.is_dir() and not any(self.work.iterdir()):
            self.work.rmdir()
        self.files.value = (f"run files removed ({size(used)} freed); tick 'keep files' to "
                            f"keep them")

    # -- the chart -----------------------------------------------------------------------------
    def _refresh(self, run: Run) -> None:
        """Draw once a second while the run is live, then once more at its end."""
        chart = live_timeline()
        spent = 0.0
        while not run.ended.wait(max(0.05, 1.0 - spent)):
            began = time.time()
            self._frame(run, chart, live=True)
            spent = time.time() - began
        self._frame(run, chart, live=False)

    def _frame(self, run: Run, chart: Timeline, live: bool) -> None:
        c = run.controller
        camp = run.campaign if run.campaign is not None else c and c.campaign
        if c is None or camp is None or not c.metrics_log.is_file():
            return
        try:
            out = outcome(run.settings, run.rate, run.sustainable, camp, c.metrics_log,
                          origin=run.began, now=time.time() if live else None)
        except NoSamples:
            return  # nothing sampled yet
        except Exception as e:  # noqa: BLE001 - shown; the next frame tries again
            self._error("chart", e)
            return
        try:
            png = self.draw(chart, out)
            if png != self.chart.value:
                self.chart.value = png
                run.frames += 1
        except Exception as e:  # noqa: BLE001 - shown; the status and next frame go on
            self._error("chart", e)
        if live:  # after the chart: what the status says is drawn already
            try:
                self.status.value = self._live_status(run, out)
            except Exception as e:  # noqa: BLE001 - shown; the next frame tries again
                self._error("status", e)

    def _live_status(self, run: Run, out: Outcome) -> str:
        s = run.settings
        if run.stopping.is_set():
            return "stopping ..."
        line = (f"running at {run.rate / 1e6:.2f} M tuples/s ({s.load:.0%} of "
                f"{run.sustainable / 1e6:.2f}{', measured before in this session' if run.reused else ''})"
                f" &middot; {time.time() - run.began:.0f} s, input for {s.seconds:g} s &middot; "
                f"{out.campaign.kills} kill(s)")
        if out.recoveries:
            k = out.campaign.kill_walls[-1] - out.origin
            phases = out.recoveries[-1]
            if "_under_way" in phases:
                line += f" &middot; killed at {k:.1f} s: {phases['_under_way']} ..."
            elif "catch-up" in phases:
                line += (f" &middot; recovered: latency back {phases['catch-up'][1] - k:.1f} s "
                         f"after the kill")
        c = run.controller
        if c is not None and c.proc is not None and c.proc.poll() == 0:
            line += " &middot; input consumed: verifying the output ..."
        else:
            line += " &middot; press Kill, or Stop"
        return line + f" &middot; files: {size(disk_use(run.folder))}"


@atexit.register
def _stop_all() -> None:
    """The kernel is exiting: stop every live run (its processes killed, its files removed)."""
    for panel in list(_PANELS):
        panel.stop()
    for panel in list(_PANELS):
        panel.wait(30)
