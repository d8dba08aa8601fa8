"""Persisted data survives `kill -9` of the process writing it; a torn last segment is rejected."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from storage_child import CONFIG
from test_storage import SCHEMA, check_batch

from scabbard.storage import BlockManager

pytestmark = [pytest.mark.crash]
CHILD = str(Path(__file__).parent / "storage_child.py")


def run_child(folder, *args, kill_after: int | None = None) -> list[int]:
    proc = subprocess.Popen([sys.executable, CHILD, str(folder), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    acks = []
    deadline = time.monotonic() + 120
    try:
        for line in proc.stdout:
            acks.append(int(line))
            if kill_after is not None and len(acks) >= kill_after:
                proc.send_signal(signal.SIGKILL)
                break
            if time.monotonic() > deadline:
                pytest.fail("the child wrote too slowly")
    finally:
        proc.wait(timeout=60)
    if kill_after is None:
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
    return acks


def reopen_and_check(folder, acked: int) -> tuple[int, list[str]]:
    with BlockManager(folder, CONFIG) as bm:
        sid = bm.stream("in", SCHEMA)
        end = bm.durable_end(sid)
        assert end >= acked, f"acknowledged up to {acked}, only {end} survived"
        total = 0
        for b in bm.load(sid):
            check_batch(b)
            total += len(b)
        assert total == end - bm.start(sid)
        return end, list(bm.torn)


@pytest.mark.parametrize("kill_after", [7, 180, 400])
def test_kill_9_mid_write_keeps_every_acknowledged_segment(tmp_path, kill_after):
    acks = run_child(tmp_path, "plain", kill_after=kill_after)
    end, _ = reopen_and_check(tmp_path, acks[-1])
    acks2 = run_child(tmp_path, "plain", kill_after=20)  # and it goes on from there
    assert acks2[0] == end + 1000
    reopen_and_check(tmp_path, acks2[-1])


def test_torn_write_by_a_real_crash_is_rejected(tmp_path):
    acks = run_child(tmp_path, "tear", "25")
    assert len(acks) == 25
    end, torn = reopen_and_check(tmp_path, acks[-1])
    assert end == acks[-1]
    assert len(torn) == 1 and "corrupt segment" in torn[0] and ".seg" in torn[0]
