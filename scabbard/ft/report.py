"""What a run's report says, in lines: the summary ``scabbard run`` prints after a run (a
notebook prints the same from the report :func:`scabbard.ft.run.open_run` returns).

Nothing here runs anything: each function takes a report (or a metrics sample) and gives
text.
"""

from __future__ import annotations

from scabbard.engine import RunReport
from scabbard.ft.config import RunConfig
from scabbard.ft.recovery import FTReport


def progress_line(sample: dict) -> str:
    """One metrics sample (:func:`scabbard.engine.metrics.samples_to`) as a progress line."""
    return (f"  {sample['t']:7.1f} s  {sample['tuples_per_s'] / 1e6:8.2f} M tuples/s  "
            f"{sample['mb_per_s']:8.1f} MB/s  p50 {sample['latency_ms']['p50']:7.1f} ms  "
            f"results {sample['result_rows']:,}")


def run_summary(report: RunReport, output: str | None = None) -> list[str]:
    """A run without fault tolerance: throughput, task size, latency percentiles, results
    (``output``: where they were written), then what its state and kernels did."""
    s, lat = report.summary, report.summary.latency_ms
    return [f"\n{report.query}: {s.tuples:,} tuples in {s.seconds:.2f} s = "
            f"{s.tuples_per_s / 1e6:.2f} M tuples/s ({s.mb_per_s:.1f} MB/s), "
            f"{report.workers} workers, {report.batch_rows:,} tuples per task",
            f"latency ms: p5 {lat['p5']}  p25 {lat['p25']}  p50 {lat['p50']}  "
            f"p75 {lat['p75']}  p95 {lat['p95']}",
            f"results: {s.result_rows:,} rows" + (f" -> {output}" if output else ""),
            *layout_lines(report), *spilled_lines(report), *kernel_lines(report)]


def ft_start_line(config: RunConfig, recover: bool) -> str:
    """What a fault-tolerant run is about to do: storage, checkpoints, output."""
    ft = config.ft
    mode = ft.checkpoint_mode or ("as recorded" if recover else "full")
    return (f"{'recovering' if recover else 'starting'} a fault-tolerant run: storage "
            f"{config.persist.storage}, checkpoints every {ft.interval:g} s ({mode}), "
            f"{ft.sink} exactly-once output to {ft.output}")


def ft_summary(r: FTReport, output, recover: bool = False) -> list[str]:
    """A fault-tolerant run (or recovery): damage found on opening, where it resumed and
    what it loaded, throughput, checkpoints and the state they wrote, results in
    ``output``, then what its state and kernels did."""
    s = r.run.summary
    lines = [f"storage: {what}" for what in r.damage]
    if r.resumed_from is not None or recover:
        lines.append(f"resumed from checkpoint {r.resumed_from}, replayed input from offset "
                     f"{r.replayed_from:,}" + loaded_phrase(r.loaded))
    times = [c.duration_s * 1e3 for c in r.checkpoints]
    lines.append(f"\n{r.run.query}: {s.tuples:,} tuples in {s.seconds:.2f} s = "
                 f"{s.tuples_per_s / 1e6:.2f} M tuples/s, {len(r.checkpoints)} checkpoints"
                 + (f" (avg {sum(times) / len(times):.1f} ms, state "
                    f"{r.checkpoints[-1].bytes / 1e6:.2f} MB)" if times else "")
                 + (f", {len(r.damage)} damaged or torn storage items dropped on opening"
                    if r.damage else ""))
    if r.checkpoints:
        panes = [c.operator.get("written", {}).get("panes", 0) for c in r.checkpoints]
        lines.append(f"checkpoints ({r.checkpoint_mode}): state written "
                     f"{r.state_bytes_written / max(s.seconds, 1e-9) / 1e6:.3f} MB/s, "
                     f"{sum(panes) / len(panes):,.1f} panes per checkpoint")
    lines.append(f"results: {s.result_rows:,} rows -> {output}")
    return [*lines, *layout_lines(r.run), *spilled_lines(r.run), *kernel_lines(r.run)]


def layout_lines(report: RunReport) -> list[str]:
    """Where ``--assembly auto`` kept the window state, where it estimated the keys."""
    lay = report.layout
    if not lay:
        return []
    keys = "all but unique" if lay["keys"] is None else f"~{lay['keys']:,}"
    return [f"window state: {lay['chosen']} (keys {keys}, ~{lay['task_keys']:,} a task; "
            f"engine/layout.py)"]


def kernel_lines(report: RunReport) -> list[str]:
    """What adaptive compilation did, per window operator."""
    return [f"kernels of {branch}: tasks {st['generic']:,} generic, {st['instrumented']:,} "
            f"instrumented, {st['optimised']:,} optimised; {st['swaps']} swaps, "
            f"{st['deopts']} deoptimisations" for branch, st in report.kernels.items()]


def spilled_lines(report: RunReport) -> list[str]:
    """What holding the state under its memory budget did, per window operator."""
    return [f"state of {branch} within {st['budget'] / 2**20:,.0f} MiB: "
            f"{st['spills']:,} spills, {st['reloads']:,} reloads, "
            f"{st.get('spilled_bytes', 0) / 1e6:,.1f} MB written, "
            f"{st.get('reloaded_bytes', 0) / 1e6:,.1f} MB read back, "
            f"at most {st['peak_bytes'] / 2**20:,.1f} MiB in memory"
            for branch, st in report.spilled.items()]


def loaded_phrase(loaded: dict) -> str:
    """What a recovery loaded (:attr:`FTReport.loaded`), as a clause; empty if nothing."""
    if not loaded or loaded.get("bytes") is None:
        return ""
    replay = loaded.get("replay_tuples")
    return (f"; state loaded: {loaded['bytes'] / 1e6:.3f} MB, {loaded['panes']:,} panes "
            f"({loaded['runs']} runs of pane units) in {loaded['load_ms']:.1f} ms"
            + (f", {loaded['spill_verified_bytes'] / 1e6:.3f} MB of spilled state verified "
               f"(read back as its windows close)" if "spill_verified_bytes" in loaded else "")
            + (f"; {replay:,} tuples to replay" if replay is not None else "")
            + (f" (from an eventual step at offset {loaded['step']:,}, after the record)"
               if "step" in loaded else "")
            + (f"; the steps' extent after the record: {loaded['extent_rows']:,} rows "
               f"({loaded['extent_bytes'] / 1e6:.3f} MB, {loaded['extent_opens']:,} open "
               f"parts) scanned in {loaded['scan_ms']:.1f} ms" if "scan_ms" in loaded else ""))
