"""What ``scabbard bench`` runs: a table of the benchmarks, each with what it says of itself
(its line in ``scabbard bench --help`` and its own ``--help``), the fields of its experiment's
``Settings`` that become its flags, the help of those fields, and the call that runs it.

The command line reads this table and declares nothing of its own for a benchmark: a new one
is an entry here and a ``bench`` function (settings, output folder, log) in its experiment
module; a new setting is a field of that module's ``Settings`` and a line in :data:`HELP`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from scabbard.ft.modes import CHECKPOINT_MODES, EXACTLY_ONCE_SINKS


@dataclass(frozen=True)
class Bench:
    """A benchmark: ``scabbard bench <name>``.

    ``options``: the fields of ``module``'s ``Settings`` given flags (``data_dir`` is always
    one, ``--data-root``); ``defaults``: the command's defaults where they differ from the
    settings'; ``out``: its output folder's default under the project's runs folder (None: it
    writes none); ``run``: ``(module, settings, out, log) -> exit status`` (None: the
    module's ``bench(settings, out, log=)``); ``output_dir``: the settings take the output
    folder too (their ``output_dir``); ``helps``: this bench's own help of a field."""

    name: str
    summary: str
    description: str
    module: str
    options: tuple[str, ...]
    out: str | None = None
    run: Callable | None = None
    defaults: Mapping = field(default_factory=dict)
    output_dir: bool = False
    epilog: str | None = None
    helps: Mapping = field(default_factory=dict)

    def experiment(self):
        return importlib.import_module(f"scabbard.experiments.{self.module}")

    def settings_class(self) -> type:
        return self.experiment().Settings

    def needs(self) -> tuple[str, ...]:
        """The names its run takes of its experiment module."""
        return ("bench",) if self.run is None else self.run.needs

    def __call__(self, settings, out: Path, log) -> int:
        exp = self.experiment()
        if self.run is None:
            return exp.bench(settings, out, log=log)
        return self.run(exp, settings, out, log)


# -- the settings' help, by field name (a field several experiments have shares it) ----------
# a flag's default is the experiment's own (its Settings) unless the bench's ``defaults`` say
# otherwise; a flag other commands take too (--queries, --scale, --seed, a run's --rate...) is
# declared where they take it (scabbard.cli.common.declared) and its help comes from there,
# unless the benchmarks' use differs (a help here says how)
HELP = {
    "seconds": "wall seconds per run", "interval": "checkpoint interval, seconds",
    "rounds": "runs per configuration, interleaved; the median is kept",
    "spark": "without Spark", "flink": "without Flink-FT",
    "with_query": "ingest only, no query runs", "peers": "without the broker and Kafka++",
    "reduced": "without the reduced ingest (push-up + adaptive compression)",
    "batch_kib": "batch sizes in KiB", "sinks": "the exactly-once sinks",
    "kills": "kills per configuration",
    "reduce_every": "push-up + compression on every Nth configuration",
    "min_life": "shortest life before a kill, s", "max_life": "longest life before a kill, s",
    "work": "scratch folder", "rows": "values per column", "repeat": "timed runs, best kept",
    "placements": "p-streams on every edge between operators: on every other configuration "
                  "of a query with several operators, on all, or none",
    "workload": "the workload generated", "tuples": "rows generated",
    "workers": "local[N] threads, and the cluster's workers of 1 core",
    "assembly": "assembly modes measured side by side: serial, partitioned, partitioned:P (a "
                "kill campaign: every incarnation's)",
    "ingress": "numbers of ingress partitions measured side by side (the source read by N "
               "threads; a kill campaign: every incarnation's, in turn - each recovery reads the "
               "source with another number than the run it continues)",
    "keys": "distinct keys of the Zipf and uniform streams",
    "darwin_keys": "DARWIN's distinct keys: its dataset generated at --scale with as many "
                   "(default the workload's, 100,000)",
    "key_counts": "numbers of distinct keys (the window state's size), a dataset each",
    "systems": "systems measured side by side: engine (state in memory), engine-spill "
               "(state within --state-memory), engine-ft (checkpoints), engine-ft-spill "
               "(checkpoints of state within --state-memory), spark-rocksdb, flink-rocksdb "
               "(bench state-recovery: engine-ft, engine-ft-spill)",
    "in_memory_keys": "engine-ft only at key counts up to this (0: at all; with its state in "
                      "memory, a run at 10^7 keys held 4.3 GB for 347 MB of state)",
    "event_seconds": "event seconds of each dataset",
    "record_counts": "records each store is prefilled with, a size each",
    "sizes_mb": "MB stored, a folder each", "segment_kib": "KiB a segment",
    "cold": "keep the page cache (it is dropped before each opening by default)",
    "stores": "key-value stores measured side by side: keystore (the engine's per-key store), "
              "rocksdb (RocksDB in-process, through rocksdict)",
    "ops": "inserts and gets measured after the prefill",
    "batch": "records a call (a write batch, a multi-get)",
    "individual_ops": "inserts measured one record a call, and as many in groups",
    "group": "records a call in the grouped inserts",
    "width": "float64 words a value (5: 48-byte records with the key)",
    "state_memory": "the state memory budget of engine-spill and engine-ft-spill (e.g. 16M; a "
                    "kill campaign: every incarnation's --state-memory, the spilled units the "
                    "checkpoint's state)",
    "spark_memory": "the Spark driver's heap, e.g. 8g ('auto': half the memory available)",
    "spark_partitions": "Spark's shuffle partitions (0: two per core)",
    "speedup": "paced runs: event seconds per wall second (the dataset's event rate times "
               "this; 0: no paced runs)",
    "variants": "kernel variants measured side by side: generic, instrumented (every task "
                "profiled), adaptive (generic, instrumented, then optimised)",
    "timeline_query": "the query whose keys leave the profiled range (Fig. 12): YSB's events "
                      "go from 10 campaigns to all 100, another's key column moves by 1,000",
    "change_at": "wall seconds into the timeline run when the keys change",
    "stage_seconds": "the timeline's generic and instrumented stages last at least this long "
                     "(seconds; Grizzly's last as long as a compilation)",
    "recovery_query": "the query killed and recovered with generic and with adaptive kernels",
    "compression_interval": "the adaptive compression's decision interval, s (in a kill "
                            "campaign: in every incarnation, its swaps and fallbacks within "
                            "each life)",
    "checkpoint_mode": "checkpoint mode of every run: full, incremental (closed panes written "
                       "once) or eventual (CEC: pane units saved in steps between records)",
    "worker_counts": "numbers of workers measured side by side",
    "load": "input rate as a share of the sustainable rate (measured first)",
    "kill_at": "seconds after the start of the kill",
    "reduced_with": "the compression of the configurations with push-up: the adaptive and the "
                    "default scheme in turn (alternate), or always one",
    "counts": "numbers of queries run at once, a run each",
    "periods_ms": "checkpoint periods CP swept, ms (a record every CP)",
    "step_ms": "eventual steps every CI ms in the CP sweep",
    "replay_bounds": "U swept at the longest CP (CI as long): tuples since a record's cut",
    "unsaved_bounds": "Q swept at the longest CP (CI as long): closed panes left unsaved",
    "task_ms": "input per task, wall ms at the paced rate",
    "shared_workers": "the worker threads that run every query's tasks in the shared engine",
    "configs": "configurations measured side by side: no_ft (results dropped), no_ft_written "
               "(results to a Parquet file), checkpoints (state only), ingest (the input "
               "persisted raw, no query), ft_raw (input persisted raw), scabbard (push-up + "
               "adaptive codecs); and, only when named, scabbard_nodisk (as scabbard, its "
               "input's writes discarded: what the disk costs)",
}
FLAGS = {"with_query": "--no-query", "batch_kib": "--batch-kb", "min_life": "--min",
          "max_life": "--max", "seconds": "--duration", "worker_counts": "--workers",
          "batch_rows": "--batch", "every_tasks": "--every"}
ALIASES = {"seconds": "--seconds"}  # the old spellings, hidden
CHOICES = {"scale": ("tiny", "small", "full"), "sinks": EXACTLY_ONCE_SINKS,
            "placements": ("alternate", "all", "none"),
            "reduced_with": ("alternate", "adaptive", "default"),
            "checkpoint_mode": CHECKPOINT_MODES,
            "systems": ("engine", "engine-spill", "engine-ft", "engine-ft-spill", "spark-rocksdb",
                        "flink-rocksdb"),
            "variants": ("generic", "instrumented", "adaptive"),
            "stores": ("keystore", "rocksdb"),
            "layouts": ("per-task", "per-key", "auto", "adaptive"),
            "configs": ("no_ft", "no_ft_written", "checkpoints", "ingest", "ft_raw",
                        "scabbard", "scabbard_nodisk")}


# -- how a benchmark's run ends: the shapes several share ----------------------------------------
def tabled(table: str, figure: str, results: str = "results.csv", parts: str | None = None):
    """A run of the module's ``run`` (a line each as they come), its ``table`` printed (and, with
    ``parts``, its per-part costs under that title), its figure, and where both went."""

    def bench(exp, settings, out: Path, log) -> int:
        runs = exp.run(settings, log=log)
        log("\n" + getattr(exp, table)(runs).round(2).to_string(index=False))
        if parts is not None:
            log(f"\n{parts}:\n" + exp.parts(runs).round(2).to_string(index=False))
        exp.plot(runs, out)
        log(f"\nresults: {Path(out) / results}, figure: {Path(out) / figure}")
        return 0

    bench.needs = ("run", table, "plot") + (("parts",) if parts else ())
    return bench


def recovery_bench(results: str, figure: str, digits: int):
    """A Darwin Fig. 2 bench: the module's ``recovery`` runs (a line each), its summary
    printed, its figure, and where both went."""

    def bench(exp, settings, out: Path, log) -> int:
        runs = exp.recovery(settings, log=log)
        log("\n" + exp.recovery_summary(runs).round(digits).to_string(index=False))
        exp.plot_recovery(runs, out)
        log(f"\nresults: {Path(out) / results}, figure: {Path(out) / figure}")
        return 0

    bench.needs = ("recovery", "recovery_summary", "plot_recovery")
    return bench


def needs(*names: str):
    """What a run takes of its experiment module (checked by the tests for every bench)."""

    def mark(fn):
        fn.needs = names
        return fn

    return mark


@needs("bench")
def _with_log_only(exp, settings, out: Path, log) -> int:  # the output folder is a setting
    return exp.bench(settings, log=log)


@needs("bench_peers")
def _peers(exp, settings, out: Path, log) -> int:
    return exp.bench_peers(settings, out, log=log)


@needs("bench_restarts")
def _restarts(exp, settings, out: Path, log) -> int:
    return exp.bench_restarts(settings, out, log=log)


@needs("run", "summary", "note")
def _cluster(exp, settings, out: Path, log) -> int:
    table = exp.run(settings, log=log)
    log("\n" + exp.summary(table))
    log("\n" + exp.note(table))
    return 0


@needs("run", "summary", "plot", "timeline", "plot_timeline", "recovery", "RECOVERY_PHASES")
def _adaptive(exp, settings, out: Path, log) -> int:
    runs = exp.run(settings, log=log)
    log("\n" + exp.summary(runs).round(2).to_string(index=False))
    exp.plot(runs, out)
    samples, events, info = exp.timeline(settings, log=log)
    exp.plot_timeline(samples, events, info, out)
    rec = exp.recovery(settings, log=log)
    med = rec.groupby("variant")[list(exp.RECOVERY_PHASES)].median().round(0)
    log(f"\n{settings.recovery_query}: a kill and its recovery, medians (ms); exactly once in "
        f"{int(rec['exactly_once'].sum())} of {len(rec)} runs\n{med.to_string()}")
    log(f"\nresults: {Path(out) / 'results.csv'}, figures: {Path(out) / 'adaptive.png'}, "
        f"{Path(out) / 'timeline.png'}")
    return 0


# -- the benchmarks, in the order ``scabbard bench --help`` lists them ----------------------------
BENCHES = (
    Bench(
        "engine", module="engine_throughput",
        summary="per query: engine vs Spark throughput, 1 vs 2 workers, latency at 80% load",
        description="For each query on its small dataset: the engine's sustainable throughput "
                    "with 1 and 2 workers (endless replay for --duration), Spark Structured "
                    "Streaming's throughput on the same data, and the engine's latency "
                    "percentiles at 80% of its rate.  Writes results.csv and "
                    "engine_throughput.png to --output.",
        options=("queries", "seconds", "spark", "scale", "assembly", "ingress", "rounds"),
        out="bench-engine",
        run=_with_log_only,
        output_dir=True),
    Bench(
        "ingest", module="ingest",
        summary="disk bandwidth, then per query persisted ingest and the query with persisted "
                "input",
        description="Measure this machine's O_DIRECT sequential write bandwidth, then per query: "
                    "pure ingest with persistence, raw and reduced (push-up + adaptive "
                    "compression, as the paper's Scabbard persists; tuples/s, MB/s to disk, share "
                    "of the disk bandwidth) and the query's throughput without and with "
                    "--persist-input.  Writes results.csv and ingest.png.",
        options=("queries", "seconds", "scale", "with_query", "peers", "reduced", "ingress",
                 "compression_interval"),
        out="bench-ingest"),
    Bench(
        "checkpoints", module="checkpointing",
        summary="Table 4 and Fig. 7a: per query and worker count, throughput without FT (results "
                "dropped, and written to a file), with checkpoints only, with full FT on raw "
                "input, and as Scabbard (push-up + adaptive codecs); the CPU of every part per "
                "input tuple",
        description="Per query on its dataset, back to back and interleaved over --rounds, on 1 "
                    "and 2 workers: the query without fault tolerance (results dropped; and "
                    "written to a Parquet file - the fair baseline), with its state checkpointed "
                    "every --interval seconds (input not persisted: the paper's Scabbard-Chk), "
                    "and fully fault-tolerant (checkpoints, the input persisted, results through "
                    "the clocked exactly-once sink, machine durability: fdatasync before every "
                    "acknowledgement and record) - with raw input and as the paper's Scabbard "
                    "(persistence push-up and the adaptive codecs).  Prints the medians: "
                    "throughput, the overheads against no FT writing its results, 2 workers over "
                    "1, bytes persisted per input tuple, checkpoint time and state size beside "
                    "the paper's Table 4, and each part's CPU in ns per input tuple (dispatch, "
                    "stage, push-up, profile, compress, encode, fragment, boundary, assembly, "
                    "sink, checkpoint, other).  Writes results.csv, parts.csv, runs.csv and "
                    "checkpointing.png to --output.",
        options=("queries", "seconds", "interval", "worker_counts", "configs",
                 "compression_interval", "rounds", "scale"),
        out="bench-checkpoints",
        defaults={"rounds": 2}),
    Bench(
        "incremental", module="incremental",
        summary="Table 4 with full, incremental and eventual checkpoints side by side",
        description="Per query on its dataset: the query without fault tolerance, then with "
                    "full, incremental and eventual checkpoints (CEC: steps every 10 ms between "
                    "records; its overhead is the excerpt's Fig. 5) every --interval seconds "
                    "(Scabbard-Chk: input not persisted), flat out - throughput overhead, "
                    "checkpoint time, state MB written per second, panes per checkpoint, the state "
                    "load time of a recovery - and paced at --speedup x the dataset's event rate "
                    "with a window of backlog (state MB/s once it was processed).  Prints the "
                    "modes side by side and the ratios; writes results.csv, runs.csv and "
                    "incremental_checkpoints.png to --output (notebook 12's part (a)).",
        options=("queries", "seconds", "interval", "rounds", "scale", "speedup"),
        out="bench-incremental"),
    Bench(
        "cec", module="cec",
        summary="CEC's Figs. 6-9: the checkpoint period, Q and U against response time, the "
                "extent, EC-load and replay",
        description="Eventual checkpoints (CEC) on a long-window query with full fault "
                    "tolerance (persisted input, the clocked exactly-once sink), paced at "
                    "--speedup x its event rate: per checkpoint period CP (a record every CP, a "
                    "step every CI), the response time against native (the same engine with no "
                    "checkpoint; no FT beside it); each run stopped half a period after a record "
                    "and recovered - the extent read after the record to find the newest step, "
                    "EC-load (the state load and that scan), the input replayed, the recovery "
                    "time; the same against U and Q at the longest CP with CI as long.  "
                    "--rounds interleaved; prints the medians and writes cec_results.csv, "
                    "cec_runs.csv and cec_tradeoff.png (the range of the rounds drawn) to "
                    "--output.  Notebook 12 runs it as its part (b).",
        options=("query", "periods_ms", "step_ms", "replay_bounds", "unsaved_bounds",
                 "speedup", "seconds", "task_ms", "rounds", "scale"),
        out="bench-cec",
        helps={"query": "a long-window query whose window is its only state",
               "speedup": "event seconds per wall second (the dataset's event rate times this)"}),
    Bench(
        "codecs", module="compression",
        summary="Fig. 6: compression ratio and encode/decode MB/s per codec and data type",
        description="Per data type of the paper's Fig. 6 (timestamps regular and bursty, integers "
                    "random and in runs, floats lossless and with 2 decimals, repeated 16-byte "
                    "strings) and per codec that applies: compression ratio and single-core "
                    "encode and decode throughput, with the issue's targets (Var-Byte, NS, RLE, "
                    "delta codecs >= 1 GB/s; Simple-8b, XOR >= 300 MB/s).  Writes results.csv, "
                    "targets.csv and compression_tradeoffs.png to --output.",
        options=("rows", "repeat"),
        out="bench-codecs"),
    Bench(
        "peers", module="comparison",
        summary="Fig. 7a and Fig. 8 side by side: the engine vs Spark-FT, Flink-FT, the broker, "
                "Kafka++",
        description="On this machine, in one run and on the same data, per query: the engine "
                    "without and with fault tolerance (persisted input, 1 s checkpoints, "
                    "exactly-once output), Spark Structured Streaming and Flink SQL with "
                    "checkpoints (Fig. 7a; targets: FT >= 50x each peer; Spark in one session "
                    "sized for this machine, a fresh one after its JVM dies; a peer that fails "
                    "says why and the next query runs), then persisted ingest: the engine's "
                    "p-stream, raw and with push-up + adaptive compression (the paper's "
                    "Scabbard), vs the synchronous log (Kafka++, LZ4) vs a real broker, RabbitMQ "
                    "Streams, started on 127.0.0.1 for the run and stopped after it (Fig. 8; "
                    "target: reduced ingest >= 100x the broker).  A line per query and system "
                    "tells the time so far and what is left.  Writes fig7a/, fig8/ (tables and "
                    "figures) and side_by_side.csv to --output.",
        options=("queries", "seconds", "scale", "spark", "flink", "spark_memory",
                 "spark_partitions"),
        out="bench-peers",
        run=_peers),
    Bench(
        "aligned", module="aligned",
        summary="Fig. 9: aligned checkpoints (Flink++) vs Scabbard's, on YSB, per batch size",
        description="The engine run four ways on one query (YSB) for each batch size: Scabbard "
                    "(p-streams, asynchronous checkpoints, results written at once), Scabbard-Chk "
                    "(checkpoints only), Flink++ (aligned checkpoints: the pipeline drains at "
                    "each marker; results held until the checkpoint commits) and Flink++ with its "
                    "input persisted through the synchronous log (Kafka++).  Prints throughput, "
                    "result latency, checkpoint and alignment time and disk MB/s, then the ratios "
                    "the paper states.  Writes results.csv, runs.csv and aligned.png to --output.",
        options=("query", "batch_kib", "seconds", "interval", "scale"),
        out="bench-aligned"),
    Bench(
        "partitioned", module="partitioned",
        summary="serial vs key-partitioned assembly vs a partitioned dataflow: key skew (one "
                "key, Zipf, uniform) and the queries",
        description="In one run, side by side for every --assembly mode and 1 and 2 workers (a "
                    "dataflow's partition threads): a "
                    "synthetic stream (an 8-byte key and a value) whose keys are one key, "
                    "Zipf-distributed or uniform over --keys keys, counted and summed per key "
                    "over a sliding window; then the paper's queries whose windows are assembled "
                    "sequentially; --rounds runs of each, interleaved.  Prints the median "
                    "throughput (with its runs' min-max), each mode's scaling from 1 to 2 "
                    "workers, its gain over serial, its CPU a tuple (the dataflow's: routing, "
                    "partitions, merge) and cores; writes results.csv, comparison.csv, figure.",
        options=("queries", "keys", "rows", "seconds", "scale", "assembly", "rounds"),
        helps={"assembly": "modes measured side by side: the task-parallel engine's assembly "
                           "(serial, partitioned, partitioned:P) and dataflow (PipeFabric's "
                           "partitioned dataflow: the input routed by key to a partition thread "
                           "per worker; queries whose groups cannot be routed are skipped)"},
        out="bench-partitioned",
        run=tabled("comparison", "partitioned.png", parts="CPU per input tuple (medians)"),
        output_dir=True),
    Bench(
        "selection", module="pipefabric",
        summary="PipeFabric's Table 1: a stateless selection's throughput per selectivity",
        description="In one run, with 1 and 2 workers: the selection of PipeFabric's Table 1 (the "
                    "queries PF-TRUE, PF-MOD2, PF-MOD10, PF-FALSE: SG readings whose measurement "
                    "id satisfies true, mod 2, mod 10, false; results dropped) on the SG dataset "
                    "replayed for --seconds, the four alternating for --rounds rounds (the median "
                    "kept).  Prints the throughput and its ratio to 'true' beside the paper's (1 "
                    ": 1.30 : 1.61 : 1.93), then the CPU per input tuple of each part (the "
                    "selection's kernel, the survivors gathered, the rest of the task, the "
                    "assembly, the dispatcher, the rest).  Writes table1.csv, table1_runs.csv and "
                    "table1.png to --output.",
        options=("queries", "seconds", "rounds", "scale"),
        out="bench-selection",
        run=tabled("table1", "table1.png", "table1.csv",
                   parts="CPU per input tuple, ns (medians; the parts add up to CPU ns)"),
        output_dir=True),
    Bench(
        "interquery", module="interquery",
        summary="PipeFabric's Fig. 7: several queries at once, total throughput per number of "
                "queries",
        description="Run --counts copies of --query at once, each on its own copy of the input "
                    "(results dropped), for --duration seconds two ways: separate (PipeFabric's: "
                    "an engine of one worker thread per query) and shared (one engine whose "
                    "--shared-workers threads run every query's tasks); counts and ways alternate "
                    "for --rounds rounds (the median kept).  Prints the total throughput, the "
                    "slowest and fastest query's and the scaling against one query.  Writes "
                    "interquery.csv, interquery_runs.csv and interquery.png to --output.",
        options=("query", "counts", "shared_workers", "seconds", "rounds", "scale"),
        out="bench-interquery",
        run=tabled("summary", "interquery.png", "interquery.csv"),
        output_dir=True),
    Bench(
        "state", module="state",
        summary="Darwin's Fig. 5: the micro-benchmark on the engine and on Spark and Flink with "
                "RocksDB state",
        description="Per number of keys, on Darwin's micro-benchmark (DARWIN: 32-byte records, a "
                    "60 s tumbling sum per key; the dataset generated with Spark, --event-seconds "
                    "at --rate): the engine with its state in memory, within --state-memory "
                    "(spilled to disk beyond) and with checkpoints, each in a process of its own "
                    "with its peak resident and anonymous memory, then Spark Structured Streaming "
                    "with the RocksDB state store and Flink SQL with the RocksDB state backend, "
                    "each over the whole dataset once.  Prints the throughputs and the engine's "
                    "over each peer's; writes results.csv, state_runs.csv and state.png to "
                    "--output.",
        options=("key_counts", "systems", "event_seconds", "rate", "rounds", "interval",
                 "state_memory"),
        out="bench-state",
        run=tabled("summary", "state.png"),
        output_dir=True),
    Bench(
        "adaptive", module="grizzly",
        summary="Grizzly: generic, instrumented and adaptive kernels; a change of the key range",
        description="Per query, the engine with the generic kernels, with every task instrumented "
                    "and with adaptive kernels (generic, instrumented, then optimised: filters by "
                    "selectivity, a fused dense-array aggregation for a small key range or, "
                    "YSB's, by the joined campaign's code), --rounds interleaved for --duration "
                    "seconds each; then one adaptive run of --timeline-query whose keys leave the "
                    "profiled range at --change-at seconds (Grizzly's Fig. 12; YSB: ten times "
                    "more campaigns): when it deoptimised and how long after the change the "
                    "re-optimised variant was swapped in; then --rounds kills of --recovery-query "
                    "with the generic and with adaptive kernels (notebook 04's experiment): the "
                    "recovery's phases side by side.  Prints the throughputs and the ratios to "
                    "the generic kernels; writes results.csv, adaptive.png, timeline.csv, "
                    "timeline.png and recovery.csv to --output.",
        options=("queries", "variants", "seconds", "rounds", "workers", "scale", "timeline_query",
                 "change_at", "stage_seconds", "recovery_query"),
        out="bench-adaptive",
        run=_adaptive,
        output_dir=True),
    Bench(
        "state-size", module="statesize",
        summary="Grizzly's Fig. 11 on the engine: throughput against distinct keys, per "
                "layout of the window state",
        description="Per number of distinct keys (a synthetic stream: an 8-byte key drawn "
                    "uniformly, a value; a count and a sum per key in 10 s tumbling windows, "
                    "YSB's shape without its join), the engine four ways side by side: "
                    "per-task (every task's partials merged by the assembler, Grizzly's table "
                    "per thread), per-key (the partitioned dataflow, a partition a worker: each "
                    "key held once), auto (the default, which estimates a task's keys on the "
                    "first tuples and picks one: the row says which) and adaptive (per-task "
                    "with the adaptive kernels); --rounds interleaved runs of --duration "
                    "seconds.  Prints the medians with their spread, auto's choice and "
                    "per-key over per-task; writes runs.csv, summary.csv and state_size.png to "
                    "--output.",
        options=("key_counts", "layouts", "rows", "rate", "seconds", "rounds", "workers"),
        defaults={"rows": 8_000_000},
        helps={"rows": "tuples of each key count's dataset, replayed with its times shifted",
               "rate": "tuples per second of event time in the datasets",
               "workers": "the engine's workers (and the dataflow's partitions)",
               "layouts": "layouts measured side by side"},
        out="bench-state-size",
        run=tabled("summary", "state_size.png", "runs.csv"),
        output_dir=True),
    Bench(
        "restart", module="recovery",
        summary="notebook 04 (paper Fig. 10): kill -> recovered, cold restart and warm standby, "
                "each phase",
        description="--rounds times, in turn: the query (default LRB1 small) runs as its own "
                    "process at --load of its sustainable rate, is killed with SIGKILL --kill-at "
                    "seconds in and recovered by a new process (cold restart: process start, then "
                    "code loading while the state loads) and by a warm standby started ahead of "
                    "the failure; its output is compared with a failure-free run.  Prints each "
                    "phase's median and spread in ms; writes restarts.csv to --output.",
        options=("query", "scale", "load", "interval", "kill_at", "rounds"),
        out="bench-restart",
        run=_restarts,
        helps={"rounds": "kills of each kind"}),
    Bench(
        "state-recovery", module="state",
        summary="Darwin's Fig. 2: checkpoint and recovery time against the state's size, state in "
                "memory vs spilled",
        description="Per number of keys (a dataset at --rate, or at keys / 30 tuples/s if more: "
                    "a window then holds 86 % of them), on DARWIN, the engine with checkpoints, "
                    "its state in memory (engine-ft) or within --state-memory (engine-ft-spill: "
                    "the spilled units are the checkpoint's state), stopped halfway through the "
                    "dataset, recovered and run over the next window's end.  Prints per run the "
                    "state its last checkpoint lists, the checkpoint and state load times and "
                    "the recovered run's; writes recovery.csv and state_recovery.png to --output.",
        options=("key_counts", "systems", "in_memory_keys", "event_seconds", "rate", "rounds",
                 "state_memory"),
        out="bench-state-recovery", defaults={"systems": ("engine-ft", "engine-ft-spill")},
        run=recovery_bench("recovery.csv", "state_recovery.png", 2),
        output_dir=True),
    Bench(
        "reopen", module="reopen",
        summary="opening a storage folder: the sealed files' segment indexes vs a scan of "
                "every segment header",
        description="Per stored size, a folder filled once with a stream of small segments, "
                    "then opened --rounds times each way, alternating: its indexes removed (a "
                    "scan of every segment header, as every opening was before them) and with "
                    "them; the page cache dropped before each opening (root only).  Prints "
                    "each opening and the medians; writes results.csv, runs.csv and "
                    "reopen.png to --output.",
        options=("sizes_mb", "segment_kib", "rounds", "cold"),
        out="bench-reopen",
        run=tabled("table", "reopen.png"),
        output_dir=True),
    Bench(
        "keyvalue", module="keyvalue",
        summary="Darwin's Figs. 1 and 3: the engine's per-key store against RocksDB, insert and "
                "get",
        description="In one process and one thread, per store size: the engine's per-key store (a "
                    "log of records written in groups, an index in memory) and RocksDB through "
                    "rocksdict, each prefilled with --record-counts records (an 8-byte key and "
                    "--width float64 words), then --ops new records inserted and --ops existing "
                    "keys read, --batch a call; then --individual-ops records inserted one a call "
                    "and in calls of --group (Fig. 3).  --rounds rounds, the stores alternating.  "
                    "Prints the medians and the keystore's ratio over RocksDB; writes "
                    "keyvalue.csv, keyvalue_runs.csv and keyvalue.png to --output.",
        options=("record_counts", "stores", "ops", "batch", "individual_ops", "group", "width",
                 "rounds"),
        out="bench-keyvalue",
        run=tabled("summary", "keyvalue.png", "keyvalue.csv"),
        output_dir=True),
    Bench(
        "keyvalue-recovery", module="keyvalue",
        summary="Darwin's Fig. 2: checkpoint and recovery time against the state's size, per store",
        description="In one process, per state size (--record-counts records of an 8-byte key and "
                    "--width float64 words): the state in memory with a hash index, written whole "
                    "to a file at a checkpoint and read back at a recovery (the paper's TBB); the "
                    "engine's per-key store (a checkpoint writes its log's tail and, every 1 M "
                    "records, its index's changed pages; a recovery maps the index and reads the "
                    "log since); RocksDB (a checkpoint flushes its memtable, a recovery opens "
                    "it).  Each store is filled (the per-key store checkpointing every 1 M "
                    "records), 1 M of its keys are updated, a checkpoint is taken (timed, flushed "
                    "to the disk), its files are dropped from the page cache, it is recovered "
                    "(timed) and read 1,000 times (timed); the per-key store's index catch-up is "
                    "timed last.  --rounds rounds, the stores alternating.  Writes "
                    "keyvalue_recovery.csv, keyvalue_recovery_runs.csv and keyvalue_recovery.png "
                    "to --output.",
        options=("record_counts", "width", "rounds"),
        out="bench-keyvalue-recovery",
        defaults={"record_counts": (1000000, 10000000, 40000000)},
        run=recovery_bench("keyvalue_recovery.csv", "keyvalue_recovery.png", 3),
        output_dir=True),
    Bench(
        "cluster", module="scaleout",
        summary="generation rate and one query's throughput: local mode vs a standalone cluster "
                "here",
        description="In one run: Spark in local mode (local[N]), then a standalone cluster "
                    "started for the run (a master and N workers of one core on 127.0.0.1, "
                    "stopped afterwards): each generates --tuples rows of --workload into a "
                    "file:// URI (the executors write Parquet and the replay columns) and runs "
                    "--query on them with the Spark backend (results written by the executors).  "
                    "Prints the generation rate and the query's throughput side by side, and what "
                    "limits them on this machine.",
        options=("workload", "tuples", "query", "workers", "rounds", "work"),
        run=_cluster),
    Bench(
        "kills", module="kills",
        summary="a long kill campaign: SIGKILL the engine at random moments, recover, verify",
        description="For every query with every exactly-once sink (push-up and a compression "
                    "scheme on every --reduce-every-th configuration), run the engine as its own "
                    "process with checkpoints, SIGKILL it at random moments (each incarnation "
                    "lives a random time), restart it with --recover until its input is consumed, "
                    "and compare the committed output with a failure-free run.  Prints per "
                    "configuration kills survived, results compared, lost, duplicated, different; "
                    "writes runs.csv to --output.  The defaults (11 queries x 2 sinks x 23 kills "
                    "= 506) take about an hour here.",
        options=("queries", "sinks", "kills", "reduce_every", "reduced_with", "scale", "rate",
                 "interval", "min_life", "max_life", "work", "seed", "placements",
                 "checkpoint_mode", "compression_interval", "state_memory", "darwin_keys",
                 "adaptive_kernels", "assembly", "ingress", "batch"),
        helps={"batch": "tuples per task of every incarnation (with tasks of 2^20 and many "
                        "keys, --assembly auto lays the state out per key: engine/layout.py)"},
        out="bench-kills",
        epilog="Exit status 1 if any configuration lost, duplicated or changed a result."),
)
BY_NAME = {b.name: b for b in BENCHES}
