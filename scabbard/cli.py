"""``scabbard``: the workbench's command line.

    scabbard datagen WORKLOAD|all [--scale tiny|small|full] [--duration S] [--rate R] ...
    scabbard run --query Q [--backend scabbard|spark] [--workers N] [--rate R] [--duration S] ...
    scabbard data list|check ...
    scabbard reproduce [--only NAME] [--scale small|full]
    scabbard bench datagen ...
    scabbard check crash-states --query Q [--sink clocked|transactional] [--states N]

Every subcommand has ``--help``.  Errors print one line, ``scabbard: error: ...``,
and exit non-zero (2 for bad input, 1 for failures while running).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from scabbard import __version__

EXIT_FAILURE = 1
EXIT_USAGE = 2
MAX_INTERVAL = 86_400  # a checkpoint at least once a day


class CLIError(Exception):
    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code


# -- datagen -----------------------------------------------------------------------------------
def _add_datagen(sub) -> None:
    from scabbard.workloads import NAMES

    p = sub.add_parser(
        "datagen",
        help="generate benchmark datasets with Spark",
        description=(
            "Generate a benchmark dataset with PySpark: Parquet under OUT/WORKLOAD/NAME/ plus the "
            "engine's replay format (one memory-mappable file per column) and a manifest with a "
            "checksum.  Same parameters give byte-identical data, whatever the partitioning."
        ),
        epilog=(
            "Scales (per workload, at its default rate): tiny (tests, ~30k rows), small (~1M rows, "
            "the default), full (~32M rows).  Explicit --duration/--rate override the scale.  An "
            "identical dataset already in place is kept (use --force to regenerate)."
        ),
    )
    p.add_argument("workload", help=f"one of {', '.join(NAMES)}, or 'all'")
    p.add_argument("--scale", choices=("tiny", "small", "full"), default=None,
                   help="size preset (default: small)")
    p.add_argument("--duration", type=float, metavar="SECONDS",
                   help="event-time length of the dataset in seconds")
    p.add_argument("--rate", type=float, metavar="TUPLES_PER_SECOND",
                   help="tuples per second of event time")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--partitions", type=int, help="Spark partitions (default: from size and cores)")
    p.add_argument("--out", default="data", metavar="DIR", help="output root (default: data)")
    p.add_argument("--name", help="dataset folder name (default: the scale, or a slug of the parameters)")
    p.add_argument("--master", default="local[*]",
                   help="Spark master URL (default: local[*]); with a cluster, --out must be a "
                        "folder that the driver and every executor see at the same path")
    p.add_argument("--force", action="store_true", help="regenerate even if the dataset exists")
    p.add_argument("--parquet-codec", default="snappy",
                   choices=("snappy", "zstd", "lz4", "gzip", "none"),
                   help="Parquet compression (default: snappy)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    g = p.add_argument_group("workload options")
    g.add_argument("--xways", type=int, help="lrb: expressways (default: one per 1,000 reports/s)")
    g.add_argument("--plugs", type=int, help="sg: smart plugs (default 2,125)")
    g.add_argument("--houses", type=int, help="sg: houses (default 40)")
    g.add_argument("--machines", type=int, help="cm: machines (default 12,500)")
    g.add_argument("--campaigns", type=int, help="ysb: campaigns of 10 ads (default 100)")
    g.add_argument("--change-at", type=float, metavar="SECONDS",
                   help="sm: event time at which the integer readings change distribution")
    p.set_defaults(func=_run_datagen)


_OPTION_FLAGS = ("xways", "plugs", "houses", "machines", "campaigns", "change_at")


def _run_datagen(args) -> int:
    from scabbard import workloads
    from scabbard.workloads.generator import check_writable, generate, make_params

    names = workloads.NAMES if args.workload == "all" else (args.workload,)
    given = {k: getattr(args, k) for k in _OPTION_FLAGS if getattr(args, k) is not None}
    plans = []
    for name in names:
        try:
            module = workloads.get(name)
        except workloads.UnknownWorkloadError as e:
            raise CLIError(str(e)) from None
        spec = module.SPEC
        opts = given
        if args.workload == "all":
            opts = {k: v for k, v in given.items() if k in {o.name for o in spec.options}}
        params = make_params(spec, scale=args.scale, duration=args.duration, rate=args.rate,
                             seed=args.seed, **opts)
        plans.append((spec, params))
    if args.workload == "all" and args.name:
        raise CLIError("--name names one dataset; it cannot be used with 'all'")
    if args.partitions is not None and args.partitions < 1:
        raise CLIError(f"--partitions must be >= 1, got {args.partitions}")
    check_writable(Path(args.out))

    spark = None
    rows = []
    for spec, params in plans:
        if spark is None:
            from scabbard.sparksession import SparkSettings, get_spark

            spark = get_spark(SparkSettings(master=args.master, app_name="scabbard-datagen"))
        ds = generate(
            spec, params, out=args.out, name=args.name, partitions=args.partitions,
            master=args.master, force=args.force, progress=not args.no_progress,
            parquet_codec=args.parquet_codec, spark=spark, log=lambda s: print(s, flush=True),
        )
        run = ds.manifest.get("run", {})
        rows.append((spec.name, ds.rows, ds.stream.nbytes / 1e6, run.get("seconds_total"), ds.path))
    print()
    print(f"{'workload':<9} {'rows':>12} {'MB (rows)':>10} {'seconds':>8} {'M tuples/s':>10}  path")
    for name, n, mb, secs, path in rows:
        rate = f"{n / secs / 1e6:10.2f}" if secs else f"{'-':>10}"
        print(f"{name:<9} {n:>12,} {mb:>10.1f} {secs or 0:>8.1f} {rate}  {path}")
    return 0


# -- run ---------------------------------------------------------------------------------------
def _add_run(sub) -> None:
    from scabbard.queries import NAMES

    p = sub.add_parser(
        "run",
        help="run one of the paper's queries on a dataset",
        description=(
            "Run a query of the paper's Table 3 on a generated dataset with the engine (or with "
            "Spark Structured Streaming), printing live throughput and latency and a final "
            "summary.  Results (one row per window and group: window_start, window_end, keys, "
            "aggregates) go to --out."
        ),
        epilog=(
            "Without --duration or --max-tuples the dataset is read once (fault-tolerant runs "
            "too); with either, it is replayed with shifted timestamps (as the paper's "
            "benchmarks do) until the limit.  The default dataset is data/<workload>/small, "
            "generated on first use; its manifest is checked on every run (sizes, schema), its "
            "checksums with --verify.  A fault-tolerant run records its dataset's identity and "
            "its settings in <storage>/run.json; --recover refuses other data or settings."
        ),
    )
    p.add_argument("--query", required=True, type=str.upper, choices=NAMES, metavar="QUERY",
                   help=f"one of {', '.join(NAMES)}")
    p.add_argument("--backend", choices=("scabbard", "spark"), default="scabbard")
    p.add_argument("--data", metavar="DIR", help="dataset folder (default: data/<workload>/small)")
    p.add_argument("--verify", action="store_true",
                   help="recompute the dataset's checksums before running (reads every byte)")
    p.add_argument("--out", metavar="PATH", help="write the results to a .parquet or .csv file")
    p.add_argument("--workers", type=int, help="worker threads (default: one per core)")
    p.add_argument("--rate", type=float, help="input rate limit, tuples per second")
    p.add_argument("--duration", type=float, metavar="SECONDS",
                   help="replay the dataset endlessly for this long (wall time)")
    p.add_argument("--max-tuples", type=int, help="stop after this many input tuples")
    p.add_argument("--batch", type=int, metavar="ROWS", help="tuples per task (default: per query)")
    p.add_argument("--metrics-log", metavar="PATH", help="JSON-lines metrics log (live samples)")
    p.add_argument("--metrics-interval", type=float, default=0.5, metavar="SECONDS",
                   help="seconds between metrics samples (default 0.5)")
    p.add_argument("--master", default="local[*]", help="Spark master for --backend spark")
    p.add_argument("--persist-input", action="store_true",
                   help="persist the ingress p-stream while the query runs (stored before "
                        "processed; released input is garbage-collected)")
    p.add_argument("--storage", metavar="DIR",
                   help="storage folder for --persist-input / checkpoints (default: "
                        "storage/<QUERY>-<time>)")
    p.add_argument("--checkpoint-interval", type=float, metavar="SECONDS",
                   help="fault tolerance: persist the input, checkpoint the operator every "
                        "SECONDS, write exactly-once output to --output (implies --persist-input)")
    p.add_argument("--durability", choices=("process", "machine"),
                   help="with --checkpoint-interval: machine (the default) flushes everything a "
                        "checkpoint record or an acknowledgement depends on to the device first "
                        "(fdatasync after the O_DIRECT writes, directories fsynced): the run "
                        "survives power loss; process only survives the engine being killed")
    p.add_argument("--output", metavar="DIR",
                   help="exactly-once output folder (with --checkpoint-interval or --recover)")
    p.add_argument("--exactly-once", choices=("clocked", "transactional"), default="clocked",
                   help="clocked: results stored at once with their vector clock, duplicates "
                        "dropped on replay; transactional: two-phase commit with each checkpoint")
    p.add_argument("--checkpoint-only", action="store_true",
                   help="with --checkpoint-interval: checkpoint the operator state but do not "
                        "persist the input; recovery requests the input again from the source "
                        "(the paper's Scabbard-Chk)")
    p.add_argument("--recover", action="store_true",
                   help="continue the killed run in --storage (same query, data and --output)")
    p.add_argument("--standby", action="store_true",
                   help="with --recover: a warm standby - load the code, print 'standby: ready', "
                        "wait for a line on stdin, then recover (exit quietly if stdin closes)")
    p.add_argument("--push-up", action="store_true",
                   help="persistence push-up (paper §3.4): selections and projections run "
                        "before the ingress p-stream, which then stores only the tuples and "
                        "attributes the query needs (see 'scabbard explain')")
    p.add_argument("--compression", choices=("none", "default", "adaptive"),
                   help="compress the persisted p-stream per column (§5): default = the "
                        "paper's starting scheme (delta-of-delta timestamps, Simple-8b ints, "
                        "XOR floats); adaptive = profile and switch codecs while running "
                        "(default none; a recovery takes the run's own)")
    p.add_argument("--compression-interval", type=float, default=4.0, metavar="SECONDS",
                   help="with --compression adaptive: seconds between re-selections (default 4, "
                        "the paper's)")
    p.add_argument("--lossy-decimals", type=int, metavar="N",
                   help="with --compression: store float columns with N decimals (error "
                        "<= 0.5e-N), as integers; batches that cannot be (NaN, inf) fall back "
                        "to lossless XOR")
    p.add_argument("--quiet", action="store_true", help="no live progress lines")
    p.set_defaults(func=_run_query)


def _storage_dir(args, query: str) -> Path:
    if args.storage:
        return Path(args.storage)
    return Path("storage") / f"{query}-{time.strftime('%Y%m%d-%H%M%S')}"


def _add_ingest(sub) -> None:
    from scabbard.queries import NAMES

    p = sub.add_parser(
        "ingest",
        help="measure pure ingest with persistence (no query processing)",
        description=(
            "Replay the query's dataset endlessly into its ingress p-stream in the query's batch "
            "size; every p-unit is persisted (O_DIRECT, bulk writes) before it is readable, and "
            "released right after it is read, so the file pool is reused.  Prints tuples/s and "
            "MB/s written to disk."
        ),
    )
    p.add_argument("--query", required=True, type=str.upper, choices=NAMES, metavar="QUERY",
                   help=f"one of {', '.join(NAMES)}")
    p.add_argument("--data", metavar="DIR", help="dataset folder (default: data/<workload>/small)")
    p.add_argument("--storage", metavar="DIR", help="storage folder (default: storage/<QUERY>-<time>)")
    p.add_argument("--duration", type=float, default=5.0, metavar="SECONDS",
                   help="how long to ingest (default 5)")
    p.add_argument("--batch", type=int, metavar="ROWS", help="tuples per p-unit (default: per query)")
    p.set_defaults(func=_run_ingest)


def _add_explain(sub) -> None:
    from scabbard.queries import NAMES

    p = sub.add_parser(
        "explain",
        help="show a query's plan before and after persistence push-up, and bytes persisted",
        description=(
            "Print the query's logical plan with the ingress p-stream where it persists: before "
            "persistence push-up (right after the source: every attribute of every tuple) and "
            "after it (paper §3.4: selections, projections and compression moved below the "
            "p-stream; stateful operators never move).  Then the bytes persisted per input "
            "tuple for each, measured on the first --sample tuples of the dataset: the "
            "selectivity of the moved selections, and the paper's default compression scheme "
            "(lossless, and with --lossy-decimals for float columns)."
        ),
    )
    p.add_argument("--query", required=True, type=str.upper, choices=NAMES, metavar="QUERY",
                   help=f"one of {', '.join(NAMES)}")
    p.add_argument("--data", metavar="DIR",
                   help="dataset to measure on (default: data/<workload>/small if generated)")
    p.add_argument("--sample", type=int, default=1 << 20, metavar="TUPLES",
                   help="tuples to measure on (default 1,048,576)")
    p.add_argument("--lossy-decimals", type=int, default=2, metavar="N",
                   help="also show floats stored with N decimals (default 2; -1: do not)")
    p.set_defaults(func=_run_explain)


def _run_explain(args) -> int:
    from scabbard import queries, workloads
    from scabbard.data import dataset_path, open_dataset
    from scabbard.engine.pushup import explain, footprint

    if args.sample < 1:
        raise CLIError(f"--sample must be >= 1, got {args.sample}")
    query = queries.get(args.query)
    workload = queries.workload_of(args.query)
    path = args.data or dataset_path("data", workload, "small")
    ds = None
    if args.data or (Path(path) / "manifest.json").is_file():
        ds = open_dataset(path, schema=workloads.get(workload).SCHEMA)
    decimals = None if args.lossy_decimals < 0 else args.lossy_decimals
    print(explain(query, footprint(query, ds, rows=args.sample, lossy_decimals=decimals)))
    if ds is None:
        print(f"(no dataset at {path}: generate one with 'scabbard datagen {workload}' or pass "
              f"--data to measure selectivity and compression)")
    return 0


def _run_ingest(args) -> int:
    from scabbard.experiments.ingest import ingest

    if not args.duration > 0:
        raise CLIError(f"--duration must be positive, got {args.duration}")
    ds = _query_dataset(args)
    store = _storage_dir(args, args.query)
    print(f"ingest of {ds.path} for {args.query} into {store} for {args.duration:g} s", flush=True)
    r = ingest(args.query, ds, store, args.duration, batch_rows=args.batch,
               progress=lambda n, t: print(f"  {t:6.1f} s  {n / t / 1e6:8.2f} M tuples/s",
                                           flush=True))
    print(f"\n{args.query} ingest: {r.tuples:,} tuples in {r.seconds:.2f} s = "
          f"{r.tuples_per_s / 1e6:.2f} M tuples/s, {r.disk_mb_s:,.0f} MB/s to disk "
          f"({r.row_mb_s:,.0f} MB/s of {r.row_bytes}-byte rows), {r.io_mode}; "
          f"pool {r.pool_bytes / 1e6:.0f} MB in {store}")
    return 0


def _run_query(args) -> int:
    from scabbard import queries

    query = queries.get(args.query)
    for flag in ("workers", "batch", "max_tuples"):
        v = getattr(args, flag)
        if v is not None and v < 1:
            raise CLIError(f"--{flag.replace('_', '-')} must be >= 1, got {v}")
    for flag in ("rate", "duration"):
        v = getattr(args, flag)
        if v is not None and not v > 0:
            raise CLIError(f"--{flag} must be positive, got {v}")
    if not args.metrics_interval > 0:
        raise CLIError(f"--metrics-interval must be positive, got {args.metrics_interval}")
    if args.out and not args.out.endswith((".parquet", ".csv")):
        raise CLIError(f"--out {args.out}: use a .parquet or .csv file name")
    ft = args.checkpoint_interval is not None or args.recover
    if args.durability and not ft:
        raise CLIError("--durability goes with --checkpoint-interval (or --recover)")
    if args.storage and not (args.persist_input or ft):
        raise CLIError("--storage is the folder for --persist-input; add --persist-input")
    if ft and not args.output:
        raise CLIError("fault tolerance needs an --output folder for exactly-once results")
    if ft and not args.storage:
        raise CLIError("fault tolerance needs a --storage folder (to recover from it later)")
    if args.output and not ft:
        raise CLIError("--output is the exactly-once folder; add --checkpoint-interval")
    if args.standby and not args.recover:
        raise CLIError("--standby goes with --recover")
    if args.checkpoint_only and not ft:
        raise CLIError("--checkpoint-only goes with --checkpoint-interval")
    if args.checkpoint_only and args.persist_input:
        raise CLIError("--checkpoint-only and --persist-input contradict each other")
    reduces = args.push_up or args.compression not in (None, "none")
    if reduces and not (args.persist_input or ft):
        raise CLIError("--push-up and --compression reduce the persisted input: add "
                       "--persist-input or --checkpoint-interval")
    if reduces and args.checkpoint_only:
        raise CLIError("--checkpoint-only persists no input: --push-up and --compression "
                       "have nothing to reduce")
    if not args.compression_interval > 0:
        raise CLIError(f"--compression-interval must be positive, got {args.compression_interval}")
    if args.lossy_decimals is not None and args.compression in (None, "none"):
        raise CLIError("--lossy-decimals goes with --compression default or adaptive")
    if args.lossy_decimals is not None and not 0 <= args.lossy_decimals <= 9:
        raise CLIError(f"--lossy-decimals must be 0..9, got {args.lossy_decimals}")
    if args.checkpoint_interval is not None and not 0 < args.checkpoint_interval <= MAX_INTERVAL:
        raise CLIError(f"--checkpoint-interval must be in (0, {MAX_INTERVAL:,}] seconds, got "
                       f"{args.checkpoint_interval}")
    ds = _query_dataset(args)
    print(f"{query.name} on {ds.path} ({ds.rows:,} tuples, {ds.schema.row_bytes} B each), "
          f"backend {args.backend}", flush=True)
    if args.backend == "spark":
        return _run_spark(args, query, ds)
    return _run_engine(args, query, ds)


def _query_dataset(args):
    """The dataset ``--data`` names, or the query's small default (generated on first use)."""
    from scabbard import queries, workloads
    from scabbard.data import dataset_path, open_dataset

    workload = queries.workload_of(args.query)
    schema = workloads.get(workload).SCHEMA
    verify = getattr(args, "verify", False)
    if args.data:
        ds = open_dataset(args.data, schema=schema, verify=verify)
    else:
        path = dataset_path("data", workload, "small")
        if not (path / "manifest.json").is_file():
            print(f"{path} not found: generating it (scabbard datagen {workload} --scale small)",
                  flush=True)
            spec = workloads.get(workload).SPEC
            spec.generate(scale="small", out="data", log=lambda s: print(s, flush=True))
        ds = open_dataset(path, schema=schema, verify=verify)
    return ds


