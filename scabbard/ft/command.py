"""A run's configuration from ``scabbard run``'s flags: the rules between them, and back.

:func:`from_flags` is the inverse of :meth:`~scabbard.ft.config.RunConfig.argv`: each field
from its flag (:mod:`scabbard.ft.flags`), the command's own flags (``--output``,
``--storage``, ``--persist-at``, ``--checkpoint-only``, ``--checkpoint-period``,
``--verify``) by the rules below, and a value a field refuses, or flags that contradict each
other, a :class:`~scabbard.errors.FlagError` of one line naming the flags.  The rules that
need more than the flags - a placement the cost model chooses, what a recovered run recorded
in ``run.json`` - give a new configuration from a checked one (:func:`placed`,
:func:`as_recorded`); nothing here changes the parsed flags.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from scabbard import paths
from scabbard.errors import FlagError
from scabbard.ft.config import ConfigError, FTConfig, PersistConfig, RunConfig
from scabbard.ft.flags import flag_name, given
from scabbard.ft.modes import INTERVAL
from scabbard.usage import Usage

RUN = Usage(
    "run one of the paper's queries on a dataset",
    "Run a query of the paper's Table 3 (or PipeFabric's Table 1, PF-TRUE, PF-MOD2, PF-MOD10, "
    "PF-FALSE: a stateless selection on SG; or LRB-ROWS, a count-based window) on a generated "
    "dataset with the engine (or with Spark Structured Streaming), printing live throughput and "
    "latency and a final summary.  Results (one row per window and group: window_start, "
    "window_end, keys, aggregates; a stateless query's: the selected tuples, in input order) go "
    "to --output: a .parquet or .csv file, or with fault tolerance an exactly-once folder "
    "(scabbard.ft.read_output reads it); uuids are canonical strings in each.",
    "Without --duration or --max-tuples the dataset is read once (fault-tolerant runs too); "
    "with either, it is replayed with shifted timestamps (as the paper's benchmarks do) until "
    "the limit.  The default dataset is <data root>/<workload>/small, generated on first use; "
    "its manifest is checked on every run (sizes, schema), its checksums with --verify.  A "
    "fault-tolerant run records its dataset's identity and its settings in <storage>/run.json; "
    "--recover refuses other data or settings.")

# the fields of the configuration that the command's own flags set (the rest carry theirs)
OWN_FLAGS = {"persist": "--storage", "output": "--output", "query": "--query", "data": "--data"}
# the flags that only eventual checkpoints take
_EVENTUAL = ("checkpoint_period", "checkpoint_step", "max_unsaved_panes", "max_replay_tuples")


def storage_dir(args, query: str) -> Path:
    """``--storage``, or a new folder under the project's storage root."""
    if args.storage:
        return Path(args.storage)
    return paths.storage_root() / f"{query}-{time.strftime('%Y%m%d-%H%M%S')}"


def verify_mode(args) -> bool | str:
    """The dataset check a command's flags ask for: ``--verify`` every time, ``--no-verify``
    never, else once per change of the dataset's files (:func:`scabbard.data.open_dataset`)."""
    always, never = getattr(args, "verify", False), getattr(args, "no_verify", False)
    if always and never:
        raise FlagError("--verify and --no-verify contradict each other: give one")
    return True if always else False if never else "once"


def from_flags(args) -> RunConfig:
    """The run's configuration from ``scabbard run``'s parsed flags."""
    interval = _interval(args)
    ft = interval is not None or args.recover
    _check_outputs(args, ft)
    placement = _placement(args, ft)
    # --persist-at without ingress: checkpoints only, the source replays the input
    checkpoint_only = args.checkpoint_only or (placement is not None
                                               and "ingress" not in placement)
    reduces = args.push_up or args.compression not in (None, "none")
    if reduces and not (args.persist_input or ft):
        raise FlagError("--push-up and --compression reduce the persisted input: add "
                        "--persist-input or --checkpoint-interval")
    if reduces and checkpoint_only:
        raise FlagError("no persisted input (--checkpoint-only, or --persist-at without "
                        "ingress): --push-up and --compression have nothing to reduce")
    try:
        return _config(args, interval if ft else None, placement, checkpoint_only)
    except ConfigError as e:
        raise _flag_error(e) from None


