"""dd-like sequential bandwidth of the storage device, with the BlockManager's I/O path.

``O_DIRECT`` writes of ``block`` bytes from one page-aligned buffer into a
pre-allocated file (what the pool files are), twice - the second pass, over
written blocks, is what a reused pool sees - then reads back; the figure the
persisted-ingress benchmark is compared with (paper Fig. 1/8's disk line).
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path

from scabbard.storage.segment import aligned_empty

MiB = 1 << 20


@dataclass(frozen=True)
class DiskBandwidth:
    write_mb_s: float  # overwriting written blocks: the steady state of a reused file pool
    first_write_mb_s: float  # into freshly allocated space (extent conversion on ext4/xfs)
    read_mb_s: float
    direct: bool
    bytes: int
    block: int


def disk_bandwidth(folder: str | Path, total: int = 1024 * MiB, block: int = 16 * MiB,
                   sync: bool = False) -> DiskBandwidth:
    """Measure sequential write then read bandwidth in ``folder`` (the file is removed)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f".diskbench-{os.getpid()}"
    buf = aligned_empty(block)
    buf[:] = 0x5A  # not zeros: some devices shortcut them
    total = total // block * block
    direct = True
    try:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
            direct = False
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.posix_fallocate(fd, 0, total)
            passes = []
            for _ in range(2):
                t = time.perf_counter()
                for pos in range(0, total, block):
                    os.pwrite(fd, buf, pos)
                if sync or not direct:
                    os.fdatasync(fd)
                passes.append(time.perf_counter() - t)
            t = time.perf_counter()
            for pos in range(0, total, block):
                os.preadv(fd, [buf], pos)
            r = time.perf_counter() - t
        finally:
            os.close(fd)
    finally:
        path.unlink(missing_ok=True)
    return DiskBandwidth(total / passes[1] / 1e6, total / passes[0] / 1e6, total / r / 1e6,
                         direct, total, block)
