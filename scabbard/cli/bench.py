"""``scabbard bench ...``: the benchmarks, each printing its figures side by side."""

from __future__ import annotations

import dataclasses

from scabbard import paths
from scabbard.cli import bench_runs as runs
from scabbard.cli.bench_runs import settings_from as _settings  # noqa: F401 (tests read it)
from scabbard.cli.common import add_data_root, declared, hidden_alias, parse_bytes, shared_flag
from scabbard.ft.modes import CHECKPOINT_MODES, EXACTLY_ONCE_SINKS

# -- options shared by the benchmarks, declared once -----------------------------------------
# help per Settings field; a flag's default is the experiment's own (its Settings), unless the
# command line sets another.  A flag other commands take too (--queries, --scale, --seed, a
# run's --rate...) is declared where they take it (scabbard.cli.common.declared): its help
# comes from there, unless the benchmarks' use differs (a help here says how)
_HELP = {
    "seconds": "wall seconds per run", "interval": "checkpoint interval, seconds",
    "rounds": "runs per configuration, interleaved; the median is kept",
    "spark": "without Spark", "flink": "without Flink-FT", "with_query": "ingest only, no query runs",
    "peers": "without the broker and Kafka++",
    "reduced": "without the reduced ingest (push-up + adaptive compression)",
    "batch_kib": "batch sizes in KiB", "sinks": "the exactly-once sinks",
    "kills": "kills per configuration",
    "reduce_every": "push-up + compression on every Nth configuration",
    "min_life": "shortest life before a kill, s",
    "max_life": "longest life before a kill, s", "work": "scratch folder",
    "rows": "values per column", "repeat": "timed runs, best kept",
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
    "key_counts": "numbers of distinct keys (the window state's size), a dataset each",
    "systems": "systems measured side by side: engine (state in memory), engine-spill "
               "(state within --state-memory), engine-ft (checkpoints), engine-ft-spill "
               "(checkpoints of state within --state-memory), spark-rocksdb, flink-rocksdb",
    "event_seconds": "event seconds of each dataset",
    "record_counts": "records each store is prefilled with, a size each",
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
    "shared_workers": "the worker threads that run every query's tasks in the shared engine",
    "configs": "configurations measured side by side: no_ft (results dropped), no_ft_written "
               "(results to a Parquet file), checkpoints (state only), ingest (the input "
               "persisted raw, no query), ft_raw (input persisted raw), scabbard (push-up + "
               "adaptive codecs)",
}
_FLAGS = {"with_query": "--no-query", "batch_kib": "--batch-kb", "min_life": "--min",
          "max_life": "--max", "seconds": "--duration", "worker_counts": "--workers"}
_ALIASES = {"seconds": "--seconds"}  # the old spellings, hidden
_CHOICES = {"scale": ("tiny", "small", "full"), "sinks": EXACTLY_ONCE_SINKS,
            "placements": ("alternate", "all", "none"),
            "reduced_with": ("alternate", "adaptive", "default"),
            "checkpoint_mode": CHECKPOINT_MODES,
            "systems": ("engine", "engine-spill", "engine-ft", "engine-ft-spill", "spark-rocksdb",
                        "flink-rocksdb"),
            "variants": ("generic", "instrumented", "adaptive"),
            "stores": ("keystore", "rocksdb"),
            "configs": ("no_ft", "no_ft_written", "checkpoints", "ingest", "ft_raw",
                        "scabbard")}


