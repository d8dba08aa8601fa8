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


def scan(fn):
    """Compile a hot loop that allocates nothing, without reference counting.

    numba counts references to every array a loop body names through a helper inlined
    into it (or unpacked from a tuple) as soon as the helper branches: two atomic calls per
    array per iteration, which made the window assembly ~100x slower than its arithmetic
    (measured: 160 ns instead of 2 ns per pane partial).  A scan receives every array it
    touches from its driver (a :func:`kernel`, which allocates and keeps them alive), may
    not create, slice into a new variable or return an array, and reports "blocked" to the
    driver when it needs more room ("scan until blocked").
    """
    return njit(_nrt=False, **JIT_OPTIONS)(fn)


def inline(fn):
    """A small helper inlined into its callers at numba IR level.

    Hot loops call these per tuple; inlining removes the call and lets LLVM drop
    the reference counting of the arrays passed in (a call costs ~100 ns otherwise).
    """
    return njit(inline="always", **JIT_OPTIONS)(fn)
