"""The common driver of the six Spark dataset generators.

A workload module describes *what* to generate (a :class:`WorkloadSpec`: schema,
side tables, default rate, scale presets, options, and a ``build`` function that
returns Spark DataFrames).  :func:`generate` does the rest, the same way for all:

1. validate the parameters and the output folder (before Spark starts);
2. return at once if an identical dataset is already there (unless ``force``);
3. run the Spark job(s), writing Parquet into a hidden staging folder;
4. convert the Parquet files, in partition order, into the replay format,
   hashing every column;
5. write the manifest and rename the staging folder into place (atomic).

Rows are closed-form functions of their index (see ``_expr``), generated in
event-time order without a shuffle, so the output does not depend on the
number of partitions or on the Spark master.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scabbard.data import Dataset, open_dataset
from scabbard.data.format import (
    DatasetError,
    build_manifest,
    publish,
    remove_stale_stages,
    staging_dir,
)
from scabbard.errors import UserError
from scabbard.hadoopfs import is_uri, to_uri
from scabbard.schema import Schema
from scabbard.usage import Usage

USAGE = Usage(  # scabbard datagen
    "generate benchmark datasets with Spark",
    "Generate a benchmark dataset with PySpark: Parquet under DATA_ROOT/WORKLOAD/NAME/ plus the "
    "engine's replay format (one memory-mappable file per column) and a manifest with a "
    "checksum.  Same parameters give byte-identical data, whatever the partitioning.",
    "Scales (per workload, at its default rate): tiny (tests, ~30k rows), small (~1M rows, the "
    "default), full (~32M rows).  Explicit --event-seconds/--rate override the scale.  An "
    "identical dataset already in place is kept (use --force to regenerate).")

MAX_ROWS = 1 << 40


class DatagenError(UserError, ValueError):
    """Bad generator parameters or an unusable output folder."""


@dataclass(frozen=True)
class Option:
    """A workload-specific parameter (e.g. LRB's number of expressways)."""

    name: str
    type: type
    default: Any
    help: str
    minimum: float | None = None

    def parse(self, value: Any) -> Any:
        if value is None:
            return self.default
        try:
            v = self.type(value)
        except (TypeError, ValueError):
            raise DatagenError(f"--{self.flag}: {value!r} is not a valid {self.type.__name__}") from None
        if isinstance(v, float) and not math.isfinite(v):
            raise DatagenError(f"--{self.flag} must be finite, got {value!r}")
        if self.minimum is not None and v < self.minimum:
            raise DatagenError(f"--{self.flag} must be >= {self.minimum}, got {value!r}")
        return v

    @property
    def flag(self) -> str:
        return self.name.replace("_", "-")


@dataclass(frozen=True)
class GenParams:
    """Everything that determines a dataset's content (and nothing else)."""

    duration: float
    rate: float
    seed: int
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def rows(self) -> int:
        return int(math.floor(self.duration * self.rate + 1e-9))

    def option(self, name: str) -> Any:
        return dict(self.options)[name]

    def to_dict(self) -> dict:
        return {"duration": self.duration, "rate": self.rate, "seed": self.seed,
                **dict(self.options)}


@dataclass(frozen=True)
class BuildContext:
    """What a workload's ``build`` gets: the session, the parameters and the partitioning."""

    spark: Any
    params: GenParams
    partitions: int

    def range(self, n: int):
        """Row indices 0..n-1 as column ``id``, split into contiguous, ordered partitions.

        A build returns, per table, a DataFrame with exactly the schema's fields, in
        order, whose partitions hold consecutive rows in order (no shuffle).
        """
        return self.spark.range(0, n, 1, max(1, min(self.partitions, n)))

    @property
    def seed(self) -> int:
        return self.params.seed


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    title: str
    schema: Schema
    default_rate: float
    durations: Mapping[str, float]
    build: Callable[[BuildContext], Mapping[str, Any]]
    tables: Mapping[str, Schema] = field(default_factory=dict)
    rates: Mapping[str, float] = field(default_factory=dict)  # per-scale rate, else default_rate
    options: tuple[Option, ...] = ()
    check: Callable[[GenParams], None] | None = None
    version: int = 1

    def generate(self, scale: str | None = None, duration: float | None = None,
                 rate: float | None = None, seed: int = 0, options: Mapping[str, Any] | None = None,
                 **run: Any) -> Dataset:
        """Generate this workload's dataset: ``make_params`` then :func:`generate`.

        ``run`` takes the fields of :class:`Datagen` (``out``, ``name``, ``partitions``,
        ``master``, ``force``, ``progress``, ``spark``...).
        """
        params = make_params(self, scale=scale, duration=duration, rate=rate, seed=seed,
                             **dict(options or {}))
        return generate(self, params, Datagen(**run))


def make_params(
    spec: WorkloadSpec,
    scale: str | None = None,
    duration: float | None = None,
    rate: float | None = None,
    seed: int = 0,
    **options: Any,
) -> GenParams:
    """Validated parameters: a scale preset (default ``small``) with explicit overrides."""
    if scale is not None and scale not in spec.durations:
        raise DatagenError(f"unknown scale {scale!r} (choose from {', '.join(spec.durations)})")
    scale = scale or "small"
    if duration is None:
        duration = spec.durations[scale]
    if rate is None:
        rate = spec.rates.get(scale, spec.default_rate)
    try:
        duration, rate = float(duration), float(rate)
    except (TypeError, ValueError):
        raise DatagenError("--event-seconds and --rate must be numbers") from None
    if not math.isfinite(duration) or duration <= 0:
        raise DatagenError(f"--event-seconds must be a positive number of seconds, got {duration:g}")
    if not math.isfinite(rate) or rate <= 0:
        raise DatagenError(f"--rate must be a positive number of tuples per second, got {rate:g}")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise DatagenError(f"--seed must be an integer in [0, 2^63), got {seed!r}")
    known = {o.name: o for o in spec.options}
    unknown = sorted(set(options) - set(known))
    if unknown:
        flags = ", ".join("--" + u.replace("_", "-") for u in unknown)
        raise DatagenError(f"{flags} does not apply to workload {spec.name!r}")
    opts = tuple((o.name, o.parse(options.get(o.name))) for o in spec.options)
    params = GenParams(duration, rate, seed, opts)
    if params.rows < 1:
        raise DatagenError(
            f"--event-seconds {duration:g} at --rate {rate:g}/s gives no rows; increase either"
        )
    if params.rows > MAX_ROWS:
        raise DatagenError(f"{params.rows} rows is more than this generator supports ({MAX_ROWS})")
    if spec.check is not None:
        spec.check(params)
    return params


def default_name(spec: WorkloadSpec, params: GenParams) -> str:
    """A preset's name (``small``) when the parameters are exactly that preset, else a slug."""
    for scale in spec.durations:
        if params == make_params(spec, scale=scale):
            return scale
    defaults = {o.name: o.default for o in spec.options}
    extra = "".join(
        f"-{k.replace('_', '')}{v:g}" if isinstance(v, float) else f"-{k.replace('_', '')}{v}"
        for k, v in params.options
        if v != defaults[k]
    )
    return f"d{params.duration:g}s-r{params.rate:g}-seed{params.seed}{extra}"


def check_writable(folder: Path) -> None:
    """Create ``folder`` if needed and prove we can write into it, or raise DatagenError."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as e:
        raise DatagenError(f"cannot write to output folder {folder}: {e.strerror or e}") from None


def code_fingerprint(spec: WorkloadSpec) -> str:
    """A hash of the code that decides a workload's bytes (its module and the shared helpers).

    Stored in the manifest, so that a dataset made by older generator code is regenerated
    rather than silently reused.
    """
    import hashlib
    import inspect

    from scabbard.workloads import _expr

    h = hashlib.sha256()
    for module in (inspect.getmodule(spec.build), _expr):
        h.update(inspect.getsource(module).encode())
    return h.hexdigest()[:16]


def _existing(final: Path, spec: WorkloadSpec, params: GenParams) -> tuple[str, Dataset | None]:
    """What is at ``final``: ("none"|"same"|"stale"|"different", dataset).

    "stale": the same workload and parameters, made by other generator code (or broken) -
    safe to replace.  "different": other parameters - the user's data; not replaced
    without ``force``.
    """
    if not final.exists():
        return "none", None
    try:
        ds = open_dataset(final, schema=spec.schema)
    except DatasetError:
        return "stale", None
    if ds.manifest.get("workload") != spec.name or ds.params != params.to_dict():
        return "different", ds
    if (ds.manifest.get("generator_version") == spec.version
            and ds.manifest.get("generator_code") == code_fingerprint(spec)):
        return "same", ds
    return "stale", ds


def _write_table(spark, df, schema: Schema, table_dir: Path, codec: str, progress: bool,
                 desc: str) -> dict:
    """Write one table: Spark writes Parquet, then the part files become replay columns."""
    from scabbard.progress import bar as progress_bar
    from scabbard.sparksession import spark_progress

    if df.columns != list(schema.names):
        raise RuntimeError(f"{desc}: build produced columns {df.columns}, expected {list(schema.names)}")
    folder = table_dir / "parquet"
    from scabbard.data.parquet import parquet_rows, parquet_to_replay, spark_parquet_writer

    with spark_progress(spark, f"{desc} spark", enabled=progress):
        spark_parquet_writer(df, codec).parquet(str(folder))
    files = []
    for p in sorted(folder.glob("part-*")):  # name part files by partition index only
        target = folder / f"part-{int(p.name.split('-')[1]):05d}.parquet"
        p.rename(target)
        files.append(target)
    for junk in folder.iterdir():  # _SUCCESS and checksum files of Hadoop's local file system
        if junk.name.startswith((".", "_")):
            junk.unlink()
    # modification times in partition order: a file stream reads files in that order
    start = time.time_ns() - len(files) * 10**9
    for k, f in enumerate(files):
        os.utime(f, ns=(start + k * 10**9, start + k * 10**9))

    with progress_bar(total=parquet_rows(files), desc=f"{desc} replay", unit="row", unit_scale=True,
              leave=False, disable=not progress) as bar:
        entry = parquet_to_replay(files, schema, table_dir, progress=bar.update)
    entry["parquet"] = [str(f.relative_to(table_dir)) for f in files]
    return entry


def _keep(state: str, existing, final, spec: WorkloadSpec, name: str, preset: bool,
          log: Callable[[str], None]) -> bool:
    """Whether the dataset ``_existing`` found at ``final`` is kept as it is; a dataset of
    other parameters under a name the user chose is an error, never overwritten."""
    if state == "same":
        log(f"{spec.name}: {final} is up to date ({existing.rows:,} rows); --force regenerates")
        return True
    if state == "different" and preset:
        log(f"{spec.name}: the {name!r} preset changed; regenerating {final}")
    elif state == "different":
        raise DatagenError(
            f"{final} already holds a dataset with other parameters; pass --force to "
            "replace it or --name to write beside it"
        )
    if state == "stale":
        log(f"{spec.name}: {final} was made by other generator code; regenerating it")
    return False


def default_partitions(spark, params: GenParams) -> int:
    """Two tasks per core, each of at least 250,000 rows."""
    par = spark.sparkContext.defaultParallelism
    return max(1, min(2 * par, math.ceil(params.rows / 250_000)))


def _quiet(line: str) -> None:
    pass


@dataclass(frozen=True)
class Datagen:
    """Where and how :func:`generate` writes a dataset: under ``<out>/<workload>/<name>``
    (``name``: the scale preset's, or one made of the parameters); by Spark on ``master``, or
    the ``spark`` session given, ``partitions`` tasks per table (default: two per core,
    each of at least 250,000 rows), Parquet compressed with ``parquet_codec``; ``force``
    replaces a dataset that is there; ``progress`` bars; ``log`` gets a line per step."""

    out: str | Path = "data"
    name: str | None = None
    partitions: int | None = None
    master: str = "local[*]"
    force: bool = False
    progress: bool = True
    parquet_codec: str = "snappy"
    spark: Any = None
    log: Callable[[str], None] = _quiet


LOCAL = Datagen()


def _generate_shared(spec: WorkloadSpec, params: GenParams, run: Datagen, name: str,
                     preset: bool):
    """:func:`generate` onto a URI a cluster shares: the executors write every byte
    (:mod:`scabbard.workloads.shared_output`); the dataset is the one a local run writes."""
    from scabbard.hadoopfs import SharedFS, check_executors_can_write, join
    from scabbard.sparksession import SparkSettings, get_spark
    from scabbard.workloads import shared_output

    spark, out = run.spark, to_uri(run.out)
    if spark is None:
        spark = get_spark(SparkSettings(master=run.master,
                                        app_name=f"scabbard-datagen-{spec.name}"))
    fs = SharedFS(spark)
    final = join(out, spec.name, name)
    check_executors_can_write(spark, join(out, spec.name), "--data-root")
    fingerprint = code_fingerprint(spec)
    if not run.force:
        state, existing = shared_output.existing_dataset(fs, final, spec, params.to_dict(),
                                                         fingerprint)
        if _keep(state, existing, final, spec, name, preset, run.log):
            return shared_output.opened(fs, final, spec.schema)
    partitions = run.partitions or default_partitions(spark, params)
    frames = spec.build(BuildContext(spark, params, partitions))
    expected = {"stream", *spec.tables}
    if set(frames) != expected:
        raise RuntimeError(f"{spec.name}.build returned {sorted(frames)}, expected {sorted(expected)}")
    origin = shared_output.Origin(params.to_dict(), fingerprint, {
        "master": spark.sparkContext.master, "partitions": partitions,
        "parquet_codec": run.parquet_codec})
    return shared_output.generate_shared(spec, frames, spark, final, origin, run.log)


def generate(spec: WorkloadSpec, params: GenParams, run: Datagen = LOCAL) -> Dataset:
    """Generate ``spec``'s dataset for ``params`` where and how ``run`` says (by default
    ``data/<workload>/<name>``, Spark in local mode).

    ``run.out`` is a folder, or a URI a cluster shares (``file:///shared/data``,
    ``hdfs://nn/data``); with a URI or a cluster master the executors write every byte
    (:mod:`scabbard.workloads.shared_output`) and the dataset is the same as a local run's.
    It is returned as a :class:`~scabbard.data.Dataset` where the driver sees it as a
    folder, else as a :class:`~scabbard.data.shared.SharedDataset`.
    """
    from scabbard.sparksession import SparkSettings, get_spark

    out, partitions, master, spark, log = run.out, run.partitions, run.master, run.spark, run.log
    parquet_codec, progress, name = run.parquet_codec, run.progress, run.name
    if partitions is not None and partitions < 1:
        raise DatagenError(f"--partitions must be >= 1, got {partitions}")
    preset = name is None and default_name(spec, params) in spec.durations
    name = name or default_name(spec, params)
    if not name or "/" in name or name.startswith("."):
        raise DatagenError(f"--name {name!r} is not a valid folder name")
    if is_uri(out) or not (master if spark is None else spark.sparkContext.master).startswith("local"):
        return _generate_shared(spec, params, run, name, preset)
    parent = Path(out) / spec.name
    final = parent / name
    check_writable(parent)
    remove_stale_stages(parent)
    if not run.force:
        state, existing = _existing(final, spec, params)
        if _keep(state, existing, final, spec, name, preset, log):
            return existing

    if spark is None:
        spark = get_spark(SparkSettings(master=master, app_name=f"scabbard-datagen-{spec.name}"))
    partitions = partitions or default_partitions(spark, params)

    stage = staging_dir(final)
    try:
        t0 = time.perf_counter()
        frames = spec.build(BuildContext(spark, params, partitions))
        expected = {"stream", *spec.tables}
        if set(frames) != expected:
            raise RuntimeError(f"{spec.name}.build returned {sorted(frames)}, expected {sorted(expected)}")
        entries = {}
        for tname, df in frames.items():
            if tname == "stream":
                schema, tdir = spec.schema, stage / "stream"
            else:
                schema, tdir = spec.tables[tname], stage / "tables" / tname
            entries[tname] = _write_table(spark, df, schema, tdir, parquet_codec, progress,
                                          f"{spec.name}:{tname}")
        t_total = time.perf_counter() - t0
        tables = {k: v for k, v in entries.items() if k != "stream"}
        manifest = build_manifest(
            spec.name, name, params.to_dict(), entries["stream"], tables,
            title=spec.title,
            generator_version=spec.version,
            generator_code=code_fingerprint(spec),
            run={
                "created": datetime.now(UTC).isoformat(timespec="seconds"),
                "master": master,
                "partitions": partitions,
                "spark_version": spark.version,
                "parquet_codec": parquet_codec,
                "seconds_total": round(t_total, 3),
            },
        )
        publish(stage, final, manifest)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    log(
        f"{spec.name}: {params.rows:,} rows in {t_total:.1f} s "
        f"({params.rows / t_total / 1e6:.2f} M tuples/s) -> {final}"
    )
    return open_dataset(final, schema=spec.schema)


# -- scabbard datagen ----------------------------------------------------------------------------
def output_root(data_root: str | None) -> str:
    """Where ``scabbard datagen`` writes: a URI as given, else the folder
    :func:`scabbard.paths.data_root` names, created and found writable (else a
    :class:`DatagenError`)."""
    from scabbard import paths

    if data_root and is_uri(data_root):
        return data_root
    root = str(paths.data_root(data_root))
    check_writable(Path(root))
    return root


def generate_all(plans: list[tuple[WorkloadSpec, GenParams]], run: Datagen,
                 conf: tuple[tuple[str, str], ...] = ()) -> list[tuple[str, Dataset]]:
    """Each dataset of ``plans`` (:func:`scabbard.workloads.plan`) generated as ``run`` says, on one Spark
    session started for the first (on ``run.master``, with the settings ``conf``); each with
    its workload's name."""
    from scabbard.sparksession import SparkSettings, get_spark

    spark, out = None, []
    for spec, params in plans:
        if spark is None:
            spark = get_spark(SparkSettings(master=run.master, app_name="scabbard-datagen",
                                            extra=conf))
        out.append((spec.name, generate(spec, params, replace(run, spark=spark))))
    return out


def summary(made: list[tuple[str, Dataset]]) -> str:
    """``scabbard datagen``'s table: per dataset (:func:`generate_all`) its workload, rows,
    MB of rows, the seconds its generation took and their rate, its folder."""
    lines = [f"{'workload':<9} {'rows':>12} {'MB (rows)':>10} {'seconds':>8} {'M tuples/s':>10}"
             "  path"]
    for name, ds in made:
        n, secs = ds.rows, ds.manifest.get("run", {}).get("seconds_total")
        rate = f"{n / secs / 1e6:10.2f}" if secs else f"{'-':>10}"
        lines.append(f"{name:<9} {n:>12,} {ds.stream.nbytes / 1e6:>10.1f} {secs or 0:>8.1f} "
                     f"{rate}  {ds.path}")
    return "\n".join(lines)
