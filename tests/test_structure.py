"""The layering of docs/design.md, read off the source with ``ast``: the engine core
imports nothing of persistence or storage, and no ``scabbard`` modules - nor packages -
import each other in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import scabbard

ROOT = Path(scabbard.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = p.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


MODULES = _modules()


def _resolve(name: str) -> str:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports(module: str) -> set[str]:
    """The ``scabbard`` modules ``module`` imports (anywhere in it, lazily too)."""
    deps = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            deps |= {_resolve(a.name) for a in node.names if a.name.startswith("scabbard")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.startswith("scabbard"):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                deps.add(full if full in MODULES else _resolve(node.module))
    deps.discard(module)
    return deps


def test_the_engine_core_imports_nothing_of_persistence_or_storage():
    core = [m for m in MODULES if m == "scabbard.engine" or m.startswith("scabbard.engine.")]
    assert len(core) >= 8
    bad = {m: sorted(d for d in imports(m) if d.split(".")[1] in ("pog", "storage", "ft"))
           for m in core}
    assert not {m: d for m, d in bad.items() if d}, bad


def package(module: str) -> str:
    """The package a module belongs to: ``scabbard.engine`` for ``scabbard.engine.graph``;
    a top-level module (``scabbard.paths``) is its own."""
    return ".".join(module.split(".")[:2])


def package_imports() -> dict[str, set[str]]:
    """Which packages each package's modules import (lazily too), itself left out."""
    out: dict[str, set[str]] = {}
    for m in MODULES:
        out.setdefault(package(m), set()).update(package(d) for d in imports(m))
    for p, deps in out.items():
        deps.discard(p)
    return out


def _cycles(graph: dict[str, set[str]] | None = None) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan): modules, or the
    packages of ``graph``."""
    graph = graph if graph is not None else {m: imports(m) for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_scabbard_modules_import_each_other_in_a_circle():
    assert _cycles() == []


def test_no_scabbard_packages_import_each_other_in_a_circle():
    """Packages too: ``sim`` imports nothing of ``experiments`` (its validation against the
    engine runs experiments, so it lives there), and so on for every pair."""
    graph = package_imports()
    assert len(graph) >= 15
    assert _cycles(graph) == []


def test_the_package_check_finds_a_circle_where_there_is_one():
    graph = package_imports()
    graph["scabbard.sim"] = graph["scabbard.sim"] | {"scabbard.experiments"}
    assert ["scabbard.experiments", "scabbard.sim"] in _cycles(graph)


def test_the_check_finds_a_circle_where_there_is_one(monkeypatch):
    """The cycle check can fail: two modules made to import each other are found."""
    a, b = "scabbard.engine.sinks", "scabbard.engine.sources"
    real = imports

    def fake(m):
        return real(m) | ({b} if m == a else {a} if m == b else set())

    monkeypatch.setattr(__import__(__name__), "imports", fake)
    assert [a, b] in _cycles()


def _patches(module: str) -> list[str]:
    """Where ``module`` may replace another's functions: any ``setattr(...)`` call, and any
    assignment to an attribute of a class or module it imported
    (``policy.Compression.__call__ = ...``)."""
    imported = set()
    tree = ast.parse(MODULES[module].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("scabbard"):
            imported |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            imported |= {(a.asname or a.name).split(".")[0] for a in node.names
                         if a.name.startswith("scabbard")}
    out = []
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "setattr" and node.args:
            out.append(f"{module}:{node.lineno}")
            continue
        if isinstance(node, ast.Assign | ast.AugAssign):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(t, ast.Attribute):
                    target = t.value
        while isinstance(target, ast.Attribute):
            target = target.value
        if isinstance(target, ast.Name) and target.id in imported:
            out.append(f"{module}:{node.lineno}")
    return sorted(out)


def test_no_scabbard_module_patches_another():
    """The simulator measures the engine through the timers it exposes
    (:mod:`scabbard.timers`), not by replacing its functions."""
    assert [p for m in MODULES for p in _patches(m)] == []


def test_the_patch_check_finds_a_patch(tmp_path, monkeypatch):
    src = tmp_path / "patching.py"
    src.write_text("from scabbard.engine import runtime\n"
                   "for obj in (runtime.Engine,):\n"
                   "    setattr(obj, '_fragment', None)\n"
                   "runtime.Engine.warm_up = None\n"
                   "class A:\n"
                   "    def __init__(self):\n"
                   "        self.x = 1\n")
    monkeypatch.setitem(MODULES, "scabbard.patching", src)
    assert _patches("scabbard.patching") == ["scabbard.patching:3", "scabbard.patching:4"]


def test_experiment_settings_share_their_common_fields():
    """Every experiment's ``Settings`` with a scale and a dataset root takes them from
    :class:`scabbard.experiments.Common` (they were declared again in 18 modules)."""
    import dataclasses
    import importlib

    from scabbard.experiments import Common

    apart = []
    for module in sorted(m for m in MODULES if m.startswith("scabbard.experiments.")):
        settings = getattr(importlib.import_module(module), "Settings", None)
        if settings is None or not dataclasses.is_dataclass(settings):
            continue
        names = {f.name for f in dataclasses.fields(settings)}
        if {"scale", "data_dir"} <= names and not issubclass(settings, Common):
            apart.append(module)
    assert apart == []


# the kernels' state the engine holds: named tuples whose fields it reads by name
KERNEL_STATE = ("fifo", "table", "ws", "dqi", "dqf", "dq")


def _kernel_state_indexed(module: str) -> list[str]:
    """Where ``module`` reads a kernel's state by position (``a.fifo[5]``, ``table[1]``)."""
    out = []
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, int)):
            continue
        v = node.value
        name = v.attr if isinstance(v, ast.Attribute) else getattr(v, "id", None)
        if name in KERNEL_STATE:
            out.append(f"{module}:{node.lineno}")
    return out


