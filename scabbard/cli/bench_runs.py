"""The ``scabbard bench`` commands' runs: each experiment's settings from its flags, then the
run its entry in :mod:`scabbard.experiments.benches` names (the flags are declared in
:mod:`scabbard.cli.bench`)."""

from __future__ import annotations

from pathlib import Path

from scabbard.cli.errors import CLIError
from scabbard.cli.settings import settings_from
from scabbard.progress import say


def run_datagen(args) -> int:
    from scabbard.bench import bench_datagen

    bench_datagen(
        names=args.workloads, rows=args.rows, scratch=Path(args.scratch), keep=args.keep,
        master=args.master, log=say,
    )
    return 0


def run_bench(bench, args) -> int:
    """``scabbard bench <name>``: its experiment's settings from its flags, then its run
    (:class:`scabbard.experiments.benches.Bench`)."""
    extra = {"output_dir": args.out} if bench.output_dir else {}
    settings = settings_from(bench.settings_class(), args, **extra)
    return bench(settings, getattr(args, "out", None), say)


def run_synclog(args) -> int:
    from scabbard.experiments.ingest import synclog_bench

    if args.batch_kib < 1 or args.producers < 1 or not args.seconds > 0:
        raise CLIError("--batch-kb and --producers must be >= 1 and --duration positive")
    synclog_bench(args.queries, args.scale, Path(args.data_dir), args.seconds, args.batch_kib,
                  args.producers, args.sweep_query, log=say)
    return 0
