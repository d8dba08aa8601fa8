"""``scabbard bench ...``: the benchmarks, each printing its figures side by side.  What each
is, its flags and its run come from :mod:`scabbard.experiments.benches`; declared here are the
flags' shape and the two commands that are no experiment's (datagen, synclog)."""

from __future__ import annotations

import dataclasses
import functools

from scabbard import paths
from scabbard.cli import bench_runs as runs
from scabbard.cli.bench_runs import settings_from as _settings  # noqa: F401 (tests read it)
from scabbard.cli.common import add_data_root, declared, hidden_alias, parse_bytes, shared_flag
from scabbard.experiments.benches import ALIASES, CHOICES, FLAGS, HELP


def _options(p, settings, *names: str, out: str | None = None, helps=None, **defaults) -> None:
    """Flags for the fields ``names`` of the experiment's ``settings`` class: the flag is the
    field's name (``--min-life``; a True default becomes ``--no-<name>``), its type and
    default the field's (or ``defaults``), its help ``helps``' or :data:`HELP`'s.  ``out``: the
    output folder's default, under the project's runs folder.  A settings class's
    ``data_dir`` is always a flag, ``--data-root``."""
    fields = {f.name: f for f in dataclasses.fields(settings)}
    def default_of(name: str):
        f = fields[name]
        return defaults.get(name, f.default if f.default is not dataclasses.MISSING
                            else f.default_factory())

    if "data_dir" in fields:  # always a flag, --data-root
        add_data_root(p, dest="data_dir", default=default_of("data_dir"))
        hidden_alias(p, "--data-dir", dest="data_dir")
    for name in names:
        if name == "data_dir":
            continue
        default = default_of(name)
        flag = FLAGS.get(name, "--" + name.replace("_", "-"))
        shown = " ".join(map(str, default)) if isinstance(default, tuple | list) else default
        shown = "none" if shown in (None, "") else shown
        if isinstance(default, bool):
            if default:
                flag = FLAGS.get(name, f"--no-{name.replace('_', '-')}")
            p.add_argument(flag, dest=name, action="store_false" if default else "store_true",
                           help=_help(name, flag, helps))
            continue
        kind = {"queries": str.upper, "query": str.upper, "state_memory": parse_bytes,
                "ingress": int}.get(name)
        if kind is None:
            item = default[0] if isinstance(default, tuple | list) else default
            kind = type(item) if isinstance(item, int | float) else str
        many = isinstance(default, tuple | list)
        p.add_argument(flag, dest=name, type=kind, nargs="+" if many else None,
                       default=list(default) if many else default, choices=CHOICES.get(name),
                       help=f"{_help(name, flag, helps)} (default "
                            f"{'all' if _all_queries(name, default) else shown})")
        if name in ALIASES:
            hidden_alias(p, ALIASES[name], dest=name, type=kind, nargs="+" if many else None)
    if out is not None:
        shared_flag(p, "--output", dest="out", default=str(paths.runs_root() / out),
                    metavar="DIR", help=f"output folder (default: experiments/runs/{out} in "
                                        "the project folder)")
        hidden_alias(p, "--out", dest="out")


def _own(p, name: str, **kw) -> None:
    """A benchmark's flag for ``name`` that is no field of its settings (declared in
    :data:`HELP`, as the settings' flags are; ``kw``: add_argument's, its help this use's)."""
    p.add_argument(FLAGS.get(name, "--" + name.replace("_", "-")), dest=name, **kw)


def _help(name: str, flag: str, helps=None) -> str:
    """A setting's help: the bench's own, the benchmarks', else the shared declaration's (its
    first clause: the default shown is the benchmark's)."""
    if helps and name in helps:
        return helps[name]
    if name in HELP:
        return HELP[name]
    return declared(flag)["help"].split(" (default")[0]


def _all_queries(name: str, default) -> bool:
    from scabbard.queries import NAMES

    return name == "queries" and tuple(default) == NAMES


def _bench(bsub, name: str, help: str, description: str, func, **kw):
    p = bsub.add_parser(name, help=help, description=description, **kw)
    p.set_defaults(func=func)
    return p


# -- bench -------------------------------------------------------------------------------------
def add(sub, full: bool = True) -> None:
    """The ``bench`` group; with ``full``, its commands (their flags come from each
    experiment's settings, so the experiments are imported)."""
    p = sub.add_parser("bench", help="benchmarks that print figures (never part of the tests)")
    bsub = p.add_subparsers(dest="bench_cmd", required=True)
    if not full:
        return
    from scabbard.experiments import ingest
    from scabbard.experiments.benches import BENCHES

    dp = _bench(
        bsub, "datagen", "dataset generation rate and replay-read rate per workload",
        "Generate each workload's dataset with --rows rows (into a scratch folder) and print "
        "the generation rate (tuples/s, MB/s of rows), then the read rate of the replay format "
        "from the page cache.", runs.run_datagen)
    dp.add_argument("--workloads", nargs="+", default=None, help="subset (default: all six)")
    _own(dp, "rows", type=int, default=16_000_000, help="rows per workload (default 16M)")
    dp.add_argument("--scratch", default=str(paths.data_root() / "bench"),
                    help="scratch folder (default: data/bench in the project folder)")
    dp.add_argument("--keep", action="store_true", help="keep the generated datasets")
    shared_flag(dp, "--master")
    for b in BENCHES:
        bp = _bench(bsub, b.name, b.summary.replace("%", "%%"), b.description,
                    functools.partial(runs.run_bench, b), epilog=b.epilog)
        _options(bp, b.settings_class(), *b.options, out=b.out, helps=b.helps, **b.defaults)
        if b.name == "ingest":  # the synchronous log's ingest: no experiment's, after it
            _synclog(bsub, ingest.Settings)


def _synclog(bsub, settings) -> None:
    sp = _bench(
        bsub, "synclog",
        "the synchronous-log baseline (the paper's Kafka++): ingest and latency vs batch size",
        "Per query, its dataset serialized into rows (the paper's C layout), batched, "
        "compressed with LZ4 and appended by --producers threads to their own partition "
        "files, each batch flushed to disk (fdatasync) before it is acknowledged.  Prints "
        "tuples/s, MB/s written and append-to-acknowledgement latency; then, for "
        "--sweep-query, the same for batch sizes from 64 KiB to 16 MiB.", runs.run_synclog)
    _options(sp, settings, "queries", "scale", "seconds", seconds=3.0)
    _own(sp, "batch_kib", type=int, default=1024, help="batch size in KiB (default 1024)")
    sp.add_argument("--producers", type=int, default=2, help="producer threads (default 2)")
    sp.add_argument("--sweep-query", type=str.upper, default="CM1",
                    help="query for the batch-size sweep (default CM1; 'none' to skip)")
