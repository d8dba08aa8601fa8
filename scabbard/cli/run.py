"""``scabbard run``, ``ingest``, ``explain``: a query on the engine (or Spark), with or
without fault tolerance; pure persisted ingest; the plan before and after push-up."""

from __future__ import annotations

import sys
from pathlib import Path

from scabbard.cli.common import (
    add_data_root,
    hidden_alias,
    query_dataset,
    shared_flag,
    storage_dir,
    verify_mode,
)
from scabbard.cli.errors import CLIError
from scabbard.cli.spark_backend import reject_spark_flags
from scabbard.ft.config import FTConfig, PersistConfig, RunConfig
from scabbard.ft.flags import Group, add_flags
from scabbard.ft.modes import EXACTLY_ONCE_SINKS, INTERVAL


# -- run ---------------------------------------------------------------------------------------
def add_run(sub) -> None:

    p = sub.add_parser(
        "run",
        help="run one of the paper's queries on a dataset",
        description=(
            "Run a query of the paper's Table 3 (or PipeFabric's Table 1, PF-TRUE, PF-MOD2, "
            "PF-MOD10, PF-FALSE: a stateless selection on SG; or LRB-ROWS, a count-based "
            "window) on a generated dataset with the engine (or with Spark Structured "
            "Streaming), printing live throughput and latency and a final summary.  Results "
            "(one row per window and group: window_start, window_end, keys, aggregates; a "
            "stateless query's: the selected tuples, in input order) go to --output: a .parquet "
            "or .csv file, or with fault tolerance an exactly-once folder "
            "(scabbard.ft.read_output reads it); uuids are canonical strings in each."
        ),
        epilog=(
            "Without --duration or --max-tuples the dataset is read once (fault-tolerant runs "
            "too); with either, it is replayed with shifted timestamps (as the paper's "
            "benchmarks do) until the limit.  The default dataset is <data root>/<workload>/small, "
            "generated on first use; its manifest is checked on every run (sizes, schema), its "
            "checksums with --verify.  A fault-tolerant run records its dataset's identity and "
            "its settings in <storage>/run.json; --recover refuses other data or settings."
        ),
    )
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
    from scabbard import queries, workloads
    from scabbard.cli.common import data_root
    from scabbard.data import dataset_path, open_dataset
    from scabbard.engine.pushup import explain, footprint

    if args.sample < 1:
        raise CLIError(f"--sample must be >= 1, got {args.sample}")
    query = queries.get(args.query)
    workload = queries.workload_of(args.query)
    path = args.data or dataset_path(data_root(args), workload, "small")
    ds = None
    if args.data or (Path(path) / "manifest.json").is_file():
        ds = open_dataset(path, schema=workloads.get(workload).SCHEMA)
    decimals = None if args.lossy_decimals < 0 else args.lossy_decimals
    print(explain(query, footprint(query, ds, rows=args.sample, lossy_decimals=decimals)))
    if ds is None:
        print(f"(no dataset at {path}: generate one with 'scabbard datagen {workload}' or pass "
              f"--data to measure selectivity and compression)")
        return 0
    print()
    print(_explain_placement(query, ds, args))
    return 0


def _explain_placement(query, ds, args) -> str:
    from scabbard.ft import placement as pl

    if not (args.rate > 0 and args.checkpoint_interval > 0):
        raise CLIError("--rate and --checkpoint-interval must be positive")
    m = pl.measure(query.name, ds, tuples=min(args.sample, 1 << 19))
    return "\n".join(pl.explain(query, m, args.rate, args.checkpoint_interval))


