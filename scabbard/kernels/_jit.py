"""The one place JIT flags are set (STYLE.md rule 1).

Kernels release the GIL (``nogil``) so worker threads run them in parallel, and
are cached on disk (``cache``) so a restarted engine does not recompile - the
paper's persisted binaries (§3.2).  Kernels load from that cache without numba's
refresh of every registry it has (:func:`_load_overload_without_registries`), and a
cached kernel is stale when any kernel source changed, not only its own file
(:func:`_source_stamp`: kernels inline kernels of other files).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from numba import njit
from numba.core import caching
from numba.core.runtime import rtsys

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


def _load_overload_without_registries(self, sig, target_context):
    """numba's ``Cache.load_overload`` less its ``target_context.refresh()``.

    numba refreshes the target's registries before it loads a kernel from its cache: it
    imports and installs every implementation it could ever lower (linear algebra, random
    generators, typed containers, unicode - some 40 modules) and retypes the builtins,
    150-200 ms of a cold restart's code loading (measured on notebook 04's LRB1 recovery:
    kernel loading 452 -> 315 ms).  A cached kernel needs none of it: it is object code,
    linked against the runtime (initialised here, as the refresh would) and the helper
    symbols numba registers on import; the modules its environment names are imported when
    it is unpickled.  A cache miss compiles, and numba's compiler refreshes the registries
    itself.
    """
    rtsys.initialize(target_context)
    with self._guard_against_spurious_io_errors():
        return self._load_overload(sig, target_context)


def _load_cached_kernels_without_registries() -> bool:
    """Install :func:`_load_overload_without_registries` (once; False where this numba's cache
    has another shape, and then its own loading stays)."""
    load = getattr(caching.Cache, "load_overload", None)
    if load is _load_overload_without_registries:
        return True
    if not (hasattr(caching.Cache, "_load_overload")
            and hasattr(caching.Cache, "_guard_against_spurious_io_errors")
            and hasattr(rtsys, "initialize")):
        return False
    caching.Cache.load_overload = _load_overload_without_registries
    return True


_load_cached_kernels_without_registries()


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