def _run_engine(args, query, ds) -> int:
    import os

    from scabbard.engine import EngineConfig, sink_for
    from scabbard.ft.ingress import run_persisted

    config = EngineConfig(workers=args.workers or os.cpu_count() or 1, batch_rows=args.batch,
                          metrics_interval=args.metrics_interval)

    def progress(s: dict) -> None:
        if not args.quiet:
            lat = s["latency_ms"]["p50"]
            print(f"  {s['t']:7.1f} s  {s['tuples_per_s'] / 1e6:8.2f} M tuples/s  "
                  f"{s['mb_per_s']:8.1f} MB/s  p50 {lat:7.1f} ms  results {s['result_rows']:,}",
                  flush=True)

    if args.checkpoint_interval is not None or args.recover:
        return _run_fault_tolerant(args, query, ds, config, progress)
    store = _storage_dir(args, query.name) if args.persist_input else None
    if store is not None:
        print(f"persisting the input to {store}", flush=True)
    report = run_persisted(query, ds, store, sink=sink_for(args.out), config=config,
                           rate=args.rate, duration=args.duration, max_tuples=args.max_tuples,
                           metrics_log=args.metrics_log, on_sample=progress,
                           push_up=args.push_up, compression=args.compression or "none",
                           lossy_decimals=args.lossy_decimals,
                           compression_interval=args.compression_interval)
    s = report.summary
    lat = s.latency_ms
    print(f"\n{query.name}: {s.tuples:,} tuples in {s.seconds:.2f} s = "
          f"{s.tuples_per_s / 1e6:.2f} M tuples/s ({s.mb_per_s:.1f} MB/s), "
          f"{config.workers} workers, {report.batch_rows:,} tuples per task")
    print(f"latency ms: p5 {lat['p5']}  p25 {lat['p25']}  p50 {lat['p50']}  p75 {lat['p75']}  "
          f"p95 {lat['p95']}")
    print(f"results: {s.result_rows:,} rows" + (f" -> {args.out}" if args.out else ""))
    return 0


