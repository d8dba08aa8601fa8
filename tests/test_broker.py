"""The broker peer: a private RabbitMQ node on loopback, confirmed publishes that are really
stored (read back, exact, after a restart of the node), and nothing left running after stop."""

import os

import numpy as np
import pytest

from scabbard.peers import broker

pytestmark = [pytest.mark.slow]

if not broker.installed():
    if os.environ.get("SCABBARD_REQUIRE_PEERS"):
        raise RuntimeError("RabbitMQ is not installed and SCABBARD_REQUIRE_PEERS is set: "
                           "run scripts/setup-peers.sh")
    pytest.skip("RabbitMQ is not installed (scripts/setup-peers.sh)", allow_module_level=True)


def _listeners() -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket on this machine."""
    found = []
    for name, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with open(name) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                if state == "0A":  # LISTEN
                    addr, port = local.split(":")
                    found.append((addr[-width:], int(port, 16)))
    return found


LOOPBACK = {"0100007F", "00000000000000000000000001000000"}


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rabbitmq")
    b = broker.RabbitMQ(folder, keep=True).start()
    yield b
    b.stop()


def test_the_node_listens_on_loopback_only(node):
    ours = {node.stream_port, node.amqp_port, node.dist_port, node.epmd_port}
    found = [(a, p) for a, p in _listeners() if p in ours]
    assert {p for _, p in found} == ours, "every port of the node is listening"
    assert all(a in LOOPBACK for a, _ in found), found


def test_confirmed_tuples_are_stored_and_survive_a_restart(node, tiny):
    ds = tiny["cm"]
    half = ds.rows // 2  # producer i publishes rows [i * half, (i + 1) * half)
    r = broker.ingest(node, "CM1", ds, seconds=30, producers=2,
                      publishing=broker.Publishing(tuples_per_message=64, messages_per_call=4),
                      max_tuples=2 * half, prefix="kill")
    assert r.tuples == 2 * half and r.latency_ms["p50"] > 0
    node.stop()  # the node's folder is kept: the streams' segment files
    node.start()
    for i in range(2):
        back = broker.read_stream(node, f"kill-cm1-{i}", ds.schema)
        want = ds.stream.batch(i * half, (i + 1) * half)
        assert len(back) == half
        for name, got, exp in zip(ds.schema.names, back.columns, want.columns, strict=True):
            np.testing.assert_array_equal(got, exp, err_msg=name)


def test_stop_leaves_nothing_running(tmp_path, tiny):
    b = broker.RabbitMQ(tmp_path / "node").start()
    pgid = b.proc.pid
    ports = {b.stream_port, b.dist_port, b.epmd_port}
    try:
        broker.ingest(b, "YSB", tiny["ysb"], seconds=0.3, producers=1)
    finally:
        b.stop()
    assert not _alive(pgid)
    assert not ports & {p for _, p in _listeners()}


def test_a_missing_broker_is_named_with_the_fix(monkeypatch):
    monkeypatch.setattr(broker, "SERVER", "/nonexistent/rabbitmq-server")
    with pytest.raises(broker.BrokerError, match="setup-peers.sh"):
        broker.RabbitMQ()


def test_a_node_that_cannot_start_is_reported_and_cleaned_up(tmp_path):
    b = broker.RabbitMQ(tmp_path / "bad", start_timeout=60)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "advanced.config").write_text("this is not an erlang term")
    started = []
    real_popen = broker.subprocess.Popen

    def popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    broker.subprocess.Popen = popen
    try:
        with pytest.raises(broker.BrokerError, match="advanced_configuration"):
            b.start()
    finally:
        broker.subprocess.Popen = real_popen
    assert b.proc is None and not _alive(started[0].pid)
