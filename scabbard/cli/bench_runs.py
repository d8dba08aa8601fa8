"""The ``scabbard bench`` commands' runs: each experiment's settings from its flags, the run,
its table and figure (the flags themselves are declared in :mod:`scabbard.cli.bench`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from scabbard.cli.errors import CLIError


def _log(line: str) -> None:
    print(line, flush=True)


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
        master=args.master, log=_log,
    )
    return 0


def run_engine(args) -> int:
    from scabbard.experiments import engine_throughput as exp

    return exp.bench(settings_from(exp.Settings, args, output_dir=args.out), log=_log)


def run_ingest(args) -> int:
    from scabbard.experiments import ingest as exp

    return exp.bench(settings_from(exp.Settings, args), args.out, log=_log)


def run_checkpoints(args) -> int:
    from scabbard.experiments import checkpointing as exp

    return exp.bench(settings_from(exp.Settings, args), args.out, log=_log)


def run_incremental(args) -> int:
    from scabbard.experiments import incremental as exp

    return exp.bench(settings_from(exp.Settings, args), args.out, log=_log)


def run_codecs(args) -> int:
    from scabbard.experiments import compression as exp

    if args.rows < 1 or args.repeat < 1:
        raise CLIError("--rows and --repeat must be >= 1")
    return exp.bench(settings_from(exp.Settings, args), args.out, log=_log)


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
    from scabbard.experiments import comparison

    return comparison.bench_peers(settings_from(comparison.Settings, args), args.out, log=_log)


def run_aligned(args) -> int:
    from scabbard.experiments import aligned as exp

    if any(k < 1 for k in args.batch_kib) or not args.seconds > 0:
        raise CLIError("--batch-kb must be >= 1 and --duration positive")
    return exp.bench(settings_from(exp.Settings, args), args.out, log=_log)


def run_partitioned(args) -> int:
    from scabbard.experiments import partitioned as exp

    return _tabled(args, exp, exp.comparison, "partitioned.png")


def _tabled(args, exp, table, figure: str, results: str = "results.csv", more=()) -> int:
    """A bench of one experiment module: its settings from the flags, its runs (a line each
    as they come), ``table`` of them printed (then each of ``more``: (title, table)), its
    figure, and where both went."""
    runs = exp.run(settings_from(exp.Settings, args, output_dir=args.out),
                   log=_log)
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
    return exp.bench_restarts(settings_from(exp.Settings, args), args.rounds, args.out, log=_log)


def run_adaptive(args) -> int:
    from scabbard.experiments import grizzly as exp

    settings = settings_from(exp.Settings, args, output_dir=args.out)
    runs = exp.run(settings, log=_log)
    print("\n" + exp.summary(runs).round(2).to_string(index=False))
    exp.plot(runs, args.out)
    samples, events, info = exp.timeline(settings, log=_log)
    exp.plot_timeline(samples, events, info, args.out)
    rec = exp.recovery(settings, log=_log)
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
                        log=_log)
    print("\n" + exp.recovery_summary(runs).round(digits).to_string(index=False))
    exp.plot_recovery(runs, args.out)
    print(f"\nresults: {Path(args.out) / results}, figure: {Path(args.out) / figure}")
    return 0


def run_cluster(args) -> int:
    from scabbard.experiments import scaleout as exp

    table = exp.run(settings_from(exp.Settings, args), log=_log)
    print("\n" + exp.summary(table))
    print("\n" + exp.note(table))
    return 0


def run_kills(args) -> int:
    from scabbard.experiments import kills as exp

    return exp.bench(settings_from(exp.Settings, args), args.out, log=_log)
