"""Failure injection: the engine as its own process, killed and recovered (DESIGN.md §6).

``Controller`` starts ``python -m scabbard run ... --checkpoint-interval S``,
sends it ``SIGKILL`` at a chosen or random moment, restarts it with
``--recover`` until the run has ingested all its input, and compares the
committed output with a failure-free run of the same query on the same input
(:mod:`scabbard.engine.verify`).  The CLI, the tests and notebook 04 use it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from scabbard import queries
from scabbard.data import open_dataset
from scabbard.engine.verify import Verdict, compare


@dataclass
class Campaign:
    kills: int = 0
    restarts: int = 0
    kill_times: list = field(default_factory=list)  # seconds into each incarnation
    verdict: Verdict | None = None
    seconds: float = 0.0


class Controller:
    def __init__(self, query: str, data: str | Path, workdir: str | Path, *, max_tuples: int,
                 workers: int = 2, batch: int | None = None, rate: float | None = None,
                 interval: float = 1.0, sink: str = "clocked", persist_input: bool = True):
        self.query, self.data = query, Path(data)
        self.dir = Path(workdir)
        self.storage, self.output = self.dir / "storage", self.dir / "output"
        self.metrics_log = self.dir / "metrics.jsonl"
        self.max_tuples, self.workers, self.batch, self.rate = max_tuples, workers, batch, rate
        self.interval, self.sink, self.persist_input = interval, sink, persist_input
        self.proc: subprocess.Popen | None = None
        self.incarnation = 0

    def command(self, recover: bool) -> list[str]:
        cmd = [sys.executable, "-m", "scabbard", "run", "--query", self.query,
               "--data", str(self.data), "--storage", str(self.storage),
               "--checkpoint-interval", str(self.interval), "--output", str(self.output),
               "--exactly-once", self.sink, "--max-tuples", str(self.max_tuples),
               "--workers", str(self.workers), "--metrics-log", str(self.metrics_log), "--quiet"]
        if self.batch:
            cmd += ["--batch", str(self.batch)]
        if self.rate:
            cmd += ["--rate", str(self.rate)]
        if not self.persist_input:
            cmd += ["--checkpoint-only"]
        return cmd + (["--recover"] if recover else [])

    # -- the process ------------------------------------------------------------------------------
    def start(self, recover: bool = False) -> subprocess.Popen:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.incarnation += 1
        env = dict(os.environ, SCABBARD_SPAWNED_AT=repr(time.time()))
        out = open(self.dir / f"engine-{self.incarnation}.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(self.command(recover), stdout=out, stderr=subprocess.STDOUT,
                                     env=env)
        out.close()
        return self.proc

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed - a fail-stop crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def completed(self) -> bool:
        f = self.storage / "run.json"
        return f.is_file() and "completed" in json.loads(f.read_text())

    def log_tail(self, lines: int = 15) -> str:
        text = (self.dir / f"engine-{self.incarnation}.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    # -- a campaign -----------------------------------------------------------------------------
    def run(self, kill_after: list[float], timeout: float = 600) -> Campaign:
        """Start; kill each incarnation after the next delay in ``kill_after`` (seconds from its
        start; it may finish first); restart with --recover until the run completed; verify."""
        c = Campaign()
        t0 = time.time()
        delays = list(kill_after)
        self.start(recover=False)
        while True:
            delay = delays.pop(0) if delays else None
            code = self.wait(delay)
            if code is None:  # still running at its kill time
                self.kill()
                c.kills += 1
                c.kill_times.append(delay)
            elif code != 0:
                raise RuntimeError(f"engine exited with {code}:\n{self.log_tail()}")
            elif self.completed():
                break
            if time.time() - t0 > timeout:
                self.kill()
                raise TimeoutError(f"campaign over {timeout} s")
            # killed before it recorded its run (still starting up): nothing to recover yet
            self.start(recover=(self.storage / "run.json").is_file())
            c.restarts += 1
        c.seconds = time.time() - t0
        c.verdict = self.verify()
        return c

    def expected(self):
        """The failure-free output: the same query on the same input, in this process."""
        from scabbard.engine import CollectSink, EngineConfig, run_query

        ds = open_dataset(self.data)
        sink = CollectSink()
        run_query(queries.get(self.query), ds, sink=sink, max_tuples=self.max_tuples,
                  config=EngineConfig(workers=self.workers, batch_rows=self.batch))
        return sink.to_pandas()

    def verify(self) -> Verdict:
        from scabbard.engine.output import read_output

        q = queries.get(self.query)
        return compare(read_output(self.output), self.expected(), q.schema)
