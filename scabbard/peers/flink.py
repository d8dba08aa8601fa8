"""The Flink peer: a logical plan run as a fault-tolerant Apache Flink SQL job (Fig. 7a, "Flink-FT").

Why an isolated environment: PyFlink (``apache-flink``) pins py4j, pandas < 2.3,
numpy < 2.2 and pyarrow < 17, which the project's own environment (pyspark,
numba, today's pandas/numpy/pyarrow) cannot hold.  So PyFlink lives in
``.venv-flink`` (``scripts/setup-flink.sh``), this module imports no PyFlink, and
every job runs as a subprocess of that environment's python executing
``flink_job.py`` (standard library + PyFlink only).

How a plan runs:

1. The stream fields the query reads (and each relation it joins) are exported
   to one CSV file with pyarrow (uuids as two int64 words), once per dataset,
   column set and work folder.  Only the fields read, as the columnar engine
   reads only those and a columnar format would give Flink by projection
   push-down: decoding CSV is what limits Flink here.  One file, because
   Flink's CSV reader does not split files: a single reader then reads the
   stream in event-time order, so no tuple is ever late (two files read by one
   reader one after the other would make the second one's tuples late).
2. :func:`scabbard.peers.flink_sql.flink_sql` compiles the plan to Flink SQL:
   window table-valued functions on an event-time attribute derived from
   ``timestamp`` (ms), a temporal join for the relation, and window operators
   for everything after the aggregation, so the job stays append-only.  No
   Python UDF anywhere: Flink's Python functions are 100-1000x slower.
3. ``flink_job.py`` runs the statements in a local mini-cluster (parallelism 2,
   checkpoints every second with the hashmap state backend into a ``file://``
   folder, REST endpoint on 127.0.0.1), writing the result rows as CSV.  At the
   end of the bounded input every open window fires, as in the engine.
4. The result CSV is read back into engine-style columns.

What is measured: ``seconds`` is Flink's own net runtime of the job (from its
submission to its end: scheduling and deployment included, the JVM start, the
planning and the CSV export not); ``seconds_total`` is the whole call.
``checkpoints`` counts the job's completed checkpoints (from the JobManager's log).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scabbard.data import Dataset
from scabbard.ft.modes import INTERVAL
from scabbard.peers.flink_sql import (
    OFFSET,
    FlinkSQL,
    counts_rows,
    flat_names,
    flink_sql,
    read_columns,
    sink_columns,
    subset,
)
from scabbard.query import Query, QueryError
from scabbard.query.plan import Node, RelationJoin
from scabbard.schema import Field, Schema

REPO = Path(__file__).resolve().parents[2]
FLINK_VENV = REPO / ".venv-flink"
JOB_SCRIPT = Path(__file__).resolve().with_name("flink_job.py")
SETUP_HINT = "run scripts/setup-flink.sh (about 1 minute, 850 MB)"
STATE_BACKENDS = ("hashmap", "rocksdb")


@dataclass(frozen=True)
class FlinkRun:
    """A finished Flink run: result rows (as engine-style columns), timing and checkpoints."""

    query: str
    columns: dict
    tuples: int
    seconds: float  # Flink's net runtime of the job
    seconds_total: float  # the whole call: export, JVM start, job, reading the result
    checkpoints: int  # completed checkpoints of the job
    report: dict  # what flink_job.py reported about this job

    @property
    def tuples_per_s(self) -> float:
        return self.tuples / self.seconds if self.seconds > 0 else 0.0


def flink_python(venv: str | Path | None = None) -> Path:
    return Path(venv or FLINK_VENV) / "bin" / "python"


def flink_available(venv: str | Path | None = None) -> bool:
    """Whether the Flink environment exists (``scripts/setup-flink.sh`` has run)."""
    v = Path(venv or FLINK_VENV)
    return flink_python(v).exists() and any(v.glob(".installed-apache-flink-*"))


# -- data export --------------------------------------------------------------------------------
def _arrow_table(schema: Schema, columns):
    """A pyarrow table of the CSV layout: uuids as two int64 words, everything else as is."""
    import pyarrow as pa

    arrays, names = [], []
    for f, c in zip(schema.fields, columns, strict=True):
        c = np.asarray(c)
        if f.dtype == "uuid":
            words = np.ascontiguousarray(c).view(np.int64)
            arrays += [pa.array(words[:, 0]), pa.array(words[:, 1])]
        else:
            arrays.append(pa.array(c))
        names += flat_names(f)
    return pa.Table.from_arrays(arrays, names=names)


def export_csv(schema: Schema, columns, path: Path) -> Path:
    """Write columns as one header-less CSV file (atomically: a finished file is complete)."""
    import pyarrow.csv as pcsv

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pcsv.write_csv(_arrow_table(schema, columns), tmp,
                   write_options=pcsv.WriteOptions(include_header=False, batch_size=1 << 16))
    tmp.replace(path)
    return path


def input_paths(dataset: Dataset, folder: Path, columns=None,
                relations=None, offsets: bool = False) -> tuple[Path, dict[str, Path]]:
    """Where :func:`export_dataset` puts a dataset's stream and ``relations`` (default: all)."""
    key = hashlib.sha256(f"{dataset.path.resolve()}|{dataset.checksum}".encode()).hexdigest()[:16]
    base = folder / f"{dataset.workload}-{dataset.name}-{key}"
    columns = dataset.schema.names if columns is None else tuple(columns)
    names = dataset.tables if relations is None else relations
    tag = hashlib.sha256(",".join(columns).encode()).hexdigest()[:8]
    return (base / f"stream-{len(columns)}cols-{tag}{'-offsets' if offsets else ''}.csv",
            {name: base / f"relation-{name}.csv" for name in names})