def _options(p, settings, *names: str, out: str | None = None, **defaults) -> None:
    """Flags for the fields ``names`` of the experiment's ``settings`` class: the flag is the
    field's name (``--min-life``; a True default becomes ``--no-<name>``), its type and
    default the field's (or ``defaults``), its help from :data:`_HELP`.  ``out``: the
    output folder's default, under the project's runs folder.  A settings class's
    ``data_dir`` is always a flag, ``--data-root``."""
    fields = {f.name: f for f in dataclasses.fields(settings)}
    def default_of(name: str):
        f = fields[name]
        return defaults.get(name, f.default if f.default is not dataclasses.MISSING
                            else f.default_factory())

    if "data_dir" in fields:  # always a flag, --data-root
        add_data_root(p, dest="data_dir", default=default_of("data_dir"))
        hidden_alias(p, "--data-dir", dest="data_dir")
    for name in names:
        if name == "data_dir":
            continue
        default = default_of(name)
        flag = _FLAGS.get(name, "--" + name.replace("_", "-"))
        shown = " ".join(map(str, default)) if isinstance(default, tuple | list) else default
        shown = "none" if shown in (None, "") else shown
        if isinstance(default, bool):
            if default:
                flag = _FLAGS.get(name, f"--no-{name.replace('_', '-')}")
            p.add_argument(flag, dest=name, action="store_false" if default else "store_true",
                           help=_help(name, flag))
            continue
        kind = {"queries": str.upper, "query": str.upper, "state_memory": parse_bytes,
                "ingress": int}.get(name)
        if kind is None:
            item = default[0] if isinstance(default, tuple | list) else default
            kind = type(item) if isinstance(item, int | float) else str
        many = isinstance(default, tuple | list)
        p.add_argument(flag, dest=name, type=kind, nargs="+" if many else None,
                       default=list(default) if many else default, choices=_CHOICES.get(name),
                       help=f"{_help(name, flag)} (default "
                            f"{'all' if _all_queries(name, default) else shown})")
        if name in _ALIASES:
            hidden_alias(p, _ALIASES[name], dest=name, type=kind, nargs="+" if many else None)
    if out is not None:
        shared_flag(p, "--output", dest="out", default=str(paths.runs_root() / out),
                    metavar="DIR", help=f"output folder (default: experiments/runs/{out} in "
                                        "the project folder)")
        hidden_alias(p, "--out", dest="out")


def _own(p, name: str, **kw) -> None:
    """A benchmark's flag for ``name`` that is no field of its settings (declared in
    :data:`_HELP`, as the settings' flags are; ``kw``: add_argument's, its help this use's)."""
    p.add_argument(_FLAGS.get(name, "--" + name.replace("_", "-")), dest=name, **kw)


def _help(name: str, flag: str) -> str:
    """A setting's help: the benchmarks' own, else the shared declaration's (its first clause:
    the default shown is the benchmark's)."""
    if name in _HELP:
        return _HELP[name]
    return declared(flag)["help"].split(" (default")[0]


def _all_queries(name: str, default) -> bool:
    from scabbard.queries import NAMES

    return name == "queries" and tuple(default) == NAMES


def _bench(bsub, name: str, help: str, description: str, func, **kw):
    p = bsub.add_parser(name, help=help, description=description, **kw)
    p.set_defaults(func=func)
    return p


