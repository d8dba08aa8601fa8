"""Tools for the browser tests: a private JupyterLab server and headless Chromium driving it.

The server runs on 127.0.0.1 on a free port with a random token; every folder it writes (its
root, Jupyter's config/data/runtime folders, IPython's, JupyterLab's settings and workspaces,
TMPDIR) is under the test's own folder, and it is stopped - its kernels and their children
with it - when the block ends, however it ends.  Chromium is Debian's ``chromium`` with its
``chromedriver`` (scripts/setup-browser.sh), headless, with a fresh profile and no background
networking (this machine's network is closed: its connections would be refused).

The page is read through JupyterLab's own application object (``--expose-app-in-browser``, as
JupyterLab's UI tests do): the open notebook, its kernel's status and the kernel's iopub
messages, every one of which the page records for the test (``window.scabbardIopub``).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                  "--window-size=1280,1500")


def missing() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    for tool in ("chromium", "chromedriver"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/setup-browser.sh)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the dev extras: pip install -e '.[dev]')"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A JupyterLab server serving ``root`` (see the module's docstring)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.root = folder / "notebooks"
        self.root.mkdir(parents=True, exist_ok=True)
        self.port, self.token = _free_port(), secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "jupyterlab.log"
        self.proc: subprocess.Popen | None = None

    def env(self) -> dict:
        dirs = {"JUPYTER_CONFIG_DIR": "jupyter-config", "JUPYTER_DATA_DIR": "jupyter-data",
                "JUPYTER_RUNTIME_DIR": "jupyter-runtime", "IPYTHONDIR": "ipython",
                "JUPYTERLAB_SETTINGS_DIR": "lab-settings",
                "JUPYTERLAB_WORKSPACES_DIR": "lab-workspaces", "TMPDIR": "tmp",
                "MPLCONFIGDIR": "matplotlib"}
        env = dict(os.environ, JUPYTER_PLATFORM_DIRS="1")
        for var, name in dirs.items():
            (self.folder / name).mkdir(exist_ok=True)
            env[var] = str(self.folder / name)
        # no news or update checks: the page asks nothing and fetches nothing
        notes = self.folder / "lab-settings" / "@jupyterlab" / "apputils-extension"
        notes.mkdir(parents=True, exist_ok=True)
        (notes / "notification.jupyterlab-settings").write_text(
            json.dumps({"fetchNews": "false", "checkForUpdates": False}))
        return env

    def start(self, timeout: float = 180) -> None:
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
               f"--port={self.port}", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={self.root}", "--expose-app-in-browser",
               "--ServerApp.open_browser=False", "--LabApp.check_for_updates_class="
               "jupyterlab.handlers.announcements.NeverCheckForUpdate"]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        with open(self.log, "w") as log:
            # its own session: the server, its kernels and what they start, stopped as one
            self.proc = subprocess.Popen(cmd, env=self.env(), stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         cwd=self.folder)
        deadline = time.time() + timeout
        while True:
            assert self.proc.poll() is None, f"JupyterLab exited:\n{self.log_text()[-3000:]}"
            assert time.time() < deadline, f"JupyterLab not up in {timeout} s:\n{self.log_text()[-3000:]}"
            with contextlib.suppress(OSError):
                self.api("GET", "/api/status")
                return
            time.sleep(0.2)

    def api(self, method: str, path: str):
        req = urllib.request.Request(self.url + path, method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def shut_down_kernels(self) -> None:
        """Every session's kernel shut down as JupyterLab does it (the kernel exits normally)."""
        for session in self.api("GET", "/api/sessions"):
            self.api("DELETE", f"/api/sessions/{session['id']}")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()  # the server shuts its kernels down, as on Ctrl-C
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything left of the session
        self.proc.wait()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def __enter__(self) -> Lab:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.contextmanager
def chromium(folder: Path):
    """A headless Chromium (WebDriver), quit when the block ends."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    profile = folder / "chromium-profile"
    shutil.rmtree(profile, ignore_errors=True)
    options.add_argument(f"--user-data-dir={profile}")
    service = Service(executable_path=shutil.which("chromedriver"),
                      log_output=str(folder / "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


# -- the page ------------------------------------------------------------------------------------
NOTEBOOK = "jupyterapp.shell.currentWidget"
KERNEL = f"{NOTEBOOK}?.sessionContext?.session?.kernel"


def wait(driver, timeout: float = 300):
    """A wait for a page condition; an element replaced while it was read (an output redrawn)
    is read again at the next poll."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.2,
                         ignored_exceptions=(StaleElementReferenceException,))


def open_notebook(driver, lab: Lab, name: str, timeout: float = 300) -> None:
    """Open ``name`` in JupyterLab and wait for its kernel to be idle; from then on the page
    records the kernel's error messages and error streams (``window.scabbardIopub``)."""
    driver.get(f"{lab.url}/lab/tree/{name}?token={lab.token}")
    wait(driver, timeout).until(
        lambda d: d.execute_script(f"return !!window.jupyterapp && {KERNEL}?.status === 'idle' "
                                   f"&& {NOTEBOOK}.context.path === arguments[0]", name),
        f"{name} did not open with an idle kernel")
    driver.execute_script(f"""
        window.scabbardIopub = [];
        {KERNEL}.iopubMessage.connect((_, m) => {{
            const type = m.header.msg_type;
            if (type === 'error' || (type === 'stream' && m.content.name === 'stderr'))
                window.scabbardIopub.push({{type, content: m.content}});
        }});""")


def run_all(driver, timeout: float = 600) -> None:
    """Run every cell (JupyterLab's Run All) and wait until each code cell has run."""
    driver.execute_script("jupyterapp.commands.execute('notebook:run-all-cells')")
    state = f"""
        const cells = {NOTEBOOK}.content.widgets.filter(c => c.model.type === 'code');
        return {{code: cells.length,
                 run: cells.filter(c => c.model.executionCount !== null
                                        && !c.promptNode.textContent.includes('*')).length,
                 idle: {KERNEL}?.status === 'idle'}};"""
    wait(driver, timeout).until(
        lambda d: (lambda s: s["run"] == s["code"] and s["idle"])(d.execute_script(state)),
        "the notebook's cells did not all run")


def published_errors(driver) -> list[str]:
    """Errors and tracebacks the kernel published since the notebook was opened."""
    found = []
    for m in driver.execute_script("return window.scabbardIopub"):
        c = m["content"]
        if m["type"] == "error":
            found.append(f"{c['ename']}: {c['evalue']}")
        elif "Traceback" in c.get("text", ""):
            found.append(c["text"])
    return found