def export_dataset(dataset: Dataset, folder: Path, columns=None,
                   relations=None, offsets: bool = False) -> tuple[Path, dict[str, Path]]:
    """The dataset's stream fields ``columns`` and ``relations`` (default: all) as CSV files;
    ``offsets``: each tuple's offset in the stream as a last column (count-based windows).

    Files already there are reused: the paths carry the dataset's checksum and the columns.
    """
    stream, relations = input_paths(dataset, folder, columns, relations, offsets)
    if not stream.exists():
        schema = dataset.schema if columns is None else subset(dataset.schema, columns)
        cols = tuple(dataset.column(n) for n in schema.names)
        if offsets:
            schema = Schema(schema.name, (*schema.fields, Field(OFFSET, "int64")))
            cols += (np.arange(dataset.rows, dtype=np.int64),)
        export_csv(schema, cols, stream)
    for name, path in relations.items():
        if not path.exists():
            table = dataset.tables[name]
            export_csv(table.schema, table.columns, path)
    return stream, relations


def _relation_joins(node: Node):
    if isinstance(node, RelationJoin):
        yield node
    for c in node.children:
        yield from _relation_joins(c)


def check_relations(query: Query, dataset: Dataset) -> None:
    """A temporal join matches each tuple with one relation row: the join key must be unique."""
    for j in _relation_joins(query.node):
        table = dataset.table(j.relation.name)
        key = np.ascontiguousarray(table.column(j.right))
        if key.ndim == 2:
            key = key.view(f"V{key.shape[1] * key.itemsize}").ravel()
        if len(np.unique(key)) != len(key):
            raise QueryError(f"{query.name}: {j.relation.name}.{j.right} has duplicate values; "
                             "the Flink peer joins a relation on a unique key only (a temporal "
                             "join keeps one row per key)")


