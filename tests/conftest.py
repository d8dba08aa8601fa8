"""Shared fixtures: one local Spark session and one set of tiny datasets per test session."""

from __future__ import annotations

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


@pytest.fixture(scope="session")
def tiny(spark, data_root):
    """All six workloads generated at the tiny scale (seed 0), by name."""
    from scabbard.workloads.generator import generate, make_params

    out = {}
    for name in workloads.NAMES:
        spec = workloads.get(name).SPEC
        out[name] = generate(spec, make_params(spec, scale="tiny"), out=data_root, spark=spark,
                             progress=False)
    return out
