"""Spark's standalone daemons (master, worker) as JVMs of the ``pyspark`` package itself.

The ``pyspark`` wheel ships Spark's jars, among them the launcher classes
``org.apache.spark.deploy.master.Master`` and ``org.apache.spark.deploy.worker.Worker``;
:func:`launch` runs one with ``java -cp '<pyspark>/jars/*'`` - nothing downloaded - in a
session of its own, its output in a log file, its environment tagged (see
:mod:`scabbard.standalone.processes`).  :func:`wait_for_ports` reads the ports it bound
from that log (Spark logs ``Successfully started service 'X' on port N``), which also makes
port 0 - any free port - safe.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from scabbard.errors import Failure
from scabbard.standalone.processes import TAG, alive

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_PORT = re.compile(r"Successfully started service '([^']+)' on port (\d+)")


class ClusterError(Failure, RuntimeError):
    """The local cluster cannot start, is not running, or did not stop."""


def spark_home() -> Path:
    """The ``pyspark`` package folder: Spark's jars are in its ``jars/``."""
    import pyspark

    home = Path(pyspark.__file__).parent
    if not (home / "jars").is_dir():
        raise ClusterError(f"{home} has no jars/ folder: this pyspark cannot run a cluster")
    return home


def scala_version(home: Path) -> str:
    """The Scala version of the jars (``spark-core_2.13-...`` -> ``2.13``), which a worker's
    launcher needs to build its executors' class path."""
    for jar in (home / "jars").glob("spark-core_*.jar"):
        return jar.name.split("_", 1)[1].split("-", 1)[0]
    raise ClusterError(f"no spark-core jar in {home / 'jars'}")


@dataclass(frozen=True)
class Daemon:
    """A launched daemon: its role (``master``, ``worker-1``...), process and log file (its
    own lines start at ``offset``: a restarted daemon appends to its predecessor's log)."""

    role: str
    pid: int
    log: Path
    offset: int = 0

    def log_text(self) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(self.offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""


@dataclass(frozen=True)
class JVM:
    """How a cluster's daemons run: ``java`` with ``heap`` each, bound to ``host``, their logs
    in ``folder``, each tagged ``tag`` in its environment (what finds them again)."""

    java: str
    heap: str
    host: str
    folder: Path
    tag: str


def launch(role: str, cls: str, args: list[str], jvm: JVM,
           java_options: tuple[str, ...] = ()) -> tuple[Daemon, subprocess.Popen]:
    """Start daemon class ``cls`` with ``args`` as ``jvm`` says; its log is
    ``<jvm.folder>/<role>.log``."""
    java, heap, host, folder, tag = jvm.java, jvm.heap, jvm.host, jvm.folder, jvm.tag
    home = spark_home()
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"{role}.log"
    env = dict(os.environ)
    env.update({TAG: tag, "SPARK_HOME": str(home), "SPARK_SCALA_VERSION": scala_version(home),
                "SPARK_LOCAL_IP": host, "SPARK_LOG_DIR": str(folder)})
    command = [java, "-cp", str(home / "jars" / "*"), f"-Xmx{heap}", *java_options, cls, *args]
    with open(log, "ab") as out:
        offset = out.tell()
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, cwd=folder, env=env,
                                start_new_session=True)
    return Daemon(role, proc.pid, log, offset), proc


def log_tail(daemon: Daemon, lines: int = 5) -> str:
    text = daemon.log_text().strip().splitlines()
    interesting = [x for x in text if " ERROR " in x or "Exception" in x] or text
    return " | ".join(x.strip() for x in interesting[-lines:])


def wait_for_ports(daemon: Daemon, services: tuple[str, ...], timeout: float) -> dict[str, int]:
    """The ports the daemon's services bound, read from its log as they appear.

    Fails at once if the daemon exits, and after ``timeout`` seconds otherwise, with the
    end of its log.
    """
    deadline = time.monotonic() + timeout
    found: dict[str, int] = {}
    while True:
        for name, port in _PORT.findall(daemon.log_text()):
            found[name] = int(port)
        if all(s in found for s in services):
            return {s: found[s] for s in services}
        if not alive(daemon.pid):
            raise ClusterError(f"the {daemon.role} exited while starting: {log_tail(daemon)} "
                               f"(log: {daemon.log})")
        if time.monotonic() >= deadline:
            raise ClusterError(f"the {daemon.role} did not start its {', '.join(services)} within "
                               f"{timeout:g} s: {log_tail(daemon)} (log: {daemon.log})")
        time.sleep(0.1)