# -- results ---------------------------------------------------------------------------------------
def read_result(schema: Schema, folder: Path) -> dict:
    """The result CSV files of a job as engine-style columns (uuids as (n, 2) uint64)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    cols = sink_columns(schema)
    names = [n for n, _ in cols]
    types = {n: pa.float64() if t == "DOUBLE" else pa.int64() for n, t in cols}
    pending = [p.name for p in folder.rglob(".*") if p.is_file()] if folder.exists() else []
    if pending:
        raise RuntimeError(f"Flink left uncommitted result files in {folder}: {pending[:3]}")
    files = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []
    tables = [pcsv.read_csv(p, read_options=pcsv.ReadOptions(column_names=names),
                            convert_options=pcsv.ConvertOptions(column_types=types))
              for p in files if p.stat().st_size > 0]
    table = pa.concat_tables(tables) if tables else pa.table(
        {n: pa.array([], type=types[n]) for n in names})
    out = {}
    for f in schema.fields:
        if f.dtype == "uuid":
            words = [table.column(n).to_numpy() for n in flat_names(f)]
            out[f.name] = np.stack(words, axis=1).astype(np.int64).view(np.uint64).copy()
        else:
            out[f.name] = table.column(f.name).to_numpy().astype(f.numpy_dtype)
    return out


# -- running --------------------------------------------------------------------------------------
def _job_env(venv: Path, tmp: Path) -> dict:
    env = dict(os.environ)
    # the JVM's temporary files (RPC jar, mini-cluster and blob folders) under the work folder:
    # a killed JVM leaves them behind, and they go with the work folder
    env["JAVA_TOOL_OPTIONS"] = f"{env.get('JAVA_TOOL_OPTIONS', '')} -Djava.io.tmpdir={tmp}".strip()
    env["TMPDIR"] = str(tmp)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"  # Flink's workers call `python`
    env["VIRTUAL_ENV"] = str(venv)
    for k in ("PYTHONPATH", "PYTHONHOME"):
        env.pop(k, None)
    if "JAVA_HOME" not in env and (java := shutil.which("java")):
        env["JAVA_HOME"] = str(Path(java).resolve().parents[1])
    return env


def _kill_group(pgid: int) -> None:
    """SIGTERM, then SIGKILL, the job's whole process group (python and its JVM)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def _tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return ""
    text = path.read_text(errors="replace").splitlines()
    keep = [ln for ln in text if not ln.startswith("\tat ")]  # Java stack frames: noise
    return "\n".join(keep[-lines:])


def run_job_script(spec: dict, work: Path, venv: Path, timeout_s: float) -> dict:
    """Run ``flink_job.py`` on ``spec`` in its own process group; return its report.

    On failure or timeout the whole group is killed (no JVM stays behind) and
    :class:`RuntimeError` carries the tail of the job's stderr.
    """
    python = flink_python(venv)
    if not flink_available(venv):
        raise RuntimeError(f"the Flink environment {venv} is missing or incomplete: {SETUP_HINT}")
    spec_path, report_path = work / "spec.json", Path(spec["report"])
    spec_path.write_text(json.dumps(spec, indent=1))
    report_path.unlink(missing_ok=True)
    out, err, tmp = work / "job.stdout", work / "job.stderr", work / "tmp"
    tmp.mkdir(exist_ok=True)
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen([str(python), str(JOB_SCRIPT), str(spec_path)], stdout=fo,
                                stderr=fe, stdin=subprocess.DEVNULL, env=_job_env(venv, tmp),
                                cwd=work, start_new_session=True)
    rc = None
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass
    finally:  # however it ended, the group goes (PyFlink stops its JVM at exit: make sure)
        _kill_group(proc.pid)
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    if rc is None:
        raise RuntimeError(f"the Flink job timed out after {timeout_s:g} s and was killed; "
                           f"its stderr ends:\n{_tail(err)}")
    if rc != 0 or not report_path.exists():
        raise RuntimeError(f"the Flink job failed (exit code {rc}); its stderr ends:\n{_tail(err)}")
    return json.loads(report_path.read_text())