# -- bench -------------------------------------------------------------------------------------
def add(sub, full: bool = True) -> None:
    """The ``bench`` group; with ``full``, its commands (their flags come from each
    experiment's settings, so the experiments are imported)."""
    p = sub.add_parser("bench", help="benchmarks that print figures (never part of the tests)")
    bsub = p.add_subparsers(dest="bench_cmd", required=True)
    if not full:
        return
    from scabbard.experiments import (
        aligned,
        checkpointing,
        comparison,
        compression,
        engine_throughput,
        grizzly,
        incremental,
        ingest,
        interquery,
        keyvalue,
        kills,
        partitioned,
        pipefabric,
        recovery,
        scaleout,
        state,
    )

    dp = _bench(
        bsub, "datagen", "dataset generation rate and replay-read rate per workload",
        "Generate each workload's dataset with --rows rows (into a scratch folder) and print "
        "the generation rate (tuples/s, MB/s of rows), then the read rate of the replay format "
        "from the page cache.", runs.run_datagen)
    dp.add_argument("--workloads", nargs="+", default=None, help="subset (default: all six)")
    _own(dp, "rows", type=int, default=16_000_000, help="rows per workload (default 16M)")
    dp.add_argument("--scratch", default=str(paths.data_root() / "bench"),
                    help="scratch folder (default: data/bench in the project folder)")
    dp.add_argument("--keep", action="store_true", help="keep the generated datasets")
    shared_flag(dp, "--master")
    ep = _bench(
        bsub, "engine", "per query: engine vs Spark throughput, 1 vs 2 workers, latency at 80%% load",
        "For each query on its small dataset: the engine's sustainable throughput with 1 and "
        "2 workers (endless replay for --duration), Spark Structured Streaming's throughput on "
        "the same data, and the engine's latency percentiles at 80% of its rate.  Writes "
        "results.csv and engine_throughput.png to --output.", runs.run_engine)
    _options(ep, engine_throughput.Settings, "queries", "seconds", "spark", "scale", "assembly",
             "ingress", "rounds", out="bench-engine")
    ip = _bench(
        bsub, "ingest",
        "disk bandwidth, then per query persisted ingest and the query with persisted input",
        "Measure this machine's O_DIRECT sequential write bandwidth, then per query: pure "
        "ingest with persistence, raw and reduced (push-up + adaptive compression, as the "
        "paper's Scabbard persists; tuples/s, MB/s to disk, share of the disk bandwidth) and "
        "the query's throughput without and with --persist-input.  Writes results.csv and "
        "ingest.png.",
        runs.run_ingest)
    _options(ip, ingest.Settings, "queries", "seconds", "scale", "with_query", "peers",
             "reduced", "ingress", "compression_interval", out="bench-ingest")
    cp = _bench(
        bsub, "checkpoints",
        "Table 4 and Fig. 7a: per query and worker count, throughput without FT (results "
        "dropped, and written to a file), with checkpoints only, with full FT on raw input, "
        "and as Scabbard (push-up + adaptive codecs); the CPU of every part per input tuple",
        "Per query on its dataset, back to back and interleaved over --rounds, on 1 and 2 "
        "workers: the query without fault tolerance (results dropped; and written to a "
        "Parquet file - the fair baseline), with its state checkpointed every --interval "
        "seconds (input not persisted: the paper's Scabbard-Chk), and fully fault-tolerant "
        "(checkpoints, the input persisted, results through the clocked exactly-once sink, "
        "machine durability: fdatasync before every acknowledgement and record) - with raw "
        "input and as the paper's Scabbard (persistence push-up and the adaptive codecs).  "
        "Prints the medians: throughput, the overheads against no FT writing its results, "
        "2 workers over 1, bytes persisted per input tuple, checkpoint time and state size "
        "beside the paper's Table 4, and each part's CPU in ns per input tuple (dispatch, "
        "stage, push-up, profile, compress, encode, fragment, boundary, assembly, sink, "
        "checkpoint, other).  Writes results.csv, parts.csv, runs.csv and checkpointing.png "
        "to --output.",
        runs.run_checkpoints)
    _options(cp, checkpointing.Settings, "queries", "seconds", "interval", "worker_counts",
             "configs", "compression_interval", "rounds", "scale", out="bench-checkpoints",
             rounds=2)
    ic = _bench(
        bsub, "incremental",
        "Table 4 with full and incremental checkpoints side by side",
        "Per query on its dataset: the query without fault tolerance, then with full and with "
        "incremental checkpoints every --interval seconds (Scabbard-Chk: input not persisted), "
        "flat out - throughput overhead, checkpoint time, state MB written per second, panes "
        "per checkpoint, the state load time of a recovery - and paced at --speedup x the "
        "dataset's event rate with a window of backlog (state MB/s once it was processed).  "
        "Prints both modes side by side and the ratios; writes results.csv, runs.csv and "
        "incremental_checkpoints.png to --output.  Notebook 12 also sweeps CEC's period.",
        runs.run_incremental)
    _options(ic, incremental.Settings, "queries", "seconds", "interval", "rounds", "scale",
             "speedup", out="bench-incremental")
    zp = _bench(
        bsub, "codecs", "Fig. 6: compression ratio and encode/decode MB/s per codec and data type",
        "Per data type of the paper's Fig. 6 (timestamps regular and bursty, integers "
        "random and in runs, floats lossless and with 2 decimals, repeated 16-byte "
        "strings) and per codec that applies: compression ratio and single-core encode and "
        "decode throughput, with the issue's targets (Var-Byte, NS, RLE, delta codecs >= 1 "
        "GB/s; Simple-8b, XOR >= 300 MB/s).  Writes results.csv, targets.csv and "
        "compression_tradeoffs.png to --output.", runs.run_codecs)
    _options(zp, compression.Settings, "rows", "repeat", out="bench-codecs")
    sp = _bench(
        bsub, "synclog",
        "the synchronous-log baseline (the paper's Kafka++): ingest and latency vs batch size",
        "Per query, its dataset serialized into rows (the paper's C layout), batched, "
        "compressed with LZ4 and appended by --producers threads to their own partition "
        "files, each batch flushed to disk (fdatasync) before it is acknowledged.  Prints "
        "tuples/s, MB/s written and append-to-acknowledgement latency; then, for "
        "--sweep-query, the same for batch sizes from 64 KiB to 16 MiB.", runs.run_synclog)
    _options(sp, ingest.Settings, "queries", "scale", "seconds", seconds=3.0)
    _own(sp, "batch_kib", type=int, default=1024, help="batch size in KiB (default 1024)")
    sp.add_argument("--producers", type=int, default=2, help="producer threads (default 2)")
    sp.add_argument("--sweep-query", type=str.upper, default="CM1",
                    help="query for the batch-size sweep (default CM1; 'none' to skip)")
    pp = _bench(
        bsub, "peers",
        "Fig. 7a and Fig. 8 side by side: the engine vs Spark-FT, Flink-FT, the broker, Kafka++",
        "On this machine, in one run and on the same data, per query: the engine without "
        "and with fault tolerance (persisted input, 1 s checkpoints, exactly-once output), "
        "Spark Structured Streaming and Flink SQL with checkpoints (Fig. 7a; targets: FT >= "
        "50x each peer; Spark in one session sized for this machine, a fresh one after its "
        "JVM dies; a peer that fails says why and the next query runs), then persisted "
        "ingest: the engine's p-stream, raw and with push-up + adaptive compression (the "
        "paper's Scabbard), vs the synchronous log (Kafka++, LZ4) vs a real broker, RabbitMQ "
        "Streams, started on 127.0.0.1 for the run and stopped after it (Fig. 8; target: "
        "reduced ingest >= 100x the broker).  A line per query and system tells the time so "
        "far and what is left.  Writes fig7a/, fig8/ (tables and figures) and "
        "side_by_side.csv to --output.", runs.run_peers)
    _options(pp, comparison.Settings, "queries", "seconds", "scale", "spark", "flink",
             "spark_memory", "spark_partitions", out="bench-peers")
    ap = _bench(
        bsub, "aligned", "Fig. 9: aligned checkpoints (Flink++) vs Scabbard's, on YSB, per batch size",
        "The engine run four ways on one query (YSB) for each batch size: Scabbard "
        "(p-streams, asynchronous checkpoints, results written at once), Scabbard-Chk "
        "(checkpoints only), Flink++ (aligned checkpoints: the pipeline drains at each "
        "marker; results held until the checkpoint commits) and Flink++ with its input "
        "persisted through the synchronous log (Kafka++).  Prints throughput, result "
        "latency, checkpoint and alignment time and disk MB/s, then the ratios the paper "
        "states.  Writes results.csv, runs.csv and aligned.png to --output.", runs.run_aligned)
    _options(ap, aligned.Settings, "query", "batch_kib", "seconds", "interval", "scale",
             out="bench-aligned")
    tp = _bench(
        bsub, "partitioned",
        "serial vs key-partitioned assembly: key skew (one key, Zipf, uniform) and the queries",
        "In one run, side by side for every --assembly mode and 1 and 2 workers: a synthetic "
        "stream (an 8-byte key and a value) whose keys are one key, Zipf-distributed or "
        "uniform over --keys keys, counted and summed per key over a sliding window; then the "
        "paper's queries whose windows are assembled sequentially.  Prints throughput, each "
        "mode's scaling from 1 to 2 workers and its gain over serial.  Writes results.csv, "
        "comparison.csv and partitioned.png to --output.", runs.run_partitioned)
    _options(tp, partitioned.Settings, "queries", "keys", "rows", "seconds", "scale", "assembly",
             out="bench-partitioned")
    fp = _bench(
        bsub, "selection",
        "PipeFabric's Table 1: a stateless selection's throughput per selectivity",
        "In one run, with 1 and 2 workers: the selection of PipeFabric's Table 1 (the queries "
        "PF-TRUE, PF-MOD2, PF-MOD10, PF-FALSE: SG readings whose measurement id satisfies "
        "true, mod 2, mod 10, false; results dropped) on the SG dataset replayed for "
        "--seconds, the four alternating for --rounds rounds (the median kept).  Prints the "
        "throughput and its ratio to 'true' beside the paper's (1 : 1.30 : 1.61 : 1.93), then "
        "the CPU per input tuple of each part (the selection's kernel, the survivors gathered, "
        "the rest of the task, the assembly, the dispatcher, the rest).  "
        "Writes table1.csv, table1_runs.csv and table1.png to --output.", runs.run_selection)
    _options(fp, pipefabric.Settings, "queries", "seconds", "rounds", "scale",
             out="bench-selection")
    iq = _bench(
        bsub, "interquery",
        "PipeFabric's Fig. 7: several queries at once, total throughput per number of queries",
        "Run --counts copies of --query at once, each on its own copy of the input (results "
        "dropped), for --duration seconds two ways: separate (PipeFabric's: an engine of one "
        "worker thread per query) and shared (one engine whose --shared-workers threads run "
        "every query's tasks); counts and ways alternate for --rounds rounds (the median "
        "kept).  Prints the total throughput, the slowest and fastest query's and the scaling "
        "against one query.  Writes interquery.csv, interquery_runs.csv and interquery.png "
        "to --output.", runs.run_interquery)
    _options(iq, interquery.Settings, "query", "counts", "shared_workers", "seconds", "rounds",
             "scale", out="bench-interquery")
    sp = _bench(
        bsub, "state",
        "Darwin's Fig. 5: the micro-benchmark on the engine and on Spark and Flink with "
        "RocksDB state",
        "Per number of keys, on Darwin's micro-benchmark (DARWIN: 32-byte records, a 60 s "
        "tumbling sum per key; the dataset generated with Spark, --event-seconds at --rate): "
        "the engine with its state in memory, within --state-memory (spilled to disk beyond) and "
        "with checkpoints, each in a process of its own with its peak resident and anonymous "
        "memory, then Spark Structured Streaming with the RocksDB state store and "
        "Flink SQL with the RocksDB state backend, each over the whole dataset once.  Prints "
        "the throughputs and the engine's over each peer's; writes results.csv, "
        "state_runs.csv and state.png to --output.", runs.run_state)
    _options(sp, state.Settings, "key_counts", "systems", "event_seconds", "rate", "rounds",
             "interval", "state_memory", out="bench-state")
    ap = _bench(
        bsub, "adaptive",
        "Grizzly: generic, instrumented and adaptive kernels; a change of the key range",
        "Per query, the engine with the generic kernels, with every task instrumented and "
        "with adaptive kernels (generic, instrumented, then optimised: filters by selectivity, "
        "a fused dense-array aggregation for a small key range or, YSB's, by the joined "
        "campaign's code), --rounds interleaved for --duration seconds each; then one adaptive "
        "run of --timeline-query whose keys leave the profiled range at --change-at seconds "
        "(Grizzly's Fig. 12; YSB: ten times more campaigns): when it "
        "deoptimised and how long after the change the re-optimised variant was swapped in; "
        "then --rounds kills of --recovery-query with the generic and with adaptive kernels "
        "(notebook 04's experiment): the recovery's phases side by side.  "
        "Prints the throughputs and the ratios to the generic kernels; writes results.csv, "
        "adaptive.png, timeline.csv, timeline.png and recovery.csv to --output.",
        runs.run_adaptive)
    _options(ap, grizzly.Settings, "queries", "variants", "seconds", "rounds", "workers",
             "scale", "timeline_query", "change_at", "stage_seconds", "recovery_query",
             out="bench-adaptive")
    rs = _bench(
        bsub, "restart",
        "notebook 04 (paper Fig. 10): kill -> recovered, cold restart and warm standby, "
        "each phase",
        "--rounds times, in turn: the query (default LRB1 small) runs as its own process at "
        "--load of its sustainable rate, is killed with SIGKILL --kill-at seconds in and "
        "recovered by a new process (cold restart: process start, then code loading while "
        "the state loads) and by a warm standby started ahead of the failure; its output is "
        "compared with a failure-free run.  Prints each phase's median and spread in ms; "
        "writes restarts.csv to --output.", runs.run_restart)
    _options(rs, recovery.Settings, "query", "scale", "load", "interval", "kill_at",
             out="bench-restart")
    _own(rs, "rounds", type=int, default=3, help="kills of each kind (default 3)")
    rp = _bench(
        bsub, "state-recovery",
        "Darwin's Fig. 2: checkpoint and recovery time against the state's size, state in "
        "memory vs spilled",
        "Per number of keys, on Darwin's micro-benchmark (DARWIN), the engine with checkpoints, "
        "its state in memory (engine-ft) or within --state-memory (engine-ft-spill: the "
        "spilled units are the checkpoint's state), is stopped halfway through the dataset, "
        "then recovered and run over the next window's end.  Prints per run the state the "
        "last checkpoint holds, the checkpoints' median duration, the recovery's state load "
        "and the recovered run's time; writes recovery.csv and state_recovery.png to "
        "--output.", runs.run_state_recovery)
    _options(rp, state.Settings, "key_counts", "event_seconds", "rate", "rounds",
             "state_memory", out="bench-state-recovery")
    kv = _bench(
        bsub, "keyvalue",
        "Darwin's Figs. 1 and 3: the engine's per-key store against RocksDB, insert and get",
        "In one process and one thread, per store size: the engine's per-key store (a log of "
        "records written in groups, an index in memory) and RocksDB through rocksdict, each "
        "prefilled with --record-counts records (an 8-byte key and --width float64 words), "
        "then --ops new records inserted and --ops existing keys read, --batch a call; then "
        "--individual-ops records inserted one a call and in calls of --group (Fig. 3).  "
        "--rounds rounds, the stores alternating.  Prints the medians and the keystore's "
        "ratio over RocksDB; writes keyvalue.csv, keyvalue_runs.csv and keyvalue.png to "
        "--output.", runs.run_keyvalue)
    _options(kv, keyvalue.Settings, "record_counts", "stores", "ops", "batch", "individual_ops",
             "group", "width", "rounds", out="bench-keyvalue")
    kr = _bench(
        bsub, "keyvalue-recovery",
        "Darwin's Fig. 2: checkpoint and recovery time against the state's size, per store",
        "In one process, per state size (--record-counts records of an 8-byte key and --width "
        "float64 words): the state in memory with a hash index, written whole to a file at a "
        "checkpoint and read back at a recovery (the paper's TBB); the engine's per-key store "
        "(a checkpoint writes its log's tail and, every 1 M records, its index's changed "
        "pages; a recovery maps the index and reads the log since); RocksDB (a checkpoint "
        "flushes its memtable, a recovery opens it).  Each store is filled (the per-key "
        "store checkpointing every 1 M records), 1 M of its keys are updated, a "
        "checkpoint is taken (timed, flushed to the disk), its files are dropped from the "
        "page cache, it is recovered (timed) and read 1,000 times (timed); the per-key "
        "store's index catch-up is timed last.  --rounds rounds, the stores alternating.  "
        "Writes keyvalue_recovery.csv, "
        "keyvalue_recovery_runs.csv and keyvalue_recovery.png to --output.",
        runs.run_keyvalue_recovery)
    _options(kr, keyvalue.Settings, "record_counts", "width", "rounds",
             out="bench-keyvalue-recovery", record_counts=(1_000_000, 10_000_000, 40_000_000))
    gp = _bench(
        bsub, "cluster",
        "generation rate and one query's throughput: local mode vs a standalone cluster here",
        "In one run: Spark in local mode (local[N]), then a standalone cluster started for the "
        "run (a master and N workers of one core on 127.0.0.1, stopped afterwards): each "
        "generates --tuples rows of --workload into a file:// URI (the executors write "
        "Parquet and the replay columns) and runs --query on them with the Spark backend "
        "(results written by the executors).  Prints the generation rate and the query's "
        "throughput side by side, and what limits them on this machine.", runs.run_cluster)
    _options(gp, scaleout.Settings, "workload", "tuples", "query", "workers", "rounds", "work")
    kp = _bench(
        bsub, "kills",
        "a long kill campaign: SIGKILL the engine at random moments, recover, verify",
        "For every query with every exactly-once sink (push-up and a compression scheme on "
        "every --reduce-every-th configuration), run the engine as its own process with "
        "checkpoints, SIGKILL it at random moments (each incarnation lives a random time), "
        "restart it with --recover until its input is consumed, and compare the committed "
        "output with a failure-free run.  Prints per configuration kills survived, results "
        "compared, lost, duplicated, different; writes runs.csv to --output.  The defaults "
        "(11 queries x 2 sinks x 23 kills = 506) take about an hour here.", runs.run_kills,
        epilog="Exit status 1 if any configuration lost, duplicated or changed a result.")
    _options(kp, kills.Settings, "queries", "sinks", "kills", "reduce_every", "reduced_with",
             "scale", "rate",
             "interval", "min_life", "max_life", "work", "seed", "placements",
             "checkpoint_mode", "compression_interval", "state_memory", "adaptive_kernels",
             "assembly", "ingress", out="bench-kills")


