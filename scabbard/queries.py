"""The eleven queries of the paper's Table 3 (:data:`NAMES`), and a few more, by name.

    >>> from scabbard import queries
    >>> q = queries.get("LRB1")
    >>> print(q.explain())                                    # doctest: +SKIP

Each query lives in its workload's module (``scabbard.workloads.lrb.lrb1`` ...), with
its CQL-like meaning as docstring; :func:`workload_of` says which dataset it reads.
Beyond Table 3 (:data:`OTHERS`): PipeFabric's Table 1, a stateless selection at four
selectivities on SG (:data:`TABLE1`, ``scabbard.workloads.sg.pipefabric``), a
count-based window on LRB (``LRB-ROWS``), and Darwin's micro-benchmark (``DARWIN``: a 60 s
tumbling sum per key, ``scabbard.workloads.darwin``).
"""

from __future__ import annotations

from scabbard import workloads
from scabbard.errors import UserError
from scabbard.progress import say
from scabbard.query import Query

NAMES = ("CM1", "CM2", "SG1", "SG2", "SG3", "LRB1", "LRB2", "LRB3", "YSB", "NQ", "SM")
TABLE1 = ("PF-TRUE", "PF-MOD2", "PF-MOD10", "PF-FALSE")  # from selectivity 100% to 0%
OTHERS = (*TABLE1, "LRB-ROWS", "DARWIN")
ALL = NAMES + OTHERS
_WORKLOAD = {"CM1": "cm", "CM2": "cm", "SG1": "sg", "SG2": "sg", "SG3": "sg", "LRB1": "lrb",
             "LRB2": "lrb", "LRB3": "lrb", "YSB": "ysb", "NQ": "nexmark", "SM": "sm",
             **dict.fromkeys(TABLE1, "sg"), "LRB-ROWS": "lrb", "DARWIN": "darwin"}


class UnknownQueryError(UserError, KeyError):
    def __str__(self) -> str:
        return f"unknown query {self.args[0]!r} (choose from {', '.join(ALL)})"


def workload_of(name: str) -> str:
    """The workload (dataset) a query reads."""
    key = name.upper()
    if key not in _WORKLOAD:
        raise UnknownQueryError(name)
    return _WORKLOAD[key]


def get(name: str) -> Query:
    """The query called ``name`` (case-insensitive), freshly built."""
    module = workloads.get(workload_of(name))
    return module.QUERIES[name.upper()]()


def all_queries() -> dict[str, Query]:
    return {n: get(n) for n in NAMES}



def dataset(name: str, data=None, root="data", verify: bool | str = "once", log=say,
            generate: bool = True):
    """The dataset query ``name`` runs on (what ``scabbard run``, ``ingest``, ``explain`` and
    ``check`` read): the folder ``data``, else its workload's small one under ``root`` -
    generated first, saying so to ``log``, when missing (``generate`` False: None then);
    opened against the workload's schema (``verify``: :func:`scabbard.data.open_dataset`'s)."""
    from scabbard.data import dataset_path, open_dataset

    workload = workload_of(name)
    schema = workloads.get(workload).SCHEMA
    if data:
        return open_dataset(data, schema=schema, verify=verify)
    path = dataset_path(root, workload, "small")
    if not (path / "manifest.json").is_file():
        if not generate:
            return None
        log(f"{path} not found: generating it (scabbard datagen {workload} --scale small)")
        workloads.get(workload).SPEC.generate(scale="small", out=str(root), log=log)
    return open_dataset(path, schema=schema, verify=verify)