def run_flink_many(runs: list[tuple[Query, Dataset]], workdir: str | Path | None = None,
                   checkpoint_interval_s: float | None = INTERVAL, parallelism: int = 2,
                   timeout_s: float = 900.0, venv: str | Path | None = None,
                   state_backend: str = "hashmap") -> list[FlinkRun]:
    """Run several queries in ONE JVM: each as its own Flink job, one after the other.

    Saves the JVM and environment start (5-10 s) per query.  (One job for all,
    a statement set of every insert, was slower: 50 s against 41 s for the six
    queries of the tests - planning and running six pipelines at once on two
    cores.)  ``seconds_total`` of each run is the whole call's.  See :func:`run_flink`.
    """
    if state_backend not in STATE_BACKENDS:
        raise ValueError(f"state_backend: one of {', '.join(STATE_BACKENDS)}, "
                         f"not {state_backend!r}")
    venv = Path(venv or FLINK_VENV)
    own = workdir is None
    work = Path(tempfile.mkdtemp(prefix="scabbard-flink-")) if own else Path(workdir).resolve()
    try:
        t0 = time.perf_counter()
        # 1. check and compile everything before anything starts
        jobs, compiled = [], []
        for i, (query, dataset) in enumerate(runs):
            if dataset.schema.fingerprint != query.source.schema.fingerprint:
                raise ValueError(f"{query.name} reads {query.source.schema.name!r} data, not "
                                 f"{dataset.schema.name!r}")
            used = sorted({j.relation.name for j in _relation_joins(query.node)})
            columns, offsets = read_columns(query), counts_rows(query)
            stream, relations = input_paths(dataset, work / "input", columns, used, offsets)
            name = f"{i:02d}-{query.name}"
            out = work / "output" / name
            sql: FlinkSQL = flink_sql(query, stream.as_uri(),
                                      {k: p.as_uri() for k, p in relations.items()},
                                      out.as_uri(), prefix=f"q{i}_", columns=columns)
            check_relations(query, dataset)
            compiled.append((query, dataset, out, columns, used, offsets))
            jobs.append({"name": name, "ddl": list(sql.ddl), "inserts": [sql.insert],
                         "checkpoint_dir": str(work / "checkpoints" / name)})
        if not flink_available(venv):
            raise RuntimeError(f"the Flink environment {venv} is missing or incomplete: "
                               f"{SETUP_HINT}")
        # 2. the input as CSV, fresh output folders
        for _, dataset, out, columns, used, offsets in compiled:
            export_dataset(dataset, work / "input", columns, used, offsets)
            shutil.rmtree(out, ignore_errors=True)
        # 3. the job(s)
        spec = {"parallelism": parallelism, "checkpoint_interval_s": checkpoint_interval_s,
                "report": str(work / "report.json"), "log_dir": str(work / "log"), "jobs": jobs,
                "config": {"state.backend.type": state_backend,
                           # RocksDB's files: on this run's disk, removed with it
                           "state.backend.rocksdb.localdir": str(work / "rocksdb")}}
        report = run_job_script(spec, work, venv, timeout_s)
        # 4. the results
        results = []
        for (query, dataset, out, *_), job in zip(compiled, report["jobs"], strict=True):
            cols = read_result(query.schema, out)
            seconds = job["net_runtime_s"] or job["seconds_wall"]
            results.append((query, dataset, cols, seconds, job))
        total = time.perf_counter() - t0
        if state_backend == "rocksdb" and not report.get("rocksdb_native_loaded"):
            raise RuntimeError(f"the Flink job ran, but its log ({work / 'log'}) does not say "
                               f"that RocksDB's native library was loaded")
        return [FlinkRun(q.name, cols, ds.rows, s, total, int(job["checkpoints"]),
                         {**job, "env_start_s": report.get("env_start_s"),
                          "state_backend": report.get("state_backend")})
                for q, ds, cols, s, job in results]
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def run_flink(query: Query, dataset: Dataset, workdir: str | Path | None = None,
              checkpoint_interval_s: float | None = INTERVAL, parallelism: int = 2,
              timeout_s: float = 900.0, venv: str | Path | None = None,
              state_backend: str = "hashmap") -> FlinkRun:
    """Run ``query`` over ``dataset`` as a Flink SQL job; return its window results.

    ``workdir`` holds the exported CSV input, the checkpoints, the result files,
    the job's spec, report and logs; a temporary folder (removed afterwards) by
    default.  ``checkpoint_interval_s=None`` runs without checkpoints.
    ``state_backend``: ``hashmap`` (objects on the JVM heap) or ``rocksdb`` (the embedded
    RocksDB of ``flink-dist``: serialized state on the local disk, larger than memory);
    the job's report says which one the job ran with (``state_backend``).
    Raises :class:`QueryError` for a plan the peer cannot compile, ``ValueError``
    for a dataset of another workload, :class:`RuntimeError` if the job fails
    or times out (its process group killed) or ``.venv-flink`` is missing.
    """
    return run_flink_many([(query, dataset)], workdir, checkpoint_interval_s, parallelism,
                          timeout_s, venv, state_backend)[0]


def main(argv: list[str] | None = None) -> int:
    """``python -m scabbard.peers.flink QUERY DATASET_FOLDER``: run one query, print a summary."""
    import argparse

    from scabbard import queries
    from scabbard.data import open_dataset

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("query")
    p.add_argument("dataset")
    p.add_argument("--workdir")
    args = p.parse_args(argv)
    run = run_flink(queries.get(args.query), open_dataset(args.dataset), workdir=args.workdir)
    print(f"{run.query}: {run.tuples} tuples in {run.seconds:.2f} s "
          f"({run.tuples_per_s / 1e6:.2f} M tuples/s), {len(next(iter(run.columns.values())))} "
          f"result rows, {run.checkpoints} checkpoints, {run.seconds_total:.1f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
