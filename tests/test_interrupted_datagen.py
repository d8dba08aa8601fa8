"""`kill -9` during generation never leaves a dataset that looks complete; the next run recovers."""

import os
import signal
import subprocess
import sys
import time

import pytest

from scabbard import workloads
from scabbard.data import DatasetError, open_dataset
from scabbard.workloads.generator import Datagen, generate, make_params

pytestmark = [pytest.mark.crash, pytest.mark.spark, pytest.mark.slow]


def wait_for(predicate, timeout, proc):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def test_sigkill_while_converting_leaves_no_complete_dataset(spark, tmp_path):
    out = tmp_path / "data"
    cmd = [sys.executable, "-m", "scabbard.cli", "datagen", "ysb", "--duration", "600",
           "--rate", "10000", "--out", str(out), "--name", "big", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        # the replay columns appear once Spark has written Parquet: kill in the middle of that
        def converting():
            return any((p / "stream" / "columns").is_dir()
                       for p in (out / "ysb").glob(".big.partial-*")) if (out / "ysb").is_dir() else False

        assert wait_for(converting, 240, proc), proc.stderr.read().decode()[-2000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    final = out / "ysb" / "big"
    assert not final.exists()
    partial = list((out / "ysb").glob(".big.partial-*"))
    assert len(partial) == 1 and not (partial[0] / "manifest.json").exists()
    with pytest.raises(DatasetError):
        open_dataset(final)

    # the next run (same folder) clears the dead run's staging folder and completes
    spec = workloads.get("ysb").SPEC
    ds = generate(spec, make_params(spec, scale="tiny"),
                  Datagen(out=out, name="big", spark=spark, progress=False))
    ds.verify()
    assert [p.name for p in (out / "ysb").iterdir()] == ["big"]