def _run_ingest(args) -> int:
    import dataclasses

    from scabbard.engine import Replay
    from scabbard.experiments.ingest import INGEST, ingest

    if not args.duration > 0:
        raise CLIError(f"--duration must be positive, got {args.duration}")
    if args.ingress_partitions < 1:
        raise CLIError(f"--ingress-partitions must be >= 1, got {args.ingress_partitions}")
    ds = query_dataset(args)
    store = storage_dir(args, args.query)
    print(f"ingest of {ds.path} for {args.query} into {store} for {args.duration:g} s", flush=True)
    r = ingest(args.query, ds, PersistConfig(store), Replay(duration=args.duration),
               dataclasses.replace(INGEST, ingress_partitions=args.ingress_partitions),
               batch_rows=args.batch,
               progress=lambda n, t: print(f"  {t:6.1f} s  {n / t / 1e6:8.2f} M tuples/s",
                                           flush=True))
    print(f"\n{r} in {store}")
    return 0


# the fields of the configuration that the command's own flags set (the rest carry theirs)
OWN_FLAGS = {"persist": "--storage", "output": "--output", "query": "--query", "data": "--data"}


def config_from_args(args):
    """The run's :class:`~scabbard.ft.config.RunConfig`: each field from its flag
    (:mod:`scabbard.ft.flags`), the command's own flags by hand; flags that contradict each
    other, or a value a field refuses, are a one-line CLIError."""
    from scabbard.ft.config import ConfigError

    interval = _check_modes(args)
    ft = interval is not None or args.recover
    if args.output and not ft and not args.output.endswith((".parquet", ".csv")):
        raise CLIError(f"--output {args.output}: use a .parquet or .csv file name (an "
                       "exactly-once folder needs --checkpoint-interval)")
    if args.output and ft and args.output.endswith((".parquet", ".csv")):
        raise CLIError(f"--output {args.output}: with fault tolerance the output is an "
                       "exactly-once folder, not a .parquet or .csv file")
    if args.durability and not ft:
        raise CLIError("--durability goes with --checkpoint-interval (or --recover)")
    if args.storage and not (args.persist_input or ft):
        raise CLIError("--storage is the folder for --persist-input; add --persist-input")
    if ft and not args.output:
        raise CLIError("fault tolerance needs an --output folder for exactly-once results")
    if ft and not args.storage:
        raise CLIError("fault tolerance needs a --storage folder (to recover from it later)")
    for flag, folder in (("--storage", args.storage), ("--output", args.output if ft else None)):
        if folder and Path(folder).exists() and not Path(folder).is_dir():
            raise CLIError(f"{flag} {folder}: is a file; {flag} names a folder (it is made "
                           f"if missing)")
    if args.standby and not args.recover:
        raise CLIError("--standby goes with --recover")
    if (args.crash_at or args.spawned_at is not None) and not ft:
        raise CLIError("--crash-at and --spawned-at go with --checkpoint-interval or --recover")
    placement = _placement(args, ft)
    # --persist-at without ingress: checkpoints only, the source replays the input
    checkpoint_only = args.checkpoint_only or (placement is not None
                                               and "ingress" not in placement)
    reduces = args.push_up or args.compression not in (None, "none")
    if reduces and not (args.persist_input or ft):
        raise CLIError("--push-up and --compression reduce the persisted input: add "
                       "--persist-input or --checkpoint-interval")
    if reduces and checkpoint_only:
        raise CLIError("no persisted input (--checkpoint-only, or --persist-at without "
                       "ingress): --push-up and --compression have nothing to reduce")
    try:
        return _config(args, interval if ft else None, placement, checkpoint_only)
    except ConfigError as e:
        from scabbard.ft.config import FTConfig, PersistConfig, RunConfig
        from scabbard.ft.flags import flag_name

        flag = OWN_FLAGS.get(e.field) or next(
            (f for c in (RunConfig, PersistConfig, FTConfig) if (f := flag_name(c, e.field))),
            "--" + e.field.replace("_", "-"))
        raise CLIError(f"{flag} {e.problem}") from None


