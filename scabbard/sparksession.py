"""One place that starts Spark: the Java check, the session, and progress display.

Spark needs a Java runtime (17 or newer for Spark 4).  :func:`check_java` finds
it the way Spark does (``JAVA_HOME``, then ``java`` on the PATH) and raises
:class:`JavaNotFoundError` with what to do when it is missing or too old -
before any JVM is launched, so the user sees one clear line, not a stack of
py4j errors.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from scabbard.errors import Failure

MIN_JAVA = 17
INSTALL_HINT = (
    "install a Java 17+ runtime (Debian/Ubuntu: `sudo apt-get install -y "
    "openjdk-17-jre-headless`, or `make java` in this repository) or point JAVA_HOME at one"
)


class JavaNotFoundError(Failure, RuntimeError):
    """No usable Java runtime for Spark."""


class SparkMasterError(Failure, RuntimeError):
    """The Spark master cannot be reached."""


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


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def master_addresses(master: str) -> list[tuple[str, int]]:
    """The (host, port) pairs a master URL names: ``spark://h1:p1,h2:p2`` (standalone, with
    standby masters), ``k8s://https://host:port``; none for ``local[*]`` or ``yarn``."""
    if master.startswith("spark://"):
        out = []
        for hp in master[len("spark://"):].split(","):
            host, _, port = hp.rpartition(":") if ":" in hp else (hp, "", "7077")
            out.append((host.strip("[]"), int(port) if port.isdigit() else 7077))
        return out
    m = re.match(r"^k8s://(https?)://([^/:]+)(?::(\d+))?", master)
    if m:
        return [(m.group(2), int(m.group(3) or (443 if m.group(1) == "https" else 80)))]
    return []


def check_master(master: str, timeout: float = 10.0) -> None:
    """Raise :class:`SparkMasterError` unless one address of ``master`` accepts a connection
    (a master that is not there would otherwise make Spark retry for a minute)."""
    errors = []
    for host, port in master_addresses(master):
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            return
        except OSError as e:
            errors.append(f"{host}:{port}: {e.strerror or e}")
    if errors:
        raise SparkMasterError(
            f"cannot reach the Spark master {master} ({'; '.join(errors)}): is it running? "
            f"(a local one: `scabbard spark status`)")


@dataclass(frozen=True)
class SparkSettings:
    """How to start Spark.  ``master`` is any Spark master URL (``local[*]``, ``spark://...``,
    ``yarn``, ``k8s://...``); ``ui`` the address the driver's web UI binds to (None: no UI);
    ``extra`` Spark settings (``--conf``), applied last, so they override the rest."""

    master: str = "local[*]"
    app_name: str = "scabbard"
    driver_memory: str = "4g"
    shuffle_partitions: int = 8
    local_dir: str | None = None
    extra: tuple[tuple[str, str], ...] = ()
    ui: str | None = None

    @property
    def is_local(self) -> bool:
        return self.master.startswith("local")

    @property
    def on_loopback(self) -> bool:
        """Local mode, or a cluster all of whose masters are on this machine's loopback."""
        hosts = [h for h, _ in master_addresses(self.master)]
        return self.is_local or (bool(hosts) and all(h in LOOPBACK for h in hosts))


def machine_resources() -> tuple[int, int]:
    """This machine's (cores this process may use, bytes of memory available now)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) << 10
    except OSError:
        pass
    if available is None:  # no /proc: what sysconf says of physical memory
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(1, cores or 1), available


def sized_for_machine(cores: int, available_bytes: int, driver_memory: str | None = None,
                      shuffle_partitions: int | None = None, **settings) -> SparkSettings:
    """Local-mode settings sized for a machine of ``cores`` and ``available_bytes`` of free
    memory (:func:`machine_resources`): half of it as the driver's heap (in local mode the
    executors' tasks run in the driver's JVM, and their state stores live there), in whole
    GiB, 1 to 64 GiB; two shuffle partitions per core.  ``driver_memory`` (``"6g"``) and
    ``shuffle_partitions`` override either."""
    if driver_memory is None:
        driver_memory = f"{min(64, max(1, (available_bytes // 2) >> 30))}g"
    if shuffle_partitions is None:
        shuffle_partitions = max(2, 2 * cores)
    if not re.fullmatch(r"\d+[kmgt]?", driver_memory.lower()) or shuffle_partitions < 1:
        raise ValueError(f"Spark's driver memory is a size such as 4g (got {driver_memory!r}) "
                         f"and its shuffle partitions a positive count (got {shuffle_partitions})")
    return SparkSettings(**{"master": f"local[{cores}]", **settings,
                            "driver_memory": driver_memory.lower(),
                            "shuffle_partitions": shuffle_partitions})


def _address_towards(master: str) -> str:
    """This machine's address on the route to the master (what its executors can reach)."""
    for host, port in master_addresses(master):
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((host, port))
                return s.getsockname()[0]
        except OSError:
            continue
    return socket.gethostbyname(socket.gethostname())


