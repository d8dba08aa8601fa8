"""``scabbard bench ...``: the benchmarks, each printing its figures side by side."""

from __future__ import annotations

from pathlib import Path

from scabbard.cli.errors import CLIError


# -- bench -------------------------------------------------------------------------------------
def add(sub) -> None:
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