def _flag_error(e: ConfigError) -> FlagError:
    """A field's refusal as the one line of the flag that sets it."""
    flag = OWN_FLAGS.get(e.field) or next(
        (f for c in (RunConfig, PersistConfig, FTConfig) if (f := flag_name(c, e.field))),
        "--" + e.field.replace("_", "-"))
    return FlagError(f"{flag} {e.problem}")


def _check_outputs(args, ft: bool) -> None:
    """Where results and storage go, and the flags that only a fault-tolerant run takes."""
    if args.output and not ft and not args.output.endswith((".parquet", ".csv")):
        raise FlagError(f"--output {args.output}: use a .parquet or .csv file name (an "
                        "exactly-once folder needs --checkpoint-interval)")
    if args.output and ft and args.output.endswith((".parquet", ".csv")):
        raise FlagError(f"--output {args.output}: with fault tolerance the output is an "
                        "exactly-once folder, not a .parquet or .csv file")
    if args.durability and not ft:
        raise FlagError("--durability goes with --checkpoint-interval (or --recover)")
    if args.storage and not (args.persist_input or ft):
        raise FlagError("--storage is the folder for --persist-input; add --persist-input")
    if ft and not args.output:
        raise FlagError("fault tolerance needs an --output folder for exactly-once results")
    if ft and not args.storage:
        raise FlagError("fault tolerance needs a --storage folder (to recover from it later)")
    for flag, folder in (("--storage", args.storage), ("--output", args.output if ft else None)):
        if folder and Path(folder).exists() and not Path(folder).is_dir():
            raise FlagError(f"{flag} {folder}: is a file; {flag} names a folder (it is made "
                            f"if missing)")
    if args.standby and not args.recover:
        raise FlagError("--standby goes with --recover")
    if (args.crash_at or args.spawned_at is not None) and not ft:
        raise FlagError("--crash-at and --spawned-at go with --checkpoint-interval or --recover")


def _placement(args, ft: bool) -> list[str] | None:
    """The edges ``--persist-at`` names (None: not given), checked against the other flags
    that place p-streams."""
    if args.checkpoint_only and not ft:
        raise FlagError("--checkpoint-only goes with --checkpoint-interval")
    if args.checkpoint_only and args.persist_input:
        raise FlagError("--checkpoint-only and --persist-input contradict each other")
    if args.placement and args.persist_at:
        raise FlagError("--placement auto and --persist-at both place the p-streams: use one")
    if args.placement and not ft:
        raise FlagError("--placement goes with --checkpoint-interval (or --recover)")
    if args.persist_at is None:
        return None
    placement = [e.strip() for e in args.persist_at.split(",") if e.strip()]
    if not placement:
        raise FlagError(f"--persist-at {args.persist_at!r} names no edge: give operator ids, "
                        f"ingress or output, separated by commas")
    if not ft:
        raise FlagError("--persist-at goes with --checkpoint-interval (or --recover)")
    if args.checkpoint_only:
        raise FlagError("--checkpoint-only and --persist-at both place the p-streams: use "
                        "--persist-at without ingress")
    return placement


def _config(args, interval: float | None, placement: list[str] | None,
            checkpoint_only: bool) -> RunConfig:
    """The configuration from the checked flags (``interval`` None: no fault tolerance)."""
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


