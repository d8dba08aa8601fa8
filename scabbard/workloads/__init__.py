"""The six benchmark workloads of the paper's Table 3, each with its schema and Spark generator.

``scabbard.workloads.<name>`` (cm, sg, lrb, ysb, nexmark, sm; and darwin, Darwin's
micro-benchmark, beyond Table 3) exposes ``SCHEMA``, its side tables' schemas, and ``SPEC``,
its generator::

    from scabbard.workloads import lrb
    ds = lrb.SPEC.generate(duration=600, rate=2000, seed=1, out="data")

:func:`get` looks a workload up by name.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from scabbard.errors import UserError

NAMES = ("cm", "sg", "lrb", "ysb", "nexmark", "sm")
# Beyond Table 3: Darwin's micro-benchmark (larger-than-memory state)
OTHERS = ("darwin",)
ALL = NAMES + OTHERS
# The paper's abbreviation of each dataset (Table 3); NEXMark's queries are called NQ.
PAPER_NAMES = {"cm": "CM", "sg": "SG", "lrb": "LRB", "ysb": "YSB", "nexmark": "NQ", "sm": "SM"}


class UnknownWorkloadError(UserError, KeyError):
    def __str__(self) -> str:
        return f"unknown workload {self.args[0]!r} (choose from {', '.join(ALL)})"


def get(name: str) -> ModuleType:
    """The workload module called ``name`` (case-insensitive; ``nq`` means nexmark)."""
    key = name.lower()
    key = "nexmark" if key == "nq" else key
    if key not in ALL:
        raise UnknownWorkloadError(name)
    return import_module(f"scabbard.workloads.{key}")


def dataset(name: str, scale: str = "small", root: str = "data", seed: int = 0,
            generate: bool = True, progress: bool = False):
    """The dataset of workload ``name`` at a scale preset under ``root``.

    Generated with Spark if missing or stale (and ``generate``), else opened and validated.
    """
    from scabbard.data import dataset_path, open_dataset
    from scabbard.workloads.generator import default_name, make_params

    spec = get(name).SPEC
    if generate:
        return spec.generate(scale=scale, seed=seed, out=root, progress=progress)
    params = make_params(spec, scale=scale, seed=seed)
    return open_dataset(dataset_path(root, spec.name, default_name(spec, params)), schema=spec.schema)


def options() -> list[tuple[str, object]]:
    """Every workload's own generator options (:class:`~scabbard.workloads.generator.Option`),
    with the workload's name, in :data:`ALL`'s order (each workload module is imported)."""
    return [(name, o) for name in ALL for o in get(name).SPEC.options]


def check_dataset(ds, verify: bool = False) -> str:
    """``scabbard data check``'s verdict on the dataset ``ds`` (opened, unverified): opened
    again against its workload's schema (if the workload is known here), its sizes checked,
    every checksum with ``verify``; the line that says what is valid.  A check that fails:
    a :class:`scabbard.data.DatasetError`."""
    from scabbard.data import open_dataset

    try:
        expected = get(ds.workload).SCHEMA
    except UnknownWorkloadError:
        expected = None
    ds = open_dataset(ds.path, schema=expected, verify=verify)
    what = "checksums verified" if verify else "sizes and schema valid (--verify for checksums)"
    return f"{ds.path}: {ds.workload} {ds.rows:,} rows, {len(ds.tables)} side tables; {what}"


def plan(workload: str, given: dict, scale: str | None = None, duration: float | None = None,
         rate: float | None = None, seed: int = 0) -> list[tuple]:
    """What ``scabbard datagen WORKLOAD`` makes: pairs of the workload's spec and its
    parameters, checked (:func:`~scabbard.workloads.generator.make_params`, with the options
    ``given``); ``all``: each workload of :data:`NAMES`, with those options given that are its
    own.  An unknown workload is a :class:`UnknownWorkloadError`."""
    from scabbard.workloads.generator import make_params

    out = []
    for name in NAMES if workload == "all" else (workload,):
        spec = get(name).SPEC
        opts = given
        if workload == "all":
            opts = {k: v for k, v in given.items() if k in {o.name for o in spec.options}}
        out.append((spec, make_params(spec, scale=scale, duration=duration, rate=rate,
                                      seed=seed, **opts)))
    return out