def driver_configuration(settings: SparkSettings) -> tuple[dict, dict]:
    """What :func:`get_spark` sets: (environment of the driver's JVM, Spark settings).

    * The driver's Python workers and the executors' run ``spark.pyspark.python`` if given
      (a cluster's nodes have their own), else this interpreter.
    * On loopback (local mode, a local cluster) the driver binds to 127.0.0.1: the host name
      of these machines does not resolve to it.
    * On a remote standalone or Kubernetes cluster the driver announces its address on the
      route to the master (what the executors can reach, whatever the host name resolves to).
    * The web UI is off unless ``ui`` names an address; Spark binds it to ``SPARK_LOCAL_IP``,
      so that is set to it.
    """
    extra = dict(settings.extra)
    env = {"PYSPARK_PYTHON": extra.get("spark.pyspark.python", sys.executable),
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    conf = {"spark.ui.enabled": "true" if settings.ui else "false"}
    if settings.on_loopback:
        env["SPARK_LOCAL_IP"] = settings.ui or "127.0.0.1"
        conf.update({"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"})
    else:
        if settings.ui:
            env["SPARK_LOCAL_IP"] = settings.ui
        if master_addresses(settings.master):
            conf["spark.driver.host"] = _address_towards(settings.master)
    conf.update(extra)
    return env, conf


def get_spark(settings: SparkSettings = SparkSettings()):
    """Start (or reuse) the SparkSession described by ``settings``.

    Java and the master are checked first (one clear error each).  The environment is
    read by the driver's JVM when it starts - the first session of a process - so a later
    session with another ``ui`` address keeps the first one's binding.
    """
    check_java()
    check_master(settings.master)
    from pyspark.sql import SparkSession

    env, conf = driver_configuration(settings)
    os.environ.update(env)
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
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.local.dir", local_dir)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
    )
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def stop_active_session() -> None:
    """Stop this process's active Spark session, if Spark was ever loaded (its JVM then
    leaves the cores to what runs next)."""
    if "pyspark" in sys.modules:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is not None:
            spark.stop()


def jvm_pid(spark) -> int:
    """The process id of the session's driver JVM."""
    return int(spark._jvm.java.lang.ProcessHandle.current().pid())


def spark_alive(spark) -> bool:
    """Whether the session's driver JVM still answers and its context is not stopped."""
    try:
        return not spark.sparkContext._jsc.sc().isStopped()
    except Exception:  # noqa: BLE001 - py4j raises several kinds on a dead gateway
        return False


def jvm_exit(spark, timeout: float = 10.0) -> str:
    """Why the session's driver JVM is gone, in a few words: its exit code (52: out of
    memory, Spark's own code for it) or the signal that killed it; waits up to ``timeout``
    for a dying one."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return "the JVM is not a child of this process"
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return "the JVM no longer answers"
    if code == 52:
        return "the JVM ran out of memory (exit code 52)"
    if code < 0:
        return f"the JVM was killed by signal {-code}"
    return f"the JVM exited with code {code}"


def discard_spark(spark) -> None:
    """Forget a session whose JVM died (or stop a live one) so that the next
    :func:`get_spark` starts a fresh JVM: pyspark keeps the gateway and the session in
    class attributes, which a dead JVM leaves pointing at nothing."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession, SQLContext

    alive = spark_alive(spark)
    if alive:
        spark.stop()
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if not alive:
        if proc is not None and proc.poll() is None:  # hung, not dead: make it dead
            proc.kill()
            proc.wait()
        with warnings.catch_warnings(), contextlib.suppress(Exception):
            warnings.simplefilter("ignore")  # "unable to cleanly shutdown Spark JVM process"
            spark.sparkContext.stop()  # its accumulator server, its place as the active one
        if gateway is not None:
            with contextlib.suppress(Exception):  # nothing left to talk to
                gateway.shutdown()
        with SparkContext._lock:
            SparkContext._active_spark_context = None
            SparkContext._gateway = None
            SparkContext._jvm = None
        SparkSession._instantiatedSession = None
        SparkSession._activeSession = None
        SQLContext._instantiatedContext = None


_SHIPPED: dict[str, str] = {}  # application id -> the zip of scabbard's code it was sent


def ship_scabbard(spark) -> str | None:
    """On a cluster, send this scabbard's Python code along with the jobs (``addPyFile``), so
    that the executors' Python tasks (the replay columns) need numpy and pyarrow there - which
    pyspark's Arrow support needs anyway - but not scabbard installed.  Once per application;
    nothing in local mode, whose Python workers run this interpreter.  Returns the zip."""
    import atexit
    import zipfile

    sc = spark.sparkContext
    if sc.master.startswith("local"):
        return None
    if sc.applicationId not in _SHIPPED:
        import scabbard

        root = Path(scabbard.__file__).parent
        folder = tempfile.mkdtemp(prefix="scabbard-code-")
        atexit.register(shutil.rmtree, folder, True)
        path = Path(folder) / "scabbard.zip"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for f in sorted(root.rglob("*.py")):
                z.write(f, f.relative_to(root.parent))
        sc.addPyFile(str(path))
        _SHIPPED[sc.applicationId] = str(path)
    return _SHIPPED[sc.applicationId]


@contextmanager
def spark_progress(spark, desc: str, enabled: bool = True):
    """Show a tqdm bar of Spark task completion while the body runs a job."""
    if not enabled:
        yield
        return
    from scabbard.progress import bar as progress_bar

    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    bar = progress_bar(total=0, desc=desc, unit="task", leave=False)
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
