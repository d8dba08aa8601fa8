"""A local Spark standalone cluster: one master and N workers on loopback, in one folder.

:class:`StandaloneCluster` starts and stops it (``scabbard spark up|down|status`` and the
tests' fixture use it).  Its folder holds everything it writes: ``cluster.json`` (what
runs: the tag of its processes, their ids and ports), one log per daemon, and per worker
its executors' work and scratch folders.

Starting, in steps (a failure at any step stops what was started and says why):

1. Java is checked (Spark 4 needs 17+) before any JVM is launched.
2. The master is launched and its ports read from its log; ``cluster.json`` is written
   at once, so ``down`` finds it even if a later step fails.
3. Each worker is launched (its own folder, ``cores`` cores, ``memory`` for executors)
   and its ports read from its log.
4. The master's JSON status page is polled until every worker is registered and ALIVE -
   an event, bounded by ``timeout`` seconds, never a guess of how long it takes.

Stopping (also by the object that started it when ``cluster.json`` is gone) sends SIGTERM
to the daemons, then SIGKILL to every process still carrying the
cluster's tag (:mod:`scabbard.standalone.processes`), and waits until all are gone.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from scabbard import paths
from scabbard.standalone.daemons import (
    JVM,
    MASTER_CLASS,
    WORKER_CLASS,
    ClusterError,
    Daemon,
    launch,
    log_tail,
    wait_for_ports,
)
from scabbard.standalone.processes import alive, stop_tagged, tagged, wait_gone

STATE_FILE = "cluster.json"
_MEMORY = re.compile(r"^\d+[kmgtKMGT]?$")


@dataclass(frozen=True)
class ClusterSettings:
    """What cluster to start.  Ports 0 take any free port (the ports bound are read back)."""

    folder: Path = field(default_factory=lambda: paths.spark_cluster())  # <home>/spark-cluster
    workers: int = field(default=2, metadata={"help": "workers"})
    cores: int = field(default=1, metadata={"help": "cores per worker"})
    memory: str = field(default="2g", metadata={"help": "memory per worker for its executors"})
    host: str = "127.0.0.1"
    port: int = field(default=7077, metadata={"help": "the master's port (0: any free port)"})
    # the master's web UI (its JSON status page is /json/)
    ui_port: int = field(default=8080, metadata={
        "help": "the master's web UI port (0: any free port)"})
    daemon_heap: str = "512m"
    timeout: float = field(default=180.0, metadata={  # bound of every wait
        "help": "seconds to wait for each daemon to start and register"})

    def __post_init__(self):
        object.__setattr__(self, "folder", Path(self.folder))
        if self.workers < 1 or self.cores < 1:
            raise ValueError(f"--workers and --cores must be >= 1, got {self.workers} and "
                             f"{self.cores}")
        for name in ("port", "ui_port"):
            if not 0 <= getattr(self, name) <= 65535:
                raise ValueError(f"--{name.replace('_', '-')} must be a port number (0: any "
                                 f"free one), got {getattr(self, name)}")
        for name in ("memory", "daemon_heap"):
            if not _MEMORY.match(getattr(self, name)):
                raise ValueError(f"--{name.replace('_', '-')} must be a size like 2g or 512m, "
                                 f"got {getattr(self, name)!r}")
        if not self.timeout > 0:
            raise ValueError(f"--timeout must be positive, got {self.timeout}")


@dataclass(frozen=True)
class DaemonState:
    role: str
    pid: int
    port: int
    ui_port: int
    log: str
    log_offset: int = 0


@dataclass(frozen=True)
class ClusterState:
    """``cluster.json``: what a cluster started."""

    tag: str
    host: str
    master: DaemonState
    workers: tuple[DaemonState, ...] = ()
    settings: dict = field(default_factory=dict)

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.master.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{self.host}:{self.master.ui_port}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ClusterState:
        d = json.loads(text)
        return cls(d["tag"], d["host"], DaemonState(**d["master"]),
                   tuple(DaemonState(**w) for w in d["workers"]), d.get("settings", {}))


def master_status(ui_url: str, timeout: float = 5.0) -> dict | None:
    """The master's JSON status page (workers, applications), or None if it does not answer."""
    try:
        with urllib.request.urlopen(f"{ui_url}/json/", timeout=timeout) as r:
            return json.loads(r.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None


class StandaloneCluster:
    """A local standalone cluster in ``settings.folder``; also a context manager
    (``with StandaloneCluster(s) as c: ... c.master_url``) that stops it on exit, and it
    stops at interpreter exit too when this process started it."""

    def __init__(self, settings: ClusterSettings | None = None):
        settings = settings if settings is not None else ClusterSettings()
        self.settings = settings
        self.folder = settings.folder.absolute()
        self._procs = {}  # pid -> Popen of the daemons this process launched (to reap them)
        self._started: ClusterState | None = None  # what this object started, if the file goes

    # -- state ---------------------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.folder / STATE_FILE

    @property
    def state(self) -> ClusterState | None:
        try:
            return ClusterState.from_json(self.state_file.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as e:
            raise ClusterError(f"{self.state_file} is damaged ({e}); remove it and stop any "
                               f"JVM it started by hand") from None

    def _save(self, state: ClusterState) -> None:
        self._started = state
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(state.to_json())
        tmp.replace(self.state_file)

    @property
    def master_url(self) -> str:
        return self._running().master_url

    def _running(self) -> ClusterState:
        st = self.state
        if st is None or not alive(st.master.pid) or not tagged(st.tag, [st.master.pid]):
            raise ClusterError(f"no cluster is running in {self.folder}: start one with "
                               f"`scabbard spark up --folder {self.folder}`")
        return st

    def running(self) -> bool:
        try:
            self._running()
        except ClusterError:
            return False
        return True

    # -- up ------------------------------------------------------------------------------------
    def up(self, stop_at_exit: bool = False) -> ClusterState:
        """Start the cluster (see the module's steps), or complete a running one: workers
        that died are started again.  Returns what runs."""
        from scabbard.sparksession import check_java

        # Step 1
        java = check_java().executable
        self.folder.mkdir(parents=True, exist_ok=True)
        st = self.state
        if st is not None and not self.running():
            stop_tagged(st.tag)  # what is left of a cluster whose master died
            self.state_file.unlink(missing_ok=True)
            st = None
        fresh = st is None
        try:
            if fresh:
                st = self._start_master(java)  # Step 2
            running = {w.role for w in st.workers if alive(w.pid)}
            missing = [f"worker-{i}" for i in range(1, self.settings.workers + 1)
                       if f"worker-{i}" not in running]
            if missing:
                st = self._start_workers(java, st, missing)  # Step 3
            self._wait_registered(st)  # Step 4
        except BaseException:
            started = self.state
            if fresh and started is not None:
                self._stop(started)
            raise
        if stop_at_exit:
            atexit.register(self.down)
        return st

    def _start_master(self, java: str) -> ClusterState:
        s = self.settings
        tag = f"{uuid.uuid4().hex[:12]}"
        daemon, proc = launch(
            "master", MASTER_CLASS,
            ["--host", s.host, "--port", str(s.port), "--webui-port", str(s.ui_port)],
            JVM(java, s.daemon_heap, s.host, self.folder, tag),
            ("-Dspark.master.rest.enabled=false", "-Dspark.ui.killEnabled=false"))
        self._procs[daemon.pid] = proc
        st = ClusterState(tag, s.host, DaemonState("master", daemon.pid, 0, 0, str(daemon.log)),
                          settings={k: str(v) for k, v in asdict(s).items()})
        self._save(st)  # before waiting: `down` must find a master that hangs
        ports = wait_for_ports(daemon, ("sparkMaster", "MasterUI"), s.timeout)
        st = replace(st, master=DaemonState("master", daemon.pid, ports["sparkMaster"],
                                            ports["MasterUI"], str(daemon.log), daemon.offset))
        self._save(st)
        return st

    def _start_workers(self, java: str, st: ClusterState, roles: list[str]) -> ClusterState:
        """Launch the workers ``roles`` side by side, then read each one's ports."""
        s = self.settings
        launched = []
        for role in roles:
            home = self.folder / role
            (home / "local").mkdir(parents=True, exist_ok=True)
            daemon, proc = launch(
                role, WORKER_CLASS,
                ["--host", s.host, "--port", "0", "--webui-port", "0", "--cores", str(s.cores),
                 "--memory", s.memory, "--work-dir", str(home / "work"), st.master_url],
                JVM(java, s.daemon_heap, s.host, self.folder, st.tag),
                (f"-Dspark.local.dir={home / 'local'}",))
            self._procs[daemon.pid] = proc
            launched.append(daemon)
            st = self._with_worker(st, DaemonState(role, daemon.pid, 0, 0, str(daemon.log),
                                                   daemon.offset))
        self._save(st)  # before waiting: `down` must find a worker that hangs
        for daemon in launched:
            ports = wait_for_ports(daemon, ("sparkWorker", "WorkerUI"), s.timeout)
            st = self._with_worker(st, DaemonState(daemon.role, daemon.pid, ports["sparkWorker"],
                                                   ports["WorkerUI"], str(daemon.log),
                                                   daemon.offset))
        self._save(st)
        return st

    @staticmethod
    def _with_worker(st: ClusterState, worker: DaemonState) -> ClusterState:
        others = [w for w in st.workers if w.role != worker.role]
        return replace(st, workers=tuple(sorted([*others, worker], key=lambda w: w.role)))

    def _wait_registered(self, st: ClusterState) -> None:
        """Step 4: until the master lists every worker of ``st`` as ALIVE."""
        want = {w.port: w for w in st.workers}
        deadline = time.monotonic() + self.settings.timeout
        while True:
            status = master_status(st.ui_url) or {}
            registered = {w.get("port") for w in status.get("workers", [])
                          if w.get("state") == "ALIVE"}
            if set(want) <= registered:
                return
            for d in [st.master, *st.workers]:
                if not alive(d.pid):
                    raise ClusterError(f"the {d.role} exited: "
                                       f"{log_tail(Daemon(d.role, d.pid, Path(d.log), d.log_offset))}")
            if time.monotonic() >= deadline:
                missing = ", ".join(want[p].role for p in sorted(set(want) - registered))
                raise ClusterError(f"{missing} did not register with the master at "
                                   f"{st.master_url} within {self.settings.timeout:g} s "
                                   f"(logs in {self.folder})")
            time.sleep(0.1)

    # -- down ----------------------------------------------------------------------------------
    def down(self) -> list[int]:
        """Stop every JVM of the cluster (executors included) and nothing else; return their
        pids (empty if none runs)."""
        st = self.state or self._started
        if st is None:
            return []
        return self._stop(st)

    def _stop(self, st: ClusterState) -> list[int]:
        stopped = stop_tagged(st.tag, first=[st.master.pid, *(w.pid for w in st.workers)],
                              timeout=self.settings.timeout)
        for pid, proc in list(self._procs.items()):
            proc.wait()  # reap the daemons this process launched
            del self._procs[pid]
        self.state_file.unlink(missing_ok=True)
        self._started = None
        atexit.unregister(self.down)
        return stopped

    # -- faults and status ---------------------------------------------------------------------
    def worker(self, role: str) -> DaemonState:
        st = self._running()
        for w in st.workers:
            if w.role == role:
                return w
        raise ClusterError(f"no {role} in {self.folder} (has {', '.join(w.role for w in st.workers)})")

    def kill_worker(self, role: str = "worker-1") -> int:
        """SIGKILL the worker's JVM (a machine failing, as far as Spark can tell); its
        executors exit once they lose it.  Returns its pid."""
        w = self.worker(role)
        if not tagged(self._running().tag, [w.pid]):
            raise ClusterError(f"{role} (pid {w.pid}) is not running")
        os.kill(w.pid, signal.SIGKILL)
        if w.pid in self._procs:
            self._procs.pop(w.pid).wait()
        if wait_gone([w.pid], self.settings.timeout):
            raise ClusterError(f"{role} (pid {w.pid}) survived SIGKILL")
        return w.pid

    def restart_worker(self, role: str) -> DaemonState:
        """Start ``role`` again (after a kill) and wait until it is registered."""
        from scabbard.sparksession import check_java

        self.worker(role)  # a role of this cluster
        st = self._start_workers(check_java().executable, self._running(), [role])
        self._wait_registered(st)
        return next(w for w in st.workers if w.role == role)

    def status(self) -> dict:
        """What runs: the state, each daemon's process, and the master's view of the workers
        and applications (``master`` None if it does not answer)."""
        st = self.state
        if st is None:
            return {"running": False, "folder": str(self.folder)}
        master = master_status(st.ui_url)
        seen = {w["port"]: w for w in (master or {}).get("workers", [])}
        return {
            "running": self.running(), "folder": str(self.folder), "master_url": st.master_url,
            "ui_url": st.ui_url, "master_pid": st.master.pid, "tag": st.tag,
            "workers": [{"role": w.role, "pid": w.pid, "process": alive(w.pid),
                         "state": seen.get(w.port, {}).get("state", "unknown"),
                         "cores": seen.get(w.port, {}).get("cores"),
                         "memory_mb": seen.get(w.port, {}).get("memory")} for w in st.workers],
            "applications": [a.get("name") for a in (master or {}).get("activeapps", [])],
            "master": master is not None,
            "processes": tagged(st.tag),
        }

    # -- context manager -----------------------------------------------------------------------
    def __enter__(self) -> StandaloneCluster:
        self.up(stop_at_exit=True)
        return self

    def __exit__(self, *exc) -> None:
        self.down()
