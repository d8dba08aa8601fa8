"""Failure injection: the engine as its own process, killed and recovered (docs/design.md).

``Controller`` starts ``python -m scabbard run ... --checkpoint-interval S``,
sends it ``SIGKILL`` at a chosen or random moment, restarts it with
``--recover`` until the run has ingested all its input, and compares the
committed output with a failure-free run of the same query on the same input
(:mod:`scabbard.ft.verify`).  The CLI, the tests and notebook 04 use it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from scabbard import queries
from scabbard.data import open_dataset
from scabbard.ft.config import RunConfig
from scabbard.ft.verify import Verdict, compare

_bytecode = threading.Lock()
_bytecode_checked = False


def compiled_bytecode() -> None:
    """The package's modules compiled to bytecode before the first engine process starts
    (once a process; a few ms when up to date).  An editable install writes none while
    ``PYTHONDONTWRITEBYTECODE`` is set, as on this machine, and every engine process then
    compiled the package from source: 230 ms of a cold restart's 650 ms process start.
    A package folder that cannot be written is left as it is."""
    global _bytecode_checked
    with _bytecode:
        if not _bytecode_checked:
            import compileall

            import scabbard

            compileall.compile_dir(Path(scabbard.__file__).parent, quiet=2)
            _bytecode_checked = True


def campaign_config(query: str, data: str | Path, folder: str | Path, **fields) -> RunConfig:
    """A fault-tolerant run's configuration laid out in ``folder`` as a :class:`Controller`
    keeps it: the storage, the exactly-once output and the metrics log inside; ``fields``:
    any other setting by its field's name (:meth:`RunConfig.of`) - two workers unless
    given (the failure-free run it is compared with uses as many)."""
    folder = Path(folder)
    return RunConfig.of(query, **{"workers": 2, **fields}, data=Path(data),
                        metrics_log=folder / "metrics.jsonl", storage=folder / "storage",
                        output=folder / "output")


@dataclass
class Campaign:
    kills: int = 0
    restarts: int = 0
    kill_times: list = field(default_factory=list)  # seconds into each incarnation
    kill_walls: list = field(default_factory=list)  # wall-clock time of each kill
    standby_takeovers: int = 0  # restarts served by a warm standby
    crashes: int = 0  # incarnations that killed themselves at a crash point
    verdict: Verdict | None = None
    seconds: float = 0.0
    aborted: bool = False


class Controller:
    """Starts the engine process, kills it, restarts it with ``--recover``, verifies.

    With ``standby=True`` a second process - a *warm standby* - is started
    ``standby_after`` seconds after each incarnation: it imports and loads the compiled
    code, then waits; on a kill it takes over at once (process start and code loading
    are then off the recovery path), and a new standby is started.  A kill that comes
    before the standby is ready falls back to a cold restart.
    """

    def __init__(self, config: RunConfig, folder: str | Path | None = None, *,
                 standby: bool = False, standby_after: float = 2.0,
                 ingress_partitions: tuple[int, ...] = ()):
        if config.ft is None or config.max_tuples is None or config.data is None:
            raise ValueError("a controlled run is fault-tolerant, on a dataset, with "
                             "max_tuples (so that it ends and is verified)")
        self.config = config
        self.query, self.data, self.max_tuples = config.query, config.data, config.max_tuples
        self.storage, self.output = config.persist.storage, config.ft.output
        self.metrics_log = config.metrics_log
        self.dir = Path(folder) if folder is not None else self.storage.parent
        self.standby, self.standby_after = standby, standby_after
        # --ingress-partitions one per incarnation in turn (a recovery with another number
        # than the run it continues); () : the config's for every incarnation
        self.ingress_partitions = tuple(ingress_partitions)
        self.proc: subprocess.Popen | None = None
        self.spare: subprocess.Popen | None = None
        self.incarnation = 0
        self._spare_log: Path | None = None
        self.campaign: Campaign | None = None  # the one running (read by a live panel)
        self._kill_now = threading.Event()
        self._abort = threading.Event()

    def command(self, recover: bool) -> list[str]:
        """The engine process of the next incarnation: ``scabbard run`` with the flags that
        make the configuration (:meth:`RunConfig.argv`), quiet, recovering or not."""
        cfg, parts = self.config, self.ingress_partitions
        if parts:
            cfg = replace(cfg, ingress_partitions=parts[(self.incarnation - 1) % len(parts)])
        return ([sys.executable, "-m", "scabbard", "run", *cfg.argv(), "--quiet"]
                + (["--recover"] if recover else []))

    # -- the process ------------------------------------------------------------------------------
    def _spawn(self, cmd: list[str], log: Path, stdin=None,
               crash_at: str | None = None) -> subprocess.Popen:
        self.dir.mkdir(parents=True, exist_ok=True)
        compiled_bytecode()
        cmd = cmd + ["--spawned-at", repr(time.time())]
        if crash_at:
            cmd += ["--crash-at", crash_at]
        with open(log, "w") as out:
            return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=stdin)

    def start(self, recover: bool = False, crash_at: str | None = None) -> subprocess.Popen:
        self.incarnation += 1
        self.proc = self._spawn(self.command(recover),
                                self.dir / f"engine-{self.incarnation}.log", crash_at=crash_at)
        return self.proc

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed - a fail-stop crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def request_kill(self) -> None:
        """Kill the running incarnation now (from another thread: a notebook's Kill button)."""
        self._kill_now.set()

    def abort(self) -> None:
        """Stop a campaign running in another thread: every process is killed, nothing verified."""
        self._abort.set()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def completed(self) -> bool:
        from scabbard.ft.runfile import recorded_run

        run = recorded_run(self.storage)
        return run is not None and "completed" in run

    def log_tail(self, lines: int = 15) -> str:
        text = (self.dir / f"engine-{self.incarnation}.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    # -- the warm standby -----------------------------------------------------------------------
    def _start_spare(self) -> None:
        self._spare_log = self.dir / f"standby-{self.incarnation + 1}.log"
        self.spare = self._spawn(self.command(recover=True) + ["--standby"], self._spare_log,
                                 stdin=subprocess.PIPE)

    def _spare_ready(self) -> bool:
        return (self.spare is not None and self.spare.poll() is None
                and "standby: ready" in self._spare_log.read_text(errors="replace"))

    def standby_ready(self) -> bool:
        """A warm standby is loaded and waiting (a kill now is served by it)."""
        return self._spare_ready()

    def _drop_spare(self) -> None:
        if self.spare is not None:
            if self.spare.poll() is None:
                self.spare.send_signal(signal.SIGKILL)
            self.spare.wait()
            self.spare.stdin.close()
            self.spare = None

    def _take_over(self) -> None:
        """The standby becomes the running incarnation."""
        self.incarnation += 1
        self._spare_log.rename(self.dir / f"engine-{self.incarnation}.log")
        self.proc, self.spare = self.spare, None
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    # -- a campaign -----------------------------------------------------------------------------
    def _watch(self, delay: float | None) -> int | None:
        """Wait for the incarnation to exit (its code) or to be due for a kill (None)."""
        born = time.time()
        while True:
            code = self.proc.poll()
            if code is not None:
                return code
            if self._abort.is_set() or self._kill_now.is_set():
                return None
            if delay is not None and time.time() - born >= delay:
                return None
            if (self.standby and self.spare is None
                    and time.time() - born >= self.standby_after):
                self._start_spare()
            time.sleep(0.005)

    def run(self, kill_after: list[float], timeout: float = 600,
            crash_at: list[str] | None = None) -> Campaign:
        """Start; kill each incarnation after the next delay in ``kill_after`` (seconds from its
        start; it may finish first) or on :meth:`request_kill`; restart with --recover until the
        run completed; verify.  ``crash_at``: crash points (:mod:`scabbard.faults`), one per
        incarnation in order, where that incarnation kills itself."""
        c = self.campaign = Campaign()
        t0 = time.time()
        delays = list(kill_after)
        crashes = list(crash_at or [])
        self.start(recover=False, crash_at=crashes.pop(0) if crashes else None)
        try:
            while True:
                born = time.time()
                code = self._watch(delays.pop(0) if delays else None)
                if self._abort.is_set():
                    self.kill()
                    c.aborted = True
                    return c
                if code is None:  # due for a kill
                    self._kill_now.clear()
                    self.kill()
                    c.kills += 1
                    c.kill_walls.append(time.time())
                    c.kill_times.append(c.kill_walls[-1] - born)
                elif code == -signal.SIGKILL:  # it reached its crash point
                    c.kills += 1
                    c.crashes += 1
                    c.kill_walls.append(time.time())
                    c.kill_times.append(c.kill_walls[-1] - born)
                elif code != 0:
                    raise RuntimeError(f"engine exited with {code}:\n{self.log_tail()}")
                elif self.completed():
                    break
                if time.time() - t0 > timeout:
                    raise TimeoutError(f"campaign over {timeout} s")
                recorded = (self.storage / "run.json").is_file()
                crash = crashes.pop(0) if crashes else None
                if recorded and self._spare_ready() and crash is None:
                    self._take_over()
                    c.standby_takeovers += 1
                else:
                    # killed before it recorded its run (still starting up): start afresh
                    self._drop_spare()
                    self.start(recover=recorded, crash_at=crash)
                c.restarts += 1
        finally:
            self.kill()
            self._drop_spare()
        c.seconds = time.time() - t0
        c.verdict = self.verify()
        return c

    def expected(self):
        """The failure-free output: the same query on the same input, in this process."""
        from scabbard.engine import EngineConfig
        from scabbard.ft.verify import failure_free

        return failure_free(queries.get(self.query), open_dataset(self.data), self.max_tuples,
                            EngineConfig(workers=self.config.workers or os.cpu_count() or 1,
                                         batch_rows=self.config.batch_rows))

    def verify(self) -> Verdict:
        from scabbard.ft.sinks import read_output

        q = queries.get(self.query)
        return compare(read_output(self.output), self.expected(), q.schema)
