"""Run Flink SQL jobs in a local mini-cluster: the script ``scabbard.peers.flink`` starts.

It runs INSIDE ``.venv-flink`` (standard library + PyFlink only; started as a
file path, so nothing of the ``scabbard`` package, which needs numba, is
imported).  It reads a JSON spec from the file named on argv, or from stdin::

    {"parallelism": 2, "checkpoint_interval_s": 1.0, "report": "/path/report.json",
     "log_dir": "/path/log",
     "jobs": [{"name": "CM1", "ddl": ["CREATE ..."], "inserts": ["INSERT ..."],
               "checkpoint_dir": "/path/checkpoints/CM1"}]}

One TableEnvironment (one JVM) runs the jobs one after the other, each in a
local mini-cluster of its own (REST endpoint on 127.0.0.1): a job is a
statement set of its inserts, checkpointed every ``checkpoint_interval_s``
(exactly-once) with the hashmap state backend (``config``'s ``state.backend.type``:
``rocksdb`` for state on the local disk) into its own ``file://`` folder.
After each job the report is rewritten: the JVM and environment start time,
and per job its id, seconds to plan and submit it, wall seconds from
submission to finish, Flink's net runtime and the number of completed
checkpoints (from the JobManager's log, written to ``log_dir``).

Bounded input: the sources are files, so when they are read to the end the
watermark jumps to +inf and every window still open fires, including the last
ones that end after the last tuple.  That is what the engine does at the end of
its stream (it flushes its open windows as final), and what the Spark peer gets
by its sentinel tuple far beyond the last window: the three give the same rows.
A job stopped before the end of its input would emit fewer windows, never
partial ones: windows fire on the watermark only.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path


def log(msg: str) -> None:
    print(f"flink_job: {msg}", file=sys.stderr, flush=True)


def make_env(spec: dict):
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    conf = Configuration()
    settings = {
        "rest.bind-address": "127.0.0.1",
        "rest.address": "127.0.0.1",
        "rest.port": "0",  # any free port
        "parallelism.default": str(spec.get("parallelism", 2)),
        "table.local-time-zone": "UTC",
        "state.backend.type": "hashmap",
    }
    if spec.get("checkpoint_interval_s"):  # none: no checkpoints
        settings.update({
            "execution.checkpointing.interval": f"{round(spec['checkpoint_interval_s'] * 1000)} ms",
            "execution.checkpointing.mode": "EXACTLY_ONCE",
            "execution.checkpointing.storage": "filesystem",
        })
    settings.update(spec.get("config", {}))
    for k, v in settings.items():
        conf.set_string(k, v)
    env = EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(conf).build()
    return TableEnvironment.create(env)


def completed_checkpoints(log_dir: Path, job_id: str) -> int:
    """Completed checkpoints of a job, from the JobManager's log.

    (Local execution starts a mini-cluster per job and stops it, REST endpoint
    and all, the moment the job ends: the log is what stays.)
    """
    pattern = re.compile(rf"Completed checkpoint (\d+) for job {job_id}\b")
    ids = set()
    for path in log_dir.glob("*.log"):
        with open(path, errors="replace") as f:
            for line in f:
                if "Completed checkpoint" in line and (m := pattern.search(line)):
                    ids.add(int(m.group(1)))
    return len(ids)


def rocksdb_loaded(log_dir: Path) -> bool:
    """Whether the log says RocksDB's native library was loaded (the rocksdb backend)."""
    for path in log_dir.glob("*.log"):
        with open(path, errors="replace") as f:
            if any("Successfully loaded RocksDB native library" in line for line in f):
                return True
    return False


def run_job(t_env, job: dict, log_dir: Path) -> dict:
    folder = Path(job["checkpoint_dir"])
    folder.mkdir(parents=True, exist_ok=True)
    t_env.get_config().set("execution.checkpointing.dir", folder.resolve().as_uri())
    t_env.get_config().set("pipeline.name", f"scabbard-{job['name']}")
    for stmt in job["ddl"]:
        t_env.execute_sql(stmt)
    stset = t_env.create_statement_set()
    for stmt in job["inserts"]:
        stset.add_insert_sql(stmt)
    t0 = time.perf_counter()
    result = stset.execute()  # plans, starts the job's mini-cluster, submits
    submitted = time.perf_counter() - t0
    client = result.get_job_client()
    job_id = str(client.get_job_id())
    log(f"{job['name']}: job {job_id} submitted")
    result.wait()
    wall = time.perf_counter() - t0
    net = None
    try:
        net = client.get_job_execution_result().result().get_net_runtime() / 1000.0
    except Exception as e:
        log(f"{job['name']}: no net runtime ({e})")
    checkpoints = completed_checkpoints(log_dir, job_id)
    log(f"{job['name']}: finished in {wall:.2f} s (net runtime {net} s), "
        f"{checkpoints} completed checkpoints")
    return {"name": job["name"], "job_id": job_id, "seconds_submit": submitted,
            "seconds_wall": wall, "net_runtime_s": net, "checkpoints": checkpoints}


def write_report(report: dict, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1))
    tmp.replace(path)


def main(argv: list[str]) -> int:
    started = time.perf_counter()
    spec = json.loads(Path(argv[1]).read_text() if len(argv) > 1 else sys.stdin.read())
    report_path = Path(spec["report"])
    log_dir = Path(spec["log_dir"])
    os.environ["FLINK_LOG_DIR"] = str(log_dir)  # where PyFlink's JVM writes its log
    report = {"pid": os.getpid(), "jobs": []}
    t_env = make_env(spec)
    report["env_start_s"] = time.perf_counter() - started
    for job in spec["jobs"]:
        report["jobs"].append(run_job(t_env, job, log_dir))
        write_report(report, report_path)
    report["total_s"] = time.perf_counter() - started
    report["state_backend"] = spec.get("config", {}).get("state.backend.type", "hashmap")
    report["rocksdb_native_loaded"] = rocksdb_loaded(log_dir)
    write_report(report, report_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
