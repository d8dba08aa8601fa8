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