def _run_fault_tolerant(args, query, ds, config, progress) -> int:
    from scabbard.ft.recovery import StandbyReleased, run_fault_tolerant
    from scabbard.ft.sinks import open_output

    interval = args.checkpoint_interval or 1.0
    standby = None
    if args.standby:
        def standby() -> None:
            print("standby: ready", flush=True)
            if not sys.stdin.readline():
                raise StandbyReleased  # stdin closed: the controller has no failure for us
    what = "recovering" if args.recover else "starting"
    print(f"{what} a fault-tolerant run: storage {args.storage}, checkpoints every {interval:g} s, "
          f"{args.exactly_once} exactly-once output to {args.output}", flush=True)
    try:
        r = run_fault_tolerant(query, ds, args.storage,
                               open_output(args.output, args.exactly_once), config,
                               interval=interval, recover=args.recover, rate=args.rate,
                               duration=args.duration, max_tuples=args.max_tuples,
                               metrics_log=args.metrics_log, on_sample=progress,
                               persist_input=False if args.checkpoint_only else None,
                               standby=standby, push_up=args.push_up,
                               compression=args.compression, lossy_decimals=args.lossy_decimals,
                               compression_interval=args.compression_interval,
                               durability=args.durability)
    except StandbyReleased:
        print("standby: released without taking over", flush=True)
        return 0
    s = r.run.summary
    for what in r.damage:
        print(f"storage: {what}")
    if r.resumed_from is not None or args.recover:
        print(f"resumed from checkpoint {r.resumed_from}, replayed input from offset "
              f"{r.replayed_from:,}")
    times = [c.duration_s * 1e3 for c in r.checkpoints]
    print(f"\n{query.name}: {s.tuples:,} tuples in {s.seconds:.2f} s = "
          f"{s.tuples_per_s / 1e6:.2f} M tuples/s, {len(r.checkpoints)} checkpoints"
          + (f" (avg {sum(times) / len(times):.1f} ms, state "
             f"{r.checkpoints[-1].bytes / 1e6:.2f} MB)" if times else "")
          + (f", {len(r.damage)} damaged or torn storage items dropped on opening"
             if r.damage else ""))
    print(f"results: {s.result_rows:,} rows -> {args.output}")
    return 0


