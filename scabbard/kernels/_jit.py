"""The one place JIT flags are set (STYLE.md rule 1).

Kernels release the GIL (``nogil``) so worker threads run them in parallel, and
are cached on disk (``cache``) so a restarted engine does not recompile - the
paper's persisted binaries (§3.2).  Kernels load from that cache with less of numba's
work (:mod:`scabbard.kernels._cacheload`), and a cached kernel is stale when any kernel
source changed, not only its own file (:func:`_source_stamp`: kernels inline kernels of
other files).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from numba import njit
from numba.core import caching

from scabbard.kernels import _cacheload

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


_cacheload.install_without_registries()
_cacheload.install_lazy_symbols()


# the package's files whose functions are compiled (a structure test keeps the list whole):
# a cached kernel inlines helpers of the others, so its cache is keyed by all of them
PACKAGE = Path(__file__).resolve().parents[1]
KERNEL_SOURCES = ("kernels", "compression", "storage/checksum.py", "sim/machine.py")


def kernel_files(root: Path = PACKAGE) -> list[Path]:
    """The files :data:`KERNEL_SOURCES` names under ``root``, in a fixed order."""
    out = []
    for name in KERNEL_SOURCES:
        p = root / name
        out += sorted(p.glob("*.py")) if p.is_dir() else [p]
    return out


def sources_digest(files: list[Path]) -> bytes:
    """One digest of the contents of ``files``."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.digest()


_digest: bytes | None = None
_own_stamp = caching._SourceFileBackedLocatorMixin.get_source_stamp


def _source_stamp(self):
    """numba's stamp of a cached function's source file - and, for a file of this package,
    of every kernel source with it: numba recompiles a kernel when its own file changes,
    not when a kernel it inlines from another file does (``assembler.py``'s inline
    ``window.py``'s), so an updated checkout ran stale kernels until ``__pycache__`` was
    cleared."""
    global _digest
    own = _own_stamp(self)
    if not os.path.abspath(self._py_file).startswith(str(PACKAGE) + os.sep):
        return own
    if _digest is None:
        _digest = sources_digest(kernel_files())
    return hashlib.sha256(repr(own).encode() + _digest).digest()


def _stamp_with_every_kernel_source() -> bool:
    """Install :func:`_source_stamp` (False where this numba's locators have another
    shape, and then each kernel's cache follows its own file only)."""
    mixin = getattr(caching, "_SourceFileBackedLocatorMixin", None)
    if mixin is None or not hasattr(mixin, "get_source_stamp"):
        return False
    mixin.get_source_stamp = _source_stamp
    return True


_stamp_with_every_kernel_source()