def test_nothing_outside_the_kernels_indexes_a_kernels_state():
    """The window state, its deques, the pane FIFO and the key table are named tuples
    (``WindowState``, ``Deques``, ``PaneFifo``, ``KeyTable``): the engine reads their fields
    by name, so their layout is the kernels' own."""
    assert [p for m in MODULES if not m.startswith("scabbard.kernels")
            for p in _kernel_state_indexed(m)] == []


def test_the_index_check_finds_an_index(tmp_path, monkeypatch):
    src = tmp_path / "indexing.py"
    src.write_text("def f(a, table):\n"
                   "    return a.fifo[5], table[1][0], a.fifo.pane[0], a.rows[2]\n")
    monkeypatch.setitem(MODULES, "scabbard.indexing", src)
    assert _kernel_state_indexed("scabbard.indexing") == ["scabbard.indexing:2"] * 2


# -- every kernel called from outside the kernels is checked (issue 46) -------------------------
def kernels_called_compiled(module: str) -> list[str]:
    """What ``module`` takes from ``scabbard.kernels`` that is a compiled kernel (a numba
    dispatcher) rather than its validating wrapper: ``kernels-module.name`` each."""
    import importlib

    from numba.core.dispatcher import Dispatcher

    tree = ast.parse(MODULES[module].read_text())
    taken: set[tuple[str, str]] = set()
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.startswith("scabbard.kernels"):
            for a in node.names:
                if f"{node.module}.{a.name}" in MODULES:  # a module: its uses below
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                else:
                    taken.add((node.module, a.name))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("scabbard.kernels") and a.asname:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases:
            taken.add((aliases[node.value.id], node.attr))
    return sorted(f"{m}.{name}" for m, name in taken
                  if isinstance(getattr(importlib.import_module(m), name, None), Dispatcher))


def test_nothing_outside_the_kernels_calls_a_compiled_kernel_unchecked():
    """A module outside ``scabbard.kernels`` calls the kernels' validating wrappers
    (:mod:`scabbard.kernels._check`), never a compiled kernel: compiled without bounds
    checks, a kernel given an array one row short writes past its end."""
    assert [f"{m}: {k}" for m in MODULES if not m.startswith("scabbard.kernels")
            for k in kernels_called_compiled(m)] == []


def test_the_compiled_kernel_check_finds_one(tmp_path, monkeypatch):
    src = tmp_path / "caller.py"
    src.write_text("from scabbard.kernels.hashtable import new_table, empty_key_table\n"
                   "from scabbard.kernels import assembler as ka\n"
                   "def f():\n"
                   "    return new_table(1, 8), empty_key_table(1, 8), ka._route_rows, ka.route_rows\n")
    monkeypatch.setitem(MODULES, "scabbard.caller", src)
    assert kernels_called_compiled("scabbard.caller") == [
        "scabbard.kernels.assembler._route_rows", "scabbard.kernels.hashtable.new_table"]


# -- size ------------------------------------------------------------------------------------------
MAX_MODULE_LINES = 600
MAX_PARAMETERS = 8
# the functions outside the kernels that still take more than MAX_PARAMETERS: none left (the
# ratchet of issue 46 reached zero); a function that joins it fails the test
MANY_PARAMETERS: set[str] = set()


def test_no_module_is_over_600_lines():
    long = {m: n for m, p in MODULES.items()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, long


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    n = len(names) + (a.vararg is not None) + (a.kwarg is not None)
    return n - (bool(names) and names[0].arg in ("self", "cls"))


def many_parameters() -> set[str]:
    """The functions outside ``scabbard.kernels`` with more than MAX_PARAMETERS."""
    out = set()
    for m, p in MODULES.items():
        if m.startswith("scabbard.kernels"):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) \
                    and _parameters(node) > MAX_PARAMETERS:
                out.add(f"{m}.{node.name}")
    return out


def test_no_function_takes_more_than_8_parameters_but_the_known_ones():
    found = many_parameters()
    assert found <= MANY_PARAMETERS, sorted(found - MANY_PARAMETERS)
    assert not MANY_PARAMETERS - found, f"no longer too many: drop {sorted(MANY_PARAMETERS - found)}"