def _run_spark(args, query, ds) -> int:
    from scabbard.peers.spark import run_spark
    from scabbard.sparksession import SparkSettings, get_spark

    if args.persist_input or args.checkpoint_interval is not None or args.recover:
        raise CLIError("--persist-input, --checkpoint-interval and --recover apply to the "
                       "scabbard backend")
    for flag in ("rate", "duration", "max_tuples", "batch", "workers", "metrics_log"):
        if getattr(args, flag) is not None:
            raise CLIError(f"--{flag.replace('_', '-')} applies to the scabbard backend; the spark "
                           "backend reads the dataset once")
    spark = get_spark(SparkSettings(master=args.master, app_name=f"scabbard-{query.name}"))
    out = args.out if args.out and args.out.endswith(".parquet") else None
    if args.out and out is None:
        raise CLIError("--out: the spark backend writes .parquet")
    run = run_spark(query, ds, spark=spark, output=out)
    rows = len(run.columns["window_end"])
    print(f"\n{query.name} (Spark Structured Streaming, {spark.sparkContext.master}): "
          f"{run.tuples:,} tuples in {run.seconds:.2f} s = {run.tuples_per_s / 1e6:.3f} M tuples/s "
          f"(streaming part; {run.seconds_total:.2f} s in all)")
    print(f"results: {rows:,} rows" + (f" -> {out}" if out else ""))
    return 0


