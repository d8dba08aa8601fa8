"""``scabbard bench ...``: the benchmarks, each printing its figures side by side.  What each
is, its flags and its run come from :mod:`scabbard.experiments.benches`; declared here are the
flags' shape and the two commands that are no experiment's (datagen, synclog)."""

from __future__ import annotations

import functools

from scabbard import paths
from scabbard.cli import bench_runs as runs
from scabbard.cli.common import shared_flag
from scabbard.cli.settings import own_flag, settings_flags


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
    own_flag(dp, "rows", type=int, default=16_000_000, help="rows per workload (default 16M)")
    dp.add_argument("--scratch", default=str(paths.data_root() / "bench"),
                    help="scratch folder (default: data/bench in the project folder)")
    dp.add_argument("--keep", action="store_true", help="keep the generated datasets")
    shared_flag(dp, "--master")
    for b in BENCHES:
        bp = _bench(bsub, b.name, b.summary.replace("%", "%%"), b.description,
                    functools.partial(runs.run_bench, b), epilog=b.epilog)
        settings_flags(bp, b.settings_class(), *b.options, out=b.out, helps=b.helps, **b.defaults)
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
    settings_flags(sp, settings, "queries", "scale", "seconds", seconds=3.0)
    own_flag(sp, "batch_kib", type=int, default=1024, help="batch size in KiB (default 1024)")
    sp.add_argument("--producers", type=int, default=2, help="producer threads (default 2)")
    sp.add_argument("--sweep-query", type=str.upper, default="CM1",
                    help="query for the batch-size sweep (default CM1; 'none' to skip)")
