"""``bench peers`` with a Spark JVM killed: the comparison of the engine and Spark-FT run as
its own process (a process has one SparkContext, and the test process's is shared), the
first Spark-FT run's JVM SIGKILLed as that query's peer run starts - its pid known, its
session started - and the table the run returns written as JSON.

``python tests/peer_kill_child.py DATA_ROOT OUT.json QUERY [QUERY ...]``
"""

import json
import os
import signal
import sys
from pathlib import Path

from scabbard.experiments import comparison


def main() -> None:
    data_root, out, names = sys.argv[1], Path(sys.argv[2]), tuple(sys.argv[3:])
    killed: list[dict] = []

    def kill_the_first_spark_jvm(query: str, system: str, pid: int | None) -> None:
        if system == "spark_ft" and not killed:
            os.kill(pid, signal.SIGKILL)
            killed.append({"query": query, "pid": pid})

    settings = comparison.Settings(queries=names, scale="tiny", data_dir=data_root,
                                   seconds=0.2, flink=False, spark_memory="1g",
                                   spark_partitions=2)
    runs = comparison.run(settings, log=lambda s: print(s, flush=True),
                          on_peer_start=kill_the_first_spark_jvm)
    table = comparison.summary(runs)
    out.write_text(json.dumps({"killed": killed, "runs": json.loads(runs.to_json(orient="records")),
                               "failed": dict(zip(table["query"], table["failed"], strict=True))}))


if __name__ == "__main__":
    main()
