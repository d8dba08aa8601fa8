"""``scabbard run --backend spark``: a query on Spark Structured Streaming, local or on a cluster.

With a cluster master (``spark://``, ``yarn``, ``k8s://``) every location is a URI the
executors reach: ``--data`` (a dataset folder or URI), ``--workdir`` (checkpoints, the
branches' windows, the results) and ``--output``.  The executors read and write them; the
driver collects nothing.  A run on the work folder of one that stopped resumes it.
"""

from __future__ import annotations

import tempfile

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


def _dataset(args, spark):
    from scabbard import queries, workloads
    from scabbard.cli.common import query_dataset
    from scabbard.data.shared import open_shared_dataset
    from scabbard.hadoopfs import SharedFS, is_uri

    if args.data and is_uri(args.data):
        schema = workloads.get(queries.workload_of(args.query)).SCHEMA
        return open_shared_dataset(SharedFS(spark), args.data, schema)
    return query_dataset(args)


def run_spark_backend(args, query) -> int:
    from scabbard.hadoopfs import check_executors_can_write, join
    from scabbard.peers.spark import Results, run_spark
    from scabbard.sparksession import SparkSettings, get_spark

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
    spark = get_spark(settings)
    if args.spark_ui:
        print(f"Spark UI: {spark.sparkContext.uiWebUrl} (bound to {args.spark_ui})", flush=True)
    ds = _dataset(args, spark)
    print(f"{query.name} on {ds.path} ({ds.rows:,} tuples, {ds.schema.size_label}), "
          f"backend spark", flush=True)
    with tempfile.TemporaryDirectory(prefix="scabbard-spark-") as tmp:
        workdir = args.workdir or tmp
        if args.workdir:
            check_executors_can_write(spark, args.workdir, "--workdir")
        out = args.output or join(workdir, "result")
        run = run_spark(query, ds, spark=spark, workdir=workdir, results=Results(out, False))
    print(f"\n{query.name} (Spark Structured Streaming, {spark.sparkContext.master}): "
          f"{run.tuples:,} tuples in {run.seconds:.2f} s = {run.tuples_per_s / 1e6:.3f} M tuples/s "
          f"(streaming part; {run.seconds_total:.2f} s in all)")
    shown = run.output if args.workdir or args.output else "(not kept: give --output or --workdir)"
    print(f"results: {run.rows:,} rows, written by the executors -> {shown}")
    return 0
