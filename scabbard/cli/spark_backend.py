"""``scabbard run --backend spark``: a query on Spark Structured Streaming, local or on a cluster.

With a cluster master (``spark://``, ``yarn``, ``k8s://``) every location is a URI the
executors reach: ``--data`` (a dataset folder or URI), ``--workdir`` (checkpoints, the
branches' windows, the results) and ``--output``.  The executors read and write them; the
driver collects nothing.  A run on the work folder of one that stopped resumes it.  Here:
the flags, checked; the run is :func:`scabbard.peers.spark_backend.run_backend`.
"""

from __future__ import annotations

from scabbard.cli.errors import CLIError

SPARK_FLAGS = ("workdir", "conf", "spark_ui")


def parse_conf(items: list[str] | None) -> tuple[tuple[str, str], ...]:
    """``--conf key=value`` items as pairs; a malformed one is a one-line error."""
    out = []
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise CLIError(f"--conf {item!r}: expected KEY=VALUE, e.g. "
                           "--conf spark.executor.memory=2g")
        out.append((key.strip(), value.strip()))
    return tuple(out)


def reject_spark_flags(args) -> None:
    """The engine has no use for the spark backend's flags: say so rather than ignore them."""
    given = [f"--{f.replace('_', '-')}" for f in SPARK_FLAGS if getattr(args, f, None)]
    if given:
        raise CLIError(f"{', '.join(given)} apply to --backend spark")


def run_spark_backend(args, query) -> int:
    from scabbard.cli.common import query_dataset
    from scabbard.peers.spark_backend import run_backend
    from scabbard.sparksession import SparkSettings

    if args.persist_input or args.checkpoint_interval is not None or args.recover:
        raise CLIError("--persist-input, --checkpoint-interval and --recover apply to the "
                       "scabbard backend")
    for flag in ("rate", "duration", "max_tuples", "batch", "workers", "metrics_log"):
        if getattr(args, flag) is not None:
            raise CLIError(f"--{flag.replace('_', '-')} applies to the scabbard backend; the spark "
                           "backend reads the dataset once")
    if args.output and not args.output.endswith(".parquet"):
        raise CLIError("--output: the spark backend writes .parquet")
    try:
        settings = SparkSettings(master=args.master, app_name=f"scabbard-{query.name}",
                                 extra=parse_conf(args.conf), ui=args.spark_ui)
    except ValueError as e:
        raise CLIError(str(e)) from None
    if not settings.is_local and not args.workdir:
        raise CLIError(f"--master {args.master} runs on a cluster: give --workdir URI, a folder "
                       "every executor and the driver reach (a shared folder, hdfs://..., "
                       "s3a://...)")
    print(run_backend(query, settings, args.data, lambda: query_dataset(args), args.workdir,
                      args.output))
    return 0
