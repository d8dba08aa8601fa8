"""Which processes a cluster started, and stopping exactly those (Linux ``/proc``).

Every JVM of a local cluster carries one tag in its environment,
``SCABBARD_SPARK_CLUSTER=<id>``: the master and the workers get it when they are launched,
and the executors a worker launches inherit it from the worker.  A process is the
cluster's if and only if its environment holds the tag - never because of its name - so
stopping the cluster stops its JVMs (orphaned executors of a killed worker included) and
nothing else, not even another cluster's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

TAG = "SCABBARD_SPARK_CLUSTER"
PROC = Path("/proc")


def _environ(pid: int) -> bytes:
    try:
        return (PROC / str(pid) / "environ").read_bytes()
    except OSError:  # gone, or not ours to read
        return b""


def state(pid: int) -> str | None:
    """The process's state letter (``R``, ``S``, ``Z``...), None when there is no such process."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to reap it does not)."""
    return state(pid) not in (None, "Z", "X")


def tagged(tag: str, pids: Iterable[int] | None = None) -> list[int]:
    """The live processes whose environment carries ``tag`` (among ``pids``, default all)."""
    needle = f"{TAG}={tag}".encode()
    if pids is None:
        pids = (int(p.name) for p in PROC.iterdir() if p.name.isdigit())
    return sorted(pid for pid in pids
                  if pid != os.getpid() and needle in _environ(pid).split(b"\0") and alive(pid))


def command_line(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def _signal(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait until none of ``pids`` runs, at most ``timeout`` seconds; return those still running."""
    pids = list(pids)
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def stop_tagged(tag: str, first: Iterable[int] = (), grace: float = 20.0,
                timeout: float = 30.0) -> list[int]:
    """Stop every process carrying ``tag``; return their pids.

    Step 1: SIGTERM to ``first`` (the daemons, which then stop their executors cleanly)
    that carry the tag, and wait up to ``grace`` seconds.
    Step 2: SIGKILL to every process still carrying the tag (stragglers, orphans).
    Step 3: wait until they are gone; raise ``TimeoutError`` naming any that are not.
    """
    stopped = set(tagged(tag))
    # Step 1
    daemons = tagged(tag, first)
    _signal(daemons, signal.SIGTERM)
    wait_gone(daemons, grace)
    # Step 2
    rest = tagged(tag)
    stopped |= set(rest)
    _signal(rest, signal.SIGKILL)
    # Step 3
    left = wait_gone(stopped, timeout)
    if left:
        raise TimeoutError(f"processes {left} of cluster {tag} did not stop within {timeout:g} s")
    return sorted(stopped)
