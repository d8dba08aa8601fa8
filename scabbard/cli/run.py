"""``scabbard run``, ``ingest``, ``explain``: a query on the engine (or Spark), with or
without fault tolerance; pure persisted ingest; the plan before and after push-up."""

from __future__ import annotations

from scabbard.cli.common import add_data_root, hidden_alias, query_dataset, shared_flag, storage_dir
from scabbard.cli.errors import CLIError
from scabbard.cli.spark_backend import reject_spark_flags
from scabbard.ft.command import RUN
from scabbard.ft.config import FTConfig, PersistConfig, RunConfig
from scabbard.ft.flags import Group, add_flags
from scabbard.ft.modes import EXACTLY_ONCE_SINKS, INTERVAL
from scabbard.progress import say


# -- run ---------------------------------------------------------------------------------------
def add_run(sub) -> None:
    p = RUN.parser(sub, "run")
    inp = p.add_argument_group("input", "which query, on what data, how much of it")
    eng = p.add_argument_group("engine", "how the engine runs it")
    per = p.add_argument_group("persistence", "what is stored, where, and how small")
    ft = p.add_argument_group("fault tolerance", "checkpoints, exactly-once output, recovery, "
                              "failure injection")
    out = p.add_argument_group("output", "results, metrics, progress")
    spk = p.add_argument_group("the Spark backend (--backend spark)")
    shared_flag(inp, "--query")
    inp.add_argument("--backend", choices=("scabbard", "spark"), default="scabbard",
                     help="scabbard: this engine (default); spark: the same plan on Spark "
                          "Structured Streaming")
    shared_flag(inp, "--data")
    add_data_root(inp, "where the default dataset is looked for (and generated)")
    shared_flag(inp, "--verify", help="recompute the dataset's checksums before running, even if "
        "they were verified since its files last changed (by default they are verified once per "
        "change: the first run reads every byte)")
    inp.add_argument("--no-verify", action="store_true",
                   help="do not verify the dataset's checksums (sizes and schema are checked)")
    shared_flag(out, "--output", help="where the results go: a .parquet or .csv file; with "
        "--checkpoint-interval or --recover the exactly-once output folder")
    hidden_alias(out, "--out", dest="output")
    # every flag that sets one field of the configuration, with the field's help
    add_flags({Group.INPUT: inp, Group.ENGINE: eng, Group.PERSISTENCE: per,
               Group.FAULT_TOLERANCE: ft, Group.OUTPUT: out}, RunConfig, PersistConfig, FTConfig)
    shared_flag(spk, "--master", help="Spark master for --backend spark (default: local[*])")
    shared_flag(spk, "--workdir")
    shared_flag(spk, "--conf", help="spark backend: a Spark setting (repeatable)")
    spk.add_argument("--spark-ui", nargs="?", const="127.0.0.1", metavar="ADDRESS",
                   help="spark backend: the Spark web UI, on 127.0.0.1 (or ADDRESS)")
    shared_flag(per, "--persist-input", help="persist the ingress p-stream while the query runs "
        "(stored before processed; released input is garbage-collected)")
    ft.add_argument("--checkpoint-period", type=float, metavar="MS",
                   help="--checkpoint-mode eventual: a checkpoint record (the cut recovery "
                        "resumes from) every MS milliseconds, CEC's CP (instead of "
                        "--checkpoint-interval)")
    hidden_alias(ft, "--exactly-once", dest="sink", choices=EXACTLY_ONCE_SINKS)
    ft.add_argument("--checkpoint-only", action="store_true",
                   help="with --checkpoint-interval: checkpoint the operator state but do not "
                        "persist the input; recovery requests the input again from the source "
                        "(the paper's Scabbard-Chk)")
    shared_flag(per, "--persist-at", help="with --checkpoint-interval: where p-streams sit (paper "
        "§3.1, 'scabbard explain' lists the edges): ingress (the input), an operator id (its "
        "output: window0, join0, ...) or output (before the sink); without ingress the source "
        "replays the input (as --checkpoint-only).  Default: ingress")
    per.add_argument("--placement", choices=("auto",),
                   help="with --checkpoint-interval: choose the p-streams with the cost model "
                        "(measured on a sample of the dataset: bytes per edge, state, the CPU of "
                        "state building and emission; see 'scabbard explain'); a recovery keeps "
                        "the run's own")
    ft.add_argument("--recover", action="store_true",
                   help="continue the killed run in --storage (same query, data and --output)")
    ft.add_argument("--standby", action="store_true",
                   help="with --recover: a warm standby - load the code, print 'standby: ready', "
                        "wait for a line on stdin, then recover (exit quietly if stdin closes)")
    out.add_argument("--quiet", action="store_true", help="no live progress lines")
    p.set_defaults(func=_run_query)


