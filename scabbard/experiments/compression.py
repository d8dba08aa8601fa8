"""Notebook 05 / ``scabbard bench codecs``: compression ratio vs throughput (paper Fig. 6).

Per data type of the paper's Fig. 6 - timestamps at fixed intervals and in bursts,
random and run-heavy integers, floats kept exactly and with two decimals, repeated
fixed-length strings (16-byte ids) - and per codec that applies to it: the
compression ratio (raw bytes / stored bytes), and encode and decode throughput in MB/s
of raw column bytes on one core (best of ``repeat`` runs, compiled code warm).

The columns are synthetic, seeded, and follow the distributions the paper describes
(§5.1); what each codec does to the real workloads is shown by ``scabbard explain``
and notebook 06.  Targets: Var-Byte, NS, RLE and the delta codecs encode at
>= 1 GB/s per core; Simple-8b and XOR at >= 300 MB/s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard.compression import Codec, codec_class
from scabbard.experiments import finish, save_tables

_INTS = ("integers, random", "integers, runs", "integers, wandering")
_TS = ("timestamps, regular", "timestamps, bursty")
# codec family -> (encode MB/s per core, the data types it is meant for: where it is checked)
TARGETS_MB_S = {"varbyte": (1000, _INTS), "ns_byte": (1000, _INTS), "ns_bit": (1000, _INTS),
                "rle": (1000, ("integers, runs", "timestamps, bursty")),
                "base_delta": (1000, _INTS + _TS), "delta_of_delta": (1000, _TS),
                "delta": (1000, ("integers, wandering",)),
                "simple8b": (300, _INTS), "xor": (300, ("floats, lossless", "floats, 2 decimals"))}


@dataclass(frozen=True)
class Settings:
    rows: int = 4_000_000  # values per column
    repeat: int = 3
    seed: int = 6

    def __post_init__(self) -> None:
        for name in ("rows", "repeat"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


def _c(name: str, **kw) -> Codec:
    return codec_class(name)(**kw)


def data_types(rows: int, seed: int) -> dict[str, tuple[np.ndarray, list[Codec]]]:
    """Fig. 6's data types: name -> (column, the codecs that apply to it)."""
    rng = np.random.default_rng(seed)
    ts_regular = np.arange(rows, dtype=np.int64) * 10 + 1_600_000_000_000
    ts_bursty = 1_600_000_000_000 + np.cumsum(rng.random(rows) < 0.05).astype(np.int64)
    ints_random = rng.integers(0, 1 << 20, rows).astype(np.int64)
    ints_runs = np.repeat(rng.integers(0, 1000, rows // 20 + 1), 20)[:rows].astype(np.int64)
    # a power reading (SM's mf01): a walk of steps of sd 20 around 13,000
    ints_walk = (13_000 + np.cumsum(rng.normal(0, 20, rows))).astype(np.int64)
    walk = 20 + np.cumsum(rng.integers(-1, 2, rows)) * 0.01  # a 2-decimal sensor reading
    floats = np.round(walk, 2)
    noisy = walk + rng.normal(0, 1e-3, rows)
    ids = rng.integers(0, 1 << 62, (1000, 2)).astype(np.uint64)
    strings = ids[rng.zipf(1.5, rows) % 1000]
    generic = [_c("snappy"), _c("lz4")]
    ints = [_c("varbyte"), _c("ns_byte"), _c("ns_bit"), _c("simple8b"), _c("base_delta"),
            _c("rle", inner=_c("ns_bit")), _c("dictionary"), *generic]
    ts = [_c("delta_of_delta"), _c("base_delta"), _c("rle", inner=_c("base_delta")),
          _c("varbyte"), *generic]
    return {
        "timestamps, regular": (ts_regular, ts),
        "timestamps, bursty": (ts_bursty, ts),
        "integers, random": (ints_random, ints),
        "integers, runs": (ints_runs, ints),
        "integers, wandering": (ints_walk, [*ints, _c("delta"), _c("delta_of_delta")]),
        "floats, lossless": (noisy, [_c("xor"), _c("rle"), _c("dictionary"), *generic]),
        "floats, 2 decimals": (floats, [_c("xor"), _c("lossy_float", decimals=2),
                                        _c("lossy_float", decimals=2, inner=_c("delta_of_delta")),
                                        _c("lossy_float", decimals=2, inner=_c("simple8b")),
                                        *generic]),
        "strings, repeated": (strings, [_c("dictionary"), *generic]),
    }


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(column: np.ndarray, codec: Codec, repeat: int) -> dict:
    dtype = "uuid" if column.ndim == 2 else str(column.dtype)
    payload = codec.encode(column)  # warm: compiled code, page faults
    back = codec.decode(payload, len(column), dtype)
    if codec.lossless:
        exact = np.array_equal(np.ascontiguousarray(back).view(np.uint8),
                               np.ascontiguousarray(column).view(np.uint8))
        err = 0.0 if exact else float("inf")
    else:
        err = float(np.max(np.abs(back - column))) if len(column) else 0.0
    enc = _best(lambda: codec.encode(column), repeat)
    dec = _best(lambda: codec.decode(payload, len(column), dtype), repeat)
    mb = column.nbytes / 1e6
    return {"codec": str(codec), "family": codec.name, "ratio": column.nbytes / payload.nbytes,
            "bits_per_value": 8 * payload.nbytes / len(column), "encode_mb_s": mb / enc,
            "decode_mb_s": mb / dec, "lossless": codec.lossless, "max_error": err}


def run(settings: Settings, log=print) -> pd.DataFrame:
    """One row per (data type, codec)."""
    rows = []
    for name, (column, codecs) in data_types(settings.rows, settings.seed).items():
        for codec in codecs:
            m = measure(column, codec, settings.repeat)
            rows.append({"data": name, **m})
            log(f"{name:22} {m['codec']:42} ratio {m['ratio']:7.2f}  encode "
                f"{m['encode_mb_s']:8,.0f} MB/s  decode {m['decode_mb_s']:8,.0f} MB/s")
    return pd.DataFrame(rows)


def targets(table: pd.DataFrame) -> pd.DataFrame:
    """Per codec family with a target: its slowest encode on the data types it is meant for
    (RLE on runs, XOR on floats, ...; every configuration measured there)."""
    out = []
    for fam, (want, meant) in TARGETS_MB_S.items():
        t = table[(table["family"] == fam) & table["data"].isin(meant)]
        if t.empty:
            continue
        worst = t.loc[t["encode_mb_s"].idxmin()]
        out.append({"codec": fam, "target MB/s": want, "slowest encode MB/s":
                    worst["encode_mb_s"], "on": worst["data"], "median encode MB/s":
                    t["encode_mb_s"].median(), "met": bool(worst["encode_mb_s"] >= want)})
    return pd.DataFrame(out)


def headline(table: pd.DataFrame) -> str:
    t = targets(table)
    missed = t[~t["met"]]
    best = table.loc[table.groupby("data")["ratio"].idxmax(), ["data", "codec", "ratio"]]
    lines = [f"encode targets met by {len(t) - len(missed)} of {len(t)} codec families"
             + ("" if missed.empty else f" (missed: {', '.join(missed['codec'])})")]
    lines += [f"  best ratio for {r.data}: {r.codec} ({r.ratio:.1f}x)" for r in best.itertuples()]
    return "\n".join(lines)


def save(table: pd.DataFrame, output_dir: str | Path) -> Path:
    return save_tables(output_dir, results=table, targets=targets(table))


def plot(table: pd.DataFrame, output_dir: str | None = None):
    """Fig. 6: compression ratio against encode throughput, one line per data type."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 5.5))
    markers = dict(zip(sorted(table["family"].unique()), "osD^v<>phH*XP+x", strict=False))
    for i, (name, t) in enumerate(table.groupby("data", sort=False)):
        color = f"C{i}"
        ax.plot([], [], "s", color=color, label=name)
        for r in t.itertuples():
            ax.plot(r.encode_mb_s, r.ratio, markers[r.family], color=color, ms=8, alpha=0.85)
    for fam, m in markers.items():
        ax.plot([], [], m, color="grey", label=fam)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("encode throughput, MB/s of raw column bytes (one core)")
    ax.set_ylabel("compression ratio (raw / stored)")
    ax.set_title("Compression ratio vs throughput per data type and codec (after the paper's Fig. 6)")
    ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(True, which="both", alpha=0.3)
    return finish(fig, output_dir, "compression_tradeoffs.png")


def bench(settings: Settings, out: Path, log=print) -> int:
    """``scabbard bench codecs``: each codec's targets, the headline, the table and figure
    in ``out``."""
    table = run(settings, log=log)
    log("\n" + targets(table).round(0).to_string(index=False))
    log(headline(table))
    csv = save(table, out)
    plot(table, out)
    log(f"\nresults: {csv}, figure: {Path(out) / 'compression_tradeoffs.png'}")
    return 0
