"""Cached kernels loaded with less of numba's work (a cold restart's code loading).

numba loads a kernel from its on-disk cache as object code plus the kernel's LLVM bitcode,
kept for inlining it into kernels compiled later.  Two steps of that loading are work a
restart does not need, and are skipped here (each installed once, and only where this
numba has the shape it was written against; otherwise numba's own loading stays):

- :func:`_load_overload_without_registries`: numba refreshes every registry it has before
  the first load (150-200 ms);
- :func:`_unserialize_lazily`: numba parses every cached kernel's bitcode and lists its
  symbols at once.  Here the bitcode is parsed when a kernel compiled later links the
  cached one, or when a symbol is asked for that no loaded kernel has listed yet.
"""

from __future__ import annotations

import weakref

from numba.core import caching, codegen
from numba.core.runtime import rtsys


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


_own: dict = {}  # numba's own functions replaced here, by name (set by install_lazy_symbols)


def _unserialize_lazily(cls, codegen_, state):
    """numba's ``CPUCodeLibrary._unserialize`` of a cached kernel's object code, less the
    parse of its bitcode and the listing of its symbols (half of the loading: on notebook
    04's LRB1 recovery, 18 kernels, ~100 ms of parsing and ~8,000 calls into LLVM listing
    symbols).  The object code is loaded as numba loads it; the bitcode is kept, unparsed,
    and the library joins its engine's pending ones (:func:`_list_pending`)."""
    name, kind, data = state
    if kind != "object":
        return _own["unserialize"](cls, codegen_, state)
    object_code, shared_bitcode = data
    self = codegen_.create_library(name)
    self.enable_object_caching()
    self._set_compiled_object(object_code)
    self._lazy_bitcode = shared_bitcode
    self._finalize_final_module()
    engine = self._codegen._engine
    if not hasattr(engine, "_lazy_libraries"):
        engine._lazy_libraries = weakref.WeakSet()
    engine._lazy_libraries.add(self)
    return self


def _parsed(self) -> None:
    """A lazily loaded library's bitcode parsed, and its symbols listed, as numba's loading
    would have done it (once)."""
    bitcode = getattr(self, "_lazy_bitcode", None)
    if bitcode is None:
        return
    self._shared_module = codegen.ll.parse_bitcode(bitcode)  # numba's llvmlite binding
    self._lazy_bitcode = None
    engine = self._codegen._engine
    engine._load_defined_symbols(self._shared_module)
    getattr(engine, "_lazy_libraries", set()).discard(self)


def _module_for_linking(self):
    """numba's ``_get_module_for_linking``: a lazily loaded library's parsed bitcode."""
    _parsed(self)
    return _own["module_for_linking"](self)


def _list_pending(engine) -> None:
    """Every pending library's symbols listed (numba's engine answers "is this symbol
    defined?" from its list)."""
    for library in list(getattr(engine, "_lazy_libraries", ())):
        _parsed(library)


def _is_symbol_defined(self, name):
    """numba's ``JitEngine.is_symbol_defined``, the pending libraries listed first when the
    symbol is not among those listed already."""
    if _own["is_defined"](self, name):
        return True
    if not getattr(self, "_lazy_libraries", None):
        return False
    _list_pending(self)
    return _own["is_defined"](self, name)


def _pointer_to_function(self, name):
    """numba's ``get_pointer_to_function``: a lazily loaded library's own entry point asked
    of LLVM's engine directly (it loaded the object code: the address is there, or 0 where
    the object does not define it, and then numba's way after the symbols are listed)."""
    if getattr(self, "_lazy_bitcode", None) is not None:
        self._ensure_finalized()
        address = self._codegen._engine.get_function_address(name)
        if address:
            return address
    return _own["pointer"](self, name)


def install_without_registries() -> bool:
    """Install :func:`_load_overload_without_registries` (once; False where this numba's
    cache has another shape, and then its own loading stays)."""
    cache = caching.Cache
    if getattr(cache, "load_overload", None) is _load_overload_without_registries:
        return True
    if not (hasattr(cache, "_load_overload")
            and hasattr(cache, "_guard_against_spurious_io_errors")
            and hasattr(rtsys, "initialize")):
        return False
    cache.load_overload = _load_overload_without_registries
    return True


def install_lazy_symbols() -> bool:
    """Install :func:`_unserialize_lazily` and its three companions (once; False where this
    numba's code libraries have another shape, and then its own loading stays)."""
    if _own:
        return True
    lib, jit = getattr(codegen, "CPUCodeLibrary", None), getattr(codegen, "JITCodeLibrary", None)
    engine = getattr(codegen, "JitEngine", None)
    own = {"unserialize": getattr(vars(lib).get("_unserialize"), "__func__", None),
           "module_for_linking": getattr(lib, "_get_module_for_linking", None),
           "pointer": getattr(jit, "get_pointer_to_function", None),
           "is_defined": getattr(engine, "is_symbol_defined", None)} if lib and jit else {}
    if not own or None in own.values() or not all(hasattr(lib, a) for a in (
            "enable_object_caching", "_set_compiled_object", "_finalize_final_module")) \
            or not hasattr(engine, "_load_defined_symbols"):
        return False
    _own.update(own)
    lib._unserialize = classmethod(_unserialize_lazily)
    lib._get_module_for_linking = _module_for_linking
    jit.get_pointer_to_function = _pointer_to_function
    engine.is_symbol_defined = _is_symbol_defined
    return True
