"""The command line: help, clear errors with non-zero exits, and a real run."""

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scabbard.cli import main

VENV_BIN = Path(sys.executable).parent


def run_cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "scabbard.cli", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)


@pytest.mark.parametrize(
    "args, message",
    [
        (["datagen", "foo"], "unknown workload 'foo'"),
        (["datagen", "lrb", "--rate", "-5"], "--rate must be a positive number"),
        (["datagen", "lrb", "--duration", "0"], "--event-seconds must be a positive number"),
        (["datagen", "lrb", "--event-seconds", "nan"], "--event-seconds must be a positive number"),
        (["datagen", "sm", "--duration", "0.001", "--rate", "1"], "gives no rows"),
        (["datagen", "cm", "--xways", "3"], "--xways does not apply to workload 'cm'"),
        (["datagen", "lrb", "--xways", "-1"], "--xways must be >= 0"),
        (["datagen", "lrb", "--rate", "10.5"], "must be whole"),
        (["datagen", "sm", "--change-at", "99999"], "--change-at must lie within"),
        (["datagen", "sm", "--seed", "-1"], "--seed must be an integer"),
        (["datagen", "sg", "--partitions", "0"], "--partitions must be >= 1"),
        (["datagen", "all", "--name", "x"], "cannot be used with 'all'"),
    ],
)
def test_bad_parameters_exit_2_with_one_clear_line(capsys, tmp_path, args, message):
    code = main([*args, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("scabbard: error: ") and message in err
    assert "Traceback" not in err

@pytest.mark.parametrize("args, message", [
    (["reproduce", "--only", "nope"], "unknown experiment(s) ['nope']"),
    (["reproduce", "--jobs", "0"], "jobs must be at least 1, got 0"),
])
def test_reproduce_refuses_bad_experiments_with_one_line(capsys, tmp_path, args, message):
    code = main([*args, "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("scabbard: error: ") and message in err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []



def test_unknown_scale_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["datagen", "cm", "--scale", "huge"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_unwritable_output_folder(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code = main(["datagen", "sg", "--scale", "tiny", "--out", str(blocker / "data")])
    assert code == 2
    assert "cannot write to output folder" in capsys.readouterr().err


@pytest.mark.parametrize("java_home", [None, "/nonexistent/jdk"])
def test_no_java_is_a_clear_error(tmp_path, java_home):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(VENV_BIN)  # no java on it
    if java_home:
        env["JAVA_HOME"] = java_home
    out = run_cli("datagen", "sg", "--scale", "tiny", "--out", str(tmp_path), env=env)
    assert out.returncode == 1
    assert "Spark needs Java 17+" in out.stderr and "openjdk-17" in out.stderr
    assert "Traceback" not in out.stderr


def test_every_command_explains_itself():
    for args in (["--help"], ["datagen", "--help"], ["data", "--help"], ["reproduce", "--help"],
                 ["bench", "datagen", "--help"]):
        out = run_cli(*args)
        assert out.returncode == 0 and "usage: scabbard" in out.stdout
    assert "--change-at" in run_cli("datagen", "--help").stdout



def test_a_run_or_a_recovery_loads_no_analysis_library_to_read_its_flags():
    """A cold restart is ``scabbard run --recover`` in a new process: building the parser
    must not import the experiments' libraries (pandas: ~0.2 s of the restart), nor the
    other commands' modules (the Spark cluster's HTTP client, the benchmarks', the
    simulator's: ~40 ms)."""
    code = ("import sys; from scabbard.cli import build_parser; build_parser('run'); "
            "print(sorted(m for m in ('pandas', 'matplotlib', 'pyspark', 'scabbard.check', "
            "'scabbard.experiments.validation', 'scabbard.standalone', 'scabbard.cli.bench', "
            "'scabbard.sim.session', 'http.client') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"

@pytest.mark.spark
def test_datagen_writes_a_dataset_and_data_check_validates_it(spark, tmp_path, capsys):
    assert main(["datagen", "sg", "--scale", "tiny", "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "sg" in out and str(tmp_path / "sg" / "tiny") in out
    assert main(["data", "check", str(tmp_path / "sg" / "tiny"), "--verify"]) == 0
    assert "checksums verified" in capsys.readouterr().out
    assert main(["data", "list", "--root", str(tmp_path)]) == 0
    assert "sg/tiny" in capsys.readouterr().out
    col = tmp_path / "sg" / "tiny" / "stream" / "columns" / "value.bin"
    data = bytearray(col.read_bytes())
    data[100] ^= 1
    col.write_bytes(bytes(data))
    assert main(["data", "check", str(tmp_path / "sg" / "tiny"), "--verify"]) == 1
    assert "checksum mismatch" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "--query", "Q7"], "invalid choice"),
        (["run", "--query", "CM1", "--workers", "0"], "--workers must be >= 1"),
        (["run", "--query", "CM1", "--workers", "100000"], "--workers must be at most 1024"),
        (["run", "--query", "CM1", "--rate", "-1"], "--rate must be positive"),
        (["run", "--query", "CM1", "--out", "x.json"], "use a .parquet or .csv"),
        (["run", "--query", "CM1", "--assembly", "keyed"],
         "--assembly must be serial, partitioned[:P], auto or dataflow[:P], got 'keyed'"),
        (["run", "--query", "CM1", "--assembly", "partitioned:0"],
         "--assembly partitioned:P needs a whole number of partitions >= 1, got '0'"),
        (["run", "--query", "LRB1", "--assembly", "dataflow", "--state-memory", "64M"],
         "--assembly dataflow holds its window state in memory and runs the generic kernels"),
        (["run", "--query", "CM1", "--ingress-partitions", "0"],
         "--ingress-partitions must be >= 1, got 0"),
        (["ingest", "--query", "CM1", "--ingress-partitions", "0"],
         "--ingress-partitions must be >= 1, got 0"),
        (["bench", "engine", "--ingress", "0"], "ingress_partitions must be a whole number"),
        (["bench", "engine", "--rounds", "0"], "rounds must be a whole number >= 1, got 0"),
        (["bench", "ingest", "--ingress", "1", "0"], "ingress partitions must be whole numbers"),
        (["run", "--query", "CM1", "--checkpoint-interval", "0", "--storage", "s", "--output",
          "o"], "--checkpoint-interval 0: a checkpoint interval is a positive number"),
        (["run", "--query", "CM1", "--checkpoint-interval", "1", "--storage", "s", "--output",
          "o", "--persist-at", ","], "--persist-at ',' names no edge"),
    ],
)
def test_run_rejects_bad_arguments(capsys, args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a flag taken by mistake writes nothing into the checkout
    try:
        code = main(args)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    assert code == 2 and message in capsys.readouterr().err


@pytest.mark.spark
def test_run_writes_window_results(tiny, tmp_path, capsys):
    import pyarrow.parquet as pq

    out = tmp_path / "lrb1.parquet"
    assert main(["run", "--query", "lrb1", "--data", str(tiny["lrb"].path), "--out", str(out),
                 "--workers", "2", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "M tuples/s" in text and "latency ms: p5" in text
    table = pq.read_table(out)
    assert table.column_names == ["window_start", "window_end", "highway", "direction", "segment",
                                  "avg_speed"]
    ends = table.column("window_end").to_numpy()
    assert table.num_rows > 0 and (ends[1:] >= ends[:-1]).all()
    assert (table.column("avg_speed").to_numpy() < 40).all()


@pytest.mark.spark
def test_run_with_the_spark_backend(tiny, tmp_path, capsys):
    out = tmp_path / "ysb.parquet"
    assert main(["run", "--query", "YSB", "--backend", "spark", "--data", str(tiny["ysb"].path),
                 "--out", str(out)]) == 0
    assert "Spark Structured Streaming" in capsys.readouterr().out
    assert out.stat().st_size > 0
    assert main(["run", "--query", "YSB", "--backend", "spark", "--data", str(tiny["ysb"].path),
                 "--rate", "100"]) == 2
    assert "applies to the scabbard backend" in capsys.readouterr().err


@pytest.mark.spark
def test_run_with_persisted_input_and_ingest(tiny, tmp_path, capsys):
    from scabbard.storage import BlockManager
    from scabbard.workloads import cm

    store = tmp_path / "store"
    data = str(tiny["cm"].path)
    assert main(["run", "--query", "CM1", "--data", data, "--persist-input", "--storage",
                 str(store), "--max-tuples", "200000", "--batch", "20000", "--quiet"]) == 0
    assert f"persisting the input to {store}" in capsys.readouterr().out
    with BlockManager(store) as bm:
        assert bm.durable_end(bm.stream("input", cm.SCHEMA)) == 200_000
        # a second engine on the same folder is refused, clearly, and nothing is lost
        assert main(["run", "--query", "CM1", "--data", data, "--persist-input", "--storage",
                     str(store), "--max-tuples", "1000", "--quiet"]) == 1
        assert "in use by another engine" in capsys.readouterr().err
    assert main(["ingest", "--query", "CM1", "--data", data, "--storage", str(tmp_path / "i"),
                 "--duration", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "CM1 ingest:" in out and "MB/s to disk" in out
    assert main(["run", "--query", "CM1", "--storage", str(store)]) == 2
    assert "add --persist-input" in capsys.readouterr().err


BENCH_SETTINGS = {"engine": "engine_throughput", "ingest": "ingest", "checkpoints": "checkpointing",
                  "codecs": "compression", "peers": "comparison", "aligned": "aligned",
                  "kills": "kills", "incremental": "incremental", "interquery": "interquery"}


@pytest.mark.parametrize("command", sorted(BENCH_SETTINGS))
def test_bench_flags_are_the_experiments_settings(command):
    """Each benchmark's flags are its experiment's settings, declared once: with no flag
    given it runs the experiment's defaults (and what the command line sets apart)."""
    import dataclasses
    import importlib

    from scabbard.cli import build_parser
    from scabbard.cli.settings import settings_from

    exp = importlib.import_module(f"scabbard.experiments.{BENCH_SETTINGS[command]}")
    args = build_parser("bench").parse_args(["bench", command])
    extra = {"output_dir": args.out} if command == "engine" else {}
    overrides = {"rounds": 2} if command == "checkpoints" else {}
    got = settings_from(exp.Settings, args, **extra)
    assert got == dataclasses.replace(exp.Settings(), **extra, **overrides)
    flags = set(vars(args)) - {"command", "bench_cmd", "func", "out"}
    assert flags and flags <= {f.name for f in dataclasses.fields(exp.Settings)}


def test_bench_flags_reach_the_settings_and_bad_values_are_one_line(capsys):
    from scabbard.cli import build_parser
    from scabbard.cli.settings import settings_from
    from scabbard.experiments import kills

    args = build_parser("bench").parse_args(
        ["bench", "kills", "--queries", "cm1", "lrb3", "--sinks", "transactional", "--kills",
         "3", "--min", "0.5", "--max", "2", "--compression-interval", "0.25"])
    s = settings_from(kills.Settings, args)
    assert (s.queries, s.sinks, s.kills, s.min_life, s.max_life, s.compression_interval) == (
        ("CM1", "LRB3"), ("transactional",), 3, 0.5, 2.0, 0.25)
    assert main(["bench", "kills", "--kills", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("scabbard: error: ") and err.count("\n") == 1
    # p-streams on other edges than the input: refused for a dataflow before anything runs
    assert main(["bench", "kills", "--assembly", "dataflow:2"]) == 2
    assert kills.Settings(assembly="dataflow:2", placements="none").placements == "none"
    err = capsys.readouterr().err
    assert err.startswith("scabbard: error: ") and "--placements none" in err


def test_bench_kills_reduces_every_configuration_with_the_scheme_asked():
    """``--reduce-every 1 --reduced-with adaptive``: every configuration with push-up and the
    adaptive codecs; by default the adaptive and the default scheme take turns."""
    from scabbard.cli import build_parser
    from scabbard.cli.settings import settings_from
    from scabbard.experiments import kills

    args = build_parser("bench").parse_args(
        ["bench", "kills", "--queries", "cm1", "cm2", "ysb", "--sinks", "clocked",
         "--reduce-every", "1", "--reduced-with", "adaptive"])
    plan = kills.plan(settings_from(kills.Settings, args))
    assert [(c.push_up, c.compression) for c in plan] == [(True, "adaptive")] * 3
    turns = kills.plan(kills.Settings(queries=("CM1", "CM2"), sinks=("clocked",),
                                      reduce_every=1))
    assert [c.compression for c in turns] == ["adaptive", "default"]
    with pytest.raises(ValueError, match="reduced_with"):
        kills.Settings(reduced_with="zstd")


def test_bench_restart_summarises_each_phase_over_the_rounds(capsys):
    """``bench restart``: each phase's median and spread over the rounds, per kind of restart;
    no round is a one-line error."""
    import pandas as pd

    from scabbard.experiments import recovery

    runs = pd.DataFrame([{"round": k, "restart": r, "phase": "state load", "ms": ms,
                          "exactly_once": True}
                         for k, (r, ms) in enumerate([("cold restart", 200.0),
                                                      ("cold restart", 100.0),
                                                      ("cold restart", 400.0),
                                                      ("warm standby", 50.0)])])
    s = recovery.restart_summary(runs).set_index("restart")
    assert tuple(s.loc["cold restart", ["median ms", "min ms", "max ms", "rounds"]]) == (
        200.0, 100.0, 400.0, 3)
    assert s.loc["warm standby", "median ms"] == 50.0
    assert main(["bench", "restart", "--rounds", "0"]) == 2
    assert capsys.readouterr().err.startswith("scabbard: error: --rounds")


def test_mistakes_are_one_line_with_one_prefix_and_exit_2(capsys, tmp_path, monkeypatch):
    """38 mistakes a user makes - argparse's errors of every subcommand, wrong names, values
    out of range, a missing dataset, a file given for a folder (dataset, storage, output),
    contradicting flags: one line, ``scabbard: error:``, exit 2 (no usage, no traceback)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("x")
    for args in (["run", "--query", "FOO"], ["run", "--query", "CM1", "--duration", "abc"],
                 ["datagen", "ysb", "--scale", "medium"], ["bench", "kills", "--kills", "abc"],
                 ["check", "crash-states", "--query", "NOPE"], ["sim", "run", "--workers", "x"],
                 ["nosuchcommand"], ["run", "--query", "CM1", "--data", str(tmp_path / "nope")],
                 ["run", "--query", "CM1", "--data", str(tmp_path / "file")],
                 ["data", "check", str(tmp_path / "file")],
                 ["run", "--query", "CM1", "--rate", "abc"],
                 ["run", "--query", "CM1", "--max-tuples", "-5"],
                 ["run", "--query", "CM1", "--batch", "0"],
                 ["run", "--query", "CM1", "--checkpoint-interval", "1", "--storage", "s",
                  "--output", "file"],
                 ["run", "--query", "CM1", "--persist-input", "--storage", "file"],
                 ["run", "--query", "CM1", "--recover", "--output", "o"],
                 ["run", "--query", "CM1", "--sink", "nope", "--storage", "s", "--output", "o"],
                 ["run", "--query", "CM1", "--durability", "sometimes"],
                 ["run", "--query", "CM1", "--compression", "zip"],
                 ["run", "--query", "CM1", "--state-memory", "abc"],
                 ["run", "--query", "CM1", "--metrics-interval", "0"],
                 ["run", "--query", "CM1", "--verify", "--no-verify"],
                 ["run", "--query", "CM1", "--output", "r.parquet", "--duration", "-1"],
                 ["datagen", "nosuch"], ["datagen", "cm", "--scale", "tiny", "--partitions", "0"],
                 ["explain", "--query", "NOPE"], ["explain", "--query", "CM1", "--sample", "0"],
                 ["ingest", "--query", "NOPE"], ["bench", "checkpoints", "--configs", "nope"],
                 ["bench", "checkpoints", "--workers", "0"], ["sim", "run", "--query", "NOPE"],
                 ["sim", "run", "--query", "CM1", "--cores", "0"],
                 ["sim", "run", "--query", "CM1", "--io-kb", "x"],
                 ["sim", "run", "--query", "CM1", "--disk-mb-s", "-5"],
                 ["sim", "speed", "--cores", "0", "--queries", "CM1"],
                 ["sim", "validate", "--calibration", "nonexist.json"],
                 ["spark", "nosuch"], ["check", "output", "--storage", str(tmp_path / "nope")]):
        try:
            code = main(args)
        except SystemExit as e:
            code = e.code
        err = capsys.readouterr().err
        assert code == 2, (args, err)
        assert err.startswith("scabbard: error: ") and err.count("\n") == 1, (args, err)
        assert "Traceback" not in err and "usage:" not in err


def test_a_closed_pipe_ends_the_command_quietly(data_root, capsys, monkeypatch):
    """``scabbard data list | head -1``: the reader leaves, the command ends without a word."""
    import io
    import os

    r, w = os.pipe()
    os.close(r)
    out = io.TextIOWrapper(os.fdopen(w, "wb", buffering=0), write_through=True)
    monkeypatch.setattr("sys.stdout", out)
    code = main(["data", "list", "--root", str(data_root)])
    monkeypatch.undo()
    assert code == 141 and capsys.readouterr().err == ""


def test_the_spark_cluster_is_found_from_any_folder(tmp_path, monkeypatch, capsys):
    """``scabbard spark status|down`` look for the cluster in the project folder
    (``$SCABBARD_HOME/spark-cluster``), not in the current folder."""
    from scabbard import paths
    from scabbard.standalone import ClusterSettings

    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    monkeypatch.setenv("SCABBARD_HOME", str(home))
    monkeypatch.chdir(elsewhere)
    assert paths.spark_cluster() == home.resolve() / "spark-cluster"
    assert ClusterSettings().folder == home.resolve() / "spark-cluster"
    code = main(["spark", "status"])
    out = capsys.readouterr().out
    assert code == 3 and str(home.resolve() / "spark-cluster") in out
    assert str(elsewhere) not in out


def _options(parser, path=("scabbard",)):
    """(command, option strings, action) of every option of every subcommand."""
    import argparse

    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _options(sub, (*path, name))
        elif a.option_strings:
            yield " ".join(path), a.option_strings, a


def test_every_shown_flag_has_help_and_run_help_is_grouped():
    import argparse

    from scabbard.cli import build_parser

    bare = [(cmd, flags) for cmd, flags, a in _options(build_parser())
            if a.help is None and a.help != argparse.SUPPRESS]
    assert not bare, bare
    run = next(a for a in build_parser()._actions
               if isinstance(a, argparse._SubParsersAction)).choices["run"]
    help_text = run.format_help()
    heads = [f"\n{h}:\n" for h in ("input", "engine", "persistence", "fault tolerance",
                                    "output", "the Spark backend (--backend spark)")]
    heads = [h for h in heads if h in help_text]
    assert len(heads) == 6 and [help_text.index(h) for h in heads] == \
        sorted(help_text.index(h) for h in heads)
    assert "--spawned-at" not in help_text and "--crash-at" in help_text


def test_every_bench_names_fields_its_settings_have_and_a_run_its_module_has():
    """The benchmarks' table (scabbard.experiments.benches): each one's flags are fields of
    its experiment's settings, with help; its run's module has what the run calls."""
    import dataclasses

    from scabbard.cli.settings import flag_of, help_of
    from scabbard.experiments.benches import BENCHES, BY_NAME

    assert len({b.name for b in BENCHES}) == len(BENCHES)
    for b in BENCHES:
        fields = {f.name for f in dataclasses.fields(b.settings_class())}
        assert set(b.options) <= fields, b.name
        assert set(b.defaults) <= fields and set(b.helps) <= set(b.options), b.name
        for name in b.options:
            flag = flag_of(name)
            assert help_of(name, flag, b.helps), (b.name, name)
        exp = b.experiment()
        missing = [n for n in b.needs() if not hasattr(exp, n)]
        assert not missing, (b.name, missing)
    broken = dataclasses.replace(BY_NAME["cluster"], module="kills")  # the check can fail
    assert [n for n in broken.needs() if not hasattr(broken.experiment(), n)]


def test_crash_states_flags_are_the_explorers_settings(capsys):
    """``check crash-states``: with no flag its settings are the explorer's defaults; each
    flag reaches its field; a value the settings refuse is one line naming the flag."""
    from scabbard.check import Settings
    from scabbard.cli import build_parser
    from scabbard.cli.check import crash_settings

    def parsed(*flags):
        return crash_settings(build_parser("check").parse_args(
            ["check", "crash-states", "--query", "cm1", *flags]))

    assert parsed() == Settings("CM1")
    s = parsed("--states", "7", "--every", "2", "--batch", "500", "--state-memory", "8M",
               "--sink", "transactional", "--nested", "1", "--push-up", "--persist-at",
               "ingress,window0")
    assert (s.states, s.every_tasks, s.batch_rows, s.state_memory, s.sink, s.nested,
            s.push_up, s.persist_at) == (7, 2, 500, 8 << 20, "transactional", 1, True,
                                         ("window0",))
    assert main(["check", "crash-states", "--query", "CM1", "--states", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("scabbard: error: --states must be >= 1") and err.count("\n") == 1


def test_cluster_and_validation_flags_are_their_settings():
    """``spark up`` and ``sim validate``: no flag gives the settings' defaults, each flag its
    field (the defaults are written once, in the settings)."""
    from scabbard.cli import build_parser, spark
    from scabbard.cli.settings import settings_from
    from scabbard.experiments import validation
    from scabbard.standalone import ClusterSettings

    parse = build_parser().parse_args
    assert spark._settings(parse(["spark", "up"])) == ClusterSettings()
    s = spark._settings(parse(["spark", "up", "--ui-port", "0", "--memory", "1g",
                               "--timeout", "9"]))
    assert (s.ui_port, s.memory, s.timeout) == (0, "1g", 9.0)
    assert spark._settings(parse(["spark", "status"])) == ClusterSettings()
    assert str(spark._settings(parse(["spark", "down", "--folder", "c"])).folder) == "c"
    v = validation.Settings
    assert settings_from(v, parse(["sim", "validate"])) == v()
    s = settings_from(v, parse(["sim", "validate", "--no-kill", "--repeats", "5", "--duration",
                                "2", "--queries", "sm"]))
    assert (s.kill, s.repeats, s.seconds, s.queries) == (False, 5, 2.0, ("SM",))


def test_a_settings_fields_help_is_its_flags():
    """A settings field's ``metadata["help"]`` is its flag's help, unless the command gives
    its own; the explorer's, the cluster's and the validation's are their fields'."""
    import argparse
    from dataclasses import dataclass, field

    from scabbard.cli.settings import settings_flags

    @dataclass(frozen=True)
    class S:
        depth: int = field(default=3, metadata={"help": "how deep it goes"})
        width: int = field(default=2, metadata={"help": "how wide"})

    p = argparse.ArgumentParser()
    settings_flags(p, S, "depth", "width", helps={"width": "the command's own"})
    text = " ".join(p.format_help().split())
    assert "how deep it goes (default 3)" in text and "the command's own (default 2)" in text
    assert "how wide" not in text
    helps = _helps()
    assert "crash states to explore, sampled when there are more (default 1000)" \
        in helps["scabbard check crash-states"]
    assert "cores per worker (default 1)" in helps["scabbard spark up"]
    assert "real runs per configuration; their median is compared (default 3)" \
        in helps["scabbard sim validate"]


def _helps() -> dict[str, str]:
    """Each command's ``--help``, whitespace collapsed, by its name."""
    import argparse

    from scabbard.cli import build_parser

    out = {}

    def walk(p, name):
        out[name] = " ".join(p.format_help().split())
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for n, sub in a.choices.items():
                    walk(sub, f"{name} {n}")

    walk(build_parser(), "scabbard")
    return out


def test_datagen_takes_each_workloads_own_options_from_its_generator():
    """``datagen``'s workload options are the generators' :class:`Option`\\ s: each is a
    flag with its help and default, and its value reaches the option."""
    from scabbard import workloads
    from scabbard.cli import build_parser

    options = [(w, o) for w in workloads.ALL for o in workloads.get(w).SPEC.options]
    assert len(options) >= 8
    text = _helps()["scabbard datagen"]
    parse = build_parser("datagen").parse_args
    for w, o in options:
        assert f"--{o.flag}" in text and o.help.split(" (")[0] in text, o
        value = o.type(7)
        assert getattr(parse(["datagen", w, f"--{o.flag}", str(value)]), o.name) == value


def test_sim_run_flags_are_the_simulated_runs_fields(tmp_path, capsys):
    """``sim run``: each flag sets its :class:`SimConfig` field (the engine's flags, declared
    once, taken with the simulator's choices and defaults); a value the configuration
    refuses is one line naming the flag."""
    import json

    from scabbard.cli import build_parser, main
    from scabbard.ft.flags import flagged, given
    from scabbard.sim.config import SCHEMES, SimConfig

    parse = build_parser("sim").parse_args
    args = parse(["sim", "run", "--query", "CM1", "--workers", "3", "--batch", "512",
                  "--compression", "push-up+adaptive", "--no-persist-input", "--sim-seconds",
                  "2", "--fail-at", "1", "--assembly-parts", "2", "--adaptive-kernels"])
    assert given(args, SimConfig) == {
        "workers": 3, "batch_rows": 512, "compression": "push-up+adaptive", "persist": False,
        "duration": 2.0, "fail_at": 1.0, "assembly_parts": 2, "adaptive_kernels": True}
    assert given(parse(["sim", "run", "--query", "CM1"]), SimConfig) == {}
    assert {s["name"] for _, s in flagged(SimConfig)} <= set(_helps()["scabbard sim run"]
                                                            .replace("[", " ").split())
    choices = next(a.choices for a in _actions(build_parser("sim"), "sim", "run")
                   if a.dest == "compression")
    assert tuple(choices) == SCHEMES
    assert main(["sim", "run", "--query", "CM1", "--checkpoint-interval", "0", "--fail-at",
                 "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("scabbard: error: --fail-at needs a fault-tolerant run: set "
                          "--checkpoint-interval") and err.count("\n") == 1
    assert main(["sim", "run", "--query", "CM1", "--assembly-parts", "0"]) == 2
    assert "--assembly-parts must be an integer >= 1" in capsys.readouterr().err
    assert main(["sim", "run", "--query", "CM1", "--sim-seconds", "1", "--json",
                 "--checkpoint-interval", "0", "--no-persist-input"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["config"]["persist"], doc["config"]["checkpoint_interval"]) == (False, None)


def _actions(parser, *path):
    import argparse

    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser._actions


def test_a_configurations_message_names_its_flags_longest_field_first():
    from dataclasses import dataclass, field

    from scabbard.ft.flags import Group, flag, in_flags

    @dataclass(frozen=True)
    class C:
        rate: float = field(default=1.0, metadata=flag("--rate", "r", Group.ENGINE))
        rate_cap: float = field(default=1.0, metadata=flag("--cap", "c", Group.ENGINE))

    assert in_flags("C.rate_cap must exceed C.rate", C) == "--cap must exceed --rate"


def test_a_commands_texts_are_its_usage_beside_its_work(capsys):
    from scabbard.check import crashstates
    from scabbard.experiments import validation
    from scabbard.ft import command
    from scabbard.standalone import report
    from scabbard.usage import Usage

    def shown(*argv):
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        return " ".join(capsys.readouterr().out.split())

    for argv, usage in ((["run"], command.RUN), (["check", "crash-states"], crashstates.USAGE),
                        (["sim", "validate"], validation.USAGE),
                        (["spark", "status"], report.ACTIONS["status"])):
        text = shown(*argv)
        assert " ".join(usage.description.split()) in text
        assert usage.epilog is None or " ".join(usage.epilog.split()) in text
    assert " ".join(command.RUN.summary.split()) in shown()
    sub = argparse.ArgumentParser(prog="x").add_subparsers()
    p = Usage("checks 100% of it").parser(sub, "c")  # a summary is a help line: % escaped
    assert p.description == "Checks 100% of it."
    assert sub._choices_actions[0].help % {} == "checks 100% of it"
