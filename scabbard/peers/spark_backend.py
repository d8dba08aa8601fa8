"""``scabbard run --backend spark``'s run: a query on Spark Structured Streaming
(:func:`scabbard.peers.spark.run_spark`), local or on a cluster, with the lines it shows.

With a cluster master every location is a URI the executors reach: the dataset (a folder or
URI), the work folder (checkpoints, the branches' windows, the results) and the output.  The
executors read and write them; the driver collects nothing.  A run on the work folder of one
that stopped resumes it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable

from scabbard.progress import say


def run_backend(query, settings, data: str | None, local_dataset: Callable, workdir=None,
                output: str | None = None, log: Callable[[str], None] = say) -> str:
    """Run ``query`` on the Spark session ``settings`` (a
    :class:`~scabbard.sparksession.SparkSettings`) over the dataset ``data`` - a URI the
    executors read, else ``local_dataset()`` - in ``workdir`` (a URI or folder every executor
    writes, checked first; None: a scratch folder, removed after), results to ``output``
    (default: ``<workdir>/result``).  ``log`` is given the Spark UI's address (when
    ``settings.ui``) and the run's first line; the lines after the run are returned."""
    from scabbard import queries, workloads
    from scabbard.data.shared import open_shared_dataset
    from scabbard.hadoopfs import SharedFS, check_executors_can_write, is_uri, join
    from scabbard.peers.spark import Results, run_spark
    from scabbard.sparksession import get_spark

    spark = get_spark(settings)
    if settings.ui:
        log(f"Spark UI: {spark.sparkContext.uiWebUrl} (bound to {settings.ui})")
    if data and is_uri(data):
        schema = workloads.get(queries.workload_of(query.name)).SCHEMA
        ds = open_shared_dataset(SharedFS(spark), data, schema)
    else:
        ds = local_dataset()
    log(f"{query.name} on {ds.path} ({ds.rows:,} tuples, {ds.schema.size_label}), backend spark")
    with tempfile.TemporaryDirectory(prefix="scabbard-spark-") as tmp:
        if workdir:
            check_executors_can_write(spark, workdir, "--workdir")
        run = run_spark(query, ds, spark=spark, workdir=workdir or tmp,
                        results=Results(output or join(workdir or tmp, "result"), False))
    shown = run.output if workdir or output else "(not kept: give --output or --workdir)"
    return (f"\n{query.name} (Spark Structured Streaming, {spark.sparkContext.master}): "
            f"{run.tuples:,} tuples in {run.seconds:.2f} s = {run.tuples_per_s / 1e6:.3f} M "
            f"tuples/s (streaming part; {run.seconds_total:.2f} s in all)\n"
            f"results: {run.rows:,} rows, written by the executors -> {shown}")
