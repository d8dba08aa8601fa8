"""A command whose work is one settings class (an experiment's, the crash-state explorer's,
the Spark cluster's): its flags are the class's fields, and its settings are read back from
them.

:func:`settings_flags` adds a flag for each field named: the flag is the field's name
(``--min-life``; a True default becomes ``--no-<name>``; :data:`FLAGS` names the others), its
type, choices and default the field's (or a shared declaration's, when a run's flag of that
name exists: ``--sink``, ``--compression``...), its help the command's, the field's own
(``metadata={"help": ...}``), the benchmarks' table's
(:data:`scabbard.experiments.benches.HELP`) or the shared declaration's.
:func:`settings_from` builds the settings from the parsed flags; a value the settings refuse
is one line naming its flag.
"""

from __future__ import annotations

import dataclasses

from scabbard import paths
from scabbard.cli.common import add_data_root, declared, hidden_alias, parse_bytes, shared_flag
from scabbard.cli.errors import CLIError
from scabbard.experiments.benches import ALIASES, CHOICES, FLAGS, HELP

# how a field's text is read where its default does not say
_TYPES = {"queries": str.upper, "query": str.upper, "state_memory": parse_bytes, "ingress": int}


def flag_of(name: str) -> str:
    """The flag of a settings field."""
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def settings_flags(p, settings, *names: str, out: str | None = None, helps=None,
                   **defaults) -> None:
    """Flags for the fields ``names`` of ``settings`` (a dataclass): see the module's text.
    ``defaults`` replaces a field's default for this command; ``out``: the output folder's
    default, under the project's runs folder.  A settings class's ``data_dir`` is always a
    flag, ``--data-root``."""
    fields = {f.name: f for f in dataclasses.fields(settings)}
    helps = {**{n: f.metadata["help"] for n, f in fields.items() if "help" in f.metadata},
             **(helps or {})}  # a field's own help, unless the command's says otherwise

    def default_of(name: str):
        f = fields[name]
        return defaults.get(name, f.default if f.default is not dataclasses.MISSING
                            else f.default_factory())

    if "data_dir" in fields:  # always a flag, --data-root
        add_data_root(p, dest="data_dir", default=default_of("data_dir"))
        hidden_alias(p, "--data-dir", dest="data_dir")
    for name in names:
        if name != "data_dir":
            _add(p, name, default_of(name), helps)
    if out is not None:
        shared_flag(p, "--output", dest="out", default=str(paths.runs_root() / out),
                    metavar="DIR", help=f"output folder (default: experiments/runs/{out} in "
                                        "the project folder)")
        hidden_alias(p, "--out", dest="out")


def _add(p, name: str, default, helps) -> None:
    flag = flag_of(name)
    if isinstance(default, bool):
        if default:
            flag = FLAGS.get(name, f"--no-{name.replace('_', '-')}")
        p.add_argument(flag, dest=name, action="store_false" if default else "store_true",
                       help=help_of(name, flag, helps))
        return
    try:
        shared = declared(flag)
    except KeyError:
        shared = {}
    many = isinstance(default, tuple | list)
    item = default[0] if many and default else default
    kind = _TYPES.get(name) or shared.get("type") or (
        type(item) if isinstance(item, int | float) else str)
    shown = " ".join(map(str, default)) if many else default
    shown = "all" if _all_queries(name, default) else \
        "none" if shown in (None, "") else shown
    p.add_argument(flag, dest=name, type=kind, nargs="+" if many else None,
                   default=list(default) if many else default,
                   choices=CHOICES.get(name) or shared.get("choices"),
                   metavar=shared.get("metavar") or ("N" if kind is int else None),
                   help=f"{help_of(name, flag, helps)} (default {shown})")
    if name in ALIASES:
        hidden_alias(p, ALIASES[name], dest=name, type=kind, nargs="+" if many else None)


def own_flag(p, name: str, **kw) -> None:
    """A command's flag for ``name`` that is no field of its settings (``kw``: add_argument's,
    its help this use's)."""
    p.add_argument(flag_of(name), dest=name, **kw)


def help_of(name: str, flag: str, helps=None) -> str:
    """A setting's help: the command's own, the benchmarks', else the shared declaration's
    (its first clause: the default shown is the command's)."""
    if helps and name in helps:
        return helps[name]
    if name in HELP:
        return HELP[name]
    return declared(flag)["help"].split(" (default")[0]


def _all_queries(name: str, default) -> bool:
    from scabbard.queries import NAMES

    return name == "queries" and tuple(default) == NAMES


def settings_from(settings, args, **extra):
    """``settings`` from the flags :func:`settings_flags` declared (and ``extra``); a value
    the settings refuse is a one-line error, the field it names first named by its flag."""
    names = {f.name for f in dataclasses.fields(settings)}
    given = {k: (tuple(v) if isinstance(v, list) else v) for k, v in vars(args).items()
             if k in names}
    try:
        return settings(**{**given, **extra})
    except ValueError as e:
        field, _, rest = str(e).partition(" ")
        if field in given:
            raise CLIError(f"{flag_of(field)} {rest}") from None
        raise CLIError(str(e)) from None
