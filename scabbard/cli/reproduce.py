"""``scabbard reproduce``: every notebook, executed with papermill."""

from __future__ import annotations

from pathlib import Path

from scabbard.cli.errors import EXIT_FAILURE


# -- reproduce ---------------------------------------------------------------------------------
def add(sub) -> None:
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
    p.add_argument("--jobs", type=int, default=1,
                   help="notebooks executed at once (default: 1; more share the cores that the "
                        "notebooks' throughput figures measure)")
    p.set_defaults(func=_run_reproduce)


def _run_reproduce(args) -> int:
    from scabbard.experiments.reproduce import reproduce

    report = reproduce(
        root=Path(args.root), only=args.only, scale=args.scale,
        runs_dir=Path(args.runs_dir) if args.runs_dir else None,
        data_dir=Path(args.data_dir) if args.data_dir else None,
        log=lambda s: print(s, flush=True), jobs=args.jobs,
    )
    failed = [r for r in report.results if not r.ok]
    print(f"\nrun folder: {report.run_dir}\nindex:      {report.run_dir / 'index.html'}")
    for r in report.results:
        print(f"  {r.name:<24} {'ok' if r.ok else 'FAILED':<7} {r.seconds:7.1f} s  {r.output}")
        if not r.ok:
            print(f"    {r.error}")
    return EXIT_FAILURE if failed else 0
