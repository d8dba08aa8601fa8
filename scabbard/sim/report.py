"""The simulator's predictions as text (``scabbard sim run``, notebook 08)."""

from __future__ import annotations

import math


def describe(result) -> str:
    """The predicted metrics as a few lines of text."""
    cfg, hw, s = result.config, result.hardware, result.summary
    disk = f"{hw.disk_write_mb_s:,.0f} MB/s"
    if hw.disk_iops:
        disk += f", {hw.disk_iops:,.0f} IOPS"
    if hw.disk_latency_ms:
        disk += f", {hw.disk_latency_ms:g} ms"
    net = f", ingest over {hw.network_mb_s * 8 / 1e3:g} Gb/s" if hw.network_mb_s else ""
    lines = [
        f"{cfg.query} on {hw.cores} cores ("
        f"{f'a dataflow of {cfg.dataflow_parts} partitions' if cfg.dataflow_parts else ''}"
        f"{'' if cfg.dataflow_parts else f'{cfg.workers} workers'}), disk {disk}{net}"
        f"{' - ' + hw.name if hw.name else ''}",
        f"  input {'persisted' if cfg.persist else 'not persisted'}"
        f"{', compression ' + cfg.compression if cfg.persist else ''}"
        f"{f', checkpoints every {cfg.checkpoint_interval:g} s' if cfg.checkpoint_interval else ''}"
        f"{f', rate {cfg.rate / 1e6:g} M tuples/s' if cfg.rate else ''}",
        f"  throughput     {s.tuples_per_s / 1e6:10.2f} M tuples/s ({s.mb_per_s:,.0f} MB/s); "
        f"steady {result.steady_tuples_per_s / 1e6:.2f} M tuples/s",
        "  latency ms     " + "  ".join(f"{k} {v:,.1f}" for k, v in s.latency_ms.items()),
    ]
    if cfg.persist:
        lines.append(f"  written        {result.written_bytes / 1e6:10,.1f} MB "
                     f"({result.written_bytes / 1e6 / max(s.seconds, 1e-9):,.0f} MB/s)")
    ck = result.checkpoints
    if len(ck):
        lines.append(f"  checkpoints    {len(ck):10d}, {ck['duration_ms'].mean():.1f} ms on "
                     f"average, {ck['state_bytes'].mean() / 1e6:.2f} MB of state each")
    rec = result.recovery
    if rec:
        lines.append(f"  recovery       failed at {rec['failed_at']:.2f} s: restart "
                     f"{rec.get('restart_init_s', math.nan) * 1e3:.0f} ms (its code loading at once "
                     f"with the state load, {rec.get('state_load_s', math.nan) * 1e3:.0f} ms) "
                     f"+ replay "
                     f"{rec.get('replay_s', math.nan) * 1e3:.0f} ms of "
                     f"{rec.get('replayed_tuples', 0) / 1e6:.2f} M tuples = "
                     f"{rec.get('recovery_s', math.nan) * 1e3:.0f} ms")
    util = result.utilisation
    parts = ", ".join(f"{k.removeprefix('cores_')} {v:.0%}" for k, v in util.items()
                      if k.startswith("cores_"))
    lines.append(f"  busy           cores {util['cores']:.0%} ({parts}); disk {util['disk']:.0%}")
    serial = result.serial_stages()
    each = {"ingress partition": " each"}
    lines.append("  serial stages  " + ", ".join(f"{k} {v:.0%}{each.get(k, '')}"
                                                for k, v in serial.items())
                 + " of a thread" + (f" ({cfg.ingress_partitions} ingress partitions)"
                                     if cfg.ingress_partitions > 1 else ""))
    lines.append(f"  simulated in   {result.wall_s:.2f} s of wall time")
    return "\n".join(lines)


def speed(cal, queries, cores: int, seconds: float, log=print) -> float:
    """``scabbard sim speed``: the simulator's own wall time for ``seconds`` of a
    fault-tolerant run of each query on ``cores`` cores and the paper's SSD, a line each as
    it comes; the slowest's, in seconds."""
    import time
    from dataclasses import replace

    from scabbard.sim.config import PAPER_SSD, SimConfig
    from scabbard.sim.model import simulate

    hw = replace(PAPER_SSD, cores=cores)
    log(f"{seconds:g} s of a fault-tolerant run on {cores} cores, 950 MB/s SSD "
        f"(target: under 10 s of wall time for 60 s on 16 cores)")
    log(f"{'query':6} {'M tuples/s':>11} {'tasks':>9} {'wall s':>7}")
    worst = 0.0
    for q in queries:
        cfg = SimConfig(q, workers=cores, persist=True, compression=cal.costs(q).best_scheme,
                        checkpoint_interval=1.0, duration=seconds)
        t0 = time.perf_counter()
        r = simulate(cal, cfg, hw)
        wall = time.perf_counter() - t0
        worst = max(worst, wall)
        log(f"{q:6} {r.tuples_per_s / 1e6:11.1f} {r.summary.tasks:9,d} {wall:7.2f}")
    log(f"slowest: {worst:.2f} s of wall time")
    return worst
