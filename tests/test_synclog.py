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
