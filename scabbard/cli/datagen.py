"""``scabbard datagen``: the benchmark datasets, generated with Spark."""

from __future__ import annotations

from scabbard.cli.common import SHARED, add_data_root, hidden_alias, shared_flag
from scabbard.cli.errors import CLIError
from scabbard.progress import say


# -- datagen -----------------------------------------------------------------------------------
def add(sub, full: bool = True) -> None:
    """The ``datagen`` command; with ``full``, each workload's own flags (the workloads are
    imported)."""
    from scabbard.workloads import ALL
    from scabbard.workloads.generator import USAGE

    p = USAGE.parser(sub, "datagen")
    p.add_argument("workload", help=f"one of {', '.join(ALL)}, or 'all' (the six of the "
                                    f"paper's Table 3)")
    shared_flag(p, "--scale", default=None, help="size preset (default: small)")
    shared_flag(p, "--event-seconds", dest="duration")
    hidden_alias(p, "--duration", dest="duration", type=float)
    shared_flag(p, "--rate", help="tuples per second of event time")
    shared_flag(p, "--seed")
    p.add_argument("--partitions", type=int, help="Spark partitions (default: from size and cores)")
    add_data_root(p, "where the datasets go: a folder, or a URI every executor reaches "
                  "(file:///shared/data, hdfs://nn/data, s3a://bucket/data); with a URI the "
                  "executors write every file", metavar="DIR|URI")
    hidden_alias(p, "--out", dest="data_root")
    p.add_argument("--name", help="dataset folder name (default: the scale, or a slug of the parameters)")
    shared_flag(p, "--master", help="Spark master URL (default: local[*]); with a cluster "
        "(spark://, yarn, k8s://) the executors write the dataset, so --data-root must be a URI "
        "or folder every executor reaches; the dataset is byte-identical")
    shared_flag(p, "--conf")
    p.add_argument("--force", action="store_true", help="regenerate even if the dataset exists")
    p.add_argument("--parquet-codec", default="snappy",
                   choices=("snappy", "zstd", "lz4", "gzip", "none"),
                   help="Parquet compression (default: snappy)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_run_datagen)
    if full:
        _workload_options(p.add_argument_group("workload options"))


def _workload_options(g) -> None:
    """Each workload's own parameters (its generator's options) as flags."""
    from scabbard import workloads

    for name, o in workloads.options():
        default = "" if o.default is None else f" (default {o.default:,})"
        text = f"{name}: {o.help}{default}".replace("%", "%%")
        if f"--{o.flag}" in SHARED:  # a flag other commands take too
            shared_flag(g, f"--{o.flag}", dest=o.name, help=text)
        else:
            g.add_argument(f"--{o.flag}", dest=o.name, type=o.type, help=text)


def _run_datagen(args) -> int:
    from scabbard import workloads
    from scabbard.cli.spark_backend import parse_conf
    from scabbard.workloads import generator as gen

    given = {o.name: getattr(args, o.name) for _, o in workloads.options()
             if getattr(args, o.name) is not None}
    plans = workloads.plan(args.workload, given, args.scale, args.duration, args.rate, args.seed)
    if args.workload == "all" and args.name:
        raise CLIError("--name names one dataset; it cannot be used with 'all'")
    if args.partitions is not None and args.partitions < 1:
        raise CLIError(f"--partitions must be >= 1, got {args.partitions}")
    conf = parse_conf(args.conf)
    run = gen.Datagen(out=gen.output_root(args.data_root), name=args.name,
                      partitions=args.partitions, master=args.master, force=args.force,
                      progress=not args.no_progress, parquet_codec=args.parquet_codec,
                      log=say)
    print(f"\n{gen.summary(gen.generate_all(plans, run, conf))}")
    return 0