def test_the_parameter_count_sees_every_kind():
    fn = ast.parse("def f(self, a, /, b, *c, d, **e): pass").body[0]
    assert _parameters(fn) == 5


# -- every flag declared once (issue 46) -------------------------------------------------------
# the Flink job's own command line (a program Flink runs, not a scabbard command)
OTHER_PROGRAMS = {"scabbard.peers.flink"}


def literal_flags(sources: dict[str, str]) -> dict[str, list[str]]:
    """Each ``--flag`` written as an ``add_argument`` call's argument, with where."""
    out: dict[str, list[str]] = {}
    for m, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                for a in node.args:
                    if isinstance(a, ast.Constant) and str(a.value).startswith("--"):
                        out.setdefault(a.value, []).append(f"{m}:{node.lineno}")
    return out


def settings_flags(sources: dict[str, str]) -> dict[str, list[str]]:
    """Each flag a ``settings_flags(p, Settings, "name", ...)`` call names, with where."""
    from scabbard.cli.settings import flag_of

    out: dict[str, list[str]] = {}
    for m, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "settings_flags":
                for a in node.args[2:]:
                    if isinstance(a, ast.Constant):
                        out.setdefault(flag_of(a.value), []).append(f"{m}:{node.lineno}")
    return out


def flag_declarations(sources: dict[str, str]) -> dict[str, list[str]]:
    """Where each flag is declared: a literal ``add_argument`` (the package's own parsers),
    :data:`scabbard.cli.common.SHARED`, a configuration field's metadata, or the benchmarks'
    settings table (a flag of its own there - one the others declare is only used)."""
    from scabbard.cli import common
    from scabbard.experiments import benches
    from scabbard.ft.config import FTConfig, PersistConfig, RunConfig
    from scabbard.ft.flags import flagged

    out = literal_flags(sources)
    for name in common.SHARED:
        out.setdefault(name, []).append("scabbard.cli.common.SHARED")
    from scabbard.sim.config import Hardware, SimConfig

    shared = set(common.SHARED)
    for cls in (RunConfig, PersistConfig, FTConfig, Hardware, SimConfig):
        for f, spec in flagged(cls):
            if not spec["shared"]:  # a shared one is a use of a flag declared elsewhere
                out.setdefault(spec["name"], []).append(f"{cls.__name__}.{f.name}")
                shared.add(spec["name"])
    for flag, where in settings_flags(sources).items():  # a command's settings' own flags
        if flag not in shared:
            out.setdefault(flag, []).extend(where)
    for name in benches.HELP:
        flag = benches.FLAGS.get(name, "--" + name.replace("_", "-"))
        if flag not in out:  # the benchmarks' own: none of the others may declare it
            out.setdefault(flag, []).append(f"scabbard.experiments.benches.HELP[{name!r}]")
        elif not any(s.startswith(("scabbard.cli.common", "RunConfig", "PersistConfig",
                                   "FTConfig")) for s in out[flag]):
            out[flag].append(f"scabbard.experiments.benches.HELP[{name!r}]")
    return out


def test_no_flag_is_declared_twice():
    sources = {m: p.read_text() for m, p in MODULES.items() if m not in OTHER_PROGRAMS}
    declarations = flag_declarations(sources)
    twice = {f: where for f, where in declarations.items() if len(where) > 1}
    assert not twice, twice
    from scabbard.ft.flags import flagged
    from scabbard.sim.config import SimConfig

    uses = [s["name"] for _, s in flagged(SimConfig) if s["shared"]]
    assert uses and not [u for u in uses if u not in declarations]  # each declared somewhere


def test_the_flag_check_finds_a_flag_declared_twice():
    a = 'p.add_argument("--scale", choices=("tiny",))'
    b = 'q.add_argument("--scale", default="small")\nq.add_argument("--own")'
    found = literal_flags({"a": a, "b": b})
    assert found["--scale"] == ["a:1", "b:1"] and found["--own"] == ["b:2"]
    twice = flag_declarations({"a": 'p.add_argument("--query")'})["--query"]
    assert twice == ["a:1", "scabbard.cli.common.SHARED"]
    own = 'settings_flags(p, S, "states", "seed")\nq.add_argument("--states")'
    assert flag_declarations({"c": own})["--states"] == ["c:2", "c:1"]
    assert flag_declarations({"c": own})["--seed"] == ["scabbard.cli.common.SHARED"]


def test_every_module_that_compiles_a_kernel_keys_the_kernel_cache():
    """A cached kernel is stale when any kernel source changes (kernels inline kernels of
    other files): the files that key the cache (``kernels._jit.KERNEL_SOURCES``) are every
    module of the package that compiles a function."""
    from scabbard.kernels import _jit

    root = Path(scabbard.__file__).parent
    compiling = {p for p in root.rglob("*.py")
                 if any(w in p.read_text() for w in ("_jit import", "import njit", "numba.njit"))}
    assert compiling and compiling <= set(_jit.kernel_files(root)), sorted(
        str(p.relative_to(root)) for p in compiling - set(_jit.kernel_files(root)))
