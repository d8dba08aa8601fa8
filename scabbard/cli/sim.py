"""``scabbard sim ...``: calibrate the simulator, validate it, run it (docs/design.md).

:func:`add_parser` adds the ``sim`` command to the ``scabbard`` parser's subcommands;
each handler returns the exit code and raises :class:`scabbard.cli.CLIError` for bad
input, as every other command does.
"""

from __future__ import annotations

from scabbard.cli.common import add_data_root, data_root, declared, hidden_alias, shared_flag
from scabbard.cli.errors import CLIError
from scabbard.cli.settings import settings_flags, settings_from
from scabbard.ft.flags import Group, add_flags, given, in_flags
from scabbard.progress import say
from scabbard.sim import report, session
from scabbard.sim.config import Hardware, SimConfig

# what the experiments' common settings mean here
_VALIDATE_HELP = {"queries": "queries to validate", "scale": "the datasets the real runs read"}


def add_parser(subparsers, full: bool = True) -> None:
    """Add ``sim`` (calibrate, validate, run) to a ``scabbard`` subparsers object; with
    ``full``, its commands (``validate``'s flags come from its experiment's settings, so the
    experiment is imported)."""
    from scabbard.queries import NAMES

    p = session.SIM.parser(subparsers, "sim")
    sub = p.add_subparsers(dest="sim_cmd", required=True, metavar="SUBCOMMAND")
    if not full:
        return

    cp = session.CALIBRATE.parser(sub, "calibrate")
    shared_flag(cp, "--queries", help=f"subset of {', '.join(NAMES)} (default: all eleven)")
    shared_flag(cp, "--scale", help="dataset scale to measure on (default: small)")
    add_data_root(cp)
    hidden_alias(cp, "--data", dest="data_root")
    shared_flag(cp, "--output", metavar="FILE", help="calibration file to write (default: this "
        "machine's, experiments/calibration.json in the project folder); queries already in it "
        "and not measured now are kept")
    cp.add_argument("--replace-shipped", action="store_true",
                    help="write the package's own calibration (scabbard/resources/"
                         "calibration.json) instead: what every machine without its own uses")
    hidden_alias(cp, "--out", dest="output")
    shared_flag(cp, "--duration", default=2.0, help="wall seconds of each timed engine run "
        "(default 2)")
    hidden_alias(cp, "--seconds", dest="duration", type=float)
    cp.add_argument("--quiet-timeout", type=float, default=120.0, metavar="SECONDS",
                    help="how long to wait for a quiet machine before each query (default 120)")
    cp.set_defaults(func=run_calibrate)

    from scabbard.experiments.validation import USAGE, Settings

    vp = USAGE.parser(sub, "validate")
    shared_flag(vp, "--calibration")
    settings_flags(vp, Settings, "queries", "scale", "seconds", "kill", "repeats", "retries",
                   "probe", helps=_VALIDATE_HELP)
    hidden_alias(vp, "--data", dest="data_dir")
    shared_flag(vp, "--output", metavar="FILE", help="also write the table as CSV")
    hidden_alias(vp, "--out", dest="output")
    vp.set_defaults(func=run_validate)

    sp = session.SPEED.parser(sub, "speed")
    shared_flag(sp, "--queries", help="subset of the calibrated queries (default: all of them)")
    shared_flag(sp, "--calibration")
    shared_flag(sp, "--sim-seconds", default=60.0, help="simulated seconds (default 60)")
    hidden_alias(sp, "--seconds", dest="sim_seconds", type=float)
    shared_flag(sp, "--cores", default=16, help="cores (default 16)")
    sp.set_defaults(func=run_speed)

    rp = session.RUN.parser(sub, "run")
    shared_flag(rp, "--query", choices=None)  # the calibration names the queries it has
    shared_flag(rp, "--calibration")
    rp.add_argument("--preset", default="this", choices=session.PRESETS,
                    help="hardware to start from (default: this)")
    hw = rp.add_argument_group("hardware", "the preset's, unless given")
    run = rp.add_argument_group("the run")
    add_flags({Group.HARDWARE: hw, Group.SIM_RUN: run}, Hardware, SimConfig, shared=declared)
    hidden_alias(run, "--duration", dest="sim_seconds", type=float)
    hidden_alias(run, "--persist", dest="persist_input", action="store_true")
    hidden_alias(run, "--no-persist", dest="persist_input", action="store_false")
    rp.add_argument("--timeline", action="store_true", help="also print the 0.5 s timeline")
    shared_flag(rp, "--json")
    rp.set_defaults(func=run_sim)


# -- handlers ------------------------------------------------------------------------------------------
def run_calibrate(args) -> int:
    if not args.duration > 0:
        raise CLIError(f"--duration must be positive, got {args.duration}")
    out = session.calibration_file(args.output, args.replace_shipped)
    cal = session.calibrate_into(out, session.query_names(args.queries), args.scale,
                                 str(data_root(args)), args.duration, args.quiet_timeout)
    print(f"calibration ({', '.join(cal.queries)}) written to {out}")
    return 0


def run_validate(args) -> int:
    from scabbard.experiments.validation import Settings, report, save_csv, validate

    settings = settings_from(Settings, args)
    cal = session.calibration(args.calibration)
    names = session.query_names(list(settings.queries))
    session.warn_elsewhere(args.calibration, cal)
    try:
        table = validate(names, cal, settings)
    except ValueError as e:
        raise CLIError(str(e)) from None
    print(report(table))  # the table shown before anything can fail to be written
    if args.output:
        print("\n" + save_csv(table, args.output))
    return 0


def run_speed(args) -> int:
    if not args.sim_seconds > 0:
        raise CLIError(f"--sim-seconds must be positive, got {args.sim_seconds}")
    if args.cores < 1:
        raise CLIError(f"--cores must be >= 1, got {args.cores}")
    cal = session.calibration(args.calibration)
    names = session.query_names(args.queries) or list(cal.queries)
    session.warn_elsewhere(args.calibration, cal)
    report.speed(cal, names, args.cores, args.sim_seconds,
                 log=say)
    return 0


def run_sim(args) -> int:
    (query,) = session.query_names([args.query])
    cal = session.calibration(args.calibration)
    try:
        hw = session.hardware(args.preset, cal, given(args, Hardware))
    except ValueError as e:
        raise CLIError(in_flags(str(e), Hardware)) from None
    try:
        result = session.simulate_query(cal, args.calibration, query, hw, given(args, SimConfig))
    except ValueError as e:
        raise CLIError(in_flags(str(e), SimConfig)) from None
    print(session.describe(result, as_json=args.json, timeline=args.timeline))
    return 0
