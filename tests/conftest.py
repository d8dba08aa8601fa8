"""Shared fixtures: one local Spark session and one set of tiny datasets per test session.

`make test` runs the suite in two pytest-xdist worker processes.  Each worker has its own Spark
session (started only if one of its tests needs it) and its own data root; the tiny datasets are
generated once per run, by whichever worker asks first, and copied into the others' roots.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest

from scabbard import workloads


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from scabbard.sparksession import SparkSettings, get_spark

    local = tmp_path_factory.mktemp("spark-local")
    session = get_spark(
        SparkSettings(master="local[2]", app_name="scabbard-tests", driver_memory="2g",
                      shuffle_partitions=2, local_dir=str(local))
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


@contextmanager
def _exclusive(path: Path):
    """An advisory lock on ``path`` held for the block: one worker at a time."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _generate_tiny(out: Path, spark) -> None:
    from scabbard.workloads.generator import Datagen, generate, make_params

    for name in workloads.ALL:
        spec = workloads.get(name).SPEC
        generate(spec, make_params(spec, scale="tiny"),
                 Datagen(out=out, spark=spark, progress=False))


@pytest.fixture(scope="session")
def tiny(request, data_root, tmp_path_factory):
    """Every workload (the six of Table 3, and Darwin's) at the tiny scale (seed 0), by name."""
    from scabbard.data import open_dataset

    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        _generate_tiny(data_root, request.getfixturevalue("spark"))
    else:
        # the run's folder, shared by its workers (each worker's own base folder is inside it)
        shared = tmp_path_factory.getbasetemp().parent / "tiny-shared"
        shared.mkdir(exist_ok=True)
        with _exclusive(shared.parent / "tiny-shared.lock"):
            if not (shared / "complete").exists():
                _generate_tiny(shared, request.getfixturevalue("spark"))
                (shared / "complete").touch()
        for name in workloads.ALL:
            shutil.copytree(shared / name / "tiny", data_root / name / "tiny")
    return {name: open_dataset(data_root / name / "tiny") for name in workloads.ALL}


# The longest modules first (measured: minutes each): with two processes taking modules in
# collection order, a long one started last would run alone at the end.
LONGEST_FIRST = ("test_spark_cluster", "test_notebooks", "test_placement",
                 "test_fault_tolerance", "test_browser", "test_spark_backend", "test_aligned",
                 "test_flink", "test_comparison", "test_engine", "test_pushup",
                 "test_crash_states")


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true",
                     help="also the long end-to-end runs (marked `long`: every notebook at the "
                          "tiny scale, the Spark cluster, the browser); `make test-long` runs "
                          "them alone, CI after `make test`")
    parser.addoption("--campaign", action="store_true",
                     help="also the campaigns: every cell of the kill and crash matrices and "
                          "the Spark cluster's whole plan (`make campaign`; the default run keeps "
                          "one cell per feature)")


def _deselect(config, items, marker: str) -> None:
    dropped = [item for item in items if marker in item.keywords]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if marker not in item.keywords]


def pytest_collection_modifyitems(config, items):
    for marker in ("campaign", "long"):
        if not config.getoption(marker):
            _deselect(config, items, marker)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: order kept within
