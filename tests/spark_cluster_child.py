"""A Spark driver for the cluster tests: runs a plan of steps in one SparkSession, as its own
process (the test process has its local session; a process has one SparkContext).

``python tests/spark_cluster_child.py PLAN.json``.  The plan: ``master``, ``ui`` (an address
for the web UI, or null) and ``steps``, each either

* ``{"generate": WORKLOAD, "out": URI, "partitions": N, "scale": ..., "duration": ...,
  "rate": ...}`` - :func:`scabbard.workloads.generator.generate` onto the URI, or
* ``{"run": QUERY, "data": URI, "workdir": URI, "max_files": N, "conf": {...}}`` -
  :func:`run_spark` (with these SQL settings), the results written by the executors to
  ``<workdir>/result``, nothing collected.

It prints one JSON line per event - ``ui`` (then waits for a line on stdin: the test looks at
the UI first), ``started`` and ``done`` per step - so the test acts on events, never on time.
"""

import json
import sys
from pathlib import Path

from scabbard import queries, workloads
from scabbard.data.shared import open_shared_dataset
from scabbard.hadoopfs import SharedFS, join
from scabbard.peers.spark import Results, run_spark
from scabbard.sparksession import SparkSettings, get_spark
from scabbard.workloads.generator import Datagen, generate, make_params


def say(**event) -> None:
    print(json.dumps(event), flush=True)


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    spark = get_spark(SparkSettings(master=plan["master"], app_name="scabbard-cluster-test",
                                    shuffle_partitions=2, driver_memory="2g", ui=plan.get("ui")))
    if plan.get("ui"):
        say(event="ui", url=spark.sparkContext.uiWebUrl, app=spark.sparkContext.applicationId)
        sys.stdin.readline()
    for i, step in enumerate(plan["steps"]):
        say(event="started", step=i)
        if "generate" in step:
            spec = workloads.get(step["generate"]).SPEC
            params = make_params(spec, scale=step.get("scale"), duration=step.get("duration"),
                                 rate=step.get("rate"))
            ds = generate(spec, params,
                          Datagen(out=step["out"], partitions=step.get("partitions"), spark=spark,
                                  progress=False, force=True))
            where = spark.sparkContext.parallelize([0], 1).map(
                lambda _: __import__("scabbard").__file__).collect()[0]
            say(event="done", step=i, path=str(ds.path), rows=ds.rows,
                master=ds.manifest["run"]["master"], executors_scabbard=where)
        else:
            for key, value in step.get("conf", {}).items():  # SQL settings for this query
                spark.conf.set(key, value)
            query = queries.get(step["run"])
            schema = workloads.get(queries.workload_of(step["run"])).SCHEMA
            ds = open_shared_dataset(SharedFS(spark), step["data"], schema)
            run = run_spark(query, ds, spark=spark, workdir=step["workdir"],
                            results=Results(join(step["workdir"], "result"), False),
                            max_files_per_trigger=step.get("max_files"))
            say(event="done", step=i, query=run.query, rows=run.rows, output=run.output,
                rows_read=list(run.rows_read), tuples=run.tuples, seconds=run.seconds)
            for key in step.get("conf", {}):
                spark.conf.unset(key)
    spark.stop()


if __name__ == "__main__":
    main()
