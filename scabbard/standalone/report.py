"""What ``scabbard spark up|down|status`` print about the cluster
(:class:`~scabbard.standalone.cluster.StandaloneCluster`): each function starts, stops or asks
the cluster and gives the lines to show."""

from __future__ import annotations

from scabbard.standalone.cluster import StandaloneCluster
from scabbard.usage import Usage

SPARK = Usage(
    "start, stop or show a local Spark standalone cluster (master + workers on 127.0.0.1)",
    "A real Spark standalone cluster on this machine: one master and --workers workers on "
    "127.0.0.1, JVMs launched from the pyspark package's own jars (nothing is downloaded), each "
    "with its own folder under --folder.  Point the other commands at it with --master "
    "spark://127.0.0.1:PORT (datagen --out and run --workdir then name a folder or URI every "
    "executor reaches).",
    "`up` waits until every worker is registered with the master and prints the master URL; on "
    "a running cluster it starts the workers that died.  `down` stops the JVMs the cluster "
    "started - master, workers and their executors - and nothing else.  `status` exits 3 when "
    "no cluster runs.")
ACTIONS = {
    "up": Usage("start the cluster (or complete a running one)",
                "Start a master and --workers workers on 127.0.0.1 and wait until every worker "
                "is registered."),
    "down": Usage("stop every JVM the cluster started",
                  "Stop the cluster's master, workers and executors (SIGTERM, then SIGKILL "
                  "after a grace period) and nothing else."),
    "status": Usage("show the master URL, workers and applications",
                    "Show what runs: the master's URL and web UI, each worker's process and "
                    "state, running applications."),
}


def status_lines(status: dict) -> list[str]:
    """A running cluster's :meth:`~StandaloneCluster.status`: the master (its URL and pid,
    whether it answers), the web UI, each worker's process and state (cores and memory as the
    master sees them), the running applications."""
    lines = [f"  master   {status['master_url']}  (pid {status['master_pid']}"
             f"{'' if status['master'] else ', not answering'})",
             f"  web UI   {status['ui_url']}"]
    for w in status["workers"]:
        state = w["state"] if w["process"] else "process gone"
        lines.append(f"  {w['role']:<8} pid {w['pid']:<8} {state}"
                     + (f", {w['cores']} cores, {w['memory_mb']} MB" if w["cores"] else ""))
    if status["applications"]:
        lines.append(f"  running: {', '.join(status['applications'])}")
    return lines


def up(cluster: StandaloneCluster) -> str:
    """``scabbard spark up``: start ``cluster`` (or complete it) and say what runs, how to use
    it and how to stop it."""
    st = cluster.up()
    return "\n".join([
        f"Spark standalone cluster up in {cluster.folder} ({len(st.workers)} workers):",
        *status_lines(cluster.status()),
        f"\nuse it:  --master {st.master_url}   (e.g. scabbard run --query YSB --backend "
        f"spark --master {st.master_url} --workdir {cluster.folder / 'work'})",
        f"stop it: scabbard spark down --folder {cluster.folder}"])


def down(cluster: StandaloneCluster) -> str:
    """``scabbard spark down``: stop ``cluster``'s JVMs and say which (or that there was no
    cluster)."""
    state = cluster.state
    stopped = cluster.down()
    if state is None:
        return f"no cluster in {cluster.folder}"
    return (f"stopped the cluster in {cluster.folder}: {len(stopped)} JVMs "
            f"({', '.join(map(str, stopped)) or 'none left'})")


def status_text(folder, status: dict) -> str:
    """``scabbard spark status`` of the cluster in ``folder``: :func:`status_lines` under a
    heading, or that none runs."""
    if not status["running"]:
        return f"no cluster running in {folder}"
    return "\n".join([f"Spark standalone cluster in {folder}:", *status_lines(status)])
