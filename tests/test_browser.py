"""What a person sees in JupyterLab: notebook 04's kill panel and notebook 08's what-if panel,
driven in headless Chromium (tests/browserkit.py) with the notebooks' tiny parameters.
The report of a tiny `reproduce` (the demo and notebook 04), opened from its files: every
image loads, every interactive chart draws, no widget is an empty box.

Notebook 04: every cell runs; the panel's Start, then Kill; its chart must change at least
twice after Start (distinct frames, compared as the page draws them), the exactly-once verdict
must be on the page, no red line in the panel, no traceback published by the kernel (its iopub
messages, recorded by the page, and the server's log), and the data root must hold no more
after the run than before Start.  Notebook 08: moving the what-if panel's "cores" slider
redraws its chart.  Screenshots (during the run, at the kill, during recovery, at the end, the
what-if panel before and after) go to the test's folder and to
``experiments/runs/browser/<time>/``, with the disk figures in ``disk.txt``.

Every wait is for something on the page (WebDriverWait, generous timeouts: the machine is
shared); nothing sleeps for a guessed time.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

import pytest
from browserkit import Lab, chromium, missing, open_notebook, published_errors, run_all, wait

from scabbard.experiments.recovery_panel import disk_use
from scabbard.experiments.reproduce import load_experiments

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.long]

if missing():
    if os.environ.get("SCABBARD_REQUIRE_PEERS"):
        raise RuntimeError(f"SCABBARD_REQUIRE_PEERS is set but {missing()}")
    pytest.skip(missing(), allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with Lab(tmp_path_factory.mktemp("jupyterlab")) as server:
        yield server
    assert "Traceback" not in server.log_text(), server.log_text()[-5000:]


@pytest.fixture(scope="module")
def page(lab):
    with chromium(lab.folder) as driver:
        yield driver


@pytest.fixture(scope="module")
def shots(lab):
    """Screenshots: saved in the lab's folder and copied to experiments/runs/browser/<time>."""
    kept = ROOT / "experiments" / "runs" / "browser" / time.strftime("%Y%m%d-%H%M%S")
    folder = lab.folder / "screenshots"
    folder.mkdir()

    def save(driver, name: str) -> Path:
        path = folder / f"{name}.png"
        assert driver.save_screenshot(str(path)), name
        kept.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, kept / path.name)
        return path

    save.folder, save.kept = folder, kept
    return save


def notebook(lab: Lab, name: str, **extra) -> str:
    """The notebook, with its tiny parameters injected as papermill does, in the lab's root."""
    import nbformat
    import papermill

    exp = load_experiments(ROOT)[name]
    nb = papermill.iorw.load_notebook_node(str(exp.notebook))
    nb = papermill.parameterize.parameterize_notebook(nb, exp.parameters("tiny") | extra)
    nbformat.write(nb, lab.root / f"{name}.ipynb")
    return f"{name}.ipynb"


