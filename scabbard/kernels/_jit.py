"""The one place JIT flags are set (STYLE.md rule 1).

Kernels release the GIL (``nogil``) so worker threads run them in parallel, and
are cached on disk (``cache``) so a restarted engine does not recompile - the
paper's persisted binaries (§3.2).
"""

from __future__ import annotations

from numba import njit

JIT_OPTIONS = {"nogil": True, "cache": True, "fastmath": False, "boundscheck": False}


def kernel(fn):
    """Compile ``fn`` with the workbench's JIT options."""
    return njit(**JIT_OPTIONS)(fn)


def inline(fn):
    """A small helper inlined into its callers at numba IR level.

    Hot loops call these per tuple; inlining removes the call and lets LLVM drop
    the reference counting of the arrays passed in (a call costs ~100 ns otherwise).
    """
    return njit(inline="always", **JIT_OPTIONS)(fn)
