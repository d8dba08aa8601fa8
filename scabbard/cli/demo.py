"""``scabbard demo``: the workbench in a few minutes - what ``make demo`` runs."""

from __future__ import annotations

import time
from pathlib import Path

from scabbard.cli.common import add_data_root, data_root, shared_flag
from scabbard.cli.errors import EXIT_FAILURE


def add(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="the workbench in a few minutes: a kill recovered exactly once, push-up, 16 cores "
             "simulated - all in a report",
        description=(
            "Generate the datasets it needs (small scale, with Spark; kept for next time), then "
            "run the demo notebook into a report: a query run fault-tolerantly as its own "
            "process, killed with SIGKILL half-way and recovered, its output compared with a "
            "failure-free run (exactly once) and the recovery's phases; persistence push-up "
            "explained, with the bytes persisted per tuple before and after; push-up and "
            "compression measured; the paper's 16-core machine simulated.  Prints the "
            "report's path and the figures in it."),
        epilog="About 3 minutes here after `make setup` (2 cores); the first run also "
               "generates the datasets and compiles the kernels.",
    )
    shared_flag(p, "--scale", choices=("tiny", "small"), help="dataset preset and run lengths "
        "(default: small; tiny: the tests')")
    add_data_root(p)
    shared_flag(p, "--output", metavar="DIR", help="where the report folder goes (default: "
        "experiments/runs in the project folder)")
    p.set_defaults(func=_run_demo)


def _run_demo(args) -> int:
    from scabbard.experiments import demo, report
    from scabbard.experiments.progress import clock
    from scabbard.experiments.reproduce import load_experiments, reproduce

    t0 = time.perf_counter()
    root = data_root(args)
    params = load_experiments()["demo"].parameters(args.scale)
    s = demo.Settings(scale=params.get("scale", args.scale), data_dir=str(root))
    print(f"[demo] datasets ({', '.join(demo.workloads_needed(s))}, scale {s.scale}) under "
          f"{root}", flush=True)
    print(demo.datasets(s).to_string(index=False), flush=True)
    _stop_spark()  # its JVM is not needed while the notebook measures
    print(f"[demo] datasets ready in {clock(time.perf_counter() - t0)}; now the demo notebook",
          flush=True)
    result = reproduce(only=["demo"], scale=args.scale,
                       runs_dir=Path(args.output) if args.output else None, data_dir=root,
                       log=lambda line: print(line, flush=True))
    (r,) = result.results
    print(f"\n[demo] {'done' if r.ok else 'FAILED: ' + r.error} in "
          f"{clock(time.perf_counter() - t0)}")
    print(f"report:   {result.run_dir / 'index.html'}")
    print(f"notebook: {r.output.with_suffix('.html')}")
    figures = report.figures(r.output.parent)
    charts = sorted(p for p in r.output.parent.rglob("*.html") if p.suffix == ".html"
                    and p != r.output.with_suffix(".html"))
    print("figures:  " + ", ".join(str(f.relative_to(r.output.parent)) for f in figures))
    print("interactive: " + ", ".join(str(c.relative_to(r.output.parent)) for c in charts))
    return 0 if r.ok else EXIT_FAILURE


def _stop_spark() -> None:
    import sys

    if "pyspark" in sys.modules:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is not None:
            spark.stop()