# -- data --------------------------------------------------------------------------------------
def _add_data(sub) -> None:
    p = sub.add_parser("data", help="list and check generated datasets",
                       description="List generated datasets or validate one.")
    dsub = p.add_subparsers(dest="data_cmd", required=True)
    lp = dsub.add_parser("list", help="list datasets under a root folder")
    lp.add_argument("--root", default="data", help="data root (default: data)")
    lp.set_defaults(func=_run_data_list)
    cp = dsub.add_parser("check", help="validate a dataset folder (manifest, schema, sizes)")
    cp.add_argument("path", help="dataset folder, e.g. data/lrb/small")
    cp.add_argument("--verify", action="store_true", help="also recompute every checksum")
    cp.set_defaults(func=_run_data_check)


def _run_data_list(args) -> int:
    from scabbard.data import DatasetError, open_dataset

    root = Path(args.root)
    found = sorted(p.parent for p in root.glob("*/*/manifest.json"))
    if not found:
        print(f"no datasets under {root}/ (make them with `scabbard datagen`)")
        return 0
    print(f"{'dataset':<36} {'rows':>12} {'MB':>9}  checksum")
    for path in found:
        try:
            ds = open_dataset(path)
            print(f"{str(path.relative_to(root)):<36} {ds.rows:>12,} {ds.stream.nbytes / 1e6:>9.1f}  "
                  f"{ds.checksum[:19]}")
        except DatasetError as e:
            print(f"{str(path.relative_to(root)):<36} INVALID: {e}")
    return 0


def _run_data_check(args) -> int:
    from scabbard import workloads
    from scabbard.data import open_dataset

    ds = open_dataset(args.path)
    try:
        expected = workloads.get(ds.workload).SCHEMA
    except workloads.UnknownWorkloadError:
        expected = None
    ds = open_dataset(args.path, schema=expected, verify=args.verify)
    what = "checksums verified" if args.verify else "sizes and schema valid (--verify for checksums)"
    print(f"{ds.path}: {ds.workload} {ds.rows:,} rows, {len(ds.tables)} side tables; {what}")
    return 0


# -- reproduce ---------------------------------------------------------------------------------
def _add_reproduce(sub) -> None:
    p = sub.add_parser(
        "reproduce",
        help="run the figure notebooks with papermill",
        description=(
            "Execute the notebooks listed by the parameter files in experiments/*.yaml with "
            "papermill, writing executed notebooks, results CSVs, figures and an index.html "
            "under experiments/runs/<stamp>/."
        ),
    )
    p.add_argument("--only", action="append", metavar="NAME",
                   help="run only this experiment (repeatable), e.g. 00_datasets")
    p.add_argument("--scale", default="small", choices=("tiny", "small", "full"),
                   help="parameter set of each experiment (default: small)")
    p.add_argument("--root", default=".", help="project root holding experiments/ and notebooks/")
    p.add_argument("--runs-dir", help="where to put the run folder (default: ROOT/experiments/runs)")
    p.add_argument("--data-dir", help="dataset root passed to notebooks (default: ROOT/data)")
    p.set_defaults(func=_run_reproduce)


def _run_reproduce(args) -> int:
    from scabbard.experiments.reproduce import reproduce

    report = reproduce(
        root=Path(args.root), only=args.only, scale=args.scale,
        runs_dir=Path(args.runs_dir) if args.runs_dir else None,
        data_dir=Path(args.data_dir) if args.data_dir else None,
        log=lambda s: print(s, flush=True),
    )
    failed = [r for r in report.results if not r.ok]
    print(f"\nrun folder: {report.run_dir}\nindex:      {report.run_dir / 'index.html'}")
    for r in report.results:
        print(f"  {r.name:<24} {'ok' if r.ok else 'FAILED':<7} {r.seconds:7.1f} s  {r.output}")
        if not r.ok:
            print(f"    {r.error}")
    return EXIT_FAILURE if failed else 0


