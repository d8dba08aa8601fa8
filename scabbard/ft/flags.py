"""A run's command-line flags, generated from its configuration's fields, and back.

A field of :class:`~scabbard.ft.config.RunConfig`, :class:`~scabbard.ft.config.PersistConfig`
or :class:`~scabbard.ft.config.FTConfig` that a flag sets carries the flag in its metadata
(:func:`flag`: the name, its help, how its value is read).  ``scabbard run`` adds those flags
from the fields (:func:`add_flags`) and reads them back into fields (:func:`given`); the
process controller writes a configuration as the flags that make it (:func:`field_argv`).
A new setting costs one field and its help.  The few flags that are not one field each
(``--output``, ``--persist-at``, ``--checkpoint-only``, ``--verify``) are the command's own.
The simulator's machine (:class:`~scabbard.sim.config.Hardware`) and run
(:class:`~scabbard.sim.config.SimConfig`) are configurations too; a simulated run's field
takes the engine's flag of the same setting (``shared``: ``--workers``, ``--compression``...)
with its own help, and :func:`in_flags` names a configuration's error by its flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text: str) -> int:
    """A size in bytes: ``268435456``, ``256M``, ``2G``, ``512KiB`` (powers of 1024)."""
    t = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    try:
        value = float(t[:len(t) - len(unit)])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 256M, 2G)") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a size must be positive")
    return int(value * _UNITS[unit])


class Group(enum.Enum):
    """Where a flag is listed in ``scabbard run --help``."""

    INPUT = "input"
    ENGINE = "engine"
    PERSISTENCE = "persistence"
    FAULT_TOLERANCE = "fault tolerance"
    OUTPUT = "output"
    HARDWARE = "hardware"  # ``scabbard sim run``'s machine (scabbard.sim.config.Hardware)
    SIM_RUN = "the run"  # ``scabbard sim run``'s run (scabbard.sim.config.SimConfig)


def flag(name: str, help: str, group: Group, *, type=None, metavar: str | None = None,
         choices: tuple[str, ...] | None = None, shared: bool = False,
         negatable: bool = False) -> dict:
    """A field's metadata: the flag ``name`` sets it (``type`` reads the text; a boolean
    field's flag takes no value, or with ``negatable`` has its ``--no-`` form too);
    ``help=argparse.SUPPRESS`` hides it.  ``shared``: the flag is declared elsewhere (by
    another configuration's field, or the commands' shared flags) and this field only takes
    its value - ``help`` (and ``choices``, if given) say what it means here."""
    return {"flag": {"name": name, "help": help, "group": group, "type": type,
                     "metavar": metavar, "choices": choices, "shared": shared,
                     "negatable": negatable}}


def flagged(cls) -> list[tuple[dataclasses.Field, dict]]:
    """The fields of a configuration class that a flag sets, with the flag's spec."""
    return [(f, f.metadata["flag"]) for f in dataclasses.fields(cls) if "flag" in f.metadata]


def dest(spec: dict) -> str:
    """The attribute argparse stores a flag's value in (its name, dashes as underscores)."""
    return spec["name"].lstrip("-").replace("-", "_")


def flag_name(cls, field_name: str) -> str | None:
    """The flag that sets ``cls``'s field (None: no flag does)."""
    return next((s["name"] for f, s in flagged(cls) if f.name == field_name), None)


def field_flag(name: str, *classes) -> dict | None:
    """add_argument's keywords for the flag ``name`` where a field of ``classes`` declares it
    (another command taking the same setting; its default is the command's to give), else
    None."""
    for cls in classes:
        for f, s in flagged(cls):
            if s["name"] != name or s["shared"]:
                continue
            if f.type in (bool, "bool"):
                return {"action": argparse.BooleanOptionalAction if s["negatable"]
                        else "store_true", "help": s["help"]}
            kw = {k: s[k] for k in ("type", "metavar", "choices") if s[k] is not None}
            return {**kw, "help": s["help"]}
    return None


def add_flags(groups: dict[Group, argparse._ActionsContainer], *classes,
              shared=None) -> None:
    """The flags of ``classes``' fields, each in its group; every default is None (the
    field's own default applies unless the flag is given).  ``shared(name)``: add_argument's
    keywords of a flag declared elsewhere, for the fields that take one (:func:`flag`)."""
    for cls in classes:
        for _, s in flagged(cls):
            if not s["shared"]:
                kw = field_flag(s["name"], cls)
            else:  # the declaration's keywords, the help, choices and negation this field's
                kw = {**shared(s["name"]), "help": s["help"]}
                if s["choices"]:
                    kw["choices"] = s["choices"]
                if s["negatable"]:
                    kw["action"] = argparse.BooleanOptionalAction
            groups[s["group"]].add_argument(s["name"], default=None, **kw)


def in_flags(message: str, *classes) -> str:
    """A configuration's error message in its flags' names: ``Hardware.disk_write_mb_s must
    ...`` -> ``--disk-mb-s must ...``."""
    names = {f"{cls.__name__}.{f.name}": s["name"] for cls in classes for f, s in flagged(cls)}
    for name in sorted(names, key=len, reverse=True):  # a field's name before its prefix's
        message = message.replace(name, names[name])
    return message


def given(args, cls) -> dict:
    """``cls``'s fields whose flags were given in ``args`` (parsed by :func:`add_flags`'s
    parser), by field name."""
    out = {}
    for f, s in flagged(cls):
        value = getattr(args, dest(s), None)
        if value is not None:
            out[f.name] = value
    return out


def field_argv(config, skip: tuple[str, ...] = ()) -> list[str]:
    """The flags that set ``config``'s fields where they differ from the defaults (the
    inverse of :func:`given`).  A field with another value and no flag cannot be written:
    ValueError names it.  ``skip``: fields the caller writes itself."""
    out: list[str] = []
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.name in skip or value == _default(f) or dataclasses.is_dataclass(value):
            continue
        if "flag" not in f.metadata:
            raise ValueError(f"{type(config).__name__}.{f.name} = {value!r} has no flag: a "
                             f"run with it cannot be started from the command line")
        name = f.metadata["flag"]["name"]
        if f.type in (bool, "bool"):
            if value:
                out.append(name)
            else:
                raise ValueError(f"{name} is a switch: {f.name} cannot be {value!r}")
        elif value is not None:
            out += [name, str(value)]
    return out


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING
