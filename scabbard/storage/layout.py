"""The BlockManager's layout: its configuration, the pool-file header, and the bookkeeping of
streams, files, segments and pending writes (docs/design.md)."""

from __future__ import annotations

import struct
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scabbard.schema import Schema
from scabbard.storage.fileio import Durability
from scabbard.storage.segment import PAGE

MiB = 1 << 20
_FILE_HEADER = struct.Struct("<8sHHIQQQQ")  # magic, version, 0, stream, epoch, first offset, 0, sum
FILE_MAGIC = b"SCABFILE"
FILE_VERSION = 1


@dataclass(frozen=True)
class StorageConfig:
    """How the BlockManager lays out and writes its files."""

    # a task's input is at most one file: a global aggregate's tasks of 2^22
    # tuples (SM after push-up, 20 B a tuple: 80 MiB) fit
    file_bytes: int = 128 * MiB
    pool_files: int = 2  # pre-allocated when the folder is created
    max_bytes: int | None = None  # cap on the pool; None: until the disk is full
    align: int = PAGE
    io_threads: int = 2
    encode_threads: int = 2  # segments are copied and checksummed off the caller's thread
    bulk_bytes: int = 32 * MiB
    max_pending_bytes: int = 256 * MiB  # appends block beyond this (back-pressure)
    direct: bool = True
    sync: bool = False  # machine durability: flush every write before it is acknowledged
    # emulated devices (Fig. 11): a slower disk - writes wait so that the folder is never
    # written faster than this many bytes/s; or no disk at all - segments are built (encoded,
    # checksummed) and acknowledged but not written, so nothing can be read back
    write_bytes_per_s: float | None = None
    discard: bool = False

    def __post_init__(self) -> None:
        if self.align < PAGE or self.align & (self.align - 1):
            raise ValueError(f"align must be a power of two >= {PAGE}, got {self.align}")
        if self.file_bytes % self.align or self.file_bytes < 2 * self.align:
            raise ValueError(f"file_bytes must be a multiple of align ({self.align}) and hold "
                             f"at least one segment, got {self.file_bytes}")
        if self.io_threads < 1 or self.pool_files < 1 or self.encode_threads < 1:
            raise ValueError("io_threads, encode_threads and pool_files must be >= 1")
        if self.write_bytes_per_s is not None and not self.write_bytes_per_s > 0:
            raise ValueError(f"write_bytes_per_s must be positive, got {self.write_bytes_per_s}")

    @property
    def data_start(self) -> int:
        return max(PAGE, self.align)

    @property
    def durability(self) -> Durability:
        return Durability.MACHINE if self.sync else Durability.PROCESS


@dataclass
class _Seg:
    first: int
    count: int
    pos: int
    length: int


@dataclass
class _File:
    id: int
    path: Path
    fd: int
    stream: int = -1
    epoch: int = 0
    first: int = 0
    end: int = 0  # offset one past the last acknowledged tuple
    write_pos: int = 0  # next free byte (reserved, maybe not yet written)
    sealed: bool = False
    header_written: bool = False
    indexed: bool = False  # its segment index (storage/fileindex.py) is written or being so
    inflight: int = 0  # segments reserved in it, not yet written
    segs: list[_Seg] = field(default_factory=list)
    # the bytes from ``tail[0]`` to the end of the sealed tail that opening the folder read and
    # verified: recovery's reads of them are served from memory (dropped by forget_tails)
    tail: tuple[int, np.ndarray] | None = None


@dataclass
class _Pending:
    file: _File
    pos: int
    length: int
    encoded: Future  # -> the segment (a view of ``full``), encoded on the encoder pool
    full: np.ndarray  # the pooled buffer it lives in
    first: int
    count: int
    future: Future


@dataclass
class _Stream:
    id: int
    name: str
    schema: Schema
    files: deque = field(default_factory=deque)  # the circular list, oldest first
    next_offset: int = 0  # reserved by appends
    durable: int = 0  # acknowledged
    start: int = 0  # first offset still stored
    pending: deque = field(default_factory=deque)
    pending_bytes: int = 0
    inflight: bool = False
    error: BaseException | None = None
    cond: threading.Condition = field(default_factory=threading.Condition)
