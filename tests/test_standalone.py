"""``scabbard spark ...`` and cluster masters: clear one-line errors for a missing Java, an
unreachable master, bad settings.  (``spark up``, ``status`` and ``down`` on a real cluster:
the fixture and tests of ``test_spark_cluster.py``.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scabbard.cli import main

VENV_BIN = Path(sys.executable).parent


def cli(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "scabbard.cli", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


def test_a_missing_java_is_one_clear_line_and_starts_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(VENV_BIN)  # no java on it
    out = cli("spark", "up", "--folder", str(tmp_path / "c"), env=env)
    assert out.returncode == 1
    assert out.stderr.startswith("scabbard: error: Spark needs Java 17+") and "Traceback" not in out.stderr
    assert not (tmp_path / "c" / "cluster.json").exists()
    run = cli("run", "--query", "YSB", "--backend", "spark", "--data", str(tmp_path), env=env)
    assert run.returncode == 1 and "Spark needs Java 17+" in run.stderr


@pytest.mark.parametrize("args, message", [
    (["spark", "up", "--workers", "0"], "--workers and --cores must be >= 1"),
    (["spark", "up", "--memory", "lots"], "--memory must be a size like 2g"),
    (["spark", "up", "--port", "70000"], "--port must be a port number"),
])
def test_bad_cluster_settings_are_one_line(capsys, tmp_path, args, message):
    assert main([*args, "--folder", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("scabbard: error: ") and message in err


def test_an_unreachable_master_is_one_clear_line(capsys, tmp_path):
    # port 1 on loopback: nothing listens there; the error comes before any JVM starts
    for args in (["datagen", "sg", "--scale", "tiny", "--out", (tmp_path / "d").as_uri()],
                 ["run", "--query", "YSB", "--backend", "spark", "--data", str(tmp_path),
                  "--workdir", (tmp_path / "w").as_uri()]):
        assert main([*args, "--master", "spark://127.0.0.1:1"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("scabbard: error: cannot reach the Spark master "
                              "spark://127.0.0.1:1") and "Connection refused" in err


def test_the_reports_show_the_master_workers_and_applications(tmp_path):
    """``scabbard spark``'s lines (scabbard.standalone.report), from a status dict."""
    from types import SimpleNamespace

    from scabbard.standalone import report

    status = {"running": True, "master_url": "spark://127.0.0.1:7077", "master_pid": 11,
              "master": False, "ui_url": "http://127.0.0.1:8080", "applications": ["app"],
              "workers": [{"role": "worker-1", "pid": 12, "process": True, "state": "ALIVE",
                           "cores": 2, "memory_mb": 1024},
                          {"role": "worker-2", "pid": 13, "process": False, "state": "DEAD",
                           "cores": None, "memory_mb": None}]}
    assert report.status_text(tmp_path, status).splitlines() == [
        f"Spark standalone cluster in {tmp_path}:",
        "  master   spark://127.0.0.1:7077  (pid 11, not answering)",
        "  web UI   http://127.0.0.1:8080",
        "  worker-1 pid 12       ALIVE, 2 cores, 1024 MB",
        "  worker-2 pid 13       process gone",
        "  running: app"]
    assert report.status_text(tmp_path, {"running": False}) == \
        f"no cluster running in {tmp_path}"
    gone = SimpleNamespace(folder=tmp_path, state=None, down=lambda: [])
    assert report.down(gone) == f"no cluster in {tmp_path}"
    ran = SimpleNamespace(folder=tmp_path, state=object(), down=lambda: [21, 22])
    assert report.down(ran) == f"stopped the cluster in {tmp_path}: 2 JVMs (21, 22)"
    st = SimpleNamespace(workers=[1, 2], master_url="spark://h:1")
    up = SimpleNamespace(folder=tmp_path, up=lambda: st, status=lambda: status)
    lines = report.up(up).splitlines()
    assert lines[0] == f"Spark standalone cluster up in {tmp_path} (2 workers):"
    assert lines[1:6] == report.status_lines(status) and lines[6] == ""
    assert lines[7].startswith("use it:  --master spark://h:1   (e.g. scabbard run")
    assert lines[8:] == [f"stop it: scabbard spark down --folder {tmp_path}"]
