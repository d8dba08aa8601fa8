"""The ``scabbard bench`` commands' runs: each experiment's settings from its flags, the run,
its table and figure (the flags themselves are declared in :mod:`scabbard.cli.bench`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from scabbard.cli.errors import CLIError


def settings_from(settings, args, **extra):
    """The experiment's ``settings`` from the flags :func:`_options` declared (and ``extra``);
    a value the settings refuse is a one-line error."""
    names = {f.name for f in dataclasses.fields(settings)}
    given = {k: (tuple(v) if isinstance(v, list) else v) for k, v in vars(args).items()
             if k in names}
    try:
        return settings(**{**given, **extra})
    except ValueError as e:
        raise CLIError(str(e)) from None



def run_datagen(args) -> int:
    from scabbard.bench import bench_datagen

    bench_datagen(
        names=args.workloads, rows=args.rows, scratch=Path(args.scratch), keep=args.keep,
        master=args.master, log=lambda s: print(s, flush=True),
    )
    return 0


def run_engine(args) -> int:
    from scabbard.experiments import engine_throughput as exp

    settings = settings_from(exp.Settings, args, output_dir=args.out)
    table = exp.run(settings, log=lambda s: print(s, flush=True))
    print()
    print(exp.comparison(table).to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    exp.plot(table, args.out)
    print(f"\nresults: {Path(args.out) / 'results.csv'}, figure: {Path(args.out) / 'engine_throughput.png'}")
    return 0


def run_ingest(args) -> int:
    from scabbard.experiments import ingest as exp

    settings = settings_from(exp.Settings, args)
    disk, table = exp.run(settings, log=lambda s: print(s, flush=True))
    print("\n" + exp.summary(disk, table).round(2).to_string(index=False))
    csv = exp.save(disk, table, args.out)
    exp.plot(disk, table, args.out)
    print(f"\nresults: {csv}, figure: {Path(args.out) / 'ingest.png'}")
    return 0


def run_checkpoints(args) -> int:
    from scabbard.experiments import checkpointing as exp

    settings = settings_from(exp.Settings, args)
    runs = exp.run(settings, log=lambda s: print(s, flush=True))
    table = exp.summary(runs)
    with pd_wide():
        print("\n" + table.round(3).T.to_string(header=False))
        print("\nCPU per input tuple, ns (medians):\n"
              + exp.parts(runs).round(2).to_string(index=False))
    print(exp.headline(table))
    csv = exp.save(runs, args.out)
    exp.plot(table, args.out)
    print(f"\nresults: {csv}, figure: {Path(args.out) / 'checkpointing.png'}")
    return 0


def pd_wide():
    """pandas prints a wide table whole (no wrapping, every column)."""
    import pandas as pd

    return pd.option_context("display.width", 250, "display.max_columns", None)


def run_incremental(args) -> int:
    from scabbard.experiments import incremental as exp

    settings = settings_from(exp.Settings, args)
    runs = exp.run(settings, log=lambda s: print(s, flush=True))
    table = exp.summary(runs)
    print("\n" + table.round(3).set_index("query").T.to_string())
    print(exp.headline(table, settings.speedup))
    csv = exp.save(runs, args.out)
    exp.plot(table, args.out)
    print(f"\nresults: {csv}, figure: {Path(args.out) / 'incremental_checkpoints.png'}")
    return 0


def run_codecs(args) -> int:
    from scabbard.experiments import compression as exp

    if args.rows < 1 or args.repeat < 1:
        raise CLIError("--rows and --repeat must be >= 1")
    table = exp.run(settings_from(exp.Settings, args), log=lambda s: print(s, flush=True))
    print("\n" + exp.targets(table).round(0).to_string(index=False))
    print(exp.headline(table))
    csv = exp.save(table, args.out)
    exp.plot(table, args.out)
    print(f"\nresults: {csv}, figure: {Path(args.out) / 'compression_tradeoffs.png'}")
    return 0


def run_synclog(args) -> int:
    import tempfile

    from scabbard import queries, workloads
    from scabbard.peers.synclog import ingest

    if args.batch_kib < 1 or args.producers < 1 or not args.seconds > 0:
        raise CLIError("--batch-kb and --producers must be >= 1 and --duration positive")

    def show(r) -> None:
        lat = r.latency_ms
        print(f"{r.query:5} batch {r.batch_bytes >> 10:6} KiB  {r.tuples_per_s / 1e6:7.2f} M "
              f"tuples/s  {r.tuples_per_s * r.row_bytes / 1e6:7.0f} MB/s of rows  "
              f"{r.disk_mb_s:6.0f} MB/s to disk  latency ms p50 {lat['p50']:7.2f}  "
              f"p95 {lat['p95']:7.2f}", flush=True)

    root = Path(args.data_dir)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="scabbard-synclog-", dir=root) as folder:
        for q in args.queries:
            ds = workloads.dataset(queries.workload_of(q), args.scale, root=str(root))
            show(ingest(q, ds, folder, args.seconds, args.batch_kib << 10, args.producers))
        if args.sweep_query != "NONE":
            ds = workloads.dataset(queries.workload_of(args.sweep_query), args.scale,
                                   root=str(root))
            print(f"\nbatch size sweep, {args.sweep_query}:")
            for kb in (64, 256, 1024, 4096, 16384):
                show(ingest(args.sweep_query, ds, folder, args.seconds, kb << 10,
                            args.producers))
    return 0


def run_peers(args) -> int:
    import dataclasses

    from scabbard.experiments import comparison, ingest
    from scabbard.experiments.progress import Progress, clock, guesses_from
    from scabbard.peers.flink import flink_available

    def log(line: str) -> None:
        print(line, flush=True)

    s7 = settings_from(comparison.Settings, args)
    if s7.flink and not flink_available():
        log("note: Flink-FT is skipped: not installed here (no .venv-flink; `make peers` or "
            "scripts/setup-flink.sh creates it)")
        s7 = dataclasses.replace(s7, flink=False)
    s8 = ingest.Settings(queries=s7.queries, scale=s7.scale, seconds=s7.seconds,
                         with_query=False, disk_bytes=256 << 20, workers=s7.workers)
    out = Path(args.out)
    history = out / "steps.json"  # what each step took in the last run here
    progress = Progress(guesses_from(comparison.steps(s7) + ingest.steps(s8), history), log)
    log(f"{len(progress.steps)} steps over {len(s7.queries)} queries; about "
        f"{clock(progress.left_s())} in all, as first guessed"
        + (f" from the last run's {history}" if history.exists() else "")
        + " (each step's line updates it)")
    print("== Fig. 7a: throughput with fault tolerance, the engine vs the FT peers ==", flush=True)
    runs = comparison.run(s7, log=log, progress=progress)
    fig7 = comparison.summary(runs)
    print("\n== Fig. 8: persisted ingest, the engine vs Kafka++ vs the broker ==", flush=True)
    disk, table = ingest.run(s8, log=log, progress=progress)
    fig8 = ingest.summary(disk, table)
    log(f"\nall done in {clock(progress.elapsed_s)}")
    progress.save(history)
    print("\n== Fig. 7a (M tuples/s; FT over each peer) ==")
    print(_fig7_table(fig7, runs).T.to_string())
    for row in fig7[fig7["failed"] != ""].itertuples():
        print(f"failed on {row.query}: {row.failed}")
    print(f"\n== Fig. 8 (M tuples/s of source tuples, MB/s written to disk; disk: O_DIRECT "
          f"write {disk['write_mb_s']:,.0f} MB/s, first write {disk['first_write_mb_s']:,.0f} "
          f"MB/s) ==")
    print(fig8.set_index("query").round(2).T.to_string())
    print(f"\nFig. 7a: {comparison.headline(fig7)}")
    print(f"Fig. 8: {ingest.broker_ratio(fig8)}")
    print(f"paper: {comparison.PAPER}\npaper: {ingest.PAPER_PEERS}")
    out.mkdir(parents=True, exist_ok=True)
    side = fig7.merge(fig8, on="query")
    side.to_csv(out / "side_by_side.csv", index=False)
    comparison.save(runs, out / "fig7a")
    ingest.save(disk, table, out / "fig8")
    comparison.plot(runs, out / "fig7a")
    ingest.plot(disk, table, out / "fig8")
    print(f"\nresults: {out / 'side_by_side.csv'}, figures: {out}/fig7a, {out}/fig8")
    return 0


def _fig7_table(fig7, runs):
    """Fig. 7a's figures for printing, per query: a peer that failed says ``failed`` (why is
    printed below the table)."""
    from scabbard.experiments.comparison import SYSTEMS

    shown = fig7.drop(columns="failed").set_index("query").round(2).astype(object)
    if "error" in runs:
        for r in runs.dropna(subset=["error"]).itertuples():
            shown.loc[r.query, f"{dict(SYSTEMS)[r.system]} M tuples/s"] = "failed"
    return shown


def run_aligned(args) -> int:
    from scabbard.experiments import aligned as exp

    if any(k < 1 for k in args.batch_kib) or not args.seconds > 0:
        raise CLIError("--batch-kb must be >= 1 and --duration positive")
    settings = settings_from(exp.Settings, args)
    runs = exp.run(settings, log=lambda s: print(s, flush=True))
    print("\n" + exp.summary(runs).round(2).T.to_string(header=False))
    print(f"\npaper: {exp.PAPER}")
    csv = exp.save(runs, args.out)
    exp.plot(runs, args.out)
    print(f"\nresults: {csv}, figure: {Path(args.out) / 'aligned.png'}")
    return 0


def run_partitioned(args) -> int:
    from scabbard.experiments import partitioned as exp

    return _tabled(args, exp, exp.comparison, "partitioned.png")


def _tabled(args, exp, table, figure: str, results: str = "results.csv", more=()) -> int:
    """A bench of one experiment module: its settings from the flags, its runs (a line each
    as they come), ``table`` of them printed (then each of ``more``: (title, table)), its
    figure, and where both went."""
    runs = exp.run(settings_from(exp.Settings, args, output_dir=args.out),
                   log=lambda s: print(s, flush=True))
    print("\n" + table(runs).round(2).to_string(index=False))
    for title, extra in more:
        print(f"\n{title}:\n" + extra(runs).round(2).to_string(index=False))
    exp.plot(runs, args.out)
    print(f"\nresults: {Path(args.out) / results}, figure: {Path(args.out) / figure}")
    return 0


def run_selection(args) -> int:
    from scabbard.experiments import pipefabric as exp

    return _tabled(args, exp, exp.table1, "table1.png", "table1.csv",
                   more=(("CPU per input tuple, ns (medians; the parts add up to CPU ns)",
                          exp.parts),))


def run_interquery(args) -> int:
    from scabbard.experiments import interquery as exp

    return _tabled(args, exp, exp.summary, "interquery.png", "interquery.csv")


def run_state(args) -> int:
    from scabbard.experiments import state as exp

    return _tabled(args, exp, exp.summary, "state.png")


def run_keyvalue(args) -> int:
    from scabbard.experiments import keyvalue as exp

    return _tabled(args, exp, exp.summary, "keyvalue.png", "keyvalue.csv")


def run_keyvalue_recovery(args) -> int:
    from scabbard.experiments import keyvalue as exp

    return _recovery_bench(args, exp, "keyvalue_recovery.csv", "keyvalue_recovery.png", 3)


def run_restart(args) -> int:
    from scabbard.experiments import recovery as exp

    if args.rounds < 1:
        raise CLIError("--rounds must be at least 1")
    runs = exp.restarts(settings_from(exp.Settings, args), args.rounds,
                        log=lambda s: print(s, flush=True))
    with pd_wide():
        print("\n" + exp.restart_summary(runs).round(1).to_string(index=False))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs.to_csv(out / "restarts.csv", index=False)
    print(f"\nresults: {out / 'restarts.csv'}")
    return 0 if runs["exactly_once"].all() else 1


def run_adaptive(args) -> int:
    from scabbard.experiments import grizzly as exp

    settings = settings_from(exp.Settings, args, output_dir=args.out)
    runs = exp.run(settings, log=lambda s: print(s, flush=True))
    print("\n" + exp.summary(runs).round(2).to_string(index=False))
    exp.plot(runs, args.out)
    samples, events, info = exp.timeline(settings, log=lambda s: print(s, flush=True))
    exp.plot_timeline(samples, events, info, args.out)
    rec = exp.recovery(settings, log=lambda s: print(s, flush=True))
    med = rec.groupby("variant")[list(exp.RECOVERY_PHASES)].median().round(0)
    print(f"\n{settings.recovery_query}: a kill and its recovery, medians (ms); exactly once in "
          f"{int(rec['exactly_once'].sum())} of {len(rec)} runs\n{med.to_string()}")
    print(f"\nresults: {Path(args.out) / 'results.csv'}, figures: "
          f"{Path(args.out) / 'adaptive.png'}, {Path(args.out) / 'timeline.png'}")
    return 0


def run_state_recovery(args) -> int:
    from scabbard.experiments import state as exp

    return _recovery_bench(args, exp, "recovery.csv", "state_recovery.png", 2)


def _recovery_bench(args, exp, results: str, figure: str, digits: int) -> int:
    """A Darwin Fig. 2 bench: the module's ``recovery`` runs (a line each), its summary
    printed, its figure, and where both went."""
    runs = exp.recovery(settings_from(exp.Settings, args, output_dir=args.out),
                        log=lambda s: print(s, flush=True))
    print("\n" + exp.recovery_summary(runs).round(digits).to_string(index=False))
    exp.plot_recovery(runs, args.out)
    print(f"\nresults: {Path(args.out) / results}, figure: {Path(args.out) / figure}")
    return 0


def run_cluster(args) -> int:
    from scabbard.experiments import scaleout as exp

    table = exp.run(settings_from(exp.Settings, args), log=lambda s: print(s, flush=True))
    print("\n" + exp.summary(table))
    print("\n" + exp.note(table))
    return 0


def run_kills(args) -> int:
    from scabbard.experiments import kills as exp
    from scabbard.experiments import save_tables

    settings = settings_from(exp.Settings, args)
    configs = exp.plan(settings)
    print(f"{len(configs)} configurations x {settings.kills} kills", flush=True)
    runs = exp.run(settings, log=lambda s: print(s, flush=True))
    print(exp.headline(runs))
    print(f"results: {save_tables(args.out, runs=runs)}")
    return 0 if runs["ok"].all() else 1
