"""One place that starts Spark: the Java check, the session, and progress display.

Spark needs a Java runtime (17 or newer for Spark 4).  :func:`check_java` finds
it the way Spark does (``JAVA_HOME``, then ``java`` on the PATH) and raises
:class:`JavaNotFoundError` with what to do when it is missing or too old -
before any JVM is launched, so the user sees one clear line, not a stack of
py4j errors.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

MIN_JAVA = 17
INSTALL_HINT = (
    "install a Java 17+ runtime (Debian/Ubuntu: `sudo apt-get install -y "
    "openjdk-17-jre-headless`, or `make java` in this repository) or point JAVA_HOME at one"
)


class JavaNotFoundError(RuntimeError):
    """No usable Java runtime for Spark."""


@dataclass(frozen=True)
class JavaInfo:
    executable: str
    version: str
    major: int


def _java_executable(java_home: str | None, path: str | None) -> str | None:
    if java_home:
        cand = Path(java_home) / "bin" / "java"
        return str(cand) if cand.is_file() and os.access(cand, os.X_OK) else None
    return shutil.which("java", path=path)


def check_java(
    java_home: str | None = None, path: str | None = None, minimum: int = MIN_JAVA
) -> JavaInfo:
    """Return the Java that Spark will use, or raise :class:`JavaNotFoundError`.

    ``java_home`` and ``path`` default to the process environment's ``JAVA_HOME``
    and ``PATH`` - the same lookup Spark's launcher does.
    """
    java_home = os.environ.get("JAVA_HOME") if java_home is None else java_home
    exe = _java_executable(java_home, path)
    if exe is None:
        where = f"JAVA_HOME={java_home} has no bin/java" if java_home else "no `java` on PATH"
        raise JavaNotFoundError(f"Spark needs Java {minimum}+, but {where}: {INSTALL_HINT}")
    try:
        out = subprocess.run(
            [exe, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise JavaNotFoundError(f"Spark needs Java {minimum}+, but {exe} failed to run ({e}): "
                                f"{INSTALL_HINT}") from None
    m = re.search(r'version "([^"]+)"', out.stderr + out.stdout)
    if out.returncode != 0 or not m:
        raise JavaNotFoundError(
            f"Spark needs Java {minimum}+, but `{exe} -version` did not report a version: "
            f"{INSTALL_HINT}"
        )
    version = m.group(1)
    parts = version.split(".")
    major = int(parts[1]) if parts[0] == "1" and len(parts) > 1 else int(re.match(r"\d+", parts[0]).group())
    if major < minimum:
        raise JavaNotFoundError(
            f"Spark needs Java {minimum}+, but {exe} is Java {version}: {INSTALL_HINT}"
        )
    return JavaInfo(exe, version, major)


@dataclass(frozen=True)
class SparkSettings:
    """How to start Spark.  ``master`` is any Spark master URL (``local[*]``, ``spark://...``)."""

    master: str = "local[*]"
    app_name: str = "scabbard"
    driver_memory: str = "4g"
    shuffle_partitions: int = 8
    local_dir: str | None = None
    extra: tuple[tuple[str, str], ...] = ()

    @property
    def is_local(self) -> bool:
        return self.master.startswith("local")


def get_spark(settings: SparkSettings = SparkSettings()):
    """Start (or reuse) the SparkSession described by ``settings``."""
    check_java()
    from pyspark.sql import SparkSession

    # Spark's Python workers must run this interpreter (the venv's), and in local mode the
    # driver must bind to loopback: the host name of these machines does not resolve to it.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if settings.is_local:
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    log4j = resources.files("scabbard.resources").joinpath("log4j2.properties")
    # Spark's generated code for wide projections exceeds HotSpot's 8 KB limit for JIT
    # compilation; without this flag such stages run interpreted, 2x slower.
    java_opts = f"-Dlog4j.configurationFile=file:{log4j} -XX:-DontCompileHugeMethods"
    local_dir = settings.local_dir or tempfile.gettempdir()
    builder = (
        SparkSession.builder.master(settings.master)
        .appName(settings.app_name)
        .config("spark.driver.memory", settings.driver_memory)
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.local.dir", local_dir)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
    )
    if settings.is_local:
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
            "spark.driver.host", "127.0.0.1"
        )
    for k, v in settings.extra:
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def spark_progress(spark, desc: str, enabled: bool = True):
    """Show a tqdm bar of Spark task completion while the body runs a job."""
    if not enabled:
        yield
        return
    from tqdm.auto import tqdm

    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    bar = tqdm(total=0, desc=desc, unit="task", leave=False)
    seen: dict[int, tuple[int, int]] = {}

    def poll() -> None:
        while not stop.wait(0.3):
            for sid in tracker.getActiveStageIds():
                info = tracker.getStageInfo(sid)
                if info is not None:
                    seen[sid] = (info.numTasks, info.numCompletedTasks)
            total = sum(t for t, _ in seen.values())
            done = sum(d for _, d in seen.values())
            if total != bar.total:
                bar.total = total
            bar.n = done
            bar.refresh()

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    start = time.perf_counter()
    try:
        yield
    finally:
        stop.set()
        t.join()
        bar.n = bar.total
        bar.set_postfix_str(f"{time.perf_counter() - start:.1f}s")
        bar.close()
