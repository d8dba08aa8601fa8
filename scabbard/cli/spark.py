"""``scabbard spark up|down|status``: a local Spark standalone cluster to run the same commands on."""

from __future__ import annotations

import argparse
import json

from scabbard.cli.common import shared_flag
from scabbard.cli.settings import settings_flags, settings_from

EXIT_NOT_RUNNING = 3  # `status` of a cluster that is not running (as service managers do)


def add(sub) -> None:
    from scabbard.standalone import report

    p = report.SPARK.parser(sub, "spark")
    ssub = p.add_subparsers(dest="spark_cmd", required=True, metavar="ACTION")
    up, down, status = (u.parser(ssub, name) for name, u in report.ACTIONS.items())
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
