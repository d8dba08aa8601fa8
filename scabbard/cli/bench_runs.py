"""The ``scabbard bench`` commands' runs: each experiment's settings from its flags, then the
run its entry in :mod:`scabbard.experiments.benches` names (the flags are declared in
:mod:`scabbard.cli.bench`)."""

from __future__ import annotations

from pathlib import Path

from scabbard.cli.errors import CLIError
from scabbard.cli.settings import settings_from


def _log(line: str) -> None:
    print(line, flush=True)


def run_datagen(args) -> int:
    from scabbard.bench import bench_datagen

    bench_datagen(
        names=args.workloads, rows=args.rows, scratch=Path(args.scratch), keep=args.keep,
        master=args.master, log=_log,
    )
    return 0


def run_bench(bench, args) -> int:
    """``scabbard bench <name>``: its experiment's settings from its flags, then its run
    (:class:`scabbard.experiments.benches.Bench`)."""
    extra = {"output_dir": args.out} if bench.output_dir else {}
    settings = settings_from(bench.settings_class(), args, **extra)
    return bench(settings, getattr(args, "out", None), _log)


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
