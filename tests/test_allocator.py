"""The process's allocator (engine/memory.py): freed task memory kept for the next task."""

from __future__ import annotations

import subprocess
import sys

import pytest

from scabbard.engine import EngineConfig

PROBE = """
import os, resource, numba, numpy as np
from scabbard import queries
from scabbard.engine import memory
from scabbard.engine.runtime import Engine
before = memory.applied()
Engine(queries.get("CM1"))
@numba.njit
def task(n):  # a kernel's output: allocated, written, freed with the task
    a = np.empty(n)
    a[:] = 1.0
    return a.sum()
task(1)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):  # twenty tasks of 64 MiB
    task(8 << 20)
print(before, memory.applied(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)
"""


def _probe(env: dict | None = None) -> tuple[str, str, int]:
    import os

    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True, env={**os.environ, **(env or {})}).stdout.split()
    return out[0], out[1], int(out[2])


def test_the_first_engine_keeps_freed_memory_for_the_next_task():
    """With ``reuse`` the 64 MiB arrays of twenty kernel calls fault their pages in once;
    with glibc's defaults (``SCABBARD_ALLOCATOR=system``) each is new address space, faulted
    in again."""
    before, after, faults = _probe()
    assert (before, after) == ("system", "reuse")
    _, kept, system_faults = _probe({"SCABBARD_ALLOCATOR": "system"})
    assert kept == "system"
    pages = (64 << 20) // 4096
    assert system_faults > 15 * pages  # every array faulted in afresh
    assert faults < 3 * pages, (faults, system_faults)  # the first one, then reused


def test_an_unknown_allocator_is_refused():
    with pytest.raises(ValueError, match="allocator must be one of reuse, system"):
        EngineConfig(allocator="jemalloc")