def _interval(args) -> float | None:
    """The checkpoint mode's flags: eventual's only with it; --checkpoint-period is the
    interval in milliseconds (one of the two).  The interval in seconds (a recovery without
    one: the default), None: no fault tolerance."""
    eventual = ["--" + name.replace("_", "-") for name in _EVENTUAL
                if getattr(args, name) is not None]
    if eventual and args.checkpoint_mode != "eventual" and not args.recover:
        raise FlagError(f"{eventual[0]} goes with --checkpoint-mode eventual")
    if args.checkpoint_mode and not (args.checkpoint_interval is not None or args.recover
                                     or args.checkpoint_period is not None):
        raise FlagError("--checkpoint-mode goes with --checkpoint-interval (or "
                        "--checkpoint-period, or --recover)")
    interval = args.checkpoint_interval
    if interval is not None and not interval > 0:
        raise FlagError(f"--checkpoint-interval {interval:g}: a checkpoint interval is a "
                        f"positive number of seconds")
    if args.checkpoint_period is not None:
        if interval is not None:
            raise FlagError("--checkpoint-period and --checkpoint-interval both set how often "
                            "a checkpoint is recorded: use one")
        if not args.checkpoint_period > 0:
            raise FlagError(f"--checkpoint-period must be positive, got "
                            f"{args.checkpoint_period}")
        interval = args.checkpoint_period / 1e3
    return INTERVAL if interval is None and args.recover else interval


def placed(config: RunConfig, chosen: tuple[str, ...], *,
           persist_input_given: bool = False) -> RunConfig:
    """``config`` (fault-tolerant, no ``--persist-at`` given) with the p-streams on the edges
    ``chosen`` names, as if given with ``--persist-at`` (``ingress``: the input; nothing:
    checkpoints only, the source replays the input).  ``--checkpoint-only`` (the config's
    ``persist_input`` False) and ``--persist-input`` (``persist_input_given``) must agree
    with it, as with ``--persist-at``."""
    ingress, where = "ingress" in chosen, ", ".join(chosen) or "nothing"
    if ingress and config.ft.persist_input is False:
        raise FlagError(f"--checkpoint-only and the placement ({where}) both place the "
                        f"p-streams: use one")
    if not ingress and persist_input_given:
        raise FlagError(f"--persist-input and the placement ({where}) contradict each other: "
                        f"it persists no input")
    if config.persist.reduces and not ingress:
        raise FlagError(f"no persisted input (the placement, {where}, keeps no ingress "
                        f"p-stream): --push-up and --compression have nothing to reduce")
    try:
        persist = dataclasses.replace(config.persist,
                                      persist_at=tuple(e for e in chosen if e != "ingress"))
        ft = dataclasses.replace(config.ft, persist_input=None if ingress else False)
        return dataclasses.replace(config, persist=persist, ft=ft)
    except ConfigError as e:
        raise _flag_error(e) from None


def recorded_placement(run: dict) -> tuple[str, ...]:
    """The edges a recorded run (its ``run.json``) placed p-streams on, ``ingress`` first."""
    return (("ingress",) if run.get("persist_input", True) else ()) + tuple(
        run.get("persist_at") or ())


def as_recorded(config: RunConfig, run: dict | None, *, placement_given: bool) -> RunConfig:
    """A plain ``--recover`` continues with the p-streams its run placed and with push-up as
    the run had it (``run``: its ``run.json``), as with every other setting; a
    ``--persist-at`` given then (``placement_given``) must be the same: the recovery checks
    it."""
    if not run or config.persist is None:
        return config
    if run.get("push_up") and not config.persist.push_up:
        # the engine's plan is built with it before the run is opened
        if config.ft.persist_input is False:
            raise FlagError("no persisted input (--checkpoint-only, or --persist-at without "
                            "ingress): the run had push-up, which reduces it")
        try:
            config = dataclasses.replace(
                config, persist=dataclasses.replace(config.persist, push_up=True))
        except ConfigError as e:
            raise _flag_error(e) from None
    if run.get("persist_at") and not placement_given:
        config = placed(config, recorded_placement(run))
    return config
