"""One configuration from the command line to the engine: ``scabbard run``'s flags are made
from the configuration's fields, and a configuration written as flags (what the process
controller starts engines with) reads back as the same configuration."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scabbard import queries
from scabbard.cli import build_parser
from scabbard.cli.errors import CLIError
from scabbard.cli.run import config_from_args
from scabbard.compression.policy import SCHEMES
from scabbard.engine.runtime import MAX_WORKERS
from scabbard.engine.spill import MIN_STATE_MEMORY
from scabbard.faults import POINTS
from scabbard.ft.config import MAX_INTERVAL, FTConfig, PersistConfig, RunConfig
from scabbard.ft.flags import flagged
from scabbard.ft.modes import CHECKPOINT_MODES, DURABILITIES, EXACTLY_ONCE_SINKS

# the fields no flag of their own sets: the command's own flags (--query, --data, --verify,
# --output, --persist-at, --checkpoint-only, --persist-input with --storage), the nested
# parts, and the Python-only settings of tests and benchmarks
UNFLAGGED = {
    RunConfig: {"query", "data", "verify", "persist", "ft"},
    PersistConfig: {"persist_at", "layout"},
    FTConfig: {"output", "persist_input", "every_tasks", "aligned"},
}

paths = st.from_regex(r"/nonexistent/[a-z]{1,8}(/[a-z0-9_-]{1,8}){0,2}", fullmatch=True).map(Path)
positive = st.floats(min_value=1e-3, max_value=1e12, allow_nan=False, allow_infinity=False)
counts = st.integers(min_value=1, max_value=1 << 40)


def maybe(strategy):
    return st.none() | strategy


@st.composite
def persist_configs(draw, fault_tolerant: bool, checkpoint_only: bool):
    compression = None if checkpoint_only else draw(maybe(st.sampled_from(SCHEMES)))
    decimals = draw(maybe(st.integers(0, 9))) if compression in ("default", "adaptive") else None
    edges = st.lists(st.sampled_from(["window0", "join0", "window1", "output"]), unique=True,
                     max_size=3).map(tuple)
    return PersistConfig(draw(paths), push_up=draw(st.booleans()) and not checkpoint_only,
                         compression=compression, lossy_decimals=decimals,
                         compression_interval=draw(positive),
                         persist_at=draw(edges) if fault_tolerant else ())


@st.composite
def ft_configs(draw, checkpoint_only: bool):
    mode = draw(maybe(st.sampled_from(CHECKPOINT_MODES)))
    eventual = mode == "eventual"
    point = draw(st.sampled_from(POINTS)) + draw(st.sampled_from(["", ":1", ":7"]))
    return FTConfig(
        draw(paths), sink=draw(st.sampled_from(EXACTLY_ONCE_SINKS)),
        interval=draw(st.floats(min_value=1e-3, max_value=MAX_INTERVAL)),
        durability=draw(maybe(st.sampled_from(DURABILITIES))),
        persist_input=False if checkpoint_only else None,
        crash_at=draw(maybe(st.just(point))), spawned_at=draw(maybe(positive)),
        checkpoint_mode=mode, step_ms=draw(positive) if eventual else 10.0,
        max_unsaved_panes=draw(maybe(counts)) if eventual else None,
        max_replay_tuples=draw(maybe(counts)) if eventual else None)


@st.composite
def run_configs(draw):
    kind = draw(st.sampled_from(["in memory", "persisted", "fault-tolerant"]))
    checkpoint_only = kind == "fault-tolerant" and draw(st.booleans())
    ft = draw(ft_configs(checkpoint_only)) if kind == "fault-tolerant" else None
    persist = None if kind == "in memory" else draw(
        persist_configs(ft is not None, checkpoint_only))
    full = ft is None or ft.checkpoint_mode in (None, "full")
    assembly = draw(st.sampled_from(["auto", "serial", "partitioned", "partitioned:3",
                                     "dataflow", "dataflow:2"]))
    engine_only = not assembly.startswith("dataflow")  # a dataflow's state is in memory
    return RunConfig(
        draw(st.sampled_from(queries.ALL)), data=draw(maybe(paths)), rate=draw(maybe(positive)),
        duration=draw(maybe(positive)), max_tuples=draw(maybe(counts)),
        workers=draw(maybe(st.integers(1, MAX_WORKERS))), batch_rows=draw(maybe(counts)),
        metrics_interval=draw(positive), metrics_log=draw(maybe(paths)),
        verify=draw(st.sampled_from(["once", True, False])), persist=persist, ft=ft,
        assembly=assembly, ingress_partitions=draw(maybe(st.integers(1, 64))),
        state_memory=draw(maybe(st.integers(MIN_STATE_MEMORY, 1 << 50)))
        if full and engine_only else None,
        spill_dir=draw(maybe(paths)), adaptive_kernels=draw(st.booleans()) and engine_only)


def parsed(argv: list[str]) -> RunConfig:
    return config_from_args(build_parser("run").parse_args(["run", *argv]))


@settings(max_examples=300, deadline=None)
@given(run_configs())
def test_a_configuration_written_as_flags_reads_back_the_same(config):
    assert parsed(config.argv()) == config


def test_every_setting_has_its_flag_or_is_named_as_the_commands_own():
    """A new field is a new flag (with its help), or is listed here on purpose."""
    for cls, own in UNFLAGGED.items():
        flags = {f.name for f, _ in flagged(cls)}
        assert flags | own == {f.name for f in dataclasses.fields(cls)}, cls
        assert not flags & own
        assert all(spec["help"] for _, spec in flagged(cls))


def test_a_setting_without_a_flag_cannot_be_written_as_flags(tmp_path):
    ft = FTConfig(tmp_path / "out", every_tasks=3)
    config = RunConfig("CM1", persist=PersistConfig(tmp_path / "s"), ft=ft)
    with pytest.raises(ValueError, match="every_tasks"):
        config.argv()
    with pytest.raises(ValueError, match="interval"):
        dataclasses.replace(config, ft=FTConfig(tmp_path / "out", interval=None)).argv()


@pytest.mark.parametrize("flags, message", [
    (["--checkpoint-step", "-1", "--checkpoint-mode", "eventual"], "--checkpoint-step must be"),
    (["--compression-interval", "0"], "--compression-interval must be positive"),
    (["--max-unsaved-panes", "0", "--checkpoint-mode", "eventual"], "--max-unsaved-panes must"),
])
def test_a_value_a_field_refuses_names_the_flag(tmp_path, flags, message):
    argv = ["--query", "CM1", "--checkpoint-interval", "1", "--storage", str(tmp_path / "s"),
            "--output", str(tmp_path / "o"), *flags]
    with pytest.raises(CLIError, match=message):
        parsed(argv)


def _fault_tolerant(tmp_path, **persist) -> RunConfig:
    return RunConfig("LRB1", persist=PersistConfig(tmp_path / "s", **persist),
                     ft=FTConfig(tmp_path / "o"))


def test_a_placement_chosen_after_the_flags_gives_a_new_configuration(tmp_path):
    from scabbard.errors import FlagError
    from scabbard.ft.command import placed

    config = _fault_tolerant(tmp_path)
    both = placed(config, ("ingress", "window0"))
    assert both.persist.persist_at == ("window0",) and both.ft.persist_input is None
    assert placed(config, ()).ft.persist_input is False  # checkpoints only
    assert placed(config, ("output",)).persist.persist_at == ("output",)
    assert config == _fault_tolerant(tmp_path)  # the checked one is left as it was
    with pytest.raises(FlagError, match="nothing to reduce"):
        placed(_fault_tolerant(tmp_path, push_up=True), ("window0",))


def test_a_plain_recovery_takes_the_recorded_placement_and_push_up(tmp_path):
    from scabbard.ft.command import as_recorded

    config = _fault_tolerant(tmp_path)
    run = {"persist_at": ["window0"], "persist_input": False, "push_up": False}
    recovered = as_recorded(config, run, placement_given=False)
    assert recovered.persist.persist_at == ("window0",)
    assert recovered.ft.persist_input is False
    assert as_recorded(config, run, placement_given=True) == config  # the recovery checks it
    pushed = as_recorded(config, {"push_up": True}, placement_given=False)
    assert pushed.persist.push_up and pushed.persist.persist_at == ()
    assert as_recorded(config, None, placement_given=False) == config


def test_checkpoint_only_or_persist_input_against_a_placement_is_one_line(tmp_path):
    """What ``--persist-at`` refuses, a placement chosen or recorded refuses too: naming the
    flags, never a field."""
    from scabbard.errors import FlagError
    from scabbard.ft.command import as_recorded, placed

    only = dataclasses.replace(_fault_tolerant(tmp_path), ft=FTConfig(
        tmp_path / "o", persist_input=False))
    with pytest.raises(FlagError, match="--checkpoint-only and the placement"):
        placed(only, ("ingress", "window0"))
    assert placed(only, ("window0",)).ft.persist_input is False
    with pytest.raises(FlagError, match="--persist-input and the placement"):
        placed(_fault_tolerant(tmp_path), (), persist_input_given=True)
    with pytest.raises(FlagError, match="the run had push-up"):
        as_recorded(only, {"push_up": True}, placement_given=True)


# the settings a recovery must repeat or leave out (run.json records them): a new one is a
# field marked recorded - and a line here
RECORDED = {"rate", "max_tuples", "batch_rows", "state_memory", "push_up", "compression",
            "lossy_decimals", "persist_at", "sink", "durability", "persist_input",
            "checkpoint_mode"}
IDENTITY = {"checksum": "c", "schema": "s", "rows": 1, "workload": "w", "params": {},
            "path": "/d"}


def _recorded_fields(config: RunConfig):
    return [(part, f) for part in (config, config.persist, config.ft)
            for f in dataclasses.fields(part) if "recorded" in f.metadata]


@settings(max_examples=200, deadline=None)
@given(run_configs())
def test_run_json_is_the_configuration_a_recovery_runs_with(config):
    """A fresh run records each recorded setting under its field's name (None: the default it
    runs with); a recovery that leaves them out runs with the recorded ones, one that gives
    them again is accepted, one that gives another value of any is refused naming it."""
    import json
    import tempfile

    from scabbard.ft import runfile
    from scabbard.storage.fileio import OS, Durability

    if config.ft is None:
        return
    assert {f.name for _, f in _recorded_fields(config)} == RECORDED
    record = json.loads(json.dumps(runfile.settings(config, fresh=True)))
    assert set(record) == RECORDED and None not in (
        record["durability"], record["persist_input"], record["checkpoint_mode"],
        record["compression"])
    blank = dataclasses.replace(
        config, rate=None, max_tuples=None, batch_rows=None, state_memory=None,
        persist=dataclasses.replace(config.persist, compression=None, lossy_decimals=None),
        ft=dataclasses.replace(config.ft, durability=None, persist_input=None,
                               checkpoint_mode=None))
    recovered = runfile.as_run(blank, record)
    for part, f in _recorded_fields(recovered):
        value = getattr(part, f.name)
        assert (list(value) if isinstance(value, tuple) else value) == record[f.name], f.name
    with tempfile.TemporaryDirectory() as folder:
        storage = Path(folder)
        want = {"dataset": IDENTITY, "output": "/o", **record}
        runfile.open_run_file(storage, OS, "Q", False, want, Durability.PROCESS)
        given_again = {"dataset": IDENTITY, "output": "/o",
                       **runfile.settings(config, fresh=False)}
        runfile.open_run_file(storage, OS, "Q", True, given_again, Durability.PROCESS)
        for name in RECORDED - {"push_up"}:  # (push-up: the recovery's own message)
            other = dict(given_again, **{name: ["another"]})
            with pytest.raises(runfile.RunMismatch, match=f"{name} .* recorded, "):
                runfile.open_run_file(storage, OS, "Q", True, other, Durability.PROCESS)


def test_a_record_of_an_older_build_without_a_setting_runs_as_that_build_did(tmp_path):
    """A run.json written before a setting was recorded: the value runs had then (process
    durability, persisted input, full checkpoints, no compression, no push-up)."""
    from scabbard.ft import runfile

    config = _fault_tolerant(tmp_path)
    old = runfile.as_run(config, {"batch_rows": 4096, "rate": None, "max_tuples": 10})
    assert (old.ft.durability, old.ft.persist_input, old.ft.checkpoint_mode) == (
        "process", True, "full")
    assert (old.persist.compression, old.persist.push_up) == ("none", False)
    assert (old.batch_rows, old.max_tuples, old.state_memory) == (4096, 10, None)


def test_a_setting_given_that_does_not_go_with_a_recorded_one_is_refused_in_one_line(tmp_path):
    """A checkpoint step given to the recovery of a run of full checkpoints: refused, naming
    the recorded setting (the recovery would otherwise run without what was asked)."""
    from scabbard.ft import runfile

    config = _fault_tolerant(tmp_path)
    step = dataclasses.replace(config, ft=dataclasses.replace(config.ft, step_ms=5.0))
    with pytest.raises(runfile.RunMismatch, match="recorded settings and those given do not "
                                                  "go together: checkpoint_mode must be eventual"):
        runfile.as_run(step, {"checkpoint_mode": "full"})
    assert runfile.as_run(step, {"checkpoint_mode": "eventual"}).ft.checkpoint_mode == "eventual"
