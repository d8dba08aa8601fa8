"""A fault-tolerant run's record, ``<storage>/run.json``: its configuration as written.

A new run writes the settings a recovery must repeat - the fields of
:class:`~scabbard.ft.config.RunConfig`, :class:`~scabbard.ft.config.PersistConfig` and
:class:`~scabbard.ft.config.FTConfig` marked :func:`~scabbard.ft.config.recorded`, under
their own names - with its dataset's identity (manifest checksum, schema, rows, parameters),
the output folder it claimed and a run id.  A recovery gives each setting again or leaves it
out (None: the recorded one); :func:`open_run_file` refuses other data or settings with one
line naming each difference, and :func:`as_run` is the configuration the recovery then runs
with: the recorded settings in their fields.  So a setting a recovery must repeat costs its
field's ``recorded`` mark, nothing here.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from pathlib import Path

from scabbard.data import Dataset
from scabbard.errors import EXIT_USAGE, UserError
from scabbard.ft.config import ConfigError, RunConfig
from scabbard.pog.checkpoint import CheckpointError
from scabbard.storage.fileio import Durability, FileIO, write_atomic

RUN_FILE = "run.json"
# what a record holds beside the settings: the dataset is compared by its identity, the
# output by the run id it was claimed with (its path is for messages: a moved folder
# recovers), ``loop`` follows from the limits a new run was given
_NOT_SETTINGS = ("dataset", "output", "loop")
# compared on their own: push-up is a flag (leaving it out means "without"), the recovery
# says how to give it (scabbard.ft.recovery)
_NOT_REPEATED = (*_NOT_SETTINGS, "push_up")


class RunMismatch(CheckpointError, UserError):
    """The flags and folders given do not match the run stored there (another query,
    dataset or setting; ``--recover`` missing or of nothing; another run's output): a person
    fixes it by giving the run's own, so it is a user error (exit 2)."""

    exit_code = EXIT_USAGE


def dataset_identity(dataset: Dataset) -> dict:
    """What makes a dataset the same input: its manifest checksum, schema, size, parameters."""
    return {"workload": dataset.workload, "name": dataset.name, "checksum": dataset.checksum,
            "schema": dataset.schema.fingerprint, "rows": dataset.rows,
            "params": dataset.params, "path": str(dataset.path)}


def _recorded(cfg: RunConfig):
    """``(config, field, its recorded mark)`` for each recorded field of ``cfg`` and of its
    persistence and fault-tolerance configurations."""
    for part in (cfg, cfg.persist, cfg.ft):
        for f in dataclasses.fields(part) if part is not None else ():
            if "recorded" in f.metadata:
                yield part, f, f.metadata["recorded"]


def settings(cfg: RunConfig, *, fresh: bool, **resolved) -> dict:
    """The settings a record holds, by field name: ``cfg``'s, ``resolved`` over them (what the
    run made of a field: its task size, its edges, its sink's kind).  A ``fresh`` run
    records each default its mark names where the field is None; a recovery's None stays
    (the recorded one is taken)."""
    out = {}
    for part, f, mark in _recorded(cfg):
        value = resolved.pop(f.name, getattr(part, f.name))
        if isinstance(value, tuple):
            value = list(value)
        out[f.name] = mark.get("new", value) if fresh and value is None else value
    if resolved:
        raise ValueError(f"not recorded settings: {', '.join(resolved)}")
    return out


def as_run(cfg: RunConfig, run: dict) -> RunConfig:
    """``cfg`` with ``run``'s recorded settings in their fields (a record of an older build
    without one: the value its mark says such a run had, else ``cfg``'s); RunMismatch where a
    setting given does not go with a recorded one."""
    parts: dict[str, dict] = {"": {}, "persist": {}, "ft": {}}
    for part, f, mark in _recorded(cfg):
        if f.name in run or "old" in mark:
            value = run.get(f.name, mark.get("old"))
            where = "" if part is cfg else "persist" if part is cfg.persist else "ft"
            parts[where][f.name] = tuple(value) if isinstance(value, list) else value
    try:
        changed = {k: dataclasses.replace(getattr(cfg, k), **v)
                   for k, v in parts.items() if k and v}
        return dataclasses.replace(cfg, **parts[""], **changed)
    except ConfigError as e:  # e.g. a checkpoint step given to a run of full checkpoints
        raise RunMismatch(f"the run's recorded settings and those given do not go together: "
                          f"{e}") from None


def _differences(have: dict, want: dict) -> list[str]:
    """The recorded run's dataset and settings against this start's; one phrase each."""
    out = []
    a, b = have.get("dataset", {}), want["dataset"]
    for key in ("checksum", "schema", "rows", "workload", "params"):
        if a.get(key) != b[key]:
            out.append(f"the dataset's {key} ({a.get(key)!r} recorded from {a.get('path')}, "
                       f"{b[key]!r} in {b['path']})")
    for key in (k for k in want if k not in _NOT_REPEATED):
        if want[key] is not None and have.get(key) != want[key]:
            out.append(f"{key} {have.get(key)!r} recorded, {want[key]!r} given")
    return out


def open_run_file(storage: Path, io: FileIO, query: str, recover: bool, want: dict,
                  durability: Durability) -> dict:
    """Create ``run.json`` for a new run (``want``: its dataset's identity, output and
    settings), or check a recovery against it (one line each); the caller holds the storage
    folder's lock.  Returns the record."""
    path = storage / RUN_FILE
    if recover:
        if not path.is_file():
            raise RunMismatch(f"{storage} holds no run to recover ({RUN_FILE} is missing); "
                              f"start one without --recover")
        have = _read_run(path)
        if have["query"] != query:
            raise RunMismatch(f"{storage} holds a run of {have['query']}, not {query}")
        diff = _differences(have, want)
        if diff:
            raise RunMismatch(f"{storage} holds a run with other input or settings: "
                              + "; ".join(diff) + ". Recover it with what it was started with")
        return have
    if path.is_file():
        raise RunMismatch(f"{storage} already holds a run of {_read_run(path)['query']}: "
                          f"add --recover to continue it, or choose an empty --storage "
                          f"folder")
    doc = {"query": query, "started_at": time.time(), "run_id": uuid.uuid4().hex, **want}
    write_atomic(io, path, json.dumps(doc, indent=1).encode(), durability)
    return doc


def mark_completed(storage: Path, io: FileIO, run: dict, durability: Durability) -> None:
    """Record that the run consumed all its input (``"completed"``)."""
    write_atomic(io, storage / RUN_FILE,
                 json.dumps(dict(run, completed=time.time()), indent=1).encode(), durability)


def recorded_run(storage: str | Path) -> dict | None:
    """The run recorded in ``storage`` (None if none was; raises CheckpointError if its
    ``run.json`` is damaged).  ``"completed" in it``: the run consumed all its input."""
    path = Path(storage) / RUN_FILE
    return _read_run(path) if path.is_file() else None


def _read_run(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or not isinstance(doc.get("query"), str):
            raise ValueError("not a run description")
        return doc
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is damaged ({e}): the run cannot be identified") from None