def _placement(args, ft: bool) -> list[str] | None:
    """The edges ``--persist-at`` names (None: not given), checked against the other flags
    that place p-streams."""
    if args.checkpoint_only and not ft:
        raise CLIError("--checkpoint-only goes with --checkpoint-interval")
    if args.checkpoint_only and args.persist_input:
        raise CLIError("--checkpoint-only and --persist-input contradict each other")
    if args.placement and args.persist_at:
        raise CLIError("--placement auto and --persist-at both place the p-streams: use one")
    if args.placement and not ft:
        raise CLIError("--placement goes with --checkpoint-interval (or --recover)")
    if args.persist_at is None:
        return None
    placement = [e.strip() for e in args.persist_at.split(",") if e.strip()]
    if not placement:
        raise CLIError(f"--persist-at {args.persist_at!r} names no edge: give operator ids, "
                       f"ingress or output, separated by commas")
    if not ft:
        raise CLIError("--persist-at goes with --checkpoint-interval (or --recover)")
    if args.checkpoint_only:
        raise CLIError("--checkpoint-only and --persist-at both place the p-streams: use "
                       "--persist-at without ingress")
    return placement


def _config(args, interval: float | None, placement: list[str] | None, checkpoint_only: bool):
    """The configuration from the checked flags (``interval`` None: no fault tolerance)."""
    from scabbard.ft.config import FTConfig, PersistConfig, RunConfig
    from scabbard.ft.flags import given

    ft = interval is not None
    persist = PersistConfig(**{
        "storage": storage_dir(args, args.query), **given(args, PersistConfig),
        "persist_at": tuple(e for e in placement or () if e != "ingress"),
    }) if (args.persist_input or ft) else None
    fault_tolerance = FTConfig(**{
        **given(args, FTConfig), "output": Path(args.output), "interval": interval,
        "persist_input": False if checkpoint_only else None,
    }) if ft else None
    return RunConfig(**given(args, RunConfig), query=args.query,
                     data=Path(args.data) if args.data else None, verify=verify_mode(args),
                     persist=persist, ft=fault_tolerance)


def _check_modes(args) -> float | None:
    """The checkpoint mode's flags: eventual's only with it; --checkpoint-period is the
    interval in milliseconds (one of the two).  The interval in seconds (a recovery without
    one: the default), None: no fault tolerance."""
    eventual = [f for f, v in (("--checkpoint-period", args.checkpoint_period),
                               ("--checkpoint-step", args.checkpoint_step),
                               ("--max-unsaved-panes", args.max_unsaved_panes),
                               ("--max-replay-tuples", args.max_replay_tuples)) if v is not None]
    if eventual and args.checkpoint_mode != "eventual" and not args.recover:
        raise CLIError(f"{eventual[0]} goes with --checkpoint-mode eventual")
    if args.checkpoint_mode and not (args.checkpoint_interval is not None or args.recover
                                     or args.checkpoint_period is not None):
        raise CLIError("--checkpoint-mode goes with --checkpoint-interval (or "
                       "--checkpoint-period, or --recover)")
    interval = args.checkpoint_interval
    if interval is not None and not interval > 0:
        raise CLIError(f"--checkpoint-interval {interval:g}: a checkpoint interval is a "
                       f"positive number of seconds")
    if args.checkpoint_period is not None:
        if interval is not None:
            raise CLIError("--checkpoint-period and --checkpoint-interval both set how often a "
                           "checkpoint is recorded: use one")
        if not args.checkpoint_period > 0:
            raise CLIError(f"--checkpoint-period must be positive, got {args.checkpoint_period}")
        interval = args.checkpoint_period / 1e3
    return INTERVAL if interval is None and args.recover else interval