# -- bench -------------------------------------------------------------------------------------
def _add_bench(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks that print figures (never part of the tests)")
    bsub = p.add_subparsers(dest="bench_cmd", required=True)
    dp = bsub.add_parser(
        "datagen",
        help="dataset generation rate and replay-read rate per workload",
        description=(
            "Generate each workload's dataset with --rows rows (into a scratch folder) and print "
            "the generation rate (tuples/s, MB/s of rows), then the read rate of the replay format "
            "from the page cache."
        ),
    )
    dp.add_argument("--workloads", nargs="+", default=None, help="subset (default: all six)")
    dp.add_argument("--rows", type=int, default=16_000_000, help="rows per workload (default 16M)")
    dp.add_argument("--scratch", default="data/bench", help="scratch folder (default: data/bench)")
    dp.add_argument("--keep", action="store_true", help="keep the generated datasets")
    dp.add_argument("--master", default="local[*]", help="Spark master URL")
    dp.set_defaults(func=_run_bench_datagen)
    ep = bsub.add_parser(
        "engine",
        help="per query: engine vs Spark throughput, 1 vs 2 workers, latency at 80%% load",
        description=(
            "For each query on its small dataset: the engine's sustainable throughput with 1 and "
            "2 workers (endless replay for --seconds), Spark Structured Streaming's throughput on "
            "the same data, and the engine's latency percentiles at 80%% of its rate.  Writes "
            "results.csv and engine_throughput.png to --out."
        ),
    )
    ep.add_argument("--queries", nargs="+", type=str.upper, default=None, help="subset")
    ep.add_argument("--seconds", type=float, default=5.0, help="seconds per engine run (default 5)")
    ep.add_argument("--no-spark", action="store_true", help="engine only")
    ep.add_argument("--scale", default="small", choices=("tiny", "small", "full"))
    ep.add_argument("--out", default="experiments/runs/bench-engine", help="output folder")
    ep.set_defaults(func=_run_bench_engine)
    ip = bsub.add_parser(
        "ingest",
        help="disk bandwidth, then per query persisted ingest and the query with persisted input",
        description=(
            "Measure this machine's O_DIRECT sequential write bandwidth, then per query: pure "
            "ingest with persistence (MB/s to disk, share of the disk bandwidth) and the query's "
            "throughput without and with --persist-input.  Writes results.csv and ingest.png."
        ),
    )
    ip.add_argument("--queries", nargs="+", type=str.upper, default=None, help="subset")
    ip.add_argument("--seconds", type=float, default=5.0, help="seconds per run (default 5)")
    ip.add_argument("--scale", default="small", choices=("tiny", "small", "full"))
    ip.add_argument("--no-query", action="store_true", help="ingest only, no query runs")
    ip.add_argument("--out", default="experiments/runs/bench-ingest", help="output folder")
    ip.set_defaults(func=_run_bench_ingest)
    cp = bsub.add_parser(
        "checkpoints",
        help="Table 4: per query throughput without FT, with checkpoints, with full FT "
             "(process and machine durability)",
        description=(
            "Per query on its dataset, back to back: the query without fault tolerance, with "
            "its state checkpointed every --interval seconds (input not persisted: the paper's "
            "Scabbard-Chk), and with checkpoints plus the persisted input - once with process "
            "durability (survives kill -9) and once with machine durability (survives power "
            "loss: fdatasync before every acknowledgement and record).  Prints throughput, "
            "overheads, what machine durability costs, state size and checkpoint time beside "
            "the paper's Table 4.  Writes results.csv, runs.csv and checkpointing.png to --out."
        ),
    )
    cp.add_argument("--queries", nargs="+", type=str.upper, default=None, help="subset")
    cp.add_argument("--seconds", type=float, default=5.0, help="seconds per run (default 5)")
    cp.add_argument("--interval", type=float, default=1.0, help="checkpoint interval (default 1)")
    cp.add_argument("--rounds", type=int, default=2,
                    help="runs per configuration, interleaved; the median is kept (default 2)")
    cp.add_argument("--scale", default="small", choices=("tiny", "small", "full"))
    cp.add_argument("--out", default="experiments/runs/bench-checkpoints", help="output folder")
    cp.set_defaults(func=_run_bench_checkpoints)
    zp = bsub.add_parser(
        "codecs",
        help="Fig. 6: compression ratio and encode/decode MB/s per codec and data type",
        description=(
            "Per data type of the paper's Fig. 6 (timestamps regular and bursty, integers "
            "random and in runs, floats lossless and with 2 decimals, repeated 16-byte "
            "strings) and per codec that applies: compression ratio and single-core encode and "
            "decode throughput, with the issue's targets (Var-Byte, NS, RLE, delta codecs >= 1 "
            "GB/s; Simple-8b, XOR >= 300 MB/s).  Writes results.csv, targets.csv and "
            "compression_tradeoffs.png to --out."
        ),
    )
    zp.add_argument("--rows", type=int, default=4_000_000, help="values per column (default 4M)")
    zp.add_argument("--repeat", type=int, default=3, help="timed runs, best kept (default 3)")
    zp.add_argument("--out", default="experiments/runs/bench-codecs", help="output folder")
    zp.set_defaults(func=_run_bench_codecs)
    sp = bsub.add_parser(
        "synclog",
        help="the synchronous-log baseline (the paper's Kafka++): ingest and latency vs batch size",
        description=(
            "Per query, its dataset serialized into rows (the paper's C layout), batched, "
            "compressed with LZ4 and appended by --producers threads to their own partition "
            "files, each batch flushed to disk (fdatasync) before it is acknowledged.  Prints "
            "tuples/s, MB/s written and append-to-acknowledgement latency; then, for "
            "--sweep-query, the same for batch sizes from 64 KiB to 16 MiB."
        ),
    )
    sp.add_argument("--queries", nargs="+", type=str.upper, default=None, help="subset")
    sp.add_argument("--batch-kb", type=int, default=1024, help="batch size in KiB (default 1024)")
    sp.add_argument("--producers", type=int, default=2, help="producer threads (default 2)")
    sp.add_argument("--seconds", type=float, default=3.0, help="seconds per run (default 3)")
    sp.add_argument("--sweep-query", type=str.upper, default="CM1",
                    help="query for the batch-size sweep (default CM1; 'none' to skip)")
    sp.add_argument("--scale", default="small", choices=("tiny", "small", "full"))
    sp.set_defaults(func=_run_bench_synclog)
    pp = bsub.add_parser(
        "peers",
        help="Fig. 7a and Fig. 8 side by side: the engine vs Spark-FT, Flink-FT, the broker, Kafka++",
        description=(
            "On this machine, in one run and on the same data, per query: the engine without "
            "and with fault tolerance (persisted input, 1 s checkpoints, exactly-once output), "
            "Spark Structured Streaming and Flink SQL with checkpoints (Fig. 7a; targets: FT >= "
            "50x each peer), then persisted ingest: the engine's p-stream vs the synchronous log "
            "(Kafka++) vs a real broker, RabbitMQ Streams, started on 127.0.0.1 for the run and "
            "stopped after it (Fig. 8; target: >= 100x the broker).  Writes fig7a.csv, fig8.csv "
            "and their figures to --out."
        ),
    )
    pp.add_argument("--queries", nargs="+", type=str.upper, default=None, help="subset")
    pp.add_argument("--seconds", type=float, default=5.0, help="seconds per run (default 5)")
    pp.add_argument("--scale", default="small", choices=("tiny", "small", "full"))
    pp.add_argument("--no-spark", action="store_true", help="without Spark-FT")
    pp.add_argument("--no-flink", action="store_true", help="without Flink-FT")
    pp.add_argument("--out", default="experiments/runs/bench-peers", help="output folder")
    pp.set_defaults(func=_run_bench_peers)
    ap = bsub.add_parser(
        "aligned",
        help="Fig. 9: aligned checkpoints (Flink++) vs Scabbard's, on YSB, per batch size",
        description=(
            "The engine run four ways on one query (YSB) for each batch size: Scabbard "
            "(p-streams, asynchronous checkpoints, results written at once), Scabbard-Chk "
            "(checkpoints only), Flink++ (aligned checkpoints: the pipeline drains at each "
            "marker; results held until the checkpoint commits) and Flink++ with its input "
            "persisted through the synchronous log (Kafka++).  Prints throughput, result "
            "latency, checkpoint and alignment time and disk MB/s, then the ratios the paper "
            "states.  Writes results.csv, runs.csv and aligned.png to --out."
        ),
    )
    ap.add_argument("--query", type=str.upper, default="YSB", help="query (default YSB)")
    ap.add_argument("--batch-kb", type=int, nargs="+", default=[256, 1024, 4096],
                    help="batch sizes in KiB (default 256 1024 4096)")
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds per run (default 4)")
    ap.add_argument("--interval", type=float, default=1.0, help="checkpoint interval (default 1)")
    ap.add_argument("--scale", default="small", choices=("tiny", "small", "full"))
    ap.add_argument("--out", default="experiments/runs/bench-aligned", help="output folder")
    ap.set_defaults(func=_run_bench_aligned)
    kp = bsub.add_parser(
        "kills",
        help="a long kill campaign: SIGKILL the engine at random moments, recover, verify",
        description=(
            "For every query with every exactly-once sink (push-up and a compression scheme on "
            "every --reduce-every-th configuration), run the engine as its own process with "
            "checkpoints, SIGKILL it at random moments (each incarnation lives a random time), "
            "restart it with --recover until its input is consumed, and compare the committed "
            "output with a failure-free run.  Prints per configuration kills survived, results "
            "compared, lost, duplicated, different; writes runs.csv to --out.  The defaults "
            "(11 queries x 2 sinks x 23 kills = 506) take about an hour here."
        ),
        epilog="Exit status 1 if any configuration lost, duplicated or changed a result.",
    )
    kp.add_argument("--queries", nargs="+", type=str.upper, default=None,
                    help="subset (default: all eleven)")
    kp.add_argument("--sinks", nargs="+", choices=("clocked", "transactional"),
                    default=["clocked", "transactional"])
    kp.add_argument("--kills", type=int, default=23, help="kills per configuration (default 23)")
    kp.add_argument("--reduce-every", type=int, default=3,
                    help="push-up + compression on every Nth configuration (default 3)")
    kp.add_argument("--scale", default="tiny", help="dataset preset (default: tiny)")
    kp.add_argument("--rate", type=float, default=300_000.0, help="input tuples/s (default 300k)")
    kp.add_argument("--interval", type=float, default=0.2, help="checkpoint interval, seconds")
    kp.add_argument("--min", type=float, default=1.0, help="shortest life before a kill, s")
    kp.add_argument("--max", type=float, default=3.5, help="longest life before a kill, s")
    kp.add_argument("--work", default="experiments/runs/kills", help="scratch folder")
    kp.add_argument("--out", default="experiments/runs/bench-kills", help="output folder")
    kp.add_argument("--seed", type=int, default=0)
    kp.set_defaults(func=_run_bench_kills)


def _run_bench_datagen(args) -> int:
    from scabbard.bench import bench_datagen

    bench_datagen(
        names=args.workloads, rows=args.rows, scratch=Path(args.scratch), keep=args.keep,
        master=args.master, log=lambda s: print(s, flush=True),
    )
    return 0


def _run_bench_engine(args) -> int:
    from scabbard import queries
    from scabbard.experiments import engine_throughput as exp

    settings = exp.Settings(queries=args.queries or queries.NAMES, scale=args.scale,
                            seconds=args.seconds, spark=not args.no_spark, output_dir=args.out)
    table = exp.run(settings, log=lambda s: print(s, flush=True))
    print()
    print(exp.comparison(table).to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    exp.plot(table, args.out)
    print(f"\nresults: {Path(args.out) / 'results.csv'}, figure: {Path(args.out) / 'engine_throughput.png'}")
    return 0


def _run_bench_ingest(args) -> int:
    from scabbard import queries
    from scabbard.experiments import ingest as exp

    settings = exp.Settings(queries=args.queries or queries.NAMES, scale=args.scale,
                            seconds=args.seconds, with_query=not args.no_query)
    disk, table = exp.run(settings, log=lambda s: print(s, flush=True))
    print("\n" + exp.summary(disk, table).round(2).to_string(index=False))
    csv = exp.save(disk, table, args.out)
    exp.plot(disk, table, args.out)
    print(f"\nresults: {csv}, figure: {Path(args.out) / 'ingest.png'}")
    return 0


def _run_bench_checkpoints(args) -> int:
    from scabbard import queries
    from scabbard.experiments import checkpointing as exp

    settings = exp.Settings(queries=args.queries or queries.NAMES, scale=args.scale,
                            seconds=args.seconds, interval=args.interval, rounds=args.rounds)
    runs = exp.run(settings, log=lambda s: print(s, flush=True))
    table = exp.summary(runs)
    print("\n" + table.round(3).to_string(index=False))
    print(exp.headline(table))
    csv = exp.save(runs, args.out)
    exp.plot(table, args.out)
    print(f"\nresults: {csv}, figure: {Path(args.out) / 'checkpointing.png'}")
    return 0


def _run_bench_codecs(args) -> int:
    from scabbard.experiments import compression as exp

    if args.rows < 1 or args.repeat < 1:
        raise CLIError("--rows and --repeat must be >= 1")
    table = exp.run(exp.Settings(rows=args.rows, repeat=args.repeat),
                    log=lambda s: print(s, flush=True))
    print("\n" + exp.targets(table).round(0).to_string(index=False))
    print(exp.headline(table))
    csv = exp.save(table, args.out)
    exp.plot(table, args.out)
    print(f"\nresults: {csv}, figure: {Path(args.out) / 'compression_tradeoffs.png'}")
    return 0


def _run_bench_synclog(args) -> int:
    import tempfile

    from scabbard import queries, workloads
    from scabbard.peers.synclog import ingest

    if args.batch_kb < 1 or args.producers < 1 or not args.seconds > 0:
        raise CLIError("--batch-kb and --producers must be >= 1 and --seconds positive")

    def show(r) -> None:
        lat = r.latency_ms
        print(f"{r.query:5} batch {r.batch_bytes >> 10:6} KiB  {r.tuples_per_s / 1e6:7.2f} M "
              f"tuples/s  {r.tuples_per_s * r.row_bytes / 1e6:7.0f} MB/s of rows  "
              f"{r.disk_mb_s:6.0f} MB/s to disk  latency ms p50 {lat['p50']:7.2f}  "
              f"p95 {lat['p95']:7.2f}", flush=True)

    with tempfile.TemporaryDirectory(prefix="scabbard-synclog-", dir=".") as folder:
        for q in args.queries or queries.NAMES:
            ds = workloads.dataset(queries.workload_of(q), args.scale)
            show(ingest(q, ds, folder, args.seconds, args.batch_kb << 10, args.producers))
        if args.sweep_query != "NONE":
            ds = workloads.dataset(queries.workload_of(args.sweep_query), args.scale)
            print(f"\nbatch size sweep, {args.sweep_query}:")
            for kb in (64, 256, 1024, 4096, 16384):
                show(ingest(args.sweep_query, ds, folder, args.seconds, kb << 10,
                            args.producers))
    return 0


def _run_bench_peers(args) -> int:
    from scabbard import queries
    from scabbard.experiments import comparison, ingest

    if not args.seconds > 0:
        raise CLIError("--seconds must be positive")
    names = args.queries or queries.NAMES
    out = Path(args.out)

    def log(line: str) -> None:
        print(line, flush=True)

    print("== Fig. 7a: throughput with fault tolerance, the engine vs the FT peers ==", flush=True)
    runs = comparison.run(comparison.Settings(queries=names, scale=args.scale,
                                              seconds=args.seconds, spark=not args.no_spark,
                                              flink=not args.no_flink), log=log)
    fig7 = comparison.summary(runs)
    print("\n== Fig. 8: persisted ingest, the engine vs Kafka++ vs the broker ==", flush=True)
    disk, table = ingest.run(ingest.Settings(queries=names, scale=args.scale,
                                             seconds=args.seconds, with_query=False,
                                             disk_bytes=256 << 20), log=log)
    fig8 = ingest.summary(disk, table)
    side = fig7.merge(fig8[["query", "ingest M tuples/s", "Kafka++ M tuples/s",
                            "broker M tuples/s", "ours / broker (target >= 100x)",
                            "ours p50 ms", "Kafka++ p50 ms", "broker p50 ms"]], on="query")
    print("\n" + side.round(2).T.to_string(header=False))
    print(f"\nFig. 7a: {comparison.headline(fig7)}")
    ratio = fig8["ours / broker (target >= 100x)"]
    print(f"Fig. 8: ingest / broker: min {ratio.min():.0f}x, median {ratio.median():.0f}x "
          f"({(ratio >= 100).sum()}/{len(ratio)} queries >= 100x)")
    print(f"paper: {comparison.PAPER}\npaper: {ingest.PAPER_PEERS}")
    out.mkdir(parents=True, exist_ok=True)
    side.to_csv(out / "side_by_side.csv", index=False)
    comparison.save(runs, out / "fig7a")
    ingest.save(disk, table, out / "fig8")
    comparison.plot(runs, out / "fig7a")
    ingest.plot(disk, table, out / "fig8")
    print(f"\nresults: {out / 'side_by_side.csv'}, figures: {out}/fig7a, {out}/fig8")
    return 0


def _run_bench_aligned(args) -> int:
    from scabbard.experiments import aligned as exp

    if any(k < 1 for k in args.batch_kb) or not args.seconds > 0:
        raise CLIError("--batch-kb must be >= 1 and --seconds positive")
    settings = exp.Settings(query=args.query, batch_kib=args.batch_kb, scale=args.scale,
                            seconds=args.seconds, interval=args.interval)
    runs = exp.run(settings, log=lambda s: print(s, flush=True))
    print("\n" + exp.summary(runs).round(2).T.to_string(header=False))
    print(f"\npaper: {exp.PAPER}")
    csv = exp.save(runs, args.out)
    exp.plot(runs, args.out)
    print(f"\nresults: {csv}, figure: {Path(args.out) / 'aligned.png'}")
    return 0


def _run_bench_kills(args) -> int:
    from scabbard import queries
    from scabbard.experiments import kills as exp
    from scabbard.experiments import save_tables

    try:
        settings = exp.Settings(queries=args.queries or queries.NAMES, sinks=args.sinks,
                                kills=args.kills, reduce_every=args.reduce_every,
                                scale=args.scale, rate=args.rate, interval=args.interval,
                                min_life=args.min, max_life=args.max, seed=args.seed,
                                work=args.work)
    except ValueError as e:
        raise CLIError(str(e)) from None
    configs = exp.plan(settings)
    print(f"{len(configs)} configurations x {args.kills} kills", flush=True)
    runs = exp.run(settings, log=lambda s: print(s, flush=True))
    print(exp.headline(runs))
    print(f"results: {save_tables(args.out, runs=runs)}")
    return 0 if runs["ok"].all() else 1


# -- main --------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scabbard",
        description="Scabbard workbench: fault-tolerant single-node stream processing.",
    )
    parser.add_argument("--version", action="version", version=f"scabbard {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_datagen(sub)
    _add_run(sub)
    _add_ingest(sub)
    _add_explain(sub)
    _add_data(sub)
    _add_reproduce(sub)
    _add_bench(sub)
    from scabbard.check.cli import add_parser as _add_check
    from scabbard.sim.cli import add_parser as _add_sim  # light: SimPy loads on use

    _add_sim(sub)
    _add_check(sub)
    return parser


# Errors that end a command with one line.  Named, not imported: a module that was never
# imported cannot have raised, and importing them all would load Spark and Arrow into every
# command (the engine's restart after a crash among them).
_USAGE_ERRORS = [("scabbard.workloads.generator", "DatagenError"),
                 ("scabbard.workloads", "UnknownWorkloadError"),
                 ("scabbard.schema", "SchemaError"), ("scabbard.query", "QueryError")]
_FAILURES = [("scabbard.data", "DatasetError"), ("scabbard.sparksession", "JavaNotFoundError"),
             ("scabbard.storage", "StorageError"), ("scabbard.pog", "PStreamError"),
             ("scabbard.pog.checkpoint", "CheckpointError")]


def _loaded(names: list[tuple[str, str]]) -> tuple[type, ...]:
    return tuple(getattr(sys.modules[m], c) for m, c in names if m in sys.modules)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except CLIError as e:
        print(f"scabbard: error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print("scabbard: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        for names, code in ((_USAGE_ERRORS, EXIT_USAGE), (_FAILURES, EXIT_FAILURE)):
            if isinstance(e, _loaded(names)):
                print(f"scabbard: error: {_one_line(e)}", file=sys.stderr)
                return code
        if isinstance(e, OSError):  # a full disk, a failed write, a missing folder ...
            where = f" ({e.filename})" if e.filename else ""
            print(f"scabbard: error: {e.strerror or e}{where}", file=sys.stderr)
            return EXIT_FAILURE
        raise


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


if __name__ == "__main__":
    sys.exit(main())