def css(driver, selector: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def text(driver, selector: str) -> str:
    return css(driver, selector).text


class Frames:
    """The distinct pictures a chart showed, taken from the page each time a wait polls it."""

    def __init__(self, driver, selector: str, drawn: str):
        self.driver, self.selector, self.drawn = driver, selector, drawn
        self.seen: list[str] = []
        self.misses: list[str] = []  # why a poll saw nothing (the last few)

    def poll(self) -> int:
        from selenium.common.exceptions import WebDriverException

        chart = css(self.driver, self.selector)
        try:
            if not self.driver.execute_script(self.drawn, chart):
                self.misses = (self.misses + ["not drawn"])[-5:]
                return len(self.seen)
            digest = hashlib.sha1(chart.screenshot_as_png).hexdigest()
        except WebDriverException as e:  # changed while it was read: the next poll sees it
            self.misses = (self.misses + [str(e).splitlines()[0]])[-5:]
            return len(self.seen)
        if not self.seen or self.seen[-1] != digest:
            self.seen.append(digest)
        return len(self.seen)


# the panel's chart (an <img>) holds a decoded picture
IMAGE_DRAWN = "return arguments[0].complete && arguments[0].naturalWidth > 100;"


def cramped(driver, panel: str) -> list[str]:
    """The panel's labels cut off (text wider than its box), sliders too short to move, and
    whether the panel is wider than its place."""
    return driver.execute_script("""
        const panel = document.querySelector(arguments[0]);
        const cut = Array.from(panel.querySelectorAll('.widget-label, .widget-label-basic'))
            .filter(l => l.textContent.trim() && l.scrollWidth > l.clientWidth + 1)
            .map(l => 'label cut off: ' + l.textContent.trim());
        for (const s of panel.querySelectorAll('.widget-slider')) {
            const track = s.querySelector('.noUi-target');
            if (track && track.getBoundingClientRect().width < 100)
                cut.push('slider too short: ' + s.querySelector('.widget-label').textContent);
        }
        if (panel.scrollWidth > panel.clientWidth + 1) cut.push('the panel overflows');
        return cut;""", panel)


def waiting(driver, shots, timeout: float, context: str = ""):
    """``until(condition, what)``: wait for a page condition; on a timeout, a screenshot
    (``failed-<what>``) and what the page said in ``context`` join the failure."""
    from selenium.common.exceptions import TimeoutException

    def until(condition, what: str, detail=lambda: ""):
        try:
            return wait(driver, timeout).until(condition, what)
        except TimeoutException:
            shot = shots(driver, "failed-" + "-".join(what.split()[:6]))
            said = driver.execute_script(
                "const e = document.querySelector(arguments[0]); return e && e.innerText;",
                context) if context else ""
            raise AssertionError(f"{what} within {timeout:g} s (page: {said!r}; {detail()}; "
                                 f"{shot})") from None
    return until


def button(driver, panel: str, label: str):
    from selenium.webdriver.common.by import By

    return css(driver, panel).find_element(By.XPATH, f".//button[normalize-space()='{label}']")


def test_the_kill_panel_draws_live_kills_recovers_and_cleans_up(tiny, data_root, lab, page,
                                                                 shots):
    name = notebook(lab, "04_recovery", data_dir=str(data_root),
                    output_dir=str(lab.folder / "04-output"))
    open_notebook(page, lab, name)
    run_all(page)
    assert not published_errors(page)
    panel, status = ".scabbard-panel", ".scabbard-panel-status"
    page.execute_script("document.querySelector(arguments[0]).scrollIntoView()", panel)
    assert not cramped(page, panel)

    before = disk_use(Path(data_root))
    frames = Frames(page, ".scabbard-panel-chart", IMAGE_DRAWN)
    until = waiting(page, shots, 300, panel)

    def shows(*words, frames_after: int | None = None):
        def check(d):
            n = frames.poll()
            return (any(w in text(d, status) for w in words)
                    and (frames_after is None or n > frames_after))
        return check

    button(page, panel, "Start").click()
    until(shows("running at"), "the run did not start")
    # notebook 04's first cell measured CM1's sustainable rate: the panel reuses it
    assert "measured before in this session" in text(page, status)
    until(lambda d: frames.poll() >= 2, "the chart did not change while running",
          lambda: f"frames: {len(frames.seen)}, last misses: {frames.misses}")
    shots(page, "04-1-running")

    button(page, panel, "Kill (SIGKILL)").click()
    after_kill = ("killed at", "recovered", "exactly once")  # (a fast machine's recovery)
    until(shows(*after_kill), "no kill on the page")
    until(shows(*after_kill, frames_after=frames.poll()), "no chart after the kill")
    shots(page, "04-2-kill")
    until(shows("replay ...", "catch-up ...", "recovered", "exactly once"),
          "no recovery on the page")
    shots(page, "04-3-recovery")
    until(shows("exactly once", "failed", "lost"), "no verdict on the page")
    until(lambda d: button(d, panel, "Start").is_enabled(), "the panel did not end the run")
    frames.poll()
    shots(page, "04-4-end")

    verdict = text(page, status)
    assert "1 kill(s): exactly once" in verdict and "0 lost" in verdict, verdict
    assert len(frames.seen) >= 3, f"the chart changed {len(frames.seen) - 1} time(s)"
    assert not text(page, ".scabbard-panel-errors"), text(page, ".scabbard-panel-errors")
    assert "run files removed" in text(page, ".scabbard-panel-files")
    assert not published_errors(page)
    after = disk_use(Path(data_root))
    (shots.kept / "disk.txt").write_text(
        f"data root {data_root}\nbefore Start: {before} bytes\nafter the run: {after} bytes\n"
        f"chart frames seen: {len(frames.seen)}\nverdict: {verdict}\n")
    assert after <= before, (before, after)
    lab.shut_down_kernels()


def test_a_what_if_slider_redraws_its_chart(lab, page, shots):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    name = notebook(lab, "08_simulated_hardware", output_dir=str(lab.folder / "08-output"))
    open_notebook(page, lab, name)
    run_all(page)
    assert not published_errors(page)
    out = ".scabbard-whatif-output"
    image = f"{out} img"
    until = waiting(page, shots, 120, out)
    until(lambda d: d.find_elements(By.CSS_SELECTOR, image), "the what-if panel drew no chart")
    page.execute_script("document.querySelector(arguments[0]).scrollIntoView()", out)
    assert not cramped(page, ".scabbard-whatif")
    # every read finds its element again: the output's image is replaced on each redraw, and
    # JupyterLab may render a cell's outputs again as the page scrolls
    cores = ("//div[contains(@class,'widget-slider')][.//label[normalize-space()='cores']]"
             "//div[contains(@class,'{}')]")

    def read(d, what: str) -> str:
        return d.execute_script(what, image, cores.format("widget-readout"))

    src = "return document.querySelector(arguments[0]).src"
    readout = """return document.evaluate(arguments[1], document, null,
                     XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue.textContent"""
    first, cores_before = read(page, src), read(page, readout)
    shots(page, "08-1-what-if")

    def drag(d) -> bool:  # a person drags the handle of the cores slider to the left
        handle = d.find_element(By.XPATH, cores.format("noUi-handle"))
        d.execute_script("arguments[0].scrollIntoView({block: 'center'})", handle)
        ActionChains(d).click_and_hold(handle).move_by_offset(-60, 0).release().perform()
        return True

    until(drag, "the cores slider could not be dragged")
    until(lambda d: read(d, src) != first, "the chart did not change")
    assert read(page, readout) != cores_before
    shots(page, "08-2-fewer-cores")
    assert not published_errors(page)
    lab.shut_down_kernels()


# what the report's page shows, read from the page itself once it has loaded
REPORT_STATE = """
    const imgs = [...document.images];
    const charts = [...document.querySelectorAll('.vega-embed')];
    const drawn = c => [...c.querySelectorAll('svg, canvas')].some(
        e => e.getBoundingClientRect().width > 50 && e.getBoundingClientRect().height > 50);
    const widgets = [...document.querySelectorAll('.jupyter-widgets, .widget-area')];
    return {ready: document.readyState === 'complete',
            images: imgs.length, broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0))
                                          .map(i => i.src.slice(-80)),
            charts: charts.length, blank: charts.filter(c => !drawn(c)).length,
            empty: widgets.filter(w => !w.innerText.trim() && !w.querySelector('img, svg, canvas'))
                          .length,
            text: document.body.innerText};"""


def test_the_report_shows_every_figure_and_chart_and_no_empty_widget(data_root, lab, page,
                                                                        shots):
    """A tiny ``reproduce`` of the demo and notebook 04 (its kill panel is a widget), its
    report opened in Chromium from its files, as a person opens it: every image loads, every
    interactive chart draws, and the panel that only runs live says so instead of an empty
    box."""
    from scabbard.experiments.reproduce import reproduce

    report = reproduce(root=ROOT, only=["demo", "04_recovery"], scale="tiny",
                       runs_dir=lab.root / "report", data_dir=data_root)
    assert all(r.ok for r in report.results), [r.error for r in report.results]
    pages = [report.run_dir / "index.html", *(r.output.with_suffix(".html")
                                              for r in report.results)]
    seen = {}
    for path in pages:
        page.get(path.as_uri())  # as a person opens it: the files, offline
        state = {}

        def loaded(d, state=state):
            state.update(d.execute_script(REPORT_STATE))
            return state["ready"] and (not state["charts"] or not state["blank"])

        wait(page, 120).until(loaded, f"{path.name}: charts not drawn ({state})")
        shots(page, f"report-{path.parent.name}-{path.stem}")
        assert not state["broken"], (path.name, state["broken"])
        assert not state["empty"], (path.name, "an empty widget")
        seen[path.name] = state
    assert seen["index.html"]["images"] >= 3  # the demo's three figures at least
    assert seen["demo.html"]["images"] >= 3 and seen["demo.html"]["charts"] >= 2
    assert "runs live when the notebook is opened in JupyterLab" in seen["04_recovery.html"]["text"]
