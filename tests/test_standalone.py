"""``scabbard spark up|status|down``: a real local cluster, stopped down to its last JVM and
nothing else; clear one-line errors for a missing Java, an unreachable master, bad settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scabbard.cli import main
from scabbard.standalone import processes

VENV_BIN = Path(sys.executable).parent


def cli(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "scabbard.cli", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


@pytest.mark.spark
def test_up_status_down_starts_real_jvms_and_stops_exactly_them(tmp_path):
    folder = tmp_path / "cluster"
    # a decoy named like a Spark worker, not started by the cluster: `down` must spare it
    decoy = subprocess.Popen(["bash", "-c", "exec -a 'java org.apache.spark.deploy.worker.Worker' "
                                            "sleep 600"])
    try:
        up = cli("spark", "up", "--folder", str(folder), "--port", "0", "--ui-port", "0")
        assert up.returncode == 0, up.stderr
        assert "spark://127.0.0.1:" in up.stdout and "worker-2" in up.stdout
        status = json.loads(cli("spark", "status", "--folder", str(folder), "--json").stdout)
        assert status["running"] and [w["state"] for w in status["workers"]] == ["ALIVE"] * 2
        jvms = status["processes"]
        assert len(jvms) == 3 and all("java" in processes.command_line(p) for p in jvms)
        assert {status["master_pid"], *(w["pid"] for w in status["workers"])} == set(jvms)
        assert (folder / "master.log").is_file() and (folder / "worker-1" / "local").is_dir()
        down = cli("spark", "down", "--folder", str(folder))
        assert down.returncode == 0 and "3 JVMs" in down.stdout, down.stdout + down.stderr
        assert not any(processes.alive(p) for p in jvms)
        assert processes.tagged(status["tag"]) == []
        assert decoy.poll() is None, "down stopped a process the cluster had not started"
        again = cli("spark", "status", "--folder", str(folder))
        assert again.returncode == 3 and "no cluster running" in again.stdout
        assert "no cluster" in cli("spark", "down", "--folder", str(folder)).stdout
    finally:
        decoy.kill()
        decoy.wait()
        cli("spark", "down", "--folder", str(folder))


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
