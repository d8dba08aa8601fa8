"""The process's allocator, set for how the engine allocates.

Every task allocates its output afresh - the front kernel's columns, a long task's window
results, the partials - in arrays of megabytes that live for one task.  glibc's defaults
serve such a block with ``mmap`` and give it back with ``munmap`` when it is freed, so the
next task's block is new address space whose every page faults in zero-filled on first touch
(about 5 us per 4 KiB page here): for LRB2, whose 30-pane windows emit 30 result rows per
input tuple, that was over half the fragment's time.  Worker threads also allocate from
arenas of their own, whose heaps are at most 64 MiB, so a larger block is mmapped there
whatever the threshold.

``reuse`` (the default) keeps freed memory in the process for the next task instead: blocks
up to 1 GiB come from the heap, the heap is not trimmed below its peak, and every thread
shares the main arena (whose lock is taken once per array, not per tuple).  The cost is
that the resident size stays at its peak instead of falling back between tasks - the peak
itself is no higher.  ``system`` leaves glibc's defaults.  The setting is per process and
one-way: the first engine of a process applies it (``SCABBARD_ALLOCATOR=system`` in the
environment keeps the defaults for every engine, to compare).

Measured with ``scabbard bench engine`` (README, "Speed"): LRB2 2.4x, SG1 1.25x.

One arena holds only if it is set before a second thread allocates: a thread that allocated
earlier keeps an arena of its own, and glibc then hands the engine's threads out between the
arenas there are, each kept at its own peak.  The processes the workbench starts for engines
(the ``scabbard`` command, ``bench state``'s runs) therefore apply it first thing (DARWIN at
1 M keys within 16 MiB: 350 MB anonymous at its peak instead of 520, the sampling thread of
``bench state`` having allocated first).  :func:`arenas` counts them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading

MODES = ("reuse", "system")
# mallopt(3) parameters
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -2, -3, -8
MMAP_THRESHOLD = 1 << 30  # blocks up to this come from the heap (reused), larger are mmapped
TRIM_THRESHOLD = (1 << 31) - 1  # free memory at the heap's top kept, up to this
TOP_PAD = 64 << 20  # the heap grows by at least this much at a time

_lock = threading.Lock()
_applied: str | None = None  # what this process runs with, once an engine chose


def applied() -> str:
    """The allocator setting this process runs with (``system`` until an engine chose)."""
    return _applied or "system"


def tune(mode: str = "reuse") -> str:
    """Apply ``mode`` to this process, once (see the module); returns what applies.  A
    ``reuse`` that cannot apply (not glibc) leaves ``system``."""
    global _applied
    if mode not in MODES:
        raise ValueError(f"allocator must be one of {', '.join(MODES)}, got {mode!r}")
    if os.environ.get("SCABBARD_ALLOCATOR", "").strip().lower() == "system":
        mode = "system"
    with _lock:
        if _applied is not None:
            return _applied
        _applied = _reuse() if mode == "reuse" else "system"
        return _applied


def _libc(*names: str) -> list | None:
    """glibc's functions ``names``, or None where they are not (another C library)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return [getattr(libc, n) for n in names]
    except (OSError, AttributeError):
        return None


def _reuse() -> str:
    fns = _libc("mallopt")
    if fns is None:  # not glibc: its defaults stay
        return "system"
    (mallopt,) = fns
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    ok = all(mallopt(p, v) == 1 for p, v in ((M_ARENA_MAX, 1), (M_MMAP_THRESHOLD, MMAP_THRESHOLD),
                                              (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
                                              (M_TOP_PAD, TOP_PAD)))
    return "reuse" if ok else "system"


def arenas() -> int:
    """How many malloc arenas this process has (glibc's ``malloc_info``; 0 if not glibc)."""
    import tempfile

    fns = _libc("fopen", "fclose", "malloc_info")
    if fns is None:
        return 0
    fopen, fclose, info = fns
    fopen.restype, fopen.argtypes = ctypes.c_void_p, (ctypes.c_char_p, ctypes.c_char_p)
    fclose.argtypes, info.argtypes = (ctypes.c_void_p,), (ctypes.c_int, ctypes.c_void_p)
    with tempfile.NamedTemporaryFile() as f:
        stream = fopen(f.name.encode(), b"w")
        if not stream:
            return 0
        info(0, stream)
        fclose(stream)
        return f.read().count(b"<heap nr=")