def _auto_placement(args, ds, interval: float) -> None:
    """``--placement auto``: the placement the cost model chooses (a recovery: the run's own),
    as if given with --persist-at."""
    from scabbard.ft import placement as pl
    from scabbard.ft.recovery import recorded_run

    if args.recover:
        run = recorded_run(args.storage) or {}
        chosen = (("ingress",) if run.get("persist_input", True) else ()) + tuple(
            run.get("persist_at") or ())
        print(f"placement: the run's own ({', '.join(chosen)})", flush=True)
    else:
        m = pl.measure(args.query, ds, tuples=min(ds.rows, 1 << 18), workdir=args.storage and
                       str(Path(args.storage).parent), push_up=args.push_up,
                       compression=args.compression)
        rate = args.rate or 1e6
        best = pl.choose(m, rate, interval)
        chosen = best.placement
        print(f"placement (auto, at {rate:,.0f} tuples/s): {best.label} - "
              f"{best.bytes_per_s / 1e6:.1f} MB/s persisted, recovery ~"
              f"{best.recovery_s * 1e3:.0f} ms", flush=True)
    args.placement = None
    if chosen:
        args.persist_at = ",".join(chosen)
    else:  # nothing persisted: checkpoints only, the source replays the input
        args.persist_at, args.checkpoint_only = None, True


def _recorded_settings(args) -> None:
    """A plain ``--recover`` continues with the p-streams its run placed and with push-up as
    the run had it (``run.json``), as with every other setting; a ``--persist-at`` given then
    must be the same."""
    from scabbard.ft.recovery import recorded_run

    run = recorded_run(args.storage) if args.storage else None
    if run and run.get("push_up") and not args.push_up:
        args.push_up = True  # the engine's plan is built with it before the run is opened
    if not run or not run.get("persist_at") or args.persist_at is not None:
        return
    ingress = run.get("persist_input", True)
    args.persist_at = ",".join((("ingress",) if ingress else ()) + tuple(run["persist_at"]))
    if not ingress:  # a placement without the ingress is checkpoints only already
        args.checkpoint_only = False


def _run_query(args) -> int:
    from scabbard import queries

    query = queries.get(args.query)
    if args.placement:
        checked = config_from_args(args)  # the flags checked before anything is measured
        _auto_placement(args, query_dataset(args), checked.ft.interval)
    elif args.recover:
        _recorded_settings(args)
    config = config_from_args(args)
    if args.backend == "spark":
        return _run_spark(args, query)
    reject_spark_flags(args)
    ds = query_dataset(args)
    print(f"{query.name} on {ds.path} ({ds.rows:,} tuples, {ds.schema.size_label}), "
          f"backend {args.backend}", flush=True)
    return _run_engine(args, config, ds)


def _run_engine(args, config, ds) -> int:
    from scabbard.engine.metrics import samples_to
    from scabbard.ft.report import progress_line, run_summary
    from scabbard.ft.run import open_run
    from scabbard.outputs import sink_for

    def progress(sample: dict) -> None:
        if not args.quiet:
            print(progress_line(sample), flush=True)

    if config.ft is not None:
        return _run_fault_tolerant(args, config, ds, progress)
    if config.persist is not None:
        print(f"persisting the input to {config.persist.storage}", flush=True)
    report = open_run(config, dataset=ds, sink=sink_for(args.output),
                      watch=(samples_to(progress),))
    print("\n".join(run_summary(report, args.output)))
    return 0


def _run_fault_tolerant(args, config, ds, progress) -> int:
    from scabbard.engine.metrics import samples_to
    from scabbard.ft.recovery import StandbyReleased
    from scabbard.ft.report import ft_start_line, ft_summary
    from scabbard.ft.run import open_run

    standby = None
    if args.standby:  # the handshake with the process controller (scabbard.ft.controller)
        def standby() -> None:
            print("standby: ready", flush=True)
            if not sys.stdin.readline():
                raise StandbyReleased  # stdin closed: the controller has no failure for us
    print(ft_start_line(config, args.recover), flush=True)
    try:
        r = open_run(config, recover=args.recover, dataset=ds, watch=(samples_to(progress),),
                     standby=standby)
    except StandbyReleased:
        print("standby: released without taking over", flush=True)
        return 0
    print("\n".join(ft_summary(r, config.ft.output, args.recover)))
    return 0


def _run_spark(args, query) -> int:
    from scabbard.cli.spark_backend import run_spark_backend

    return run_spark_backend(args, query)
