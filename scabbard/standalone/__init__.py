"""A local Spark standalone cluster the workbench starts and stops (docs/design.md).

One master and N workers on 127.0.0.1, launched from the ``pyspark`` package's own jars
(no download), each with its own folder, every process tagged so that stopping the cluster
stops exactly its JVMs.  ``scabbard spark up|down|status`` and the tests use it; the same
commands then run against it with ``--master spark://127.0.0.1:<port>``.
"""

from scabbard.standalone.cluster import (
    ClusterSettings,
    ClusterState,
    StandaloneCluster,
    master_status,
)
from scabbard.standalone.daemons import ClusterError

__all__ = ["ClusterError", "ClusterSettings", "ClusterState", "StandaloneCluster",
           "master_status"]
