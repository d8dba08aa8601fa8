"""``scabbard spark up|down|status``: a local Spark standalone cluster to run the same commands on."""

from __future__ import annotations

import argparse
import json

from scabbard.cli.common import shared_flag
from scabbard.cli.settings import settings_flags, settings_from

EXIT_NOT_RUNNING = 3  # `status` of a cluster that is not running (as service managers do)


def add(sub) -> None:
    p = sub.add_parser(
        "spark",
        help="start, stop or show a local Spark standalone cluster (master + workers on 127.0.0.1)",
        description=(
            "A real Spark standalone cluster on this machine: one master and --workers workers "
            "on 127.0.0.1, JVMs launched from the pyspark package's own jars (nothing is "
            "downloaded), each with its own folder under --folder.  Point the other commands at "
            "it with --master spark://127.0.0.1:PORT (datagen --out and run --workdir then name "
            "a folder or URI every executor reaches)."),
        epilog=("`up` waits until every worker is registered with the master and prints the "
                "master URL; on a running cluster it starts the workers that died.  `down` "
                "stops the JVMs the cluster started - master, workers and their executors - "
                "and nothing else.  `status` exits 3 when no cluster runs."),
    )
    ssub = p.add_subparsers(dest="spark_cmd", required=True, metavar="ACTION")
    up = ssub.add_parser("up", help="start the cluster (or complete a running one)",
                         description="Start a master and --workers workers on 127.0.0.1 and "
                                     "wait until every worker is registered.")
    down = ssub.add_parser("down", help="stop every JVM the cluster started",
                           description="Stop the cluster's master, workers and executors "
                                       "(SIGTERM, then SIGKILL after a grace period) and "
                                       "nothing else.")
    status = ssub.add_parser("status", help="show the master URL, workers and applications",
                             description="Show what runs: the master's URL and web UI, each "
                                         "worker's process and state, running applications.")
    for q in (up, down, status):
        q.add_argument("--folder", metavar="DIR", default=argparse.SUPPRESS,
                       help="the cluster's folder: state, logs, workers' scratch (default: "
                            "spark-cluster in the project folder, $SCABBARD_HOME or the "
                            "checkout - the same whatever the current folder)")
    from scabbard.standalone import ClusterSettings

    settings_flags(up, ClusterSettings, "workers", "cores", "memory", "port", "ui_port",
                   "timeout")
    shared_flag(status, "--json", help="print the status as JSON")
    p.set_defaults(func=_run)


def _settings(args):
    from scabbard.standalone import ClusterSettings

    return settings_from(ClusterSettings, args)  # --folder too, when given


def _run(args) -> int:
    from scabbard.standalone import StandaloneCluster, report

    cluster = StandaloneCluster(_settings(args))
    if args.spark_cmd in ("up", "down"):
        print((report.up if args.spark_cmd == "up" else report.down)(cluster))
        return 0
    status = cluster.status()
    print(json.dumps(status, indent=2) if args.json else report.status_text(cluster.folder, status))
    return 0 if status["running"] else EXIT_NOT_RUNNING
