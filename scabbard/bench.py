"""Benchmarks that print figures (``scabbard bench ...``); never part of the test suite."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from scabbard import workloads
from scabbard.data import Dataset

REPLAY_BATCH_ROWS = 1 << 16


def replay_read(ds: Dataset, batch_rows: int = REPLAY_BATCH_ROWS, passes: int = 3) -> float:
    """Bytes per second of reading the replay columns into batch buffers (best of ``passes``).

    The first, untimed pass brings the files into the page cache; each timed pass
    copies every column of every batch into preallocated buffers, as a replay
    source that owns its batches does.
    """
    schema = ds.schema
    buffers = [f.empty(batch_rows) for f in schema.fields]
    best = float("inf")
    for p in range(passes + 1):
        start = time.perf_counter()
        for batch in ds.batches(batch_rows):
            n = len(batch)
            for buf, col in zip(buffers, batch.columns, strict=True):
                np.copyto(buf[:n], col)
        elapsed = time.perf_counter() - start
        if p > 0:
            best = min(best, elapsed)
    return ds.stream.stored_bytes / best


def bench_datagen(
    names: Sequence[str] | None = None,
    rows: int = 16_000_000,
    scratch: Path = Path("data/bench"),
    keep: bool = False,
    master: str = "local[*]",
    log: Callable[[str], None] = print,
) -> list[dict]:
    """Generate each workload at ``rows`` rows; print generation and replay-read rates."""
    from scabbard.sparksession import SparkSettings, get_spark
    from scabbard.workloads.generator import Datagen, generate, make_params

    names = list(names or workloads.NAMES)
    spark = get_spark(SparkSettings(master=master, app_name="scabbard-bench"))
    # Warm the JVM (class loading, JIT of Spark's own code) so the first workload is not
    # charged for it; each workload's generated code still compiles inside its timing.
    warm = workloads.get("sg").SPEC
    generate(warm, make_params(warm, scale="tiny"),
             Datagen(out=scratch, name="warmup", force=True, progress=False, spark=spark))
    shutil.rmtree(scratch / "sg" / "warmup", ignore_errors=True)
    results = []
    for name in names:
        spec = workloads.get(name).SPEC
        rate = spec.default_rate
        params = make_params(spec, duration=rows / rate, rate=rate)
        ds = generate(spec, params,
                      Datagen(out=scratch, name="bench", master=master, force=True, progress=False,
                              spark=spark))
        run = ds.manifest["run"]
        secs = run["seconds_total"]
        read = replay_read(ds)
        res = {
            "workload": name,
            "rows": ds.rows,
            "row_bytes": ds.schema.row_bytes,
            "seconds": secs,
            "gen_tuples_per_s": ds.rows / secs,
            "gen_mb_per_s": ds.stream.nbytes / secs / 1e6,
            "replay_gb_per_s": read / 1e9,
        }
        results.append(res)
        log(
            f"{name:<8} {ds.rows:>11,} rows  generate {res['gen_tuples_per_s'] / 1e6:6.2f} M tuples/s "
            f"{res['gen_mb_per_s']:7.1f} MB/s ({secs:.1f} s)  "
            f"replay read {res['replay_gb_per_s']:5.2f} GB/s"
        )
        if not keep:
            shutil.rmtree(ds.path, ignore_errors=True)
    log("")
    log(f"{'workload':<9}{'rows':>12}{'B/row':>7}{'M tuples/s':>12}{'MB/s':>9}{'replay GB/s':>13}")
    for r in results:
        log(f"{r['workload']:<9}{r['rows']:>12,}{r['row_bytes']:>7}{r['gen_tuples_per_s'] / 1e6:>12.2f}"
            f"{r['gen_mb_per_s']:>9.1f}{r['replay_gb_per_s']:>13.2f}")
    return results
