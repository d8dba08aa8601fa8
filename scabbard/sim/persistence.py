"""The costs of persisting a query's input, per compression scheme, measured on batches
replayed as the engine replays them: the bytes each scheme stores, its codecs, the segment
encoding and decoding (:func:`measure_persistence`, part of ``scabbard sim calibrate``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from scabbard.sim.config import SCHEMES


def engine_and_data(query: str, scale: str, data_dir: str | Path):
    from scabbard import queries, workloads
    from scabbard.engine import Engine, EngineConfig

    ds = workloads.dataset(queries.workload_of(query), scale, root=str(data_dir))
    engine = Engine(queries.get(query), ds.tables, EngineConfig(workers=1))
    return ds, engine


def replay(ds, rows: int, tasks: int):
    """``tasks`` batches of ``rows`` as the engine sees them in a steady run: from the
    second copy of the dataset on (timestamps shifted)."""
    from scabbard.engine import Replay
    from scabbard.engine.sources import ReplaySource

    return ReplaySource(ds, rows, start=ds.rows, replay=Replay(max_tuples=ds.rows + rows * tasks))


def measure_persistence(query: str, scale: str = "small", data_dir: str | Path = "data",
                        tasks: int = 8, schemes: Sequence[str] = SCHEMES) -> dict:
    """Per scheme: stored bytes, codec, segment encode and decode ns per *input* tuple.

    A ``push-up`` scheme first runs the operators persistence push-up moves below the
    p-stream (:class:`scabbard.engine.pushup.Reducer`, §3.4) - their time counts with the
    codecs' - and persists what they keep: raw, with the default codecs, or with floats
    kept to two decimals (``lossy``), as notebook 06's configurations do, or with the
    codecs the adaptive scheme picks for this data (``adaptive``: the paper's rules, §5.2,
    on a profile of the first batch; its profiling of every fourth batch counts)."""
    from scabbard.engine.sources import ReplaySource

    ds, engine = engine_and_data(query, scale, data_dir)
    rows = engine.batch_rows_for(ReplaySource(ds, 1).tuples_per_ms())
    full = engine.input_schema
    out = {}
    for scheme in schemes:
        # twice, each time the least: a pass of a few ms per batch on a shared host can lose
        # its core for a while (the codecs' cost is the least disturbed pass's)
        passes = [_persist_pass(ds, engine, full, rows, tasks, scheme) for _ in range(2)]
        out[scheme] = {k: min(p[k] for p in passes) for k in passes[0]}
    return out


def _persist_pass(ds, engine, full, rows: int, tasks: int, scheme: str) -> dict:
    """One pass of :func:`measure_persistence` over ``tasks`` batches (after one to warm)."""
    from scabbard.compression.policy import Compression
    from scabbard.engine.pushup import Reducer
    from scabbard.query import optimize
    from scabbard.storage import segment as seg_fmt

    reduce = Reducer(optimize.push_up(engine.query.node), engine.config.cache_dir) \
        if scheme.startswith("push-up") else None
    schema = reduce.schema if reduce is not None else full
    codecs = scheme.removeprefix("push-up").removeprefix("+") or "none"
    comp = Compression.scheme(schema, codecs if codecs in ("none", "adaptive") else "default",
                              lossy_decimals=2 if codecs == "lossy" else None,
                              **({"interval": float("inf")} if codecs == "adaptive" else {}))
    buf = None
    acc = {"compress": 0.0, "encode": 0.0, "decode": 0.0, "bytes": 0, "n": 0}
    for i, sb in enumerate(replay(ds, rows, tasks + 1).batches()):
        b, n_in = sb.batch, len(sb.batch)
        t = time.thread_time()
        if reduce is not None:
            b = reduce(b)
        stored = comp(b) if comp is not None else None
        tc = time.thread_time() - t
        n = seg_fmt.segment_length(b, 1, seg_fmt.PAGE, stored)
        if buf is None or buf.nbytes < n:
            buf = seg_fmt.aligned_empty(2 * n)
            buf[:] = 0  # a recycled buffer, as the BlockManager's: no first-touch faults
        t = time.thread_time()
        seg = seg_fmt.encode(b, stream_id=1, epoch=1, batch_id=i, meta=np.zeros(1, np.uint64),
                             out=buf, stored=stored)
        te = time.thread_time() - t
        t = time.thread_time()
        seg_fmt.decode(seg, schema, copy=False)  # as the BlockManager reads
        td = time.thread_time() - t
        if i == 0:
            if codecs == "adaptive":
                comp.decide()  # its picks, from the profile of this batch
            continue  # warm-up
        acc["compress"] += tc
        acc["encode"] += te
        acc["decode"] += td
        acc["bytes"] += seg.nbytes
        acc["n"] += n_in
    n = acc["n"]
    return {"stored_bytes_per_tuple": acc["bytes"] / n, "compress_ns": acc["compress"] / n * 1e9,
            "encode_ns": acc["encode"] / n * 1e9, "decode_ns": acc["decode"] / n * 1e9}
