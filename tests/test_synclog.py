"""The synchronous log ("Kafka++", paper §6.1): rows round-trip, a batch is durable once
acknowledged - also under kill -9 - and a torn tail is cut, never read."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_storage import SCHEMA, make_batch

from scabbard.peers.synclog import Partition, from_rows, ingest, read_partition, to_rows

CHILD = str(Path(__file__).parent / "synclog_child.py")


def _same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a.columns, b.columns, strict=True))


def test_rows_round_trip_with_padding_and_uuids():
    b = make_batch(7, 300)
    rows = to_rows(b)
    assert rows.nbytes == 300 * SCHEMA.row_bytes  # the C struct size, padding included
    assert _same(from_rows(SCHEMA, rows, 7), b)


def test_appended_batches_read_back_in_order(tmp_path):
    part = Partition(tmp_path / "p.log")
    batches = [make_batch(off, 250) for off in range(0, 2000, 250)]
    for b in batches:
        assert part.append(to_rows(b), len(b)) == b.end
    part.close()
    frames = list(read_partition(tmp_path / "p.log"))
    assert [f[0] for f in frames] == [b.offset for b in batches]
    for (first, n, rows), b in zip(frames, batches, strict=True):
        assert n == len(b) and _same(from_rows(SCHEMA, rows, first), b)


def test_a_torn_tail_is_cut_on_reopen_and_never_read(tmp_path):
    path = tmp_path / "p.log"
    part = Partition(path)
    for off in range(0, 1500, 500):
        part.append(to_rows(make_batch(off, 500)), 500)
    part.close()
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size - 100)  # the last frame half written
    assert [first for first, _, _ in read_partition(path)] == [0, 500]
    part = Partition(path)
    assert part.end == 1000
    part.append(to_rows(make_batch(1000, 500)), 500)
    part.close()
    assert [first for first, _, _ in read_partition(path)] == [0, 500, 1000]


@pytest.mark.slow
@pytest.mark.crash
def test_every_acknowledged_batch_survives_kill_9(tmp_path):
    path = tmp_path / "p.log"
    child = subprocess.Popen([sys.executable, CHILD, str(path)], stdout=subprocess.PIPE,
                             text=True)
    acked = 0
    deadline = time.time() + 60
    while acked < 20 * 500 and time.time() < deadline:
        acked = int(child.stdout.readline())
    child.send_signal(signal.SIGKILL)
    child.wait()
    frames = list(read_partition(path))
    end = frames[-1][0] + frames[-1][1]
    assert end >= acked  # nothing acknowledged is lost
    for first, n, rows in frames:
        assert _same(from_rows(SCHEMA, rows, first), make_batch(first, n))


def test_ingest_reports_throughput_and_latency(tiny, tmp_path):
    r = ingest("CM1", tiny["cm"], tmp_path, seconds=0.5, batch_bytes=64 << 10, producers=2)
    assert r.tuples > 0 and r.disk_bytes > 0
    assert 0 < r.latency_ms["p50"] <= r.latency_ms["p95"]
    total = sum(first + n for p in tmp_path.glob("partition-*.log")
                for first, n, _ in list(read_partition(p, with_data=False))[-1:])
    assert total == r.tuples  # every tuple counted is in a partition


def test_a_short_write_is_completed_before_the_acknowledgement(tmp_path, monkeypatch):
    """writev may write less than asked (a signal, a nearly full disk): the rest is written
    before the fdatasync, so everything acknowledged reads back."""
    import os as _os

    from scabbard.peers import synclog

    calls = []

    def short_writev(fd, bufs):
        calls.append(1)
        first = bytes(memoryview(bufs[0]).cast("B"))[:13]  # 13 bytes, then stop
        return _os.write(fd, first)

    monkeypatch.setattr(synclog, "_writev", short_writev)
    part = Partition(tmp_path / "p.log")
    batches = [make_batch(off, 200) for off in range(0, 1000, 200)]
    for b in batches:
        part.append(to_rows(b), len(b))
    part.close()
    assert len(calls) == len(batches)
    frames = list(read_partition(tmp_path / "p.log"))
    assert [f[1] for f in frames] == [200] * 5
    for (first, _n, rows), b in zip(frames, batches, strict=True):
        assert _same(from_rows(SCHEMA, rows, first), b)


@pytest.mark.parametrize("failure", ["no progress", "disk full"])
def test_a_write_that_fails_midway_acknowledges_nothing_and_leaves_no_torn_frame(
        tmp_path, monkeypatch, failure):
    import errno
    import os as _os

    from scabbard.peers import synclog
    from scabbard.peers.synclog import LogError

    part = Partition(tmp_path / "p.log")
    good = make_batch(0, 300)
    part.append(to_rows(good), len(good))

    def half_then_stop(fd, bufs):
        data = b"".join(bytes(memoryview(b).cast("B")) for b in bufs)
        return _os.write(fd, data[:len(data) // 2])

    def stop(fd, data):
        if failure == "disk full":
            raise OSError(errno.ENOSPC, "No space left on device")
        return 0

    monkeypatch.setattr(synclog, "_writev", half_then_stop)
    monkeypatch.setattr(synclog, "_write", stop)
    with pytest.raises(LogError, match="failed"):
        part.append(to_rows(make_batch(300, 300)), 300)
    assert part.end == 300  # the failed batch was not acknowledged
    monkeypatch.undo()
    later = make_batch(300, 250)
    assert part.append(to_rows(later), len(later)) == 550  # and the log goes on after it
    part.close()
    frames = list(read_partition(tmp_path / "p.log"))
    assert [(f[0], f[1]) for f in frames] == [(0, 300), (300, 250)]
    assert _same(from_rows(SCHEMA, frames[1][2], 300), later)


def test_the_result_line_says_the_rates_and_the_latency():
    """``scabbard bench synclog``'s line of a result (SyncLogResult.line)."""
    from scabbard.peers import synclog

    r = synclog.SyncLogResult("CM1", 1 << 20, 2, 4_000_000, 2.0, 64, 300_000_000,
                              {"p50": 1.5, "p95": 3.25})
    assert r.line() == ("CM1   batch   1024 KiB     2.00 M tuples/s      128 MB/s of rows     "
                        "150 MB/s to disk  latency ms p50    1.50  p95    3.25")