def add_ingest(sub) -> None:

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
    shared_flag(p, "--query")
    shared_flag(p, "--data")
    add_data_root(p, "where the default dataset is looked for (and generated)")
    shared_flag(p, "--storage")
    shared_flag(p, "--duration", default=5.0, help="how long to ingest (default 5)")
    shared_flag(p, "--batch", help="tuples per p-unit (default: per query)")
    shared_flag(p, "--ingress-partitions", default=1, help="read the source with N threads, each "
        "appending its own batches in turn (default 1)")
    p.set_defaults(func=_run_ingest)


def add_explain(sub) -> None:

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
    shared_flag(p, "--query")
    shared_flag(p, "--data", help="dataset to measure on (default: <data root>/<workload>/small "
        "if generated)")
    add_data_root(p, "where the default dataset is looked for")
    p.add_argument("--sample", type=int, default=1 << 20, metavar="TUPLES",
                   help="tuples to measure on (default 1,048,576)")
    shared_flag(p, "--lossy-decimals", default=2, help="also show floats stored with N decimals "
        "(default 2; -1: do not)")
    shared_flag(p, "--rate", default=1000000.0, help="input tuples/s the placement is priced at "
        "(default 1,000,000)")
    shared_flag(p, "--checkpoint-interval", default=INTERVAL, help="checkpoint interval the "
        "placement is priced at (default 1)")
    p.set_defaults(func=_run_explain)


def _run_explain(args) -> int:
    from scabbard.cli.common import data_root
    from scabbard.ft.placement import explain_query

    if args.sample < 1:
        raise CLIError(f"--sample must be >= 1, got {args.sample}")
    for part in explain_query(args.query, args.data, data_root(args), args.sample,
                              args.lossy_decimals, args.rate, args.checkpoint_interval):
        print(part)
    return 0


def _run_ingest(args) -> int:
    from scabbard.experiments.ingest import ingest_for

    if not args.duration > 0:
        raise CLIError(f"--duration must be positive, got {args.duration}")
    if args.ingress_partitions < 1:
        raise CLIError(f"--ingress-partitions must be >= 1, got {args.ingress_partitions}")
    print(ingest_for(args.query, query_dataset(args), storage_dir(args, args.query),
                     args.duration, args.ingress_partitions, args.batch,
                     log=say))
    return 0


def config_from_args(args):
    """The run's :class:`~scabbard.ft.config.RunConfig` (:func:`scabbard.ft.command.from_flags`:
    each field from its flag, the rules between them)."""
    from scabbard.ft.command import from_flags

    return from_flags(args)


def _run_query(args) -> int:
    from scabbard import queries
    from scabbard.ft import command
    from scabbard.ft.run import run_and_report
    from scabbard.ft.runfile import recorded_run

    query = queries.get(args.query)
    config = config_from_args(args)  # the flags checked before anything is measured
    run = recorded_run(args.storage) if args.recover and args.storage else None
    if args.placement:
        config = command.placed(config, _auto_placement(args, config, run),
                                persist_input_given=args.persist_input)
    elif args.recover:
        config = command.as_recorded(config, run, placement_given=args.persist_at is not None)
    if args.backend == "spark":
        from scabbard.cli.spark_backend import run_spark_backend

        return run_spark_backend(args, query)
    reject_spark_flags(args)
    ds = query_dataset(args)
    print(f"{query.name} on {ds.path} ({ds.rows:,} tuples, {ds.schema.size_label}), "
          f"backend {args.backend}", flush=True)
    run_and_report(config, ds, args.output, recover=args.recover, standby=args.standby,
                   quiet=args.quiet)
    return 0


def _auto_placement(args, config, run: dict | None) -> tuple[str, ...]:
    """``--placement auto``: the edges the cost model chooses (a recovery: the run's own)."""
    from scabbard.ft import placement as pl
    from scabbard.ft.command import recorded_placement

    if args.recover:
        chosen = recorded_placement(run or {})
        print(f"placement: the run's own ({', '.join(chosen)})", flush=True)
        return chosen
    chosen, line = pl.auto(args.query, query_dataset(args), config.persist,
                           args.rate or 1e6, config.ft.interval)
    say(line)
    return chosen
